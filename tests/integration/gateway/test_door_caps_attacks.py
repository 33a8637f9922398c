"""Attack pass 6 on issue 28's doors, on the real cluster, as an agent (a ServiceAccount
bound to tooladapter-requester in its namespace) and as a tenant with a namespace of its
own. Hits are strict xfails asserting the correct behaviour.

Order matters at the end: the failed-authentication test drains the loopback address's
bucket, so it runs last in this module (pytest keeps file order).
"""

from __future__ import annotations

import asyncio
import re
import secrets
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from kubernetes import client

from tests.integration.cli.test_cli import Cli, explain
from tests.integration.gateway_client import http_json, token_of
from tests.integration.objects import Agent, descriptor, pretty, status_of
from tooladapter.devtools import Namespace, OperatorProcess
from tooladapter.settings import Settings

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(420)]

NATIVE: dict[str, Any] = {"kind": "native", "native": {"name": "list-tools"}}
ESC = "\x1b"
DEFAULTS = Settings()


def _terminal_controls(text: str) -> list[str]:
    return [c for c in text if (ord(c) < 0x20 and c not in "\t\n") or 0x7F <= ord(c) < 0xA0]


def test_cli_approvals_writes_no_terminal_escape_an_agent_typed(
    api: client.ApiClient, operator: OperatorProcess, ns: Namespace, agent: Agent, tmp_path: Path
) -> None:
    descriptor(api, ns.name, "propose", side_effect_class="shared-write", **NATIVE)
    agent.grant(["propose"], ["shared-write"])
    reviewer = Agent.create(api, ns.name, "reviewer-1", role="tooladapter-reviewer")
    run_id = f"run{ESC}]0;approved{chr(7)}{ESC}[1A{ESC}[2K"
    key = f"note{ESC}[8m"
    name = agent.invoke("propose", {key: "x\u200by"}, runId=run_id)
    waiting = status_of(agent.wait(name, states={"AwaitingApproval", "Denied"}, timeout=120))
    assert waiting["state"] == "AwaitingApproval", pretty(waiting)
    done = Cli(tmp_path, api, reviewer)("approvals")
    assert done.returncode == 0, explain(done)
    assert name in done.stdout
    assert _terminal_controls(done.stdout + done.stderr) == [], repr(done.stdout)


# ------------------------------------------------------------------ caps


async def _hold_slow_bodies(base: str, path: str, headers: dict[str, str], count: int) -> list:
    """`count` requests whose head is sent whole and whose body never completes."""
    host, port = base.removeprefix("http://").split(":")
    held = []
    for _ in range(count):
        reader, writer = await asyncio.open_connection(host, int(port))
        head = f"POST {path} HTTP/1.1\r\nHost: {host}\r\nContent-Length: 100000\r\n"
        head += "".join(f"{k}: {v}\r\n" for k, v in headers.items())
        writer.write(head.encode() + b"Content-Type: application/json\r\n\r\n{")
        await writer.drain()
        held.append((reader, writer))
    return held


async def _settled(held: list) -> int:
    """How many held requests were answered already (a 429 comes at once)."""
    answered = 0
    for reader, _ in held:
        try:
            line = await asyncio.wait_for(reader.readline(), 0.05)
        except TimeoutError:
            continue
        if line.startswith(b"HTTP/1.1 429"):
            answered += 1
    return answered


async def _rest_cap(operator: OperatorProcess, agent: Agent) -> tuple[int, int, str]:
    base, token = operator.gateway_url, token_of(agent)
    # Reviewed once, so the held requests below cost no review each.
    status, _, _ = await asyncio.to_thread(
        http_json, "GET", f"{base}/namespaces/{agent.namespace}/tools", token
    )
    assert status == 200
    path = f"/namespaces/{agent.namespace}/tools/list-tools/dry-run"
    cap = DEFAULTS.gateway.caller_requests
    held = await _hold_slow_bodies(base, path, {"Authorization": f"Bearer {token}"}, cap)
    try:
        # Each held request took its slot when its head arrived; one more is refused.
        async with aiohttp.ClientSession() as http:
            async with http.get(
                f"{base}/namespaces/{agent.namespace}/tools",
                headers={"Authorization": f"Bearer {token}"},
            ) as answer:
                extra = answer.status
                retry = answer.headers.get("Retry-After", "")
        refused_early = await _settled(held)
    finally:
        for _, writer in held:
            writer.close()
    return extra, refused_early, retry


def test_slow_bodies_hold_at_most_the_callers_request_cap(
    api: client.ApiClient, operator: OperatorProcess, ns: Namespace, agent: Agent
) -> None:
    descriptor(api, ns.name, "list-tools", **NATIVE)
    agent.grant(["list-tools"], ["read"])
    extra, refused_early, retry = asyncio.run(_rest_cap(operator, agent))
    assert refused_early == 0
    assert extra == 429 and retry.isdigit(), (extra, retry)


async def _fill_until_refused(
    http: aiohttp.ClientSession, base: str, path: str, token: str, held: list
) -> None:
    """Hold slow bodies until the caller's next request is refused: the held heads are
    processed concurrently (under load in any order, beside the caller's other requests
    still finishing), so a probe, not a count, says when the caller's slots are all taken."""
    url = f"{base}/namespaces/{path.split('/')[2]}/tools"
    deadline = asyncio.get_running_loop().time() + 60
    while True:
        async with http.get(url, headers={"Authorization": f"Bearer {token}"}) as answer:
            if answer.status == 429:
                return
        assert asyncio.get_running_loop().time() < deadline, "the held requests took no slot"
        held += await _hold_slow_bodies(base, path, {"Authorization": f"Bearer {token}"}, 1)
        await asyncio.sleep(0.1)


async def _refused(held: list, within: float = 20.0) -> int:
    """How many held requests are answered 429 (a refusal comes at once; the others wait
    for a body that never completes, so `within` bounds the wait)."""

    async def one(reader: asyncio.StreamReader) -> bool:
        try:
            line = await asyncio.wait_for(reader.readline(), within)
        except TimeoutError:
            return False
        return line.startswith(b"HTTP/1.1 429")

    return sum(await asyncio.gather(*(one(reader) for reader, _ in held)))


async def _page_beyond_cap(operator: OperatorProcess, agent: Agent) -> tuple[int, int]:
    base, token = operator.gateway_url, token_of(agent)
    jar = aiohttp.CookieJar(unsafe=True)
    async with aiohttp.ClientSession(cookie_jar=jar) as http:
        async with http.get(f"{base}/ui/login") as form:
            nonce = re.search(r'name="nonce" value="([^"]+)"', await form.text())
        assert nonce
        data = {"nonce": nonce.group(1), "token": token, "namespaces": agent.namespace}
        async with http.post(f"{base}/ui/login", data=data, allow_redirects=False) as answer:
            assert answer.status in (302, 303), await answer.text()
        cookie = "; ".join(f"{c.key}={c.value}" for c in jar)
        cap = DEFAULTS.gateway.caller_requests
        path = f"/namespaces/{agent.namespace}/tools/list-tools/dry-run"
        held = await _hold_slow_bodies(base, path, {"Authorization": f"Bearer {token}"}, cap)
        page_held: list = []
        try:
            await _fill_until_refused(http, base, path, token, held)
            # ... and as many again through the page's cookie path (its forms read slowly).
            page_held = await _hold_slow_bodies(
                base,
                f"/ui/approvals/{agent.namespace}/nothing",
                {"Cookie": cookie, "Origin": base},
                cap,
            )
            async with http.get(f"{base}/ui/approvals", allow_redirects=False) as page:
                status = page.status
            refused = await _refused(page_held)
        finally:
            for _, writer in held + page_held:
                writer.close()
    return status, refused


def test_the_page_path_shares_the_callers_request_cap(
    api: client.ApiClient, operator: OperatorProcess, ns: Namespace, agent: Agent
) -> None:
    descriptor(api, ns.name, "list-tools", **NATIVE)
    agent.grant(["list-tools"], ["read"])
    status, refused = asyncio.run(_page_beyond_cap(operator, agent))
    # With the caller's requests at their cap, the page answers 429 too, and the page's
    # own slow forms were refused beyond the cap.
    assert status == 429 and refused == DEFAULTS.gateway.caller_requests, (status, refused)


# ------------------------------------------------------------------ records


def test_a_receipt_is_not_read_through_another_namespace(
    api: client.ApiClient, operator: OperatorProcess, ns: Namespace, agent: Agent
) -> None:
    descriptor(api, ns.name, "list-tools", **NATIVE)
    agent.grant(["list-tools"], ["read"])
    name = agent.invoke("list-tools", {}, runId="run-shared")
    done = status_of(agent.wait(name, timeout=120))
    assert done["state"] == "Observed", pretty(done)
    digest = str((done.get("receipt") or {}).get("ref") or done.get("receiptRef") or "")
    digest = digest.removeprefix("sha256:")
    assert re.fullmatch(r"[0-9a-f]{64}", digest), pretty(done)
    base = operator.gateway_url
    own = http_json("GET", f"{base}/namespaces/{ns.name}/receipts/{digest}", token_of(agent))
    assert own[0] == 200, own
    other_ns = Namespace(api)
    try:
        tenant = Agent.create(api, other_ns.name, "agent-2")
        tenant.grant(["list-tools"], ["read"])
        token = token_of(tenant)
        # The same hash asked in the tenant's own namespace, and the run's id there.
        got = http_json("GET", f"{base}/namespaces/{other_ns.name}/receipts/{digest}", token)
        assert got[0] == 404, got
        runs = http_json(
            "GET", f"{base}/namespaces/{other_ns.name}/runs/run-shared/tool-receipts", token
        )
        assert runs[0] in (200, 404), runs
        if runs[0] == 200:
            assert name not in str(runs[2]) and digest not in str(runs[2]), runs
        # And in the agent's namespace, which the tenant may not read.
        theirs = http_json("GET", f"{base}/namespaces/{ns.name}/receipts/{digest}", token)
        assert theirs[0] in (403, 404), theirs
    finally:
        other_ns.delete()


# ------------------------------------------------------------------ authentication (last)


async def _spoofed(base: str, namespace: str, count: int) -> list[int]:
    statuses = []
    # From an address of its own on loopback: the limit it exhausts is per client address,
    # and the session's other tests sign in from 127.0.0.1.
    connector = aiohttp.TCPConnector(local_addr=("127.0.0.8", 0))
    async with aiohttp.ClientSession(connector=connector) as http:
        for i in range(count):
            headers = {
                "Authorization": f"Bearer {secrets.token_urlsafe(24)}",
                "X-Forwarded-For": f"203.0.113.{i % 250}",
                "X-Real-IP": f"198.51.100.{i % 250}",
                "Forwarded": f"for=192.0.2.{i % 250}",
            }
            async with http.get(f"{base}/namespaces/{namespace}/tools", headers=headers) as r:
                statuses.append(r.status)
    return statuses


def test_forwarded_headers_do_not_reset_the_failed_authentication_limit(
    operator: OperatorProcess, ns: Namespace
) -> None:
    burst = DEFAULTS.gateway.auth_failures_burst
    statuses = asyncio.run(_spoofed(operator.gateway_url, ns.name, burst + 20))
    assert set(statuses) <= {401, 429}, statuses
    assert statuses.count(401) <= burst + 2, statuses
    assert statuses[-10:] == [429] * 10, statuses
