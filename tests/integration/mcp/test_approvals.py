"""Issue 31: approvals that reach the person at the MCP client's keyboard, and dry runs over
MCP, with the `mcp` SDK's own client in both protocol eras, on the real cluster.

A gated call from a client that declared URL elicitation gets the reviewers' page at that
call: through the 2026-07-28 input-required round trip (the SDK's client drives it with its
elicitation callback) or the 2025-11-25 URLElicitationRequired error. A reviewer decides on
the page (its HTTP form, signed in with the reviewer's token); the client's call (or its
retry) completes the one invocation that waited.
"""

from __future__ import annotations

import asyncio
import html
import os
import re
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any, cast
from urllib.parse import urlsplit

import httpx2
import pytest
from kubernetes import client
from mcp import Client, types
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError

from tests.integration.gateway_client import http_json, mcp_url, request_meta, token_of
from tests.integration.objects import Agent, custom, descriptor, get
from tooladapter import GROUP, VERSION
from tooladapter.devtools import Namespace, OperatorProcess

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(300)]

NATIVE: dict[str, Any] = {"kind": "native", "native": {"name": "list-tools"}}
MODERN = "2026-07-28"
URL_ELICITATION_REQUIRED = -32042

Elicited = Callable[[str, str], Awaitable[types.ElicitResult]]


def invocations(api: client.ApiClient, namespace: str) -> list[dict[str, Any]]:
    listed = cast(
        dict[str, Any],
        custom(api).list_namespaced_custom_object(GROUP, VERSION, namespace, "toolinvocations"),
    )
    return list(listed["items"])


def executions(obj: dict[str, Any]) -> int:
    """How many times the call's stage log says it started executing."""
    stages = obj["status"].get("stages") or []
    return sum(1 for s in stages if (s.get("stage"), s.get("outcome")) == ("execute", "started"))


def text_of(result: Any) -> str:
    return "\n".join(getattr(block, "text", "") for block in result.content)


@asynccontextmanager
async def sdk_client(
    url: str, token: str, *, mode: str, on_url: Elicited | None = None
) -> AsyncIterator[Client]:
    """The SDK's client in one era; with `on_url`, it declares URL elicitation and hands
    each URL (with its message) to `on_url`."""
    http = httpx2.AsyncClient(
        headers={"Authorization": f"Bearer {token}"},
        timeout=httpx2.Timeout(120),
        trust_env=False,
    )

    async def elicitation(context: Any, params: Any) -> types.ElicitResult | types.ErrorData:
        assert on_url is not None
        assert getattr(params, "mode", None) == "url", params
        return await on_url(params.url, params.message)

    async with (
        http,
        Client(
            streamable_http_client(url, http_client=http),
            mode=mode,
            cache=None,
            read_timeout_seconds=120,
            elicitation_callback=elicitation if on_url is not None else None,
        ) as mcp,
    ):
        yield mcp


def decide_on_page(link: str, token: str, *, decision: str, comment: str) -> str:
    """A person follows the link, signs in with `token`, and decides the marked call with
    the page's own form (nonce, CSRF token, request hash as the page shows them). Returns
    the page the person saw at the call (its notice)."""
    base = "{0.scheme}://{0.netloc}".format(urlsplit(link))
    with httpx2.Client(follow_redirects=True, trust_env=False, timeout=60) as web:
        login = web.get(link)
        assert login.status_code == 200, login.text
        nonce = re.search(r'name="nonce" value="([^"]+)"', login.text)
        call = re.search(r'name="call" value="([^"]+)"', login.text)
        assert nonce and call, login.text
        page = web.post(
            f"{base}/ui/login",
            data={"nonce": nonce.group(1), "token": token, "namespaces": "", "call": call.group(1)},
        )
        assert page.status_code == 200, page.text
        namespace, name = call.group(1).split("/")
        if decision == "":
            return page.text
        article = re.search(
            r'<article class="call marked".*?</article>', page.text, flags=re.DOTALL
        )
        assert article is not None, page.text
        csrf = re.search(r'name="csrf" value="([^"]+)"', article.group(0))
        request_hash = re.search(r'name="requestHash" value="([^"]+)"', article.group(0))
        assert csrf and request_hash, article.group(0)
        done = web.post(
            f"{base}/ui/approvals/{namespace}/{name}",
            data={
                "csrf": html.unescape(csrf.group(1)),
                "requestHash": request_hash.group(1),
                "decision": decision,
                "expires": "3600",
                "comment": comment,
            },
        )
        assert done.status_code == 200 and "was created" in done.text, done.text
        return page.text


def name_in(link: str) -> str:
    return link.rsplit("/", 1)[1]


@pytest.fixture
def gated(api: client.ApiClient, ns: Namespace, agent: Agent) -> Agent:
    """`gated` (shared-write, so every call needs an approval), granted to the agent; a
    reviewer in the namespace."""
    descriptor(api, ns.name, "gated", side_effect_class="shared-write", **NATIVE)
    agent.grant(["gated"], ["shared-write"])
    return Agent.create(api, ns.name, "reviewer-1", role="tooladapter-reviewer")


# --------------------------------------------------------------------------- dry run


@pytest.mark.parametrize("mode", [MODERN, "legacy"])
async def test_an_mcp_dry_run_answers_what_the_rest_dry_run_answers_and_creates_nothing(
    api: client.ApiClient,
    ns: Namespace,
    agent: Agent,
    gated: Agent,
    operator: OperatorProcess,
    mode: str,
) -> None:
    token = token_of(agent)
    rest_url = f"{operator.gateway_url}/namespaces/{ns.name}/tools/gated/dry-run"
    status, _, rest = await asyncio.to_thread(
        http_json, "POST", rest_url, token, {"arguments": {"limit": 3}}
    )
    assert status == 200, rest
    assert rest["verdict"] == "would-await-approval", rest
    async with sdk_client(mcp_url(operator.gateway_url, ns.name), token, mode=mode) as mcp:
        result = await mcp.call_tool(
            "gated", {"limit": 3}, meta=request_meta({"dev.tooladapter/dryRun": True})
        )
        assert result.is_error is False, text_of(result)
        meta = dict(result.meta or {})
        assert meta["dev.tooladapter/preview"] == rest
        assert "would-await-approval" in text_of(result)
        assert "dev.tooladapter/invocation" not in meta
        # Not a boolean: refused, not taken as a real call.
        with pytest.raises(MCPError, match="dryRun"):
            await mcp.call_tool("gated", {}, meta=request_meta({"dev.tooladapter/dryRun": "yes"}))
    assert invocations(api, ns.name) == []


# --------------------------------------------------------------------------- 2026-07-28


async def test_a_modern_client_gets_the_page_in_its_callback_and_the_same_call_completes_once(
    api: client.ApiClient,
    ns: Namespace,
    agent: Agent,
    gated: Agent,
    operator: OperatorProcess,
) -> None:
    reviewer = gated
    links: list[str] = []
    notices: list[str] = []

    async def on_url(url: str, message: str) -> types.ElicitResult:
        links.append(url)
        assert "cannot approve its own call" in message and "forward" in message, message
        assert '"limit":3' in message, message  # the arguments as they will run
        # The person at the keyboard is the caller: the page says to forward the link.
        notices.append(
            await asyncio.to_thread(decide_on_page, url, token_of(agent), decision="", comment="")
        )
        await asyncio.to_thread(
            decide_on_page, url, token_of(reviewer), decision="Approved", comment="fine"
        )
        return types.ElicitResult(action="accept")

    url = mcp_url(operator.gateway_url, ns.name)
    async with sdk_client(url, token_of(agent), mode=MODERN, on_url=on_url) as mcp:
        result = await mcp.call_tool("gated", {"limit": 3})
    assert result.is_error is False, text_of(result)
    assert len(links) == 1, links
    assert links[0].startswith(f"{operator.gateway_url}/ui/approvals?call={ns.name}/")
    assert "your own call" in notices[0] and "Forward this page" in notices[0], notices[0]
    meta = dict(result.meta or {})
    assert meta["dev.tooladapter/state"] == "Observed"
    assert meta["dev.tooladapter/invocation"] == name_in(links[0])
    # Executed once: one invocation, approved by the reviewer on the page.
    calls = invocations(api, ns.name)
    assert [c["metadata"]["name"] for c in calls] == [name_in(links[0])]
    assert calls[0]["status"]["approval"]["reviewer"] == reviewer.user
    assert executions(calls[0]) == 1


async def test_a_rejection_on_the_page_ends_the_modern_call_denied_with_the_reviewers_reason(
    api: client.ApiClient,
    ns: Namespace,
    agent: Agent,
    gated: Agent,
    operator: OperatorProcess,
) -> None:
    async def on_url(url: str, message: str) -> types.ElicitResult:
        await asyncio.to_thread(
            decide_on_page, url, token_of(gated), decision="Rejected", comment="not on Fridays"
        )
        return types.ElicitResult(action="accept")

    url = mcp_url(operator.gateway_url, ns.name)
    async with sdk_client(url, token_of(agent), mode=MODERN, on_url=on_url) as mcp:
        result = await mcp.call_tool("gated", {})
    assert result.is_error is True
    meta = dict(result.meta or {})
    assert meta["dev.tooladapter/state"] == "Denied"
    assert meta["dev.tooladapter/stage"] == "approval"
    assert "not on Fridays" in text_of(result) and gated.user in text_of(result), text_of(result)
    assert len(invocations(api, ns.name)) == 1


# --------------------------------------------------------------------------- 2025-11-25


async def test_a_2025_client_gets_the_url_in_the_error_and_its_retry_completes_the_same_invocation(
    api: client.ApiClient,
    ns: Namespace,
    agent: Agent,
    gated: Agent,
    operator: OperatorProcess,
) -> None:
    async def never(url: str, message: str) -> types.ElicitResult:
        raise AssertionError("the 2025-11-25 era answers with an error, not a request")

    url = mcp_url(operator.gateway_url, ns.name)
    async with sdk_client(url, token_of(agent), mode="legacy", on_url=never) as mcp:
        with pytest.raises(MCPError) as needed:
            await mcp.call_tool("gated", {"limit": 2})
        assert needed.value.code == URL_ELICITATION_REQUIRED
        elicitations = needed.value.data["elicitations"]
        link = elicitations[0]["url"]
        assert elicitations[0]["mode"] == "url"
        assert link.startswith(f"{operator.gateway_url}/ui/approvals?call={ns.name}/")
        assert "cannot approve its own call" in elicitations[0]["message"]
        await asyncio.to_thread(
            decide_on_page, link, token_of(gated), decision="Approved", comment="ok"
        )
        # The retry: the same request, attached to the call that waited.
        result = await mcp.call_tool("gated", {"limit": 2})
        assert result.is_error is False, text_of(result)
        meta = dict(result.meta or {})
        assert meta["dev.tooladapter/state"] == "Observed"
        assert meta["dev.tooladapter/invocation"] == name_in(link)
        # Once more, after it ended: still that call's answer, no new invocation.
        again = await mcp.call_tool("gated", {"limit": 2})
        assert dict(again.meta or {})["dev.tooladapter/invocation"] == name_in(link)
    calls = invocations(api, ns.name)
    assert [c["metadata"]["name"] for c in calls] == [name_in(link)]
    assert executions(calls[0]) == 1


async def test_a_2025_retry_after_a_rejection_ends_denied_with_the_reviewers_reason(
    api: client.ApiClient,
    ns: Namespace,
    agent: Agent,
    gated: Agent,
    operator: OperatorProcess,
) -> None:
    url = mcp_url(operator.gateway_url, ns.name)

    async def never(url: str, message: str) -> types.ElicitResult:
        raise AssertionError("not asked in this era")

    async with sdk_client(url, token_of(agent), mode="legacy", on_url=never) as mcp:
        with pytest.raises(MCPError) as needed:
            await mcp.call_tool("gated", {})
        link = needed.value.data["elicitations"][0]["url"]
        await asyncio.to_thread(
            decide_on_page, link, token_of(gated), decision="Rejected", comment="too broad"
        )
        result = await mcp.call_tool("gated", {})
    assert result.is_error is True
    meta = dict(result.meta or {})
    assert (meta["dev.tooladapter/state"], meta["dev.tooladapter/stage"]) == ("Denied", "approval")
    assert "too broad" in text_of(result)
    assert len(invocations(api, ns.name)) == 1


async def test_a_client_without_url_elicitation_is_held_and_answered_pending_as_before(
    api: client.ApiClient,
    ns: Namespace,
    agent: Agent,
    gated: Agent,
    tmp_path: Any,
) -> None:
    # A standby (the session's operator leads) with a one-second approval wait serves.
    standby = OperatorProcess(tmp_path, {"TOOLADAPTER_GATEWAY_APPROVAL_WAIT_SECONDS": "1"})
    standby.start(until="standby:")
    try:
        url = mcp_url(standby.gateway_url, ns.name)
        async with sdk_client(url, token_of(agent), mode="legacy") as mcp:
            result = await mcp.call_tool("gated", {})
        assert result.is_error is False, text_of(result)
        assert "awaiting approval" in text_of(result)
        assert dict(result.meta or {})["dev.tooladapter/state"] == "AwaitingApproval"
    finally:
        standby.stop()


# --------------------------------------------------------------------------- attacks


async def test_accepting_the_elicitation_approves_nothing(
    api: client.ApiClient,
    ns: Namespace,
    agent: Agent,
    gated: Agent,
    tmp_path: Any,
) -> None:
    """An agent answers its own elicitation with accept (twice): the call still waits for
    a reviewer; declining then answers it as pending, and nothing ran."""
    standby = OperatorProcess(tmp_path, {"TOOLADAPTER_GATEWAY_APPROVAL_WAIT_SECONDS": "1"})
    standby.start(until="standby:")
    answers = iter(["accept", "accept", "decline"])
    asked: list[str] = []

    async def self_approve(url: str, message: str) -> types.ElicitResult:
        asked.append(url)
        return types.ElicitResult(action=next(answers))

    try:
        url = mcp_url(standby.gateway_url, ns.name)
        async with sdk_client(url, token_of(agent), mode=MODERN, on_url=self_approve) as mcp:
            result = await mcp.call_tool("gated", {})
    finally:
        standby.stop()
    assert len(asked) == 3 and len(set(asked)) == 1, asked
    assert result.is_error is False, text_of(result)
    meta = dict(result.meta or {})
    assert meta["dev.tooladapter/state"] == "AwaitingApproval", meta
    calls = invocations(api, ns.name)
    assert len(calls) == 1
    obj = get(api, ns.name, "toolinvocations", calls[0]["metadata"]["name"])
    assert obj["status"]["state"] == "AwaitingApproval" and not obj["status"].get("approval")


async def test_another_caller_replaying_the_arguments_gets_its_own_call_not_the_waiting_one(
    api: client.ApiClient,
    ns: Namespace,
    agent: Agent,
    gated: Agent,
    operator: OperatorProcess,
) -> None:
    other = Agent.create(api, ns.name, "agent-2")
    other.grant(["gated"], ["shared-write"])
    url = mcp_url(operator.gateway_url, ns.name)

    async def never(url: str, message: str) -> types.ElicitResult:
        raise AssertionError("not asked in this era")

    links = []
    for who in (agent, other):
        async with sdk_client(url, token_of(who), mode="legacy", on_url=never) as mcp:
            with pytest.raises(MCPError) as needed:
                await mcp.call_tool("gated", {"limit": 7})
            links.append(needed.value.data["elicitations"][0]["url"])
    assert links[0] != links[1]
    calls = {c["metadata"]["name"]: c["spec"]["caller"]["name"] for c in invocations(api, ns.name)}
    assert calls == {name_in(links[0]): agent.user, name_in(links[1]): other.user}


async def test_a_sealed_request_state_does_not_open_for_another_caller_or_namespace(
    api: client.ApiClient,
    ns: Namespace,
    agent: Agent,
    gated: Agent,
    operator: OperatorProcess,
) -> None:
    other_ns = Namespace(api)
    try:
        descriptor(api, other_ns.name, "gated", side_effect_class="shared-write", **NATIVE)
        elsewhere = Agent.create(api, other_ns.name, "agent-1")
        elsewhere.grant(["gated"], ["shared-write"])
        other = Agent.create(api, ns.name, "agent-2")
        other.grant(["gated"], ["shared-write"])

        async def never(url: str, message: str) -> types.ElicitResult:
            raise AssertionError("the test drives the rounds itself")

        url = mcp_url(operator.gateway_url, ns.name)
        async with sdk_client(url, token_of(agent), mode=MODERN, on_url=never) as mcp:
            first = await mcp.session.call_tool("gated", {}, allow_input_required=True)
        assert isinstance(first, types.InputRequiredResult), first
        state = first.request_state
        assert state is not None and state.startswith("v1.")
        assert "gated" not in state and agent.user not in state  # sealed, not readable
        accepted: types.InputResponses = {"approval": types.ElicitResult(action="accept")}
        for where, who in ((url, other), (mcp_url(operator.gateway_url, other_ns.name), elsewhere)):
            async with sdk_client(where, token_of(who), mode=MODERN, on_url=never) as mcp:
                with pytest.raises(MCPError, match="Invalid or expired requestState"):
                    await mcp.session.call_tool(
                        "gated", {}, input_responses=accepted, request_state=state
                    )
        # The owner's own replay with other arguments does not open it either.
        async with sdk_client(url, token_of(agent), mode=MODERN, on_url=never) as mcp:
            with pytest.raises(MCPError, match="Invalid or expired requestState"):
                await mcp.session.call_tool(
                    "gated", {"limit": 1}, input_responses=accepted, request_state=state
                )
        assert len(invocations(api, ns.name)) == 1
        assert invocations(api, other_ns.name) == []
    finally:
        other_ns.delete()


async def test_held_listens_and_follows_of_one_caller_cannot_take_the_gateway_from_another(
    api: client.ApiClient,
    ns: Namespace,
    agent: Agent,
    gated: Agent,
    tmp_path: Any,
) -> None:
    """An agent holds listen streams up to its cap: its next listen and its next call are
    refused (nothing created), while another agent of the namespace lists and calls."""
    descriptor(api, ns.name, "list-tools", **NATIVE)
    agent.grant(["list-tools"], ["read"])
    other = Agent.create(api, ns.name, "agent-2")
    other.grant(["list-tools"], ["read"])
    standby = OperatorProcess(tmp_path, {"TOOLADAPTER_GATEWAY_CALLER_STREAMS": "2"})
    standby.start(until="standby:")
    try:
        url = mcp_url(standby.gateway_url, ns.name)
        async with (
            sdk_client(url, token_of(agent), mode=MODERN) as mcp,
            mcp.listen(tools_list_changed=True),
            mcp.listen(tools_list_changed=True),
        ):
            with pytest.raises(MCPError, match=r"(?i)too many"):
                async with mcp.listen(tools_list_changed=True):
                    pass
            with pytest.raises(MCPError, match=r"(?i)too many"):
                await mcp.call_tool("gated", {})
            async with sdk_client(url, token_of(other), mode=MODERN) as theirs:
                assert [t.name for t in (await theirs.list_tools()).tools] == ["list-tools"]
                served = await theirs.call_tool("list-tools", {})
                assert served.is_error is False, text_of(served)
    finally:
        standby.stop()
    callers = [c["spec"]["caller"]["name"] for c in invocations(api, ns.name)]
    assert callers == [other.user]


async def test_any_replica_sharing_the_key_completes_a_call_another_replica_handed_back(
    api: client.ApiClient,
    ns: Namespace,
    agent: Agent,
    gated: Agent,
    tmp_path: Any,
) -> None:
    """Stateless across replicas: the requestState one replica sealed opens at another
    that shares the page's session key (and not at one with a key of its own); a 2025-11-25
    retry attaches at any replica."""
    key = tmp_path / "session-key"
    key.write_bytes(os.urandom(48).hex().encode())
    shared = {"TOOLADAPTER_UI_SESSION_KEY_FILE": str(key)}
    for name in ("r0", "r1", "alone"):
        (tmp_path / name).mkdir()
    replicas = [OperatorProcess(tmp_path / f"r{i}", shared) for i in range(2)]
    alone = OperatorProcess(tmp_path / "alone")
    for replica in (*replicas, alone):
        replica.start(until="standby:")

    async def never(url: str, message: str) -> types.ElicitResult:
        raise AssertionError("the test drives the rounds itself")

    try:
        one, two = (mcp_url(r.gateway_url, ns.name) for r in replicas)
        async with sdk_client(one, token_of(agent), mode=MODERN, on_url=never) as mcp:
            first = await mcp.session.call_tool("gated", {}, allow_input_required=True)
        assert isinstance(first, types.InputRequiredResult), first
        request = first.input_requests["approval"]  # type: ignore[index]
        link = request.params.url
        accepted: types.InputResponses = {"approval": types.ElicitResult(action="accept")}
        async with sdk_client(
            mcp_url(alone.gateway_url, ns.name), token_of(agent), mode=MODERN, on_url=never
        ) as mcp:
            with pytest.raises(MCPError, match="Invalid or expired requestState"):
                await mcp.session.call_tool(
                    "gated", {}, input_responses=accepted, request_state=first.request_state
                )
        await asyncio.to_thread(
            decide_on_page, link, token_of(gated), decision="Approved", comment="ok"
        )
        async with sdk_client(two, token_of(agent), mode=MODERN, on_url=never) as mcp:
            done = await mcp.session.call_tool(
                "gated", {}, input_responses=accepted, request_state=first.request_state
            )
        assert isinstance(done, types.CallToolResult), done
        assert done.is_error is False, text_of(done)
        assert dict(done.meta or {})["dev.tooladapter/invocation"] == name_in(link)

        # 2025-11-25: the URL from one replica, the retry at the other.
        async with sdk_client(one, token_of(agent), mode="legacy", on_url=never) as mcp:
            with pytest.raises(MCPError) as needed:
                await mcp.call_tool("gated", {"limit": 9})
        link = needed.value.data["elicitations"][0]["url"]
        await asyncio.to_thread(
            decide_on_page, link, token_of(gated), decision="Approved", comment="ok"
        )
        async with sdk_client(two, token_of(agent), mode="legacy", on_url=never) as mcp:
            retried = await mcp.call_tool("gated", {"limit": 9})
        assert dict(retried.meta or {})["dev.tooladapter/invocation"] == name_in(link)
    finally:
        for replica in (*replicas, alone):
            replica.stop()
    assert len(invocations(api, ns.name)) == 2
