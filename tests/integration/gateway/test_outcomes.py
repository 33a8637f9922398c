"""Issue 27, the doors: what an agent reads over MCP (and REST) about how a call ended.

- Every tools/call result says its content is a tool's answer (`_meta`
  `dev.tooladapter/provenance: tool-result`), and the tool's text reaches the model between
  nonce delimiters (the gateway's default); the REST view says the same.
- A sandboxed command that runs and exits 2 is the tool's own answer: the call ends
  Observed with `result.isError` and exit code 2, and MCP answers `isError: true` with the
  exit code visible and the tool's own error text.
"""

from __future__ import annotations

import asyncio
import re
from typing import Any

import pytest
from kubernetes import client

from tests.integration.gateway_client import http_json, mcp_client, mcp_url, token_of
from tests.integration.mcp.test_endpoint import meta_of, text_of
from tests.integration.objects import Agent, descriptor, get, pretty, shell_tool
from tooladapter.devtools import Namespace, OperatorProcess

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(300)]

NATIVE: dict[str, Any] = {"kind": "native", "native": {"name": "list-tools"}}
PROVENANCE = "dev.tooladapter/provenance"


async def test_a_read_tool_result_carries_provenance_and_its_text_is_delimited(
    api: client.ApiClient, ns: Namespace, agent: Agent, operator: OperatorProcess
) -> None:
    descriptor(api, ns.name, "list-tools", **NATIVE)
    agent.grant(["list-tools"], ["read"])
    async with mcp_client(mcp_url(operator.gateway_url, ns.name), token_of(agent)) as mcp:
        result = await mcp.call_tool("list-tools", {})
    assert result.is_error is False, text_of(result)
    meta = meta_of(result)
    assert meta[PROVENANCE] == "tool-result", meta
    assert meta["dev.tooladapter/state"] == "Observed"
    text = text_of(result)
    opened = re.match(r'<tool-result id="([0-9a-f]{32})" provenance="tool-result">\n', text)
    assert opened, text[:200]
    assert text.endswith(f'</tool-result id="{opened.group(1)}">'), text[-200:]
    # Display only: the status keeps the tool's exact text, without delimiters.
    name = meta["dev.tooladapter/invocation"]
    stored = get(api, ns.name, "toolinvocations", name)["status"]["result"]
    assert "<tool-result" not in stored.get("content", ""), pretty(stored)
    # The REST view of the same call says the same.
    status, _, view = await asyncio.to_thread(
        http_json,
        "GET",
        f"{operator.gateway_url}/namespaces/{ns.name}/tool-invocations/{name}",
        token_of(agent),
    )
    assert status == 200, view
    assert view["provenance"] == "tool-result" and view["toolError"] is False


async def test_a_command_exiting_2_is_an_observed_tool_error_over_mcp(
    api: client.ApiClient, ns: Namespace, agent: Agent, operator: OperatorProcess
) -> None:
    # grep exits 2 on an unreadable file (busybox and GNU alike): the tool ran and answered.
    shell_tool(api, ns.name, "sh", shell={"allow": ["grep"]}, timeout=60)
    agent.grant(["sh"], ["sandbox"])
    command = {"command": "grep needle /no-such-file"}
    async with mcp_client(mcp_url(operator.gateway_url, ns.name), token_of(agent)) as mcp:
        result = await mcp.call_tool("sh", command)
    meta = meta_of(result)
    name = meta.get("dev.tooladapter/invocation")
    obj = get(api, ns.name, "toolinvocations", name) if name else {}
    status = obj.get("status") or {}
    assert result.is_error is True, text_of(result)
    assert meta[PROVENANCE] == "tool-result", meta
    assert status.get("state") == "Observed", pretty(status)
    assert meta["dev.tooladapter/state"] == "Observed"
    assert status["result"]["isError"] is True and status["result"]["exitCode"] == 2
    assert meta["dev.tooladapter/exitCode"] == 2 and meta["dev.tooladapter/toolError"] is True
    assert status.get("failureClass") == "tool-error", pretty(status)
    text = text_of(result)
    assert "exit code 2" in text and "do not retry blindly" in text, text
    assert "no-such-file" in text, text  # the tool's own error text
