"""Issue 16: the MCP endpoint of the gateway, with the `mcp` SDK's own client, on the real
cluster: agents' ServiceAccount tokens, RBAC grants, the operator's pipeline."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client
from mcp.shared.exceptions import MCPError

from tests.integration.cli.test_cli import Cli, explain
from tests.integration.gateway_client import (
    http_json,
    mcp_client,
    mcp_url,
    request_meta,
    token_of,
)
from tests.integration.objects import Agent, approve, descriptor, get, pretty
from tooladapter.devtools import Namespace, OperatorProcess, wait_for

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(300)]

NATIVE: dict[str, Any] = {"kind": "native", "native": {"name": "list-tools"}}


def meta_of(result: Any) -> dict[str, Any]:
    return dict(result.meta or {})


def text_of(result: Any) -> str:
    return "\n".join(getattr(block, "text", "") for block in result.content)


async def test_an_agent_lists_only_its_granted_tools_and_calls_one_to_observed(
    api: client.ApiClient, ns: Namespace, agent: Agent, operator: OperatorProcess
) -> None:
    descriptor(api, ns.name, "list-tools", **NATIVE)
    descriptor(api, ns.name, "list-tools", version="1.1.0", **NATIVE)
    descriptor(api, ns.name, "other-tool", **NATIVE)
    agent.grant(["list-tools"], ["read"])
    other = Agent.create(api, ns.name, "agent-2")
    other.grant(["other-tool"], ["read"])
    url = mcp_url(operator.gateway_url, ns.name)

    async with mcp_client(url, token_of(agent)) as mcp:
        listed = (await mcp.list_tools()).tools
        assert [t.name for t in listed] == ["list-tools"]
        tool = listed[0]
        assert (tool.meta or {})["dev.tooladapter/version"] == "1.1.0"
        assert tool.annotations is not None and tool.annotations.read_only_hint is True
        assert tool.annotations.destructive_hint is False

        result = await mcp.call_tool(
            "list-tools", {}, meta=request_meta({"dev.tooladapter/idempotencyKey": "key-1"})
        )
        assert result.is_error is False, text_of(result)
        meta = meta_of(result)
        assert meta["dev.tooladapter/state"] == "Observed"
        assert str(meta["dev.tooladapter/receiptRef"]).startswith("sha256:")
        # list-tools itself lists what the caller may invoke.
        tools = (result.structured_content or {})["tools"]
        assert {t["toolId"] for t in tools} == {"list-tools"}
        obj = get(api, ns.name, "toolinvocations", meta["dev.tooladapter/invocation"])
        assert obj["spec"]["caller"]["name"] == agent.user
        assert obj["spec"]["tool"] == {"id": "list-tools", "version": "1.1.0"}
        assert obj["spec"]["idempotencyKey"] == "key-1"

        # The same key again: a duplicate, answered with the first call's outcome and
        # receipt, naming that call (issue 27; an old Denied duplicate reads the same).
        again = await mcp.call_tool(
            "list-tools", {}, meta=request_meta({"dev.tooladapter/idempotencyKey": "key-1"})
        )
        assert again.is_error is False, text_of(again)
        repeated = meta_of(again)
        assert repeated["dev.tooladapter/duplicateOf"] == meta["dev.tooladapter/invocation"]
        assert repeated["dev.tooladapter/receiptRef"] == meta["dev.tooladapter/receiptRef"]
        assert repeated["dev.tooladapter/state"] == "Observed"

        # A tool the agent may not invoke does not exist for it.
        with pytest.raises(MCPError, match="unknown tool"):
            await mcp.call_tool("other-tool", {})

    async with mcp_client(url, token_of(other)) as mcp:
        assert [t.name for t in (await mcp.list_tools()).tools] == ["other-tool"]


async def test_no_token_or_a_bad_token_is_refused_with_401(
    ns: Namespace, operator: OperatorProcess
) -> None:
    url = mcp_url(operator.gateway_url, ns.name)
    ping = {"jsonrpc": "2.0", "id": 1, "method": "ping"}
    for token in (None, "not-a-token"):
        status, kind, body = await asyncio.to_thread(http_json, "POST", url, token, ping)
        assert status == 401
        assert kind.startswith("application/problem+json")
        assert body["status"] == 401 and "bearer" in body["detail"].lower()
    with pytest.raises(Exception):  # noqa: B017 - the SDK's error for an HTTP 401
        async with mcp_client(url, None, timeout=20) as mcp:
            await mcp.list_tools()


async def test_a_denied_call_is_an_error_result_naming_the_stage_and_reason(
    api: client.ApiClient, ns: Namespace, agent: Agent, operator: OperatorProcess
) -> None:
    descriptor(api, ns.name, "list-tools", **NATIVE)
    agent.grant(["list-tools"], [])  # the tool, but not its class
    async with mcp_client(mcp_url(operator.gateway_url, ns.name), token_of(agent)) as mcp:
        result = await mcp.call_tool("list-tools", {})
    assert result.is_error is True
    text = text_of(result)
    assert "Denied at stage permission" in text, text
    assert "use" in text and "sideeffectclasses" in text, text
    meta = meta_of(result)
    assert meta["dev.tooladapter/state"] == "Denied"
    assert meta["dev.tooladapter/stage"] == "permission"
    assert str(meta["dev.tooladapter/receiptRef"]).startswith("sha256:")


async def _call_and_approve(
    url: str, token: str, approver: Callable[[str], object], *, approve_on_progress: bool
) -> tuple[Any, list[str]]:
    """Call the tool `gated` over MCP; with `approve_on_progress`, `approver(NAME)` approves
    it once a progress message says it awaits approval, and the call's result is returned
    only after the approver has finished too (the SDK does not await progress callbacks)."""
    messages: list[str] = []
    waiting: list[str] = []
    awaiting = asyncio.Event()

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        messages.append(message or "")
        if "awaiting approval" in (message or "") and not awaiting.is_set():
            waiting.append((message or "").split("invocation ", 1)[1].split(" ", 1)[0])
            awaiting.set()

    async def approve_once_waiting() -> None:
        await asyncio.wait_for(awaiting.wait(), timeout=120)
        await asyncio.to_thread(approver, waiting[0])

    async with mcp_client(url, token) as mcp:
        call = mcp.call_tool("gated", {}, progress_callback=on_progress)
        if approve_on_progress:
            result, _ = await asyncio.gather(call, approve_once_waiting())
        else:
            result = await call
    return result, messages


async def test_a_gated_call_reports_awaiting_approval_and_completes_once_approved_with_the_cli(
    api: client.ApiClient,
    ns: Namespace,
    agent: Agent,
    operator: OperatorProcess,
    tmp_path: Path,
) -> None:
    descriptor(api, ns.name, "gated", side_effect_class="shared-write", **NATIVE)
    agent.grant(["gated"], ["shared-write"])
    reviewer = Agent.create(api, ns.name, "reviewer-1", role="tooladapter-reviewer")
    # The reviewer as a person does it: `tooladapter approve NAME` with a kubeconfig holding
    # only the reviewer's token; it waits until the operator has bound the approval.
    reviewer_cli = Cli(tmp_path, api, reviewer)
    approvals: list[str] = []

    def approve_with_cli(name: str) -> None:
        done = reviewer_cli("approve", name, "--comment", "looked at it")
        assert done.returncode == 0, explain(done)
        approvals.append(done.stdout)

    url = mcp_url(operator.gateway_url, ns.name)
    result, messages = await _call_and_approve(
        url, token_of(agent), approve_with_cli, approve_on_progress=True
    )
    assert len(approvals) == 1 and "bound" in approvals[0], approvals
    assert any("awaiting approval" in m for m in messages), messages
    assert result.is_error is False, text_of(result)
    meta = meta_of(result)
    assert meta["dev.tooladapter/state"] == "Observed", pretty(meta)
    obj = get(api, ns.name, "toolinvocations", meta["dev.tooladapter/invocation"])
    assert obj["status"]["approval"]["reviewer"] == reviewer.user


async def test_a_standby_serves_the_gateway_and_answers_a_long_wait_with_the_invocation(
    api: client.ApiClient,
    ns: Namespace,
    agent: Agent,
    operator: OperatorProcess,
    tmp_path: Path,
) -> None:
    descriptor(api, ns.name, "gated", side_effect_class="shared-write", **NATIVE)
    agent.grant(["gated"], ["shared-write"])
    reviewer = Agent.create(api, ns.name, "reviewer-1", role="tooladapter-reviewer")
    # Same namespaces as the session's operator, which leads: this one waits as a standby.
    standby = OperatorProcess(tmp_path, {"TOOLADAPTER_GATEWAY_APPROVAL_WAIT_SECONDS": "1"})
    standby.start(until="standby:")
    try:
        url = mcp_url(standby.gateway_url, ns.name)
        result, messages = await _call_and_approve(
            url, token_of(agent), lambda name: approve(reviewer, name), approve_on_progress=False
        )
        assert result.is_error is False, text_of(result)
        assert any("awaiting approval" in m for m in messages), messages
        text = text_of(result)
        assert "awaiting approval" in text, text
        name = meta_of(result)["dev.tooladapter/invocation"]
        assert f"/tool-invocations/{name}" in text
        await asyncio.to_thread(approve, reviewer, name)

        def observed() -> dict[str, Any] | None:
            status, _, body = http_json(
                "GET",
                f"{standby.gateway_url}/namespaces/{ns.name}/tool-invocations/{name}",
                token_of(agent),
            )
            assert status == 200, body
            return body if body["status"].get("state") == "Observed" else None

        await asyncio.to_thread(wait_for, observed, timeout=60, what=f"{name} Observed")
    finally:
        standby.stop()
