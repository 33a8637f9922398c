"""One call of a phase, and the tracker a single watch completes them with."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .config import TERMINAL


@dataclass
class Call:
    name: str
    target: float
    sent: float = 0.0
    created: float = 0.0
    http_status: int = 0
    error: str = ""
    done: float = 0.0
    state: str = ""
    status: dict[str, Any] | None = None
    event: asyncio.Event | None = None


class Tracker:
    """The calls of one phase, completed by a single watch on their resource."""

    def __init__(self, terminal: Callable[[dict[str, Any]], str | None]) -> None:
        self.calls: dict[str, Call] = {}
        self.terminal = terminal
        self.pending = 0
        self.all_done = asyncio.Event()

    def add(self, call: Call) -> None:
        self.calls[call.name] = call
        self.pending += 1
        self.all_done.clear()

    def handle(self, kind: str, obj: dict[str, Any], now: float) -> None:
        if kind == "DELETED":
            return
        rec = self.calls.get(obj["metadata"]["name"])
        if rec is None or rec.done:
            return
        state = self.terminal(obj)
        if state is None:
            return
        rec.done, rec.state = now, state
        st = obj.get("status") or {}
        rec.status = {k: st.get(k) for k in ("startedAt", "endedAt", "stages")}
        if rec.event is not None:
            rec.event.set()
        self.finish_one()

    def fail(self, rec: Call, why: str) -> None:
        rec.error = why
        rec.state = "CreateError"
        self.finish_one()

    def finish_one(self) -> None:
        self.pending -= 1
        if self.pending <= 0:
            self.all_done.set()


def invocation_terminal(obj: dict[str, Any]) -> str | None:
    state = (obj.get("status") or {}).get("state")
    return state if state in TERMINAL else None
