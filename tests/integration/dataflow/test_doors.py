"""Data flow through the gateway's doors, as an agent (issue 42): an MCP result of an
untrusted tool says so in `_meta`, and the REST dry run of a gated send says it would wait
and why."""

from __future__ import annotations

import asyncio

import pytest
from kubernetes import client

from tests.integration.dataflow.tools import CUSTOMERS, publish_tools
from tests.integration.gateway_client import (
    http_json,
    mcp_client,
    mcp_url,
    request_meta,
    token_of,
)
from tests.integration.objects import Agent, status_of
from tests.integration.servers import Recorder
from tooladapter.devtools import Namespace, OperatorProcess

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(300)]


async def test_an_untrusted_result_carries_its_label_and_the_rest_dry_run_of_a_send_waits(
    api: client.ApiClient,
    ns: Namespace,
    agent: Agent,
    sink: Recorder,
    operator: OperatorProcess,
) -> None:
    publish_tools(api, ns, agent, sink.port)
    token = token_of(agent)
    read = agent.invoke("crm", {"name": CUSTOMERS}, runId="run-a")
    assert status_of(agent.wait(read))["state"] == "Observed"

    async with mcp_client(mcp_url(operator.gateway_url, ns.name), token) as mcp:
        result = await mcp.call_tool(
            "web", {}, meta=request_meta({"dev.tooladapter/runId": "run-a"})
        )
    assert result.is_error is False, result
    meta = dict(result.meta or {})
    assert meta["dev.tooladapter/labels"] == ["untrusted"], meta
    fetch = meta["dev.tooladapter/invocation"]

    url = f"{operator.gateway_url}/namespaces/{ns.name}/tools/send/dry-run"
    status, _, preview = await asyncio.to_thread(
        http_json, "POST", url, token, {"arguments": {"q": "x"}, "runId": "run-a"}
    )
    assert status == 200, preview
    assert preview["verdict"] == "would-await-approval", preview
    assert any(read in r and fetch in r for r in preview["approval"]["reasons"]), preview
    assert sink.total == 0
