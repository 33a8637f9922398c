"""The Helm-installed operator serves an agent's calls: two replicas, one leading."""

from __future__ import annotations

import json

import pytest
from kubernetes import client

from tests.integration.servers import Recorder
from tooladapter.devtools import Namespace

from .calls import EFFECT, agent_for, effect_tool
from .release import Release

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
