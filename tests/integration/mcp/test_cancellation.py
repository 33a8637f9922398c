"""Issue 43: an MCP client that cancels its in-flight tools/call interrupts the call, on the
real cluster, in both protocol eras the gateway serves: a handshake-era client posts
`notifications/cancelled` naming the request; a 2026-07-28 client closes the request's
response stream. Either way the running sandboxed call ends Cancelled or Uncertain."""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

import pytest
from kubernetes import client

from tests.integration.flow.test_trust import running_pod
from tests.integration.gateway_client import mcp_client, mcp_url, token_of
from tests.integration.objects import Agent, custom, pretty, shell_tool, status_of
from tooladapter.devtools import Namespace, OperatorProcess, wait_for

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(600)]

SETTLED = {"Cancelled", "Uncertain"}


def _the_call(api: client.ApiClient, namespace: str) -> str | None:
    listed: dict[str, Any] = custom(api).list_namespaced_custom_object(  # type: ignore[assignment]  # the client returns the JSON as a dict
        "tooladapter.dev", "v1alpha1", namespace, "toolinvocations"
    )
    items = listed["items"]
    return str(items[0]["metadata"]["name"]) if len(items) == 1 else None


@pytest.mark.parametrize("era", ["legacy", "2026-07-28"])
async def test_a_cancelled_tools_call_interrupts_its_running_sandboxed_call(
    api: client.ApiClient, ns: Namespace, agent: Agent, operator: OperatorProcess, era: str
) -> None:
    shell_tool(api, ns.name, "long", timeout=300)
    agent.grant(["long"], ["sandbox"])
    url = mcp_url(operator.gateway_url, ns.name)

    async with mcp_client(url, token_of(agent), mode=era) as mcp:
        calling = asyncio.create_task(mcp.call_tool("long", {"command": "sleep 300"}))
        name = await asyncio.to_thread(
            wait_for, lambda: _the_call(api, ns.name), timeout=120, what="the invocation"
        )
        await asyncio.to_thread(
            wait_for, lambda: running_pod(api, ns.name, name), timeout=240, what="pod running"
        )
        assert not calling.done()
        calling.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await calling
        # The client stays connected, as a client that cancelled one call does.
        ended = status_of(await asyncio.to_thread(agent.wait, name, timeout=240))
    assert ended["state"] in SETTLED, pretty(ended)
