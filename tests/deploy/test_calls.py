"""The Helm-installed operator serves an agent's calls: two replicas, one leading."""

from __future__ import annotations

import json

import pytest
from kubernetes import client

from tests.deploy.calls import EFFECT, agent_for, effect_tool
from tests.deploy.release import Release
from tests.integration.objects import Agent, jobs_of, shell_tool
from tests.integration.servers import Recorder
from tooladapter.devtools import Namespace
from tooladapter.devtools.waiting import wait_for

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(600)]


def test_an_agent_calls_a_tool_through_the_installed_operator_to_observed(
    api: client.ApiClient, release: Release, tenant: Namespace, server: Recorder
) -> None:
    pods = release.pods()
    assert len(pods) == 2, [p.metadata.name for p in pods]
    leader = release.leader_pod()
    effect_tool(api, tenant.name, server)
    agent = agent_for(api, release, tenant.name)

    name = agent.invoke(EFFECT, {"id": "hello"})
    obj = agent.wait(name, timeout=120)

    status = obj["status"]
    assert status["state"] == "Observed", status
    assert json.loads(status["result"]["content"])["path"] == "/effect/hello"
    assert status["receiptRef"]
    assert server.hits["/effect/hello"] == 1
    holder = status["execution"]["holder"]
    assert holder.startswith(leader.metadata.name), (holder, leader.metadata.name)


def test_a_sandboxed_shell_call_runs_its_job_behind_the_network_gate(
    api: client.ApiClient, release: Release, tenant: Namespace
) -> None:
    """The in-cluster operator's Job, NetworkPolicy, log and canary (at the pod's address).
    Warm pools are on by the chart's defaults: a CIDR egress entry keeps this call on the
    cold path (a NetworkPolicy of its own), and the plain tool's pool starts on its own."""
    shell_tool(api, tenant.name, egress=["192.0.2.99/32"])
    shell_tool(api, tenant.name, "sh-pooled")
    agent = Agent.create(api, tenant.name, "agent-1", role=f"{release.prefix}-requester")
    agent.grant(["sh"], ["sandbox"])
    # The chart's defaults: a descriptor made active starts its profile's warm pool.
    wait_for(
        lambda: (
            client.CoreV1Api(api)
            .list_namespaced_pod(tenant.name, label_selector="tooladapter.dev/warm-state=pool")
            .items
        ),
        timeout=120,
        what="the pool of sh-pooled started by its activation",
    )

    name = agent.invoke("sh", {"command": "echo hello from the sandbox"})
    obj = agent.wait(name, timeout=180)

    status = obj["status"]
    assert status["state"] == "Observed", status
    assert status["result"]["content"].strip() == "hello from the sandbox"
    # Its pod waited for its NetworkPolicy by probing the leader's canary at the leader
    # pod's own address (POD_IP), which the policy then cut off: in the tool's own
    # container (the tool has the sandbox image, the gate's), before its argv was exec'd.
    (job,) = jobs_of(api, tenant.name)
    pod_spec = job.spec.template.spec
    assert not pod_spec.init_containers
    (tool,) = pod_spec.containers
    assert tool.command[:2] == ["/bin/sh", "-c"] and tool.command[3] == "gate"
    assert tool.command[4] == release.leader_pod().status.pod_ip
    assert " ".join(tool.command[7:]) == "echo hello from the sandbox"  # the argv, whole
