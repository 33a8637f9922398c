"""The load: open-loop creates at a fixed rate, each call its own idempotency key, and the
50 concurrent creators of one key."""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from .config import TOOLS
from .objects import Agent

#: Which descriptor each kind of call uses, and the path its effect is counted under.
TOOL_ID = {"read": "list-tools", "http": "effect", "sandbox": "sh", "gated": "gated"}
PATH_PREFIX = {"http": "/effect/", "sandbox": "/sandbox/", "gated": "/gated/"}
#: A create is retried this long (the API server may be restarting) before it counts as
#: not created.
GIVE_UP_AFTER = 240.0


@dataclass
class Planned:
    index: int
    tool: str
    name: str
    key: str
    scheduled: float = 0.0
    created: bool = False
    created_at: float | None = None
    attempts: int = 0
    error: str = ""

    @property
    def path(self) -> str | None:
        prefix = PATH_PREFIX.get(self.tool)
        return f"{prefix}{self.key}" if prefix else None


def arguments(tool: str, key: str, server: str) -> dict[str, Any]:
    if tool == "read":
        return {}
    if tool == "sandbox":
        return {"command": f"wget -q -O - http://{server}/sandbox/{key}"}
    return {"id": key}


@dataclass
class Load:
    agent: Agent
    server: str
    run_id: str
    count: int
    rate: float
    calls: list[Planned] = field(default_factory=list)
    done: threading.Event = field(default_factory=threading.Event)
    started_at: float = 0.0
    ended_at: float = 0.0

    def __post_init__(self) -> None:
        for i in range(self.count):
            tool = TOOLS[i % len(TOOLS)]
            self.calls.append(Planned(i, tool, f"c{i:04d}-{tool}", f"{self.run_id}-{i:04d}"))

    def run(self) -> None:
        """Create every call at its moment (open loop: a slow create never delays the next)."""
        self.started_at = time.time()
        with ThreadPoolExecutor(max_workers=24, thread_name_prefix="creator") as pool:
            for call in self.calls:
                call.scheduled = self.started_at + call.index / self.rate
                time.sleep(max(0.0, call.scheduled - time.time()))
                pool.submit(self.create, call)
        self.ended_at = time.time()
        self.done.set()

    def create(self, call: Planned) -> None:
        body = self.agent.invocation(
            call.name, TOOL_ID[call.tool], arguments(call.tool, call.key, self.server), call.key
        )
        call.created, call.attempts, call.error = self.agent.invoke(
            body, give_up_after=GIVE_UP_AFTER
        )
        call.created_at = time.time() if call.created else None

    def names(self) -> set[str]:
        return {c.name for c in self.calls if c.created}


def same_key(agent: Agent, creators: int, key: str) -> list[tuple[str, bool, str]]:
    """`creators` threads create one invocation each, all with `key`, released together."""
    barrier = threading.Barrier(creators)

    def one(i: int) -> tuple[str, bool, str]:
        name = f"same-{i:03d}"
        body = agent.invocation(name, "effect", {"id": key}, key)
        barrier.wait(timeout=60)
        created, _, error = agent.invoke(body, give_up_after=60)
        return name, created, error

    with ThreadPoolExecutor(max_workers=creators) as pool:
        return list(pool.map(one, range(creators)))
