"""Issue 41: warm pools on by default, sized from demand, on the real cluster.

A descriptor made active starts its profile's pool (one pod); an idle pool goes back to
zero pods after `TOOLADAPTER_WARM_POOL_IDLE_SECONDS` (short here), and a restarted
operator adopts the pool's pods instead of leaking or remaking them. Idle warm pods hold
little of the node: with three idle attempt workspaces of 500m (limits only) in a
namespace, a GVisor call still runs on this 2-core node.

This module runs its own operator (pools on, a short idle time) serving only its own
namespaces.
"""

from __future__ import annotations

import re
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client

from tests.integration.objects import SHELL_SCHEMA, Agent, descriptor, pretty, status_of
from tooladapter.devtools import SESSION, Namespace, OperatorProcess
from tooladapter.devtools.waiting import wait_for
from tooladapter.sandbox.warm import LABEL_STATE, STATE_ATTEMPT, STATE_POOL

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(600)]

PREFIX = f"{SESSION}wp"
#: Counted from the pool pod's creation, across the restart below: long enough that a loaded
#: node's restart (seen: 22 s from the pod to the listing) cannot drain it before the listing.
IDLE_SECONDS = 60


@pytest.fixture(scope="module")
def operator(tmp_path_factory: pytest.TempPathFactory) -> Iterator[OperatorProcess]:
    process = OperatorProcess(
        tmp_path_factory.mktemp("wp-operator"),
        {
            "TOOLADAPTER_NAMESPACES": f"{PREFIX}-*",
            "TOOLADAPTER_WORKSPACE_SIZE": "64Mi",
            "TOOLADAPTER_WARM_POOL_SIZE": "2",
            "TOOLADAPTER_WARM_POOL_IDLE_SECONDS": str(IDLE_SECONDS),
            "TOOLADAPTER_WORKSPACES_PER_NAMESPACE": "3",
        },
    )
    try:
        process.start()
        yield process
    finally:
        process.stop()


@pytest.fixture
def wns(api: client.ApiClient, operator: OperatorProcess) -> Iterator[Namespace]:
    namespace = Namespace(api, prefix=PREFIX)
    yield namespace
    namespace.delete()


def sandboxed_tool(
    api: client.ApiClient, namespace: str, tool_id: str, *, kind: str, workspace: str = "call"
) -> None:
    """A shell tool that declares limits only (its requests would equal them in a Job)."""
    descriptor(
        api,
        namespace,
        tool_id,
        kind="shell",
        side_effect_class="sandbox",
        inputSchema=SHELL_SCHEMA,
        timeoutSeconds=90,
        shell={"allow": ["uname", "true"]},
        sandbox={
            "kind": kind,
            "workspace": workspace,
            "resources": {"limits": {"cpu": "500m", "memory": "64Mi"}},
            "egress": {"allow": []},
        },
    )


def pods_in(api: client.ApiClient, namespace: str, state: str) -> list[Any]:
    pods = client.CoreV1Api(api).list_namespaced_pod(
        namespace, label_selector=f"{LABEL_STATE}={state}"
    )
    return [p for p in pods.items if not p.metadata.deletion_timestamp]


def idle_pool_pods_metric(operator: OperatorProcess) -> float | None:
    url = f"http://127.0.0.1:{operator.metrics_port}/metrics"
    with urllib.request.urlopen(url, timeout=10) as answer:
        text = answer.read().decode()
    found = re.search(r'^tooladapter_warm_idle_pods\{kind="pool"\} (\S+)$', text, re.M)
    return float(found.group(1)) if found else None


def explain(status: dict[str, Any], operator: OperatorProcess) -> str:
    return f"{pretty(status)}\n--- operator log ---\n{operator.tail(60)}"


def test_an_idle_pool_goes_back_to_zero_pods_and_survives_a_restart_adopted(
    api: client.ApiClient, wns: Namespace, operator: OperatorProcess
) -> None:
    sandboxed_tool(api, wns.name, "pooled", kind="Container")
    # Its activation starts the pool: one pod, before any call.
    (started,) = wait_for(
        lambda: pods_in(api, wns.name, STATE_POOL), timeout=120, what="the pool's first pod"
    )
    requests = started.spec.containers[0].resources.requests
    assert requests["cpu"] == "10m", requests  # idle-sized, though its limits are 500m
    wait_for(
        lambda: (idle_pool_pods_metric(operator) or 0) >= 1,
        timeout=60,
        what="the idle pool pod exported",
    )

    # A restarted operator adopts the pool: the same pod, not drained, not doubled.
    operator.kill()
    operator.start()
    operator.wait_log("adopted the warm pool", timeout=60)
    names = [p.metadata.name for p in pods_in(api, wns.name, STATE_POOL)]
    assert started.metadata.name in names, (names, operator.tail(40))
    assert len(names) == 1, names

    # No call: after the idle time the pool holds nothing, and says so.
    wait_for(
        lambda: not pods_in(api, wns.name, STATE_POOL),
        timeout=IDLE_SECONDS + 120,
        what="the idle pool back to zero pods",
    )
    wait_for(
        lambda: idle_pool_pods_metric(operator) == 0,
        timeout=60,
        what="no idle pool pod exported",
    )


def test_with_three_idle_500m_workspaces_a_gvisor_call_still_runs(
    api: client.ApiClient, wns: Namespace, operator: OperatorProcess
) -> None:
    sandboxed_tool(api, wns.name, "ws", kind="Container", workspace="attempt")
    sandboxed_tool(api, wns.name, "uname-gvisor", kind="GVisor")
    agent = Agent.create(api, wns.name, "alice")
    agent.grant(["ws", "uname-gvisor"], ["sandbox"])

    for i in range(3):
        status = status_of(
            agent.wait(agent.invoke("ws", {"command": "true"}, attemptId=f"a{i}"), timeout=180)
        )
        assert status["state"] == "Observed", explain(status, operator)
    held = pods_in(api, wns.name, STATE_ATTEMPT)
    assert len(held) == 3, [p.metadata.name for p in held]
    for pod in held:
        # Idle, each holds 10m of the node, not the 500m its limits say.
        assert pod.spec.containers[0].resources.requests["cpu"] == "10m", pod.metadata.name
        assert pod.spec.containers[0].resources.limits["cpu"] == "500m", pod.metadata.name

    node = str(client.CoreV1Api(api).list_node().items[0].status.node_info.kernel_version)
    status = status_of(
        agent.wait(agent.invoke("uname-gvisor", {"command": "uname -r"}), timeout=240)
    )
    assert status["state"] == "Observed", explain(status, operator)
    assert status["sandboxLease"]["runtimeClass"] == "gvisor", explain(status, operator)
    assert str(status["result"]["content"]).strip() != node, explain(status, operator)


def test_a_pool_never_takes_the_quota_share_a_call_needs(
    api: client.ApiClient, wns: Namespace, operator: OperatorProcess
) -> None:
    core = client.CoreV1Api(api)
    # One pod in all: the call's. The pool (whose activation would start a pod) keeps off it.
    core.create_namespaced_resource_quota(
        wns.name,
        {"metadata": {"name": "one-pod"}, "spec": {"hard": {"pods": "1"}}},  # type: ignore[arg-type]  # the client sends a dict body as is
    )
    sandboxed_tool(api, wns.name, "pooled", kind="Container")
    agent = Agent.create(api, wns.name, "alice")
    agent.grant(["pooled"], ["sandbox"])
    status = status_of(agent.wait(agent.invoke("pooled", {"command": "true"}), timeout=180))
    assert status["state"] == "Observed", explain(status, operator)
    assert status["sandboxLease"]["start"] == "cold", explain(status, operator)
    assert not pods_in(api, wns.name, STATE_POOL)
    # The control: with room for a call beside it, the same pool holds a pod.
    core.patch_namespaced_resource_quota("one-pod", wns.name, {"spec": {"hard": {"pods": "3"}}})
    wait_for(
        lambda: pods_in(api, wns.name, STATE_POOL),
        timeout=120,
        what="the pool's pod once the quota leaves a call its share",
    )
