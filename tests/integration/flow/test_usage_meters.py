"""Usage meters measure what ran (issue 37), on the real cluster: a tenant's quick sandboxed
calls and a call killed at its timeout each add their run time, on the operator's own
clock, to `tooladapter_sandbox_seconds_total` for that tenant, the same value each call's
status (and receipt) records."""

from __future__ import annotations

from kubernetes import client

from tests.integration.flow.test_call_semantics import metrics_of, sample
from tests.integration.objects import Agent, pretty, shell_tool, status_of
from tooladapter.devtools import Namespace, OperatorProcess, wait_for

METER = "tooladapter_sandbox_seconds_total"


def test_quick_calls_and_a_call_killed_at_its_timeout_each_add_their_run_time_for_the_tenant(
    api: client.ApiClient, ns: Namespace, agent: Agent, operator: OperatorProcess
) -> None:
    shell_tool(api, ns.name, "quick")
    # The timeout counts from the pod's start on its node, its network gate included: long
    # enough that a loaded node still starts the tool before it (else it never ran, and
    # rightly meters nothing).
    shell_tool(api, ns.name, "slow", timeout=12)
    agent.grant(["quick", "slow"], ["sandbox"])
    before = sample(metrics_of(operator), METER, tenant=ns.name)

    names = [
        agent.invoke("quick", {"command": "true"}),
        agent.invoke("quick", {"command": "echo hi"}),
        agent.invoke("slow", {"command": "sleep 60"}),
    ]
    ended = [status_of(agent.wait(name, timeout=180)) for name in names]

    quick_a, quick_b, slow = ended
    assert quick_a["state"] == quick_b["state"] == "Observed", pretty(ended)
    assert (slow["state"], slow["failureClass"]) == ("Failed", "timeout"), pretty(slow)
    seconds = [status["execution"]["sandboxSeconds"] for status in ended]
    # Kubernetes' to-the-second times metered quick calls 0 and a killed one nothing.
    assert all(value > 0 for value in seconds), seconds
    # The meter is added when the end is written: wait for the last one to land.
    total = wait_for(
        lambda: (
            value
            if abs(
                (value := sample(metrics_of(operator), METER, tenant=ns.name))
                - before
                - sum(seconds)
            )
            < 1e-6
            else None
        ),
        timeout=30,
        what=f"{METER} for {ns.name} to grow by {sum(seconds)}",
    )
    assert total > before
