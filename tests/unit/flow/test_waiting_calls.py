"""Attacks on wave 3 (own invocations watch, census-driven retention, answers awaited
without a slot, short queue with bodies, status without CRD defaults).

Each test states what must hold; the ones marked HIT fail on the code under review and pass
once the fix named in their docstring is in.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest

from tests.unit.fake_cluster import (
    NAMESPACE,
    descriptor,
    http_descriptor,
    invocation,
    loopback_http,
    make_runtime,
)
from tooladapter.enums import InvocationState, ToolKind
from tooladapter.executors import Call, InOperator, Outcome
from tooladapter.executors.http import HttpExecutor
from tooladapter.gateway.ui.web import templates
from tooladapter.handlers import routing
from tooladapter.kube import watching
from tooladapter.kube.watching import Watcher
from tooladapter.review.page import uncertain_view
from tooladapter.settings import CapacitySettings, Settings

pytestmark = [pytest.mark.timeout(30), pytest.mark.usefixtures("fast_retries")]


# --------------------------------------------------------------------------- the watch


class _Content:
    def __init__(self, lines: list[bytes], fault: BaseException | None) -> None:
        self.lines, self.fault = lines, fault

    async def iter_any(self) -> AsyncIterator[bytes]:
        for one in self.lines:
            yield one + b"\n"
        if self.fault is not None:
            raise self.fault


class _Response:
    status = 200

    def __init__(self, lines: list[bytes], fault: BaseException | None) -> None:
        self.content = _Content(lines, fault)

    def release(self) -> None:
        return None


def _event(version: str) -> bytes:
    import json

    meta = {"namespace": "mine", "name": f"x{version}", "uid": f"u{version}"}
    meta["resourceVersion"] = version
    return json.dumps({"type": "MODIFIED", "object": {"metadata": meta}}).encode()


async def test_hit_a_watch_broken_mid_stream_resumes_after_the_last_event_it_handled(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """HIT (kube/watching.py `run`): `version = await self.watch(version)` is never assigned
    when `watch` raises, so a transient fault (dropped connection, API server restart, a
    line that fails to parse) resumes from the version the watch *started* at and every
    event of that watch request (up to WATCH_SECONDS) is handled again: a stale `Received`
    body of a call no longer in `rt.finished` is run again from scratch. Fix: keep the last
    version on the watcher (`self.version`, updated in `dispatch`) and resume from it."""
    monkeypatch.setattr(watching, "RETRY_SECONDS", 0)
    import aiohttp

    handled: list[str] = []
    asked: list[str] = []
    w = Watcher.__new__(Watcher)
    w.plural, w.namespace = "toolinvocations", "mine"
    w.serves = lambda ns: ns == "mine"
    w.handle = lambda e: handled.append(e["object"]["metadata"]["resourceVersion"])
    w.listed = lambda uids: None
    w.synced = asyncio.Event()

    async def relist() -> str:
        return "1"

    async def method(*_: Any, **kwargs: Any) -> _Response:
        asked.append(str(kwargs["resource_version"]))
        if len(asked) == 1:
            return _Response([_event("2"), _event("3")], aiohttp.ClientPayloadError("cut"))
        raise asyncio.CancelledError  # end the test's run

    w.relist = relist  # type: ignore[method-assign]
    w._list_call = lambda: (method, ())  # type: ignore[method-assign]
    with pytest.raises(asyncio.CancelledError):
        await w.run()
    assert handled == ["2", "3"]
    assert asked == ["1", "3"], "resumed from the watch's start: events 2 and 3 come again"


# --------------------------------------------------------------------------- outside the gate


class OutsideExecutor(InOperator):
    """Waits for its answer as the http and MCP executors do: inside `call.outside()`."""

    def __init__(self) -> None:
        self.waiting = asyncio.Event()
        self.answer = asyncio.Event()
        self.executed: list[str] = []

    async def execute(self, call: Call) -> Outcome:
        self.executed.append(call.name)
        async with call.outside():
            self.waiting.set()
            await self.answer.wait()
        return Outcome.observed(b'{"ok": true}', structured={"ok": True})


async def test_hit_a_call_cancelled_while_its_answer_is_awaited_keeps_no_slot() -> None:
    """HIT (flow/execution.py `show_progress` + inflight.py `released`, new since http/MCP
    use `call.outside()`): a read call cancelled within PROGRESS_AFTER_SECONDS (DELETED
    event, a relisting that no longer holds it) leaves its executor task running
    (`asyncio.wait` does not cancel it); when the answer comes, `released` takes a slot
    again for a flow that is gone, and nothing ever gives it back. Sixteen such calls and
    the operator runs nothing for any tenant. Fix: cancel the executor task when
    `show_progress` is cancelled (try/except CancelledError around `asyncio.wait`:
    `task.cancel()`), and/or make `released` not re-acquire when the key has no live task."""
    executor = OutsideExecutor()
    h = make_runtime(
        settings=Settings(capacity=CapacitySettings(calls_in_flight=1)),
        executors={ToolKind.NATIVE: executor},
    )
    h.publish(descriptor())
    h.cluster.grant(tools=["lister"], classes=["read"])
    body = h.submit(invocation("slow"))
    uid = body["metadata"]["uid"]
    routing.invocation_event(h.rt, {"type": "ADDED", "object": body})
    await asyncio.wait_for(executor.waiting.wait(), 5)
    assert h.rt.gate.busy == 0  # waiting for its answer without a slot
    flow = h.rt.tasks[uid]

    routing.invocation_event(h.rt, {"type": "DELETED", "object": body})  # deleted by a person
    await asyncio.gather(flow, return_exceptions=True)
    executor.answer.set()
    for _ in range(20):
        await asyncio.sleep(0.01)

    assert uid not in h.rt.tasks
    assert h.rt.gate.holders == set(), "a slot is held for a call whose flow is gone"

    # And the next call of any tenant still runs.
    executor.answer.set()
    nxt = h.submit(invocation("next"))
    routing.invocation_event(h.rt, {"type": "ADDED", "object": nxt})
    await asyncio.wait_for(h.cluster.wait_for_state("next", InvocationState.OBSERVED), 3)


async def test_hit_answers_held_without_a_slot_are_bounded() -> None:
    """HIT (executors/http.py `execute`, mcp.py likewise): the answer is read (up to
    maxResultBytes + 64 KiB, 1.06 MiB by default) inside `call.outside()`, and the call
    then queues for a slot behind its namespace's fresh calls while holding it. A tenant's
    burst of N calls to a fast tool with large answers holds ~N answers at once (10,000
    calls: ~10 GiB, the operator is OOM-killed for every tenant); before, at most one per
    slot. Fix: bound the calls outside the gate (a semaphore of k x capacity, taken before
    the request and given back once the slot is taken again), or give returning calls
    precedence over fresh ones and read the body after re-acquiring."""
    from aiohttp import web

    capacity, calls, bound = 2, 60, 8
    payload = b"x" * 65_536

    async def answer(_: web.Request) -> web.Response:
        return web.Response(body=payload)

    class Counting(HttpExecutor):
        def __init__(self) -> None:
            super().__init__()
            self.holding: set[str] = set()
            self.peak = 0

        async def _send(self, call: Call, *args: Any) -> Outcome:
            outcome = await super()._send(call, *args)
            self.holding.add(call.uid)  # read, now waiting for a slot again
            self.peak = max(self.peak, len(self.holding))
            return outcome

        async def execute(self, call: Call) -> Outcome:
            try:
                return await super().execute(call)
            finally:
                self.holding.discard(call.uid)

    http = Counting()
    h = make_runtime(
        settings=Settings(capacity=CapacitySettings(calls_in_flight=capacity)),
        executors={ToolKind.HTTP: http},
    )
    try:
        async with loopback_http("/big", answer) as url:
            h.publish(http_descriptor("fetch", url))
            h.cluster.grant(tools=["fetch"], classes=["read"])
            for i in range(calls):
                body = h.submit(invocation(f"f-{i}", tool="fetch", arguments={}))
                routing.invocation_event(h.rt, {"type": "ADDED", "object": body})
            for i in range(calls):
                done = h.cluster.wait_for_state(f"f-{i}", InvocationState.OBSERVED)
                await asyncio.wait_for(done, 20)
    finally:
        await http.close()
    assert http.peak <= bound, f"{http.peak} answers held at once with {capacity} slots"


# --------------------------------------------------------------------------- status readers


def test_hit_the_uncertain_page_renders_a_confirmation_the_operator_has_not_recorded() -> None:
    """HIT (crdgen.py `without_defaults` + gateway/ui/templates/uncertain_live.html:31):
    the UI, the CLI and the gateway write `effectConfirmation` without `recorded`; the CRD
    used to default it to false. Now it is absent until the operator records it, and the
    template's `call.confirmation.recorded` under StrictUndefined raises: /ui/uncertain
    answers 500 to every reviewer until the operator catches up (forever if recording
    fails). Fix: `uncertain_view` passes `recorded=bool(...get("recorded"))` (or validate
    with `EffectConfirmation`), or the template uses `.get("recorded")`."""
    obj = invocation(
        "unsure",
        status={
            "state": "Uncertain",
            "endedAt": "2025-01-01T00:00:00Z",
            "effectConfirmation": {
                "effectHappened": True,
                "confirmedBy": "alice",
                "evidence": "checked the bucket",
            },
        },
    )
    html = (
        templates()
        .get_template("uncertain_live.html")
        .render(
            prefix="/ui",
            notice=None,
            view="uncertain",
            refused=[],
            person=None,
            calls=[(uncertain_view(obj), None)],
            confirmable=set(),
        )
    )
    assert "the operator is writing the new receipt" in html


# --------------------------------------------------------------------------- pre-existing


def test_hit_interrupt_signals_of_ended_and_deleted_calls_are_not_kept_forever() -> None:
    """HIT, pre-existing (handlers/routing.py `invocation_event`): every event of a call
    with `spec.interrupt: true` (which an agent may set on its own calls, or create them
    with) re-creates `rt.interrupts[uid]`, also after `mark_finished` dropped it (the echo
    of the final write, every relisting), and DELETED (retention) never drops it: one
    asyncio.Event per interrupted call for the operator's lifetime. Fix: pop
    `rt.interrupts` on DELETED and set the signal only for unfinished calls."""
    h = make_runtime()
    body = invocation(
        "stopped",
        interrupt=True,
        status={"state": "Cancelled", "endedAt": "2025-01-01T00:00:00Z", "auditRef": "a"},
    )
    body["metadata"]["resourceVersion"] = "7"
    uid = body["metadata"]["uid"]
    h.rt.mark_finished(uid)
    routing.invocation_event(h.rt, {"type": "MODIFIED", "object": body})
    routing.invocation_event(h.rt, {"type": "DELETED", "object": body})
    assert uid not in h.rt.interrupts
    assert NAMESPACE == body["metadata"]["namespace"]


# --------------------------------------------------------------------------- non-hits


async def test_a_call_interrupted_or_deleted_while_queued_with_its_body_never_executes() -> None:
    """Not a hit: a queued call keeps its event's body, but the interrupt reaches it through
    `rt.interrupts` (shared with the flow it starts) and a DELETED event drops it from the
    gate's queue (`discard`), so neither runs."""
    held = asyncio.Event()
    executor = OutsideExecutor()
    executor.answer = held
    h = make_runtime(
        settings=Settings(capacity=CapacitySettings(calls_in_flight=1)),
        executors={ToolKind.NATIVE: executor},
    )
    h.publish(descriptor())
    h.cluster.grant(tools=["lister"], classes=["read"])
    bodies = [h.submit(invocation(name)) for name in ("first", "stopped", "deleted")]
    for body in bodies:
        routing.invocation_event(h.rt, {"type": "ADDED", "object": body})
    await asyncio.wait_for(executor.waiting.wait(), 5)
    assert h.rt.gate.queued() in (1, 2)  # the first one waits outside, maybe re-queued

    stopped = h.cluster.invocation("stopped")
    stopped["spec"]["interrupt"] = True
    routing.invocation_event(h.rt, {"type": "MODIFIED", "object": stopped})
    routing.invocation_event(h.rt, {"type": "DELETED", "object": bodies[2]})
    held.set()
    await asyncio.wait_for(h.cluster.wait_for_state("stopped", InvocationState.CANCELLED), 5)
    await asyncio.wait_for(h.cluster.wait_for_state("first", InvocationState.OBSERVED), 5)
    assert executor.executed == ["first"]
