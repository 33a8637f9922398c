"""The in-memory `Cluster` behaves as the API server does where the flow depends on it."""

from __future__ import annotations

import inspect
from typing import Any

import pytest

from tests.unit.fake_cluster import CALLER, NAMESPACE, FakeCluster, invocation, merge_patch
from tooladapter.enums import Resource
from tooladapter.kube.client import Conflict, NotFound
from tooladapter.kube.cluster import Cluster

pytestmark = pytest.mark.timeout(10)


def protocol_methods() -> list[str]:
    return [
        name
        for name, member in vars(Cluster).items()
        if inspect.iscoroutinefunction(member) and not name.startswith("_")
    ]


@pytest.mark.parametrize("method", protocol_methods())
def test_the_fake_implements_every_cluster_method_with_its_signature(method: str) -> None:
    def parameters(fn: object) -> list[tuple[str, object, object]]:
        signature = inspect.signature(inspect.unwrap(fn))  # type: ignore[arg-type]
        return [(p.name, p.kind, p.default) for p in signature.parameters.values()]

    assert parameters(getattr(FakeCluster, method)) == parameters(getattr(Cluster, method))


def test_a_merge_patch_deletes_on_null_merges_objects_and_replaces_lists() -> None:
    target = {"a": 1, "b": {"c": 2, "d": 3}, "l": [1, 2], "gone": True}
    patch = {"b": {"c": 9, "e": None}, "l": [3], "gone": None, "new": {"x": None, "y": 1}}

    assert merge_patch(target, patch) == {"a": 1, "b": {"c": 9, "d": 3}, "l": [3], "new": {"y": 1}}
    assert target["b"] == {"c": 2, "d": 3}  # the target is not modified


async def test_patch_status_merges_returns_the_whole_object_and_bumps_its_version() -> None:
    cluster = FakeCluster()
    body = cluster.put(Resource.INVOCATIONS, invocation(status={"state": "Received", "x": 1}))

    result = await cluster.patch_status(
        Resource.INVOCATIONS, NAMESPACE, "call-1", {"state": "Validated", "x": None}
    )

    assert result["spec"] == body["spec"]
    assert result["status"] == {"state": "Validated"}
    assert result["metadata"]["resourceVersion"] != body["metadata"]["resourceVersion"]
    assert cluster.invocation("call-1") == result


async def test_patch_status_of_a_stale_version_conflicts_and_of_a_missing_object_is_not_found() -> (
    None
):
    cluster = FakeCluster()
    body = cluster.put(Resource.INVOCATIONS, invocation())
    await cluster.patch_status(Resource.INVOCATIONS, NAMESPACE, "call-1", {"state": "Validated"})

    with pytest.raises(Conflict):
        await cluster.patch_status(
            Resource.INVOCATIONS,
            NAMESPACE,
            "call-1",
            {"state": "Executing"},
            resource_version=body["metadata"]["resourceVersion"],
        )
    with pytest.raises(NotFound):
        await cluster.patch_status(Resource.INVOCATIONS, NAMESPACE, "nope", {})
    assert cluster.invocation("call-1")["status"] == {"state": "Validated"}


async def test_set_finalizers_applies_only_onto_the_version_it_names() -> None:
    cluster = FakeCluster()
    body = cluster.put(Resource.INVOCATIONS, invocation())
    version = body["metadata"]["resourceVersion"]

    held = await cluster.set_finalizers(
        Resource.INVOCATIONS, NAMESPACE, "call-1", ["f"], resource_version=version
    )

    assert held["metadata"]["finalizers"] == ["f"]
    with pytest.raises(Conflict):
        await cluster.set_finalizers(
            Resource.INVOCATIONS, NAMESPACE, "call-1", [], resource_version=version
        )


async def test_the_first_claimer_of_a_key_wins_and_keeps_winning() -> None:
    cluster = FakeCluster()
    claim = {"namespace": NAMESPACE, "caller": CALLER, "key": "k"}

    first = await cluster.claim_idempotency_key(**claim, invocation_name="a", invocation_uid="1")
    second = await cluster.claim_idempotency_key(**claim, invocation_name="b", invocation_uid="2")
    again = await cluster.claim_idempotency_key(**claim, invocation_name="a", invocation_uid="1")

    assert (first.won, second.won, again.won) == (True, False, True)
    assert (second.winner_name, second.winner_uid) == ("a", "1")
    release = {"namespace": NAMESPACE, "caller": CALLER, "key": "k"}
    assert await cluster.release_idempotency_key(**release, holder_uid="2") is False
    assert await cluster.release_idempotency_key(**release, holder_uid="1") is True
    third = await cluster.claim_idempotency_key(**claim, invocation_name="b", invocation_uid="2")
    assert third.won


async def test_fencing_refuses_only_a_token_below_the_highest() -> None:
    cluster = FakeCluster()

    async def check(token: int) -> bool:
        verdict = await cluster.check_fencing_token(
            namespace=NAMESPACE, caller=CALLER, attempt_id="a", token=token, holder_uid="u"
        )
        return verdict.accepted

    assert [await check(t) for t in (3, 3, 5, 4)] == [True, True, True, False]
    assert cluster.fencing[(NAMESPACE, CALLER, "a")] == 5


async def test_can_answers_from_the_grants() -> None:
    cluster = FakeCluster()
    cluster.grant(tools=["t"], classes=["read"])
    ask: dict[str, Any] = {"user": CALLER, "namespace": NAMESPACE}

    tool = await cluster.can(**ask, verb="invoke", resource="tooldescriptors", name="t")
    other = await cluster.can(**ask, verb="invoke", resource="tooldescriptors", name="u")
    cls = await cluster.can(**ask, verb="use", resource="sideeffectclasses", name="read")

    assert (tool.allowed, other.allowed, cls.allowed) == (True, False, True)


async def test_create_is_idempotent_and_a_fault_is_raised_once() -> None:
    cluster = FakeCluster()
    job = {"kind": "Job", "metadata": {"name": "j", "namespace": NAMESPACE}}
    cluster.fail_next["create"] = OSError("reset")

    with pytest.raises(OSError):
        await cluster.create(job)
    assert await cluster.create(job) is True
    assert await cluster.create(job) is False
    assert await cluster.delete("Job", NAMESPACE, "j") is True
    assert await cluster.delete("Job", NAMESPACE, "j") is False
    assert len(cluster.created) == 1
    assert len(cluster.calls_of("create")) == 3
