"""Issue 31: clients we did not write, through the MCP endpoint, on the real cluster.

The TypeScript SDK's own Client (`@modelcontextprotocol/sdk` at the version
hack/mcp-ts/package-lock.json pins, installed by hack/mcp-ts/install.sh into
~/.cache/tooladapter/) and the Python SDK's Client in both protocol eras: list, call, a
denied call as `isError` with its stage and reason, and (TypeScript, 2025-11-25) a gated
call approved on the reviewers' page through the URL elicitation its error carries.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, cast

import pytest
from kubernetes import client

from tests.integration.gateway_client import mcp_url, token_of
from tests.integration.mcp.test_approvals import (
    decide_on_page,
    invocations,
    name_in,
    sdk_client,
    text_of,
)
from tests.integration.objects import Agent, custom, descriptor
from tooladapter import GROUP, VERSION
from tooladapter.devtools import Namespace, OperatorProcess

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(300)]

NATIVE: dict[str, Any] = {"kind": "native", "native": {"name": "list-tools"}}
INSTALL = Path(__file__).resolve().parents[3] / "hack" / "mcp-ts" / "install.sh"


@pytest.fixture(scope="module")
def ts_client() -> Path:
    """The TypeScript SDK client, installed at its pinned version (once per lock)."""
    done = subprocess.run([str(INSTALL)], capture_output=True, text=True, timeout=600, check=False)
    assert done.returncode == 0, done.stderr
    return Path(done.stdout.strip()) / "client.mjs"


class TsRun:
    def __init__(self, proc: asyncio.subprocess.Process) -> None:
        self.proc = proc

    async def next(self) -> dict[str, Any]:
        assert self.proc.stdout is not None
        line = await asyncio.wait_for(self.proc.stdout.readline(), timeout=120)
        if not line:
            assert self.proc.stderr is not None
            err = await self.proc.stderr.read()
            raise AssertionError(f"the TypeScript client ended early: {err.decode()[-2000:]}")
        answer: dict[str, Any] = json.loads(line)
        return answer

    async def go_on(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(b"go\n")
        await self.proc.stdin.drain()


@asynccontextmanager
async def ts_run(
    script: Path,
    url: str,
    token: str,
    steps: list[dict[str, Any]],
    *,
    url_elicitation: bool = False,
) -> AsyncIterator[TsRun]:
    args = ["node", str(script), url, token, json.dumps(steps)]
    if url_elicitation:
        args.append("--url-elicitation")
    proc = await asyncio.create_subprocess_exec(
        *args,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        run = TsRun(proc)
        connected = await run.next()
        assert connected["op"] == "connected", connected
        yield run
        assert await asyncio.wait_for(proc.wait(), timeout=60) == 0
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()


async def test_the_typescript_client_lists_only_granted_tools_and_calls_one(
    api: client.ApiClient, ns: Namespace, agent: Agent, operator: OperatorProcess, ts_client: Path
) -> None:
    descriptor(api, ns.name, "list-tools", **NATIVE)
    descriptor(api, ns.name, "not-granted", **NATIVE)
    agent.grant(["list-tools"], ["read"])
    steps: list[dict[str, Any]] = [
        {"op": "list"},
        {"op": "call", "name": "list-tools", "arguments": {}},
    ]
    url = mcp_url(operator.gateway_url, ns.name)
    async with ts_run(ts_client, url, token_of(agent), steps) as run:
        listed = await run.next()
        called = await run.next()
    assert [t["name"] for t in listed["tools"]] == ["list-tools"]
    tool = listed["tools"][0]
    assert tool["_meta"]["dev.tooladapter/descriptorDigest"].startswith("sha256:")
    result = called["result"]
    assert result["isError"] is False, result
    assert result["_meta"]["dev.tooladapter/state"] == "Observed"
    assert {t["toolId"] for t in result["structuredContent"]["tools"]} == {"list-tools"}


async def test_the_typescript_client_sees_a_denied_call_as_an_error_with_stage_and_reason(
    api: client.ApiClient, ns: Namespace, agent: Agent, operator: OperatorProcess, ts_client: Path
) -> None:
    descriptor(api, ns.name, "list-tools", **NATIVE)
    agent.grant(["list-tools"], [])  # the tool, not its class
    steps = [{"op": "call", "name": "list-tools", "arguments": {}}]
    url = mcp_url(operator.gateway_url, ns.name)
    async with ts_run(ts_client, url, token_of(agent), steps) as run:
        result = (await run.next())["result"]
    assert result["isError"] is True
    assert result["_meta"]["dev.tooladapter/stage"] == "permission"
    text = "\n".join(block["text"] for block in result["content"])
    assert "Denied at stage permission" in text and "sideeffectclasses" in text, text


async def test_the_typescript_client_gets_the_page_in_the_error_and_its_retry_completes_it(
    api: client.ApiClient, ns: Namespace, agent: Agent, operator: OperatorProcess, ts_client: Path
) -> None:
    descriptor(api, ns.name, "gated", side_effect_class="shared-write", **NATIVE)
    agent.grant(["gated"], ["shared-write"])
    reviewer = Agent.create(api, ns.name, "reviewer-1", role="tooladapter-reviewer")
    call = {"op": "call", "name": "gated", "arguments": {"limit": 4}}
    url = mcp_url(operator.gateway_url, ns.name)
    async with ts_run(
        ts_client, url, token_of(agent), [call, {"op": "wait"}, call], url_elicitation=True
    ) as run:
        needed = (await run.next())["error"]
        assert needed["code"] == -32042, needed
        link = needed["data"]["elicitations"][0]["url"]
        assert link.startswith(f"{operator.gateway_url}/ui/approvals?call={ns.name}/")
        assert (await run.next())["op"] == "wait"
        await asyncio.to_thread(
            decide_on_page, link, token_of(reviewer), decision="Approved", comment="ok"
        )
        await run.go_on()
        result = (await run.next())["result"]
    assert result["isError"] is False, result
    assert result["_meta"]["dev.tooladapter/invocation"] == name_in(link)
    assert [c["metadata"]["name"] for c in invocations(api, ns.name)] == [name_in(link)]


@pytest.mark.parametrize("mode", ["2026-07-28", "legacy"])
async def test_the_python_sdk_client_lists_calls_and_sees_a_denial_in_each_era(
    api: client.ApiClient, ns: Namespace, agent: Agent, operator: OperatorProcess, mode: str
) -> None:
    descriptor(api, ns.name, "list-tools", **NATIVE)
    descriptor(api, ns.name, "gated", side_effect_class="shared-write", **NATIVE)
    descriptor(api, ns.name, "not-granted", **NATIVE)
    agent.grant(["list-tools", "gated"], ["read"])  # gated's class is not granted
    url = mcp_url(operator.gateway_url, ns.name)
    async with sdk_client(url, token_of(agent), mode=mode) as mcp:
        assert mcp.protocol_version == ("2026-07-28" if mode != "legacy" else "2025-11-25")
        assert sorted(t.name for t in (await mcp.list_tools()).tools) == ["gated", "list-tools"]
        ok = await mcp.call_tool("list-tools", {})
        assert ok.is_error is False, text_of(ok)
        denied = await mcp.call_tool("gated", {})
    assert denied.is_error is True
    meta = dict(denied.meta or {})
    assert (meta["dev.tooladapter/state"], meta["dev.tooladapter/stage"]) == (
        "Denied",
        "permission",
    )
    assert "sideeffectclasses" in text_of(denied)


async def test_a_listening_modern_client_is_told_when_its_tool_list_or_a_digest_changes(
    api: client.ApiClient, ns: Namespace, agent: Agent, operator: OperatorProcess
) -> None:
    descriptor(api, ns.name, "list-tools", **NATIVE)
    agent.grant(["list-tools", "later"], ["read"])
    key = "dev.tooladapter/descriptorDigest"
    url = mcp_url(operator.gateway_url, ns.name)
    async with sdk_client(url, token_of(agent), mode="2026-07-28") as mcp:

        async def listed() -> dict[str, dict[str, Any]]:
            return {t.name: dict(t.meta or {}) for t in (await mcp.list_tools()).tools}

        async def told_until(events: Any, done: Any) -> dict[str, dict[str, Any]]:
            """Each notification, list again, until `done(listing)` (bounded)."""
            while True:
                await anext(events)
                now = await listed()
                if done(now):
                    return now

        before = await listed()
        assert list(before) == ["list-tools"]
        async with mcp.listen(tools_list_changed=True) as subscription:
            events = aiter(subscription)
            await asyncio.to_thread(descriptor, api, ns.name, "later", **NATIVE)
            both = await asyncio.wait_for(
                told_until(events, lambda now: sorted(now) == ["later", "list-tools"]), 90
            )
            # A changed descriptor: a new digest in the tool's _meta, and the client is told.
            await asyncio.to_thread(
                custom(api).patch_namespaced_custom_object,
                GROUP,
                VERSION,
                ns.name,
                "tooldescriptors",
                _descriptor_name(api, ns.name, "list-tools"),
                {"spec": {"timeoutSeconds": 45}},
            )
            after = await asyncio.wait_for(
                told_until(
                    events,
                    lambda now: (
                        "list-tools" in now and now["list-tools"][key] != before["list-tools"][key]
                    ),
                ),
                90,
            )
    assert after["later"][key] == both["later"][key]


def _descriptor_name(api: client.ApiClient, namespace: str, tool_id: str) -> str:
    items = cast(
        dict[str, Any],
        custom(api).list_namespaced_custom_object(GROUP, VERSION, namespace, "tooldescriptors"),
    )
    return str(
        next(i for i in items["items"] if i["spec"]["toolId"] == tool_id)["metadata"]["name"]
    )
