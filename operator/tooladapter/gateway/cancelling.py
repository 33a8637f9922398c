"""An MCP client's cancellation of its tools/call interrupts the call's invocation
(`mcp.core.cancels` says what cancels a request in each protocol era).

`McpCalls` is this replica's table of the handshake-era calls in flight, by `call_key`: the
invocation each one follows once it is known, and whether a cancellation came for it. A
`notifications/cancelled` for a call that is not in the table (it is followed by another
replica) finds its invocation by the `CALL_LABEL` the call was created with, among the
caller's own invocations, read with the caller's token. Every interrupt is written with the
caller's token (`kube.interrupts`), so the admission policy sees the caller interrupting its
own call; it runs as a task of its own, so a request cancelled meanwhile cannot cut it short.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Coroutine
from dataclasses import dataclass, field
from typing import Any, Final

from tooladapter.enums import InterruptStanding, Resource
from tooladapter.gateway.context import Caller
from tooladapter.kube.callers import CallerApiError
from tooladapter.kube.interrupts import interrupt
from tooladapter.mcp.core.cancels import CALL_LABEL
from tooladapter.pipeline.interrupts import standing

logger = logging.getLogger("tooladapter.gateway")

#: A call whose request ended without an answer (the client went away) stays in the table
#: this long: its client's `notifications/cancelled` may arrive after the disconnect.
GRACE_SECONDS: Final = 120.0
#: Seconds the interrupt tasks get to finish when the gateway stops.
DRAIN_SECONDS: Final = 5.0


async def interrupt_as(caller: Caller, namespace: str, name: str, why: str) -> None:
    """Interrupt `namespace/name` as `caller`; a refusal is logged, never raised (the
    cancellation itself has no answer to carry it)."""
    try:
        done = await interrupt(caller.api.objects, namespace, name)
    except CallerApiError as exc:
        logger.info("%s: interrupting %s/%s refused: %s", why, namespace, name, exc)
        return
    if done.standing is InterruptStanding.REQUESTED:
        logger.info("%s: interrupted %s/%s as %s", why, namespace, name, caller.identity.username)


@dataclass
class Pending:
    """One tools/call in flight: its invocation once known; whether it was cancelled."""

    name: str | None = None
    cancelled: bool = False
    #: Monotonic time after which the entry is dropped (None: while its request runs).
    expires: float | None = None


@dataclass
class McpCalls:
    """The handshake-era calls in flight on this replica, by `call_key`."""

    calls: dict[str, Pending] = field(default_factory=dict)
    #: Set when the gateway stops: requests cancelled by the shutdown interrupt nothing.
    stopping: bool = False
    tasks: set[asyncio.Task[None]] = field(default_factory=set)

    def _prune(self) -> None:
        now = time.monotonic()
        for key in [k for k, p in self.calls.items() if p.expires is not None and p.expires < now]:
            del self.calls[key]

    def open(self, key: str) -> Pending:
        self._prune()
        pending = self.calls.get(key)
        if pending is None or pending.expires is not None:
            pending = self.calls[key] = Pending()
        return pending

    def close(self, key: str, pending: Pending, *, answered: bool) -> None:
        """The request of `key` ended: answered (forgotten now), or not (kept for a late
        cancellation)."""
        if self.calls.get(key) is not pending:
            return
        if answered:
            del self.calls[key]
        else:
            pending.expires = time.monotonic() + GRACE_SECONDS

    def spawn(self, work: Coroutine[Any, Any, None]) -> None:
        """Run `work` as a task of its own (not cut short by the request that asked)."""
        task = asyncio.get_running_loop().create_task(work)
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    async def drain(self) -> None:
        if self.tasks:
            await asyncio.wait(set(self.tasks), timeout=DRAIN_SECONDS)

    async def cancel(self, caller: Caller, namespace: str, key: str) -> None:
        """A `notifications/cancelled` for the call `key` of `caller`: interrupt it here,
        or find it by its label (followed by another replica, or its request gone)."""
        pending = self.calls.get(key)
        if pending is not None:
            pending.cancelled = True
            if pending.name is not None:
                await interrupt_as(caller, namespace, pending.name, "MCP notifications/cancelled")
                return
        try:
            found = await caller.api.list(
                Resource.INVOCATIONS,
                namespace,
                field_selector=f"spec.caller.name={caller.identity.username}",
                label_selector=f"{CALL_LABEL}={key}",
            )
        except CallerApiError as exc:
            logger.info("MCP notifications/cancelled: cannot look up the call: %s", exc)
            return
        if not found:
            logger.info("MCP notifications/cancelled: no call of %s in flight for it", namespace)
        for obj in found:
            if standing(obj) is InterruptStanding.REQUESTED:
                name = str((obj.get("metadata") or {}).get("name") or "")
                await interrupt_as(caller, namespace, name, "MCP notifications/cancelled")


@dataclass
class CallTracker:
    """One tools/call's link to cancellation. `key`: its handshake-era `call_key` (None in
    2026-07-28, where closing the response stream cancels: `closing_cancels`)."""

    calls: McpCalls
    key: str | None
    closing_cancels: bool
    #: The invocation the call followed first: the one it asked for.
    name: str | None = None
    #: The create of its invocation, while the name is not known yet.
    creating: asyncio.Future[dict[str, Any]] | None = None
    pending: Pending | None = field(default=None, init=False)

    def __post_init__(self) -> None:
        if self.key is not None:
            self.pending = self.calls.open(self.key)

    @property
    def label(self) -> dict[str, str]:
        """The label a created invocation carries (where other replicas find it)."""
        return {CALL_LABEL: self.key} if self.key is not None else {}

    async def bound(self, caller: Caller, namespace: str, name: str) -> None:
        """The call follows invocation `name` now; a cancellation that came before is
        applied."""
        if self.name is not None:
            return
        self.name = name
        if self.pending is not None:
            self.pending.name = name
            if self.pending.cancelled:
                await interrupt_as(caller, namespace, name, "MCP notifications/cancelled")

    def ended(self, caller: Caller, namespace: str, *, answered: bool) -> None:
        """The request ended: answered, or cut off (the client closed its stream)."""
        if self.key is not None and self.pending is not None:
            self.calls.close(self.key, self.pending, answered=answered)
        if answered or not self.closing_cancels or self.calls.stopping:
            return
        self.calls.spawn(self._interrupt_when_known(caller, namespace))

    async def _interrupt_when_known(self, caller: Caller, namespace: str) -> None:
        name = self.name
        if name is None and self.creating is not None:
            try:
                created = await self.creating
            except Exception:  # never created: nothing to interrupt
                return
            name = str((created.get("metadata") or {}).get("name") or "") or None
        if name is not None:
            await interrupt_as(caller, namespace, name, "MCP response stream closed")
