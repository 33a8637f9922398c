"""An operator whose gateway is turned off (TOOLADAPTER_GATEWAY_PORT=0, as the chart sets
when its gateway is disabled) starts and serves calls: it once crashed at start, reading the
gateway's shared state (found by issue 44's attack pass)."""

from __future__ import annotations

from collections.abc import Callable, Mapping

import pytest
from kubernetes import client

from tests.integration.conftest import Configured
from tests.integration.objects import Agent, descriptor, pretty, status_of

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(300)]


def test_an_operator_without_a_gateway_starts_and_serves_calls(
    api: client.ApiClient, configured: Callable[[Mapping[str, str]], Configured]
) -> None:
    operator = configured({"TOOLADAPTER_GATEWAY_PORT": "0"})
    namespace = operator.namespace(api)
    try:
        agent = Agent.create(api, namespace.name, "agent-1")
        descriptor(api, namespace.name, "list-tools", kind="native", native={"name": "list-tools"})
        agent.grant(["list-tools"], ["read"])
        status = status_of(agent.wait(agent.invoke("list-tools", {}), timeout=120))
        assert status["state"] == "Observed", pretty(status)
    finally:
        namespace.delete()
