"""Data flow across the runs of an attempt, on the real cluster, as an agent (issue 42): an
attempt's workspace carries data from one run to the next, so an attempt that read private
data in one run (in its workspace) and untrusted content in another gates its sends in a
third; another attempt of the same caller holds nothing."""

from __future__ import annotations

import pytest
from kubernetes import client

from tests.integration.dataflow.tools import LOOPBACK, publish_tools
from tests.integration.objects import SHELL_SCHEMA, Agent, descriptor, pretty, status_of
from tests.integration.servers import Recorder
from tooladapter.devtools import Namespace

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(600)]


def workspace_tool(api: client.ApiClient, namespace: str) -> None:
    """`ws-read` runs in the attempt's workspace (no egress: no sink) and reads what the
    tenant keeps private there."""
    descriptor(
        api,
        namespace,
        "ws-read",
        kind="shell",
        side_effect_class="sandbox",
        inputSchema=SHELL_SCHEMA,
        timeoutSeconds=120,
        shell={"allow": ["true"]},
        sandbox={
            "workspace": "attempt",
            "resources": {
                "requests": {"cpu": "50m", "memory": "64Mi"},
                "limits": {"cpu": "500m", "memory": "64Mi"},
            },
            "egress": {"allow": []},
        },
        dataFlow={"labels": ["private"]},
    )


def test_an_attempt_that_read_private_and_untrusted_data_in_other_runs_gates_its_sends(
    api: client.ApiClient, ns: Namespace, agent: Agent, sink: Recorder
) -> None:
    publish_tools(api, ns, agent, sink.port)
    workspace_tool(api, ns.name)
    agent.grant(["ws-read", "web", "send"], ["read", "sandbox"])

    read = agent.invoke("ws-read", {"command": "true"}, runId="run-1", attemptId="att-1")
    read_status = status_of(agent.wait(read))
    assert read_status["state"] == "Observed", pretty(read_status)
    assert read_status["sandboxLease"]["workspace"]["id"], pretty(read_status)
    fetch = agent.invoke("web", {}, runId="run-2", attemptId="att-1")
    assert status_of(agent.wait(fetch))["state"] == "Observed"

    # A third run of the same attempt: neither label is in run-3, both are in att-1.
    send = agent.invoke("send", {"q": "alice"}, runId="run-3", attemptId="att-1")
    waiting = agent.wait(send, states={"AwaitingApproval", "Observed", "Denied", "Failed"})

    status = status_of(waiting)
    assert status["state"] == "AwaitingApproval", pretty(waiting)
    gated = status["dataFlow"]["gated"]
    assert read in gated and fetch in gated and "attempt att-1" in gated, gated
    assert f"{LOOPBACK}:{sink.port}" in gated
    assert sink.total == 0

    # Another attempt (and run) of the same caller holds nothing: it sends at once.
    other = status_of(
        agent.wait(agent.invoke("send", {"q": "x"}, runId="run-4", attemptId="att-2"))
    )
    assert other["state"] == "Observed", pretty(other)
    assert sink.total == 1
