"""Bounded calls in flight, fair between namespaces (`tooladapter.inflight`), alone and
with the flow on the fake cluster."""

from __future__ import annotations

import asyncio
import functools

import pytest

from tests.unit.fake_cluster import (
    NAMESPACE,
    FakeCluster,
    Harness,
    ScriptedExecutor,
    descriptor,
    http_descriptor,
    invocation,
    loopback_http,
    make_runtime,
    shell_descriptor,
)
from tooladapter.enums import InvocationState, ToolKind
from tooladapter.executors.sandbox import SandboxExecutor
from tooladapter.flow import run_invocation
from tooladapter.handlers import routing
from tooladapter.inflight import FairGate
from tooladapter.settings import CapacitySettings, Settings

pytestmark = [pytest.mark.timeout(20), pytest.mark.usefixtures("fast_retries")]

OTHER = "team-b"
WRITER_SCHEMA = {
    "type": "object",
    "properties": {"path": {"type": "string"}},
    "required": ["path"],
}


# --------------------------------------------------------------------------- the gate alone


async def _forever() -> None:
    await asyncio.Event().wait()


def recorder(started: list[str], key: str) -> functools.partial[None]:
    return functools.partial(started.append, key)


def test_a_gate_starts_at_most_its_capacity_and_the_rest_in_turn_by_namespace() -> None:
    gate = FairGate(1)
    started: list[str] = []
    for i in range(5):
        gate.submit("a", f"a{i}", recorder(started, f"a{i}"))
    gate.submit("b", "b0", recorder(started, "b0"))
    gate.submit("c", "c0", recorder(started, "c0"))

    assert started == ["a0"]
    assert gate.queued_by_namespace() == {"a": 4, "b": 1, "c": 1}
    assert gate.position("a", "a2") == 2 and gate.position("b", "b0") == 1
    for key in list(started):
        gate.release(key)
    while gate.queued():
        gate.release(started[-1])

    # a's burst waits its turn behind b and c, one call per namespace per round.
    assert started == ["a0", "a1", "b0", "c0", "a2", "a3", "a4"]
    assert gate.busy == 1 and gate.queues == {} and not gate.turns


def test_a_key_is_queued_once_and_a_discarded_one_never_starts() -> None:
    gate = FairGate(1)
    started: list[str] = []
    gate.submit("a", "x", recorder(started, "x"))
    gate.submit("a", "x", recorder(started, "x"))  # a second event of a running call
    gate.submit("a", "y", recorder(started, "y"))
    gate.submit("a", "y", recorder(started, "y"))  # and of a queued one
    assert gate.queued() == 1
    gate.discard("a", "y")  # deleted before its turn
    gate.release("x")
    assert started == ["x"] and gate.busy == 0 and gate.queued() == 0


def test_a_gate_needs_room_for_one_call() -> None:
    with pytest.raises(ValueError, match="at least 1"):
        FairGate(0)


async def test_a_waiter_cancelled_in_the_queue_keeps_no_slot() -> None:
    gate = FairGate(1)
    gate.submit("a", "holder", lambda: None)
    waiter = asyncio.ensure_future(gate.acquire("a", "late"))
    await asyncio.sleep(0)
    assert gate.is_queued("late")
    waiter.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiter
    gate.release("holder")
    assert gate.busy == 0 and gate.queued() == 0


async def test_released_gives_the_slot_back_for_the_wait_and_takes_one_after() -> None:
    gate = FairGate(1)
    gate.submit("a", "waiting", lambda: None)
    other: list[str] = []
    async with gate.released("a", "waiting"):
        gate.submit("b", "other", recorder(other, "other"))
        assert other == ["other"]  # the slot went to another call while this one waits
        gate.release("other")
    assert gate.holders == {"waiting"}


async def test_released_queues_behind_the_call_that_took_its_slot() -> None:
    gate = FairGate(1)
    gate.submit("a", "waiting", lambda: None)

    async def wait_then_go_on() -> None:
        async with gate.released("a", "waiting"):
            gate.submit("b", "other", lambda: None)
        assert gate.holders == {"waiting"}

    task = asyncio.ensure_future(wait_then_go_on())
    await asyncio.sleep(0.01)
    assert not task.done() and gate.holders == {"other"} and gate.is_queued("waiting")
    gate.release("other")
    await asyncio.wait_for(task, 2)


def test_the_gauges_show_the_queue_by_tenant_and_the_slots_taken() -> None:
    gate = FairGate(1)
    for key in ("a0", "a1", "a2"):
        gate.submit("a", key, lambda: None)
    gate.submit("b", "b0", lambda: None)
    families = {f.name: f for f in gate.collect()}
    queued = {s.labels["tenant"]: s.value for s in families["tooladapter_calls_queued"].samples}
    assert queued == {"a": 2, "b": 1}
    assert families["tooladapter_calls_in_flight"].samples[0].value == 1


# --------------------------------------------------------------------------- with the flow


def two_tenants(capacity: int, executor: ScriptedExecutor) -> Harness:
    h = make_runtime(
        settings=Settings(capacity=CapacitySettings(calls_in_flight=capacity)),
        executors={ToolKind.NATIVE: executor},
        namespaces={NAMESPACE: {}, OTHER: {}},
    )
    for namespace in (NAMESPACE, OTHER):
        h.publish(descriptor(namespace=namespace))
    h.cluster.grant(tools=["lister"], classes=["read"])
    return h


def admit(h: Harness, body: dict) -> None:
    """What the invocations watch does with a new call (`handlers.routing`)."""
    meta = body["metadata"]
    h.rt.admit(meta["namespace"], meta["uid"], functools.partial(run_invocation, h.rt, body))


async def all_done(h: Harness) -> None:
    while h.rt.tasks or h.rt.gate.queued():
        await asyncio.gather(*list(h.rt.tasks.values()))


async def test_one_tenants_single_call_is_not_queued_behind_anothers_hundred() -> None:
    held = asyncio.Event()
    executor = ScriptedExecutor(gate=held)
    h = two_tenants(2, executor)
    for i in range(100):
        admit(h, h.submit(invocation(f"a-{i}", namespace=NAMESPACE)))
    admit(h, h.submit(invocation("b-0", namespace=OTHER)))

    # Only the slots' calls have a task; the rest are queue entries, no coroutines.
    assert len(h.rt.tasks) == 2
    assert h.rt.gate.queued_by_namespace() == {NAMESPACE: 98, OTHER: 1}
    held.set()
    await asyncio.wait_for(all_done(h), 15)

    order = [call.namespace for call in executor.executed]
    # team-b's call goes at its first turn: right after the two that held the slots and
    # at most one more of team-a's, not after a hundred.
    assert order.index(OTHER) <= 3
    names = [f"{c.namespace}/{c.name}" for c in executor.executed]
    assert len(names) == 101 and len(set(names)) == 101  # every call, each exactly once
    for i in range(100):
        assert h.cluster.invocation(f"a-{i}")["status"]["state"] == "Observed"
    assert h.cluster.invocation("b-0", OTHER)["status"]["state"] == "Observed"
    assert h.rt.gate.busy == 0 and not h.rt.tasks


async def test_a_call_waiting_for_approval_holds_no_slot() -> None:
    executor = ScriptedExecutor()
    h = two_tenants(1, executor)
    h.publish(descriptor("writer", side_effect_class="shared-write", inputSchema=WRITER_SCHEMA))
    h.cluster.grant(tools=["writer"], classes=["shared-write"])
    admit(h, h.submit(invocation("write-1", tool="writer", arguments={"path": "/x"})))
    await h.cluster.wait_for_state("write-1", InvocationState.AWAITING_APPROVAL)
    await asyncio.sleep(0)

    # The only slot is free while it waits: another call runs to its end meanwhile.
    admit(h, h.submit(invocation("read-1")))
    await h.cluster.wait_for_state("read-1", InvocationState.OBSERVED)

    h.approve_waiting("write-1")
    await asyncio.wait_for(all_done_after_approval(h), 10)
    assert h.cluster.invocation("write-1")["status"]["state"] == "Observed"
    assert [c.name for c in executor.executed] == ["read-1", "write-1"]
    assert h.rt.gate.busy == 0


async def all_done_after_approval(h: Harness) -> None:
    await h.cluster.wait_for_state("write-1", InvocationState.OBSERVED)
    await all_done(h)


async def test_a_duplicate_waiting_for_its_winner_holds_no_slot_and_runs_nothing() -> None:
    held = asyncio.Event()
    executor = ScriptedExecutor(gate=held)
    h = two_tenants(2, executor)
    admit(h, h.submit(invocation("first", idempotencyKey="k-1")))
    await asyncio.wait_for(executor.started.wait(), 5)
    admit(h, h.submit(invocation("second", idempotencyKey="k-1")))
    await asyncio.wait_for(until_holders(h, 1), 5)
    assert h.rt.gate.holders == {h.cluster.invocation("first")["metadata"]["uid"]}
    assert h.cluster.invocation("second")["metadata"]["uid"] in h.rt.tasks  # still waiting

    # The winner holds its slot; the duplicate waits without one: a third call runs.
    admit(h, h.submit(invocation("third")))
    await asyncio.wait_for(until_executed(executor, 2), 5)
    held.set()
    await h.cluster.wait_for_state("first", InvocationState.OBSERVED)
    h.invocation_changed("first")  # the watch wakes the duplicate
    await asyncio.wait_for(all_done(h), 10)

    first = h.cluster.invocation("first")["status"]
    second = h.cluster.invocation("second")["status"]
    assert first["state"] == "Observed"
    assert second["state"] == "Observed" and second["receiptRef"] == first["receiptRef"]
    assert second["duplicateOf"] == "first"
    assert sorted(c.name for c in executor.executed) == ["first", "third"]  # once each
    assert h.rt.gate.busy == 0


async def until_holders(h: Harness, count: int) -> None:
    """Until only `count` calls hold slots and every admitted flow has started."""
    # The gate has no event to wait on: polled, bounded by the caller's wait_for.
    while len(h.rt.gate.holders) != count or h.rt.gate.queued():  # noqa: ASYNC110
        await asyncio.sleep(0.005)


async def until_executed(executor: ScriptedExecutor, count: int) -> None:
    while len(executor.executed) < count:
        executor.started.clear()
        await executor.started.wait()


async def test_a_running_sandbox_job_holds_no_slot() -> None:
    """Jobs run for minutes: a tenant's long sandbox calls must not crowd out every other
    call, so the wait for a Job gives the slot back like a wait for an approval."""
    cluster = FakeCluster()
    native = ScriptedExecutor()
    h = make_runtime(
        cluster,
        settings=Settings(capacity=CapacitySettings(calls_in_flight=1)),
        executors={ToolKind.NATIVE: native, ToolKind.SHELL: SandboxExecutor(cluster, Settings())},
    )
    h.publish(descriptor())
    h.publish(shell_descriptor())
    h.cluster.grant(tools=["lister", "sh"], classes=["read", "sandbox"])
    # Its Job is created and never finishes (nothing scripts its end).
    admit(h, h.submit(invocation("sh-1", tool="sh", arguments={"command": "echo hi"})))
    await h.cluster.wait_for_state("sh-1", InvocationState.EXECUTING)
    await asyncio.wait_for(until_holders(h, 0), 5)

    admit(h, h.submit(invocation("read-1")))
    await h.cluster.wait_for_state("read-1", InvocationState.OBSERVED)
    assert [c.name for c in native.executed] == ["read-1"]
    assert h.cluster.invocation("sh-1")["status"]["state"] == "Executing"
    for task in list(h.rt.tasks.values()):
        task.cancel()


async def test_a_queued_call_keeps_only_its_name_and_is_read_when_its_turn_comes(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Under a backlog the queue holds names, not bodies (memory stays bytes per call); a
    call deleted while queued is not run, and one read at its turn runs from what is stored."""
    monkeypatch.setattr(routing, "QUEUED_WITH_BODY", 0)  # every queued call is a backlog's
    held = asyncio.Event()
    executor = ScriptedExecutor(gate=held)
    h = two_tenants(1, executor)
    h.rt.workers.append(asyncio.ensure_future(_forever()))  # no periodic workers
    bodies = [h.submit(invocation(f"call-{i}")) for i in range(3)]
    for body in bodies:
        routing.invocation_event(h.rt, {"type": "ADDED", "object": body})
    await asyncio.wait_for(executor.started.wait(), 5)
    assert h.rt.gate.queued() == 2
    for queue in h.rt.gate.queues.values():
        for start in queue.values():
            closure = [c.cell_contents for c in (start.__closure__ or ())]
            assert not any(isinstance(c, dict) for c in closure), closure

    # call-1 goes while queued; call-2 is run from the stored object at its turn.
    stored = h.cluster.invocation("call-1")["metadata"]
    await h.cluster.delete_invocation(
        NAMESPACE, "call-1", uid=stored["uid"], resource_version=stored["resourceVersion"]
    )
    held.set()
    await asyncio.wait_for(until_executed(executor, 2), 5)
    await asyncio.wait_for(all_done(h), 5)
    assert [c.name for c in executor.executed] == ["call-0", "call-2"]
    assert h.cluster.invocation("call-2")["status"]["state"] == "Observed"
    for worker in h.rt.workers:
        worker.cancel()


async def test_a_short_queue_keeps_the_bodies_and_reads_nothing_again() -> None:
    """A read per queued call is API server work when it has least to spare: below
    `QUEUED_WITH_BODY` queued calls run from their event's body."""
    held = asyncio.Event()
    executor = ScriptedExecutor(gate=held)
    h = two_tenants(1, executor)
    h.rt.workers.append(asyncio.ensure_future(_forever()))  # no periodic workers
    for i in range(3):
        body = h.submit(invocation(f"call-{i}"))
        routing.invocation_event(h.rt, {"type": "ADDED", "object": body})
    await asyncio.wait_for(executor.started.wait(), 5)
    assert h.rt.gate.queued() == 2
    reads = sum(1 for method, _ in h.cluster.calls if method == "get")
    held.set()
    await asyncio.wait_for(until_executed(executor, 3), 5)
    await asyncio.wait_for(all_done(h), 5)
    assert sum(1 for method, _ in h.cluster.calls if method == "get") == reads
    for worker in h.rt.workers:
        worker.cancel()


async def test_an_http_call_waiting_for_its_server_holds_no_slot() -> None:
    """A slow server (an agent may pick the tool that calls one) must not hold a slot
    another tenant's call could use: the answer is awaited outside the gate."""
    from aiohttp import web

    from tooladapter.executors.http import HttpExecutor

    answer = asyncio.Event()

    async def slow(_: web.Request) -> web.Response:
        await answer.wait()
        return web.Response(text="late")

    http = HttpExecutor()
    native = ScriptedExecutor()
    h = make_runtime(
        settings=Settings(capacity=CapacitySettings(calls_in_flight=1)),
        executors={ToolKind.NATIVE: native, ToolKind.HTTP: http},
    )
    try:
        async with loopback_http("/slow", slow) as url:
            h.publish(descriptor())
            h.publish(http_descriptor("fetch", url))
            h.cluster.grant(tools=["lister", "fetch"], classes=["read"])
            admit(h, h.submit(invocation("fetch-1", tool="fetch", arguments={})))
            await asyncio.wait_for(until_holders(h, 0), 5)  # waiting for the server, no slot

            admit(h, h.submit(invocation("read-1")))
            await h.cluster.wait_for_state("read-1", InvocationState.OBSERVED)
            answer.set()
            await h.cluster.wait_for_state("fetch-1", InvocationState.OBSERVED)
    finally:
        answer.set()
        await http.close()
