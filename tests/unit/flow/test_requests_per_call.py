"""What one governed call asks of the API server, request by request (issue 41: per-call
cost). The agent's create, its admission (in-process policies) and the watch events cost
the operator no request; each count here is an API request the operator sends per call,
so a change that adds one fails here before the bench shows it."""

from __future__ import annotations

import asyncio

import pytest

from tests.unit.fake_cluster import (
    CALLER,
    NAMESPACE,
    Harness,
    descriptor,
    invocation,
)
from tooladapter.enums import Resource

pytestmark = [pytest.mark.timeout(10), pytest.mark.usefixtures("fast_retries")]


def read_tool(h: Harness) -> None:
    h.publish(descriptor("lister"))
    h.cluster.grant(tools=["lister"], classes=["read"])


def requests(h: Harness) -> list[str]:
    return [name for name, _ in h.cluster.calls]


async def test_a_read_call_asks_two_reviews_and_writes_its_status_once(h: Harness) -> None:
    read_tool(h)
    h.cluster.calls.clear()

    stored = await h.run(h.submit(invocation()))

    assert stored["status"]["state"] == "Observed"
    # The caller's two grants (the tool, the class: remembered for
    # TOOLADAPTER_AUTHZ_CACHE_SECONDS by the real cluster) and the one status write, with
    # every stage in it. No read of the invocation (its event's body is the one created),
    # no finalizer (a read runs again after a restart), no claim (no key), no event.
    assert requests(h) == ["can", "can", "patch_status"]
    assert h.events.reasons() == []


async def test_a_keyed_read_call_adds_its_claim_and_the_end_on_it(h: Harness) -> None:
    read_tool(h)
    h.cluster.calls.clear()

    stored = await h.run(h.submit(invocation(idempotencyKey="k-1")))

    assert stored["status"]["state"] == "Observed"
    assert requests(h) == [
        "claim_idempotency_key",
        "can",
        "can",
        "patch_status",
        "record_idempotency_end",
    ]


async def test_a_retry_of_an_ended_call_reads_it_and_writes_once(h: Harness) -> None:
    read_tool(h)
    await h.run(h.submit(invocation("first", idempotencyKey="k-1")))
    h.cluster.calls.clear()

    stored = await h.run(h.submit(invocation("second", idempotencyKey="k-1")))

    assert stored["status"]["duplicateOf"] == "first"
    # The first call has ended: no status write for a wait that never happens.
    assert requests(h) == ["claim_idempotency_key", "get", "patch_status"]
    assert h.cluster.writes_of("second")[0]["state"] == "Observed"


async def test_a_duplicate_of_a_running_call_shows_its_wait_then_its_end(h: Harness) -> None:
    read_tool(h)
    winner = h.submit(
        invocation("first", idempotencyKey="k-1", status={"state": "AwaitingApproval"})
    )
    h.cluster.claims[(NAMESPACE, CALLER, "k-1")] = ("first", winner["metadata"]["uid"])
    task = h.start(h.submit(invocation("second", idempotencyKey="k-1")))
    waiting = await h.cluster.wait_for_status("second", lambda s: s.get("duplicateOf") == "first")
    assert waiting["status"]["state"] == "Received"
    assert not task.done()

    await h.cluster.patch_status(Resource.INVOCATIONS, NAMESPACE, "first", {"state": "Observed"})
    h.invocation_changed("first")
    await asyncio.wait_for(task, 5)

    assert [w["state"] for w in h.cluster.writes_of("second")] == ["Received", "Observed"]


async def test_a_shared_write_call_holds_a_finalizer_around_its_execution(h: Harness) -> None:
    h.publish(descriptor("writer", side_effect_class="shared-write"))
    h.cluster.grant(tools=["writer"], classes=["shared-write"])
    body = h.submit(invocation(tool="writer"))
    task = h.start(body)
    await h.cluster.wait_for_status("call-1", lambda s: s.get("state") == "AwaitingApproval")
    h.approve_waiting("call-1")
    await asyncio.wait_for(task, 5)

    # The wait, Executing before the effect (onto the version seen, under a finalizer that
    # keeps a deleted call until it settled), the end, and the finalizer let go.
    own = [
        name
        for name, args in h.cluster.calls
        if name in ("patch_status", "set_finalizers") and args["resource"] == Resource.INVOCATIONS
    ]
    assert own == [
        "patch_status",
        "set_finalizers",
        "patch_status",
        "patch_status",
        "set_finalizers",
    ]
    assert [w["state"] for w in h.cluster.writes_of("call-1")] == [
        "AwaitingApproval",
        "Executing",
        "Observed",
    ]
