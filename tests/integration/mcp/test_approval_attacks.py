"""Attack pass 7 on issue 31 (approvals in the MCP client, dry runs, tools that change), on
the real cluster, as an agent (a ServiceAccount bound to tooladapter-requester in its
namespace) and as a tenant with a namespace of its own.

- A GET (or DELETE) of the MCP endpoint without a session token is refused (405): the
  SDK's stateless transport held such a GET open for as long as the client liked, with
  nothing ever to send on it, and with it the request door of the namespace in the URL.
  Any authenticated ServiceAccount of another tenant could fill a namespace's doors so.
- A slow body sent by another tenant's ServiceAccount to this namespace's MCP endpoint
  holds that caller's request slot while it arrives, never the namespace's: its agent is
  served meanwhile. So is a slow form posted to the reviewers' page by a person of another
  tenant who signed in naming this namespace.
- The reviewers' link is built from the public URL setting, never from the Host (or a
  forwarded host) the agent sent.
- A request coming back with another run id is another call (a new invocation and a new
  link), never attached to the call waiting for the first run.
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import httpx2
import pytest
from kubernetes import client
from mcp.shared.exceptions import MCPError

from tests.integration.gateway_client import mcp_url, request_meta, token_of, unbound_sa
from tests.integration.mcp.test_approvals import (
    NATIVE,
    URL_ELICITATION_REQUIRED,
    invocations,
    name_in,
)
from tests.integration.mcp.test_approvals import sdk_client as sdk
from tests.integration.objects import Agent, descriptor
from tooladapter.devtools import Namespace, OperatorProcess

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(300)]

LEGACY = "2025-11-25"


@pytest.fixture
def gated(api: client.ApiClient, ns: Namespace, agent: Agent) -> Agent:
    """`gated` (shared-write: every call needs an approval), granted to the agent."""
    descriptor(api, ns.name, "gated", side_effect_class="shared-write", **NATIVE)
    agent.grant(["gated"], ["shared-write"])
    return agent


@pytest.fixture
def tenant(api: client.ApiClient, operator: OperatorProcess) -> Iterator[Namespace]:
    """Another tenant's namespace."""
    other = Namespace(api)
    yield other
    other.delete()


def rpc(
    url: str,
    token: str,
    body: dict[str, Any],
    headers: dict[str, str] | None = None,
) -> httpx2.Response:
    with httpx2.Client(trust_env=False, timeout=60) as http:
        return http.post(
            url,
            content=json.dumps(body).encode(),
            headers={
                "Authorization": f"Bearer {token}",
                "Content-Type": "application/json",
                "Accept": "application/json, text/event-stream",
                **(headers or {}),
            },
        )


def message_of(response: httpx2.Response) -> dict[str, Any]:
    """The JSON-RPC response in a JSON or event-stream answer."""
    if response.headers.get("content-type", "").startswith("text/event-stream"):
        data = [
            json.loads(line[len("data:") :])
            for line in response.text.splitlines()
            if line.startswith("data:") and line[len("data:") :].strip()
        ]
        answers = [d for d in data if "result" in d or "error" in d]
        assert answers, response.text
        return answers[-1]
    answer: dict[str, Any] = response.json()
    return answer


async def test_a_stream_without_a_session_is_refused_and_holds_no_door_of_another_tenant(
    api: client.ApiClient,
    ns: Namespace,
    agent: Agent,
    tenant: Namespace,
    tmp_path: Path,
) -> None:
    """A ServiceAccount of another tenant, with no tooladapter role at all, opens GET (and
    DELETE) on this namespace's MCP endpoint as many times as the namespace's request cap:
    each is answered 405 at once, and the namespace's own agent is served meanwhile."""
    descriptor(api, ns.name, "list-tools", **NATIVE)
    agent.grant(["list-tools"], ["read"])
    outsider = unbound_sa(api, tenant.name, "outsider")
    standby = OperatorProcess(tmp_path, {"TOOLADAPTER_GATEWAY_NAMESPACE_REQUESTS": "2"})
    standby.start(until="standby:")
    try:
        url = mcp_url(standby.gateway_url, ns.name)
        with (
            httpx2.Client(trust_env=False, timeout=httpx2.Timeout(60)) as http,
            ExitStack() as held,
        ):
            for method, era in (("GET", {}), ("GET", {"mcp-protocol-version": LEGACY})):
                for _ in range(2):
                    opened = held.enter_context(
                        http.stream(
                            method,
                            url,
                            headers={
                                "Authorization": f"Bearer {outsider}",
                                "Accept": "text/event-stream",
                                **era,
                            },
                        )
                    )
                    assert opened.status_code == 405, (method, era, opened.status_code)
            gone = http.request("DELETE", url, headers={"Authorization": f"Bearer {outsider}"})
            assert gone.status_code == 405, gone.text
            async with sdk(url, token_of(agent), mode="legacy") as mcp:
                listed = await mcp.list_tools()
            assert [t.name for t in listed.tools] == ["list-tools"]
    finally:
        standby.stop()


async def _slow_body(base: str, path: str, token: str) -> asyncio.StreamWriter:
    """A POST whose body never finishes arriving (one byte of a hundred)."""
    host, port = base.split("//", 1)[1].rsplit(":", 1)
    _, writer = await asyncio.open_connection(host, int(port))
    writer.write(
        (
            f"POST {path} HTTP/1.1\r\nHost: {host}\r\nAuthorization: Bearer {token}\r\n"
            "Content-Type: application/json\r\nAccept: application/json, text/event-stream\r\n"
            "Content-Length: 100\r\n\r\n{"
        ).encode()
    )
    await writer.drain()
    return writer


async def test_slow_bodies_of_another_tenant_hold_no_slot_of_this_namespace(
    api: client.ApiClient,
    ns: Namespace,
    agent: Agent,
    tenant: Namespace,
    tmp_path: Path,
) -> None:
    descriptor(api, ns.name, "list-tools", **NATIVE)
    agent.grant(["list-tools"], ["read"])
    outsider = unbound_sa(api, tenant.name, "outsider")
    caps = {
        "TOOLADAPTER_GATEWAY_NAMESPACE_REQUESTS": "2",
        "TOOLADAPTER_GATEWAY_CALLER_REQUESTS": "2",
    }
    standby = OperatorProcess(tmp_path, caps)
    standby.start(until="standby:")
    path = f"/namespaces/{ns.name}/mcp"
    url = standby.gateway_url + path
    listing = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}}
    era = {"mcp-protocol-version": LEGACY}
    writers = [await _slow_body(standby.gateway_url, path, outsider) for _ in range(2)]
    try:
        # Both slow bodies hold the outsider's slots once its next request is refused.
        for _ in range(200):
            answered = await asyncio.to_thread(rpc, url, outsider, listing, era)
            if answered.status_code == 429:
                break
        assert answered.status_code == 429, answered.text
        served = await asyncio.to_thread(rpc, url, token_of(agent), listing, era)
        assert served.status_code == 200, served.text
        tools = message_of(served)["result"]["tools"]
        assert [t["name"] for t in tools] == ["list-tools"]
    finally:
        for writer in writers:
            writer.close()
        standby.stop()


async def test_slow_page_forms_of_another_tenant_hold_no_slot_of_this_namespace(
    api: client.ApiClient,
    ns: Namespace,
    agent: Agent,
    tenant: Namespace,
    tmp_path: Path,
) -> None:
    """The same through the reviewers' page: a person of another tenant signs in naming
    this namespace and posts forms to it slowly."""
    descriptor(api, ns.name, "list-tools", **NATIVE)
    agent.grant(["list-tools"], ["read"])
    outsider = unbound_sa(api, tenant.name, "outsider")
    caps = {
        "TOOLADAPTER_GATEWAY_NAMESPACE_REQUESTS": "2",
        "TOOLADAPTER_GATEWAY_CALLER_REQUESTS": "2",
    }
    standby = OperatorProcess(tmp_path, caps)
    standby.start(until="standby:")
    base = standby.gateway_url
    url = mcp_url(base, ns.name)
    listing = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}}
    era = {"mcp-protocol-version": LEGACY}
    writers = []
    try:
        with httpx2.Client(trust_env=False, timeout=60) as web:
            form = web.get(f"{base}/ui/login")
            nonce = re.search(r'name="nonce" value="([^"]+)"', form.text)
            assert nonce, form.text
            signed = web.post(
                f"{base}/ui/login",
                data={"nonce": nonce.group(1), "token": outsider, "namespaces": ns.name},
            )
            assert signed.status_code in (302, 303), signed.text
            cookie = "; ".join(f"{k}={v}" for k, v in web.cookies.items())
        for _ in range(2):
            host, port = base.split("//", 1)[1].rsplit(":", 1)
            _, writer = await asyncio.open_connection(host, int(port))
            writer.write(
                (
                    f"POST /ui/approvals/{ns.name}/nothing HTTP/1.1\r\nHost: {host}:{port}\r\n"
                    f"Cookie: {cookie}\r\nOrigin: {base}\r\n"
                    "Content-Type: application/x-www-form-urlencoded\r\n"
                    "Content-Length: 100\r\n\r\ncsrf="
                ).encode()
            )
            await writer.drain()
            writers.append(writer)
        # Both slow forms hold the person's slots once their next request is refused.
        for _ in range(200):
            answered = await asyncio.to_thread(rpc, url, outsider, listing, era)
            if answered.status_code == 429:
                break
        assert answered.status_code == 429, answered.text
        served = await asyncio.to_thread(rpc, url, token_of(agent), listing, era)
        assert served.status_code == 200, served.text
    finally:
        for writer in writers:
            writer.close()
        standby.stop()


@pytest.mark.parametrize(
    "forged",
    [
        {"Host": "evil.example"},
        {"X-Forwarded-Host": "evil.example", "X-Forwarded-Proto": "https"},
        {"Forwarded": "host=evil.example;proto=https"},
    ],
)
async def test_the_reviewers_link_never_follows_the_host_the_agent_sent(
    api: client.ApiClient,
    ns: Namespace,
    gated: Agent,
    operator: OperatorProcess,
    forged: dict[str, str],
) -> None:
    url = mcp_url(operator.gateway_url, ns.name)
    token = token_of(gated)
    hello = await asyncio.to_thread(
        rpc,
        url,
        token,
        {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "initialize",
            "params": {
                "protocolVersion": LEGACY,
                "capabilities": {"elicitation": {"url": {}}},
                "clientInfo": {"name": "attacker", "version": "1"},
            },
        },
        forged,
    )
    assert hello.status_code == 200, hello.text
    session = hello.headers["mcp-session-id"]
    called = await asyncio.to_thread(
        rpc,
        url,
        token,
        {
            "jsonrpc": "2.0",
            "id": 2,
            "method": "tools/call",
            "params": {"name": "gated", "arguments": {"limit": 1}},
        },
        {**forged, "mcp-session-id": session, "mcp-protocol-version": LEGACY},
    )
    error = message_of(called).get("error") or {}
    assert error.get("code") == URL_ELICITATION_REQUIRED, called.text
    link = error["data"]["elicitations"][0]["url"]
    assert link.startswith(f"{operator.gateway_url}/ui/approvals?call={ns.name}/"), link
    assert "evil" not in json.dumps(error)


async def test_a_request_of_another_run_is_another_call_not_the_waiting_one(
    api: client.ApiClient,
    ns: Namespace,
    gated: Agent,
    operator: OperatorProcess,
) -> None:
    """The same arguments under another `dev.tooladapter/runId` are another call of the
    agent's: a new invocation with its own link at once, not the first run's call (whose
    approval and result belong to that run)."""

    async def never(url: str, message: str) -> Any:
        raise AssertionError("the 2025-11-25 era answers with an error")

    url = mcp_url(operator.gateway_url, ns.name)
    links = []
    async with sdk(url, token_of(gated), mode="legacy", on_url=never) as mcp:
        for run in ("run-1", "run-2"):
            with pytest.raises(MCPError) as needed:
                await mcp.call_tool(
                    "gated", {"limit": 4}, meta=request_meta({"dev.tooladapter/runId": run})
                )
            assert needed.value.code == URL_ELICITATION_REQUIRED
            links.append(needed.value.data["elicitations"][0]["url"])
    assert links[0] != links[1], links
    runs = {c["metadata"]["name"]: c["spec"].get("runId") for c in invocations(api, ns.name)}
    assert runs == {name_in(links[0]): "run-1", name_in(links[1]): "run-2"}
