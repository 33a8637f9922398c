"""Issue 41: warm pools sized from demand, against the in-memory stand-in for
`kube.warm.WarmKube`: started by a descriptor's activation, grown by calls, bounded by the
cluster-wide cap and the namespace's quotas, adopted after a restart, shrunk to zero when
idle, giving way to a call that waits for capacity; what idle pods hold exported."""

from __future__ import annotations

import asyncio
import time
from typing import Any

from prometheus_client import REGISTRY

from tests.unit.sandbox.test_warm_settlement import FakeWarmKube, call, ran, tool, warm
from tooladapter.executors.warm import WarmSandboxes
from tooladapter.kube.client import Refused
from tooladapter.sandbox.warm import (
    ANNOTATION_LAST_USED,
    ANNOTATION_PROFILE,
    LABEL_PROFILE,
    LABEL_STATE,
    LABEL_WARM,
    LABEL_WORKSPACE,
    STATE_ATTEMPT,
    STATE_POOL,
)


def pool_pods(kube: FakeWarmKube) -> list[dict[str, Any]]:
    return [p for p in kube.pods.values() if p["metadata"]["labels"].get(LABEL_STATE) == "pool"]


async def settled(sandboxes: WarmSandboxes) -> None:
    while sandboxes.background:
        await asyncio.gather(*list(sandboxes.background))


def serves(namespace: str) -> bool:
    return True


async def ended(namespace: str, name: str, uid: str) -> bool:
    return True


def test_a_descriptor_made_active_starts_its_pool_with_one_adoptable_pod() -> None:
    kube = FakeWarmKube()
    sandboxes = warm(kube, pool_size=8)

    async def scenario() -> None:
        sandboxes.activated("ns", tool(workspace="call"))
        await settled(sandboxes)

    asyncio.run(scenario())
    pods = pool_pods(kube)
    assert len(pods) == 1
    assert pods[0]["metadata"]["annotations"][ANNOTATION_PROFILE]
    assert pods[0]["spec"]["containers"][0]["resources"]["requests"]["cpu"] == "10m"


def test_a_descriptor_whose_calls_never_run_warm_starts_no_pool() -> None:
    kube = FakeWarmKube()
    sandboxes = warm(kube, pool_size=8)
    cidr = tool(workspace="call").model_copy(deep=True)
    assert cidr.sandbox_spec is not None
    cidr.sandbox_spec.egress.allow = ["10.0.0.0/24"]

    async def scenario() -> None:
        sandboxes.activated("ns", cidr)
        await settled(sandboxes)

    asyncio.run(scenario())
    assert kube.made == 0
    asyncio.run(warm(kube, pool_size=0).maintain(serves, ended))
    assert kube.made == 0


def test_a_pool_grows_with_its_calls_up_to_the_cluster_wide_cap() -> None:
    kube = FakeWarmKube()
    sandboxes = warm(kube, pool_size=8, pool_pods=3)
    descriptor = tool(workspace="call")
    profile = sandboxes.profile_of(descriptor, attempt=False)

    async def scenario() -> list[int]:
        sizes = []
        pool = sandboxes.pool_of("ns", profile)
        for in_flight in (1, 2, 5):
            # `run` counts its call in flight before it asks for a pod.
            pool.in_flight = in_flight
            sandboxes.want("ns", profile)
            await settled(sandboxes)
            sizes.append(len(pool_pods(kube)))
        return sizes

    # The most calls at once lately, and one spare: 2, 3, then 6 but the cap is 3.
    assert asyncio.run(scenario()) == [2, 3, 3]


def test_pool_pods_never_take_the_quota_share_a_call_needs() -> None:
    class Quoted(FakeWarmKube):
        async def list_quotas(self, namespace: str) -> list[dict[str, Any]]:
            return [{"hard": {"pods": "4"}, "used": {"pods": str(len(self.pods))}}]

    kube = Quoted()
    # Four pods at most in the namespace, two used: one left for a call, one for the pool.
    kube.add("other-1", {})
    kube.add("other-2", {})
    sandboxes = warm(kube, pool_size=8)
    profile = sandboxes.profile_of(tool(workspace="call"), attempt=False)

    async def scenario() -> None:
        for _ in range(4):
            sandboxes.want("ns", profile)
            await settled(sandboxes)

    asyncio.run(scenario())
    assert len(pool_pods(kube)) == 1


def test_a_restarted_operator_adopts_its_pools_and_drains_pods_it_cannot_read() -> None:
    kube = FakeWarmKube()
    first = warm(kube, pool_size=8)

    async def start() -> None:
        first.activated("ns", tool(workspace="call"))
        await settled(first)

    asyncio.run(start())
    (adopted,) = pool_pods(kube)
    kube.add("stray", {LABEL_STATE: STATE_POOL, LABEL_PROFILE: "0" * 20, LABEL_WARM: "true"})

    restarted = warm(kube, pool_size=8)
    asyncio.run(restarted.maintain(serves, ended))
    assert adopted["metadata"]["name"] in kube.pods  # adopted, not drained or doubled
    assert "stray" not in kube.pods
    assert len(pool_pods(kube)) == 1
    assert len(restarted.pools) == 1


def test_an_idle_pool_goes_back_to_zero_pods() -> None:
    kube = FakeWarmKube()
    sandboxes = warm(kube, pool_size=8, pool_idle_seconds=60)

    async def scenario() -> None:
        sandboxes.activated("ns", tool(workspace="call"))
        await settled(sandboxes)
        assert len(pool_pods(kube)) == 1
        for pool in sandboxes.pools.values():
            pool.started_at = time.monotonic() - 61
        await sandboxes.maintain(serves, ended)

    asyncio.run(scenario())
    assert pool_pods(kube) == []
    assert sandboxes.pools == {}


def test_pool_pods_give_way_first_then_the_oldest_idle_workspace() -> None:
    kube = FakeWarmKube()
    sandboxes = warm(kube, pool_size=8)
    sandboxes.busy = lambda key: key == "busy"
    kube.add("pool-1", {LABEL_STATE: STATE_POOL, LABEL_WARM: "true"})
    kube.add(
        "ws-new",
        {LABEL_STATE: STATE_ATTEMPT, LABEL_WORKSPACE: "new", LABEL_WARM: "true"},
        annotations={ANNOTATION_LAST_USED: "2026-01-01T00:10:00Z"},
    )
    kube.add(
        "ws-old",
        {LABEL_STATE: STATE_ATTEMPT, LABEL_WORKSPACE: "old", LABEL_WARM: "true"},
        annotations={ANNOTATION_LAST_USED: "2026-01-01T00:05:00Z"},
    )
    kube.add(
        "ws-busy",
        {LABEL_STATE: STATE_ATTEMPT, LABEL_WORKSPACE: "busy", LABEL_WARM: "true"},
        annotations={ANNOTATION_LAST_USED: "2026-01-01T00:01:00Z"},
    )
    assert asyncio.run(sandboxes.give_way("ns", "unschedulable")) == ["pool-1"]
    assert asyncio.run(sandboxes.give_way("ns", "unschedulable")) == ["ws-old"]
    assert asyncio.run(sandboxes.give_way("ns", "unschedulable")) == ["ws-new"]
    assert asyncio.run(sandboxes.give_way("ns", "unschedulable")) == []
    assert "ws-busy" in kube.pods


def test_a_namespace_under_pressure_keeps_no_pool_pods() -> None:
    kube = FakeWarmKube()
    sandboxes = warm(kube, pool_size=8)
    profile = sandboxes.profile_of(tool(workspace="call"), attempt=False)

    async def scenario() -> None:
        await sandboxes.give_way("ns", "quota")
        sandboxes.want("ns", profile)
        await settled(sandboxes)

    asyncio.run(scenario())
    assert pool_pods(kube) == []


def test_what_idle_warm_pods_hold_is_exported() -> None:
    kube = FakeWarmKube()
    sandboxes = warm(kube, pool_size=8)

    async def scenario() -> None:
        sandboxes.activated("ns", tool(workspace="call"))
        await settled(sandboxes)
        await sandboxes.maintain(serves, ended)

    asyncio.run(scenario())
    assert REGISTRY.get_sample_value("tooladapter_warm_idle_pods", {"kind": "pool"}) == 1
    assert (
        REGISTRY.get_sample_value("tooladapter_warm_idle_cpu_request_cores", {"kind": "pool"})
        == 0.01
    )
    assert (
        REGISTRY.get_sample_value("tooladapter_warm_idle_memory_request_bytes", {"kind": "pool"})
        == 32 * 1024 * 1024
    )


def test_a_call_with_no_ready_pod_waits_for_a_starting_one() -> None:
    kube = FakeWarmKube()
    sandboxes = warm(kube, pool_size=1)
    descriptor = tool(workspace="call")
    profile = sandboxes.profile_of(descriptor, attempt=False)
    starting = kube.add("pool-1", {LABEL_STATE: STATE_POOL, LABEL_PROFILE: profile.key})
    starting["status"] = {
        "phase": "Pending",
        "conditions": [{"type": "PodScheduled", "status": "True"}],
    }
    waited: list[str] = []

    async def ready(namespace: str, name: str, *, timeout: float) -> dict[str, Any]:
        waited.append(name)
        kube.pods[name]["status"] = {
            "phase": "Running",
            "conditions": [{"type": "Ready", "status": "True"}],
        }
        return kube.pods[name]

    kube.wait_ready = ready  # type: ignore[method-assign]
    kube.answers = [ran(b"hi", 0)]
    outcome = asyncio.run(sandboxes.run(call(descriptor, attempt=None)))
    assert waited == ["pool-1"]
    assert outcome is not None and outcome.sandbox_run is not None
    assert outcome.sandbox_run.name == "pool-1"


def test_a_namespace_that_refuses_a_pool_pod_is_not_asked_again_each_round() -> None:
    class Refusing(FakeWarmKube):
        async def create_pod(self, pod: dict[str, Any]) -> dict[str, Any]:
            self.made += 1
            raise Refused("403: namespace ns is being terminated")

    kube = Refusing()
    sandboxes = warm(kube, pool_size=8)

    async def scenario() -> None:
        sandboxes.activated("ns", tool(workspace="call"))
        await settled(sandboxes)
        await sandboxes.maintain(serves, ended)

    asyncio.run(scenario())
    assert kube.made == 1
