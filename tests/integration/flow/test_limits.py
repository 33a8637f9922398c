"""Rate limits on the real cluster, through kubectl's API as an agent."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
from kubernetes import client

from tests.integration.objects import Agent, descriptor, get, pretty, status_of
from tooladapter.devtools import Namespace, wait_for

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(300)]


def test_a_tool_limited_to_five_a_minute_called_ten_times_runs_five_and_denies_five(
    api: client.ApiClient, ns: Namespace, agent: Agent
) -> None:
    descriptor(
        api,
        ns.name,
        "list-tools",
        kind="native",
        native={"name": "list-tools"},
        rateLimits={"perMinute": 5},
    )
    agent.grant(["list-tools"], ["read"])
    with ThreadPoolExecutor(max_workers=10) as pool:
        names = list(pool.map(lambda i: agent.invoke("list-tools", {}, name=f"rl-{i}"), range(10)))
    finals = [status_of(agent.wait(n)) for n in names]
    observed = [s for s in finals if s["state"] == "Observed"]
    limited = [s for s in finals if s.get("failureClass") == "rate-limited"]
    assert len(observed) == 5 and len(limited) == 5, pretty(finals)
    for s in limited:
        assert s["state"] == "Denied" and s["deniedStage"] == "rate-limit"
        assert 1 <= s["retryAfterSeconds"] <= 61
        assert "perMinute is 5" in s["message"]


def test_a_sandbox_kind_whose_runtime_class_is_missing_keeps_its_descriptor_inactive(
    api: client.ApiClient, ns: Namespace
) -> None:
    # This cluster has no Kata (no KVM; gVisor it has): a Kata sandbox must not silently
    # run on runc.
    obj = descriptor(
        api,
        ns.name,
        "isolated",
        kind="container",
        side_effect_class="sandbox",
        wait_active=False,
        sandbox={"kind": "Kata", "command": ["/bin/true"]},
    )

    def reason() -> str | None:
        status = status_of(get(api, ns.name, "tooldescriptors", obj["metadata"]["name"]))
        ready: dict[str, Any] = next((c for c in status.get("conditions") or []), {})
        return status.get("message") if ready.get("reason") == "RuntimeClassMissing" else None

    message = wait_for(reason, timeout=30, what="descriptor inactive for its RuntimeClass")
    assert "kata" in str(message)
    assert not status_of(get(api, ns.name, "tooldescriptors", obj["metadata"]["name"]))["active"]
