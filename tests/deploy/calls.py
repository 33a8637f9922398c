"""Calls as an agent against the Helm-installed operator, and their effects as the recording
server counted them."""

from __future__ import annotations

import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from kubernetes import client

from tests.deploy.release import Release
from tests.integration.objects import TERMINAL, Agent, descriptor, get
from tests.integration.servers import Recorder
from tooladapter.devtools import wait_for

#: The effect tool: POST /effect/<id> to the recording server. Class `sandbox` (effects
#: contained, no approval): it takes the execution claim before it sends, so a call is sent
#: at most once even across a takeover, and a call cut off mid-request settles `Failed`.
EFFECT = "effect"


def effect_tool(api: client.ApiClient, namespace: str, server: Recorder) -> None:
    descriptor(
        api,
        namespace,
        EFFECT,
        kind="http",
        side_effect_class="sandbox",
        inputSchema={
            "type": "object",
            "properties": {"id": {"type": "string", "pattern": "^[a-z0-9-]{1,40}$"}},
            "required": ["id"],
            "additionalProperties": False,
        },
        http={
            "method": "POST",
            "url": f"http://{server.address}/effect/{{id}}",
            "allowedHosts": [server.address],
        },
        wait_active=False,
    )
    # Active once the release's operator has reconciled it: a first sign that it leads.
    wait_for(
        lambda: (get(api, namespace, "tooldescriptors", f"{EFFECT}-1-0-0").get("status") or {}).get(
            "active"
        ),
        timeout=120,
        what="the effect tool active (the release's operator leads)",
    )


def agent_for(api: client.ApiClient, release: Release, namespace: str) -> Agent:
    agent = Agent.create(api, namespace, "agent-1", role=f"{release.prefix}-requester")
    agent.grant([EFFECT], ["sandbox"])
    return agent


@dataclass
class Load:
    """`total` calls created at `rate` per second on a thread, each with its own id (the
    path the server counts) and idempotency key."""

    agent: Agent
    total: int
    rate: float
    tag: str
    names: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    thread: threading.Thread | None = None

    def ident(self, i: int) -> str:
        return f"{self.tag}-{i}"

    def start(self) -> None:
        self.thread = threading.Thread(target=self._run, name=f"load {self.tag}", daemon=True)
        self.thread.start()

    def _run(self) -> None:
        for i in range(self.total):
            started = time.monotonic()
            try:
                self.names.append(self.call(self.ident(i)))
            except Exception as exc:  # counted as lost below
                self.errors.append(f"{self.ident(i)}: {exc}")
            time.sleep(max(0.0, 1 / self.rate - (time.monotonic() - started)))

    def call(self, ident: str) -> str:
        return self.agent.invoke(EFFECT, {"id": ident}, name=f"call-{ident}", idempotencyKey=ident)

    def created(self) -> int:
        return len(self.names)

    def join(self, timeout: float = 120) -> None:
        assert self.thread is not None
        self.thread.join(timeout)
        assert not self.thread.is_alive(), "the load did not finish creating its calls"
        assert not self.errors, f"calls the API server refused: {self.errors}"


def wait_all_terminal(agent: Agent, names: list[str], timeout: float = 180) -> dict[str, Any]:
    """Every call's final object, once all are terminal."""

    def finished() -> dict[str, Any] | None:
        objs = {n: get(agent.api, agent.namespace, "toolinvocations", n) for n in names}
        pending = [
            n for n, o in objs.items() if (o.get("status") or {}).get("state") not in TERMINAL
        ]
        return None if pending else objs

    result: dict[str, Any] = wait_for(
        finished, timeout=timeout, what=f"{len(names)} calls terminal", interval=1
    )
    return result


def check_once_each(
    objs: dict[str, Any], server: Recorder, ident_of: dict[str, str]
) -> Counter[str | None]:
    """No call lost (terminal with a receipt), none executed twice, every Observed call's
    effect seen exactly once, and a call not Observed only because an operator died while
    it was executing (settled `Failed`: its class keeps effects contained). Returns the
    terminal states."""
    states: Counter[str | None] = Counter()
    problems = []
    for name, obj in objs.items():
        status = obj.get("status") or {}
        state = status.get("state")
        states[state] += 1
        hits = server.hits[f"/effect/{ident_of[name]}"]
        if not status.get("receiptRef"):
            problems.append(f"{name}: {state} without a receipt")
        if hits > 1:
            problems.append(f"{name}: executed {hits} times")
        if state == "Observed" and hits != 1:
            problems.append(f"{name}: Observed but the server saw it {hits} times")
        if state == "Failed" and not status.get("execution"):
            problems.append(f"{name}: Failed before executing: {status.get('message')}")
        if state not in ("Observed", "Failed"):
            problems.append(f"{name}: {state}: {status.get('message')}")
    assert not problems, problems
    return states
