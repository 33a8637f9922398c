"""The reviewers' page served by the gateway without a cluster: sign-in, the session
cookie's attributes, CSRF, the pages rendered from objects a stub API answers with, and
refusals. The real API server, RBAC and admission are in tests/integration/gateway/test_page.py."""

from __future__ import annotations

import asyncio
import re
import socket
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest

from tests.unit.fake_cluster import MemoryStore
from tooladapter.gateway import Gateway
from tooladapter.gateway.context import Deps
from tooladapter.kube.callers import CallerApiError, CallerIdentity
from tooladapter.pipeline.hashing import request_hash
from tooladapter.settings import GatewaySettings, Settings

REVIEWER = CallerIdentity(username="alice", groups=("system:authenticated", "reviewers"))
#: The hash the operator fixed for WAITING's request (what an approval binds).
REQUEST_HASH = request_hash(
    namespace="team-a",
    tool_id="deploy",
    tool_version="1.0.0",
    arguments={"tag": "v42", "password": "hunter2"},
)
WAITING: dict[str, Any] = {
    "metadata": {"name": "deploy-1", "namespace": "team-a", "uid": "u1"},
    "spec": {
        "tool": {"id": "deploy", "version": "1.0.0"},
        "arguments": {"tag": "v42", "password": "hunter2"},
        "caller": {"kind": "agent", "name": "system:serviceaccount:team-a:agent"},
    },
    "status": {
        "state": "AwaitingApproval",
        "requestHash": REQUEST_HASH,
        "descriptorDigest": "sha256:" + "b" * 64,
        "effectiveClass": "external",
        "declaredClass": "external",
        "approvalRequestedAt": "2026-01-01T00:00:00Z",
        "stages": [{"stage": "approval", "outcome": "waiting", "detail": "class external"}],
    },
}


class StubApi:
    """The person's API client: answers from a list, records writes."""

    def __init__(self, world: World) -> None:
        self.world = world

    async def list(self, plural: str, namespace: str, **_: Any) -> list[dict[str, Any]]:
        if namespace not in self.world.readable:
            raise CallerApiError(403, "forbidden")
        return [o for o in self.world.objects if o["metadata"]["namespace"] == namespace]

    async def get(self, plural: str, namespace: str, name: str) -> dict[str, Any]:
        return next(o for o in self.world.objects if o["metadata"]["name"] == name)

    async def create(self, plural: str, namespace: str, body: dict[str, Any]) -> dict[str, Any]:
        self.world.created.append(body)
        return body

    async def collection_version(self, plural: str, namespace: str | None) -> str:
        raise CallerApiError(403, "no watching here")


class World:
    def __init__(self) -> None:
        self.objects = [WAITING]
        self.readable = {"team-a"}
        self.reviewers = {"team-a"}
        self.created: list[dict[str, Any]] = []

    # Reviews
    async def identify(self, token: str) -> CallerIdentity | None:
        return REVIEWER if token == "good-token" else None

    async def allowed(self, who: CallerIdentity, *, namespace: str, **_: Any) -> bool:
        return namespace in self.reviewers

    # CallerPool
    def as_caller(self, token: str) -> StubApi:
        return StubApi(self)

    async def close(self) -> None:
        return None


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture
async def served() -> AsyncIterator[tuple[str, World]]:
    world = World()
    settings = Settings(gateway=GatewaySettings(host="127.0.0.1", port=_free_port()))
    deps = Deps(reviews=world, pool=world, store=MemoryStore(), settings=settings, kube=None)  # type: ignore[arg-type]
    gateway = Gateway(deps, None)
    await gateway.serve()
    try:
        yield f"http://127.0.0.1:{gateway.port}", world
    finally:
        await gateway.stop()


def _field(html: str, name: str) -> str:
    found = re.search(rf'name="{name}" value="([^"]*)"', html)
    assert found, html
    return found.group(1)


async def _signed_in(http: aiohttp.ClientSession, base: str, namespaces: str = "team-a") -> str:
    async with http.get(f"{base}/ui/login") as response:
        nonce = _field(await response.text(), "nonce")
    form = {"nonce": nonce, "token": "good-token", "namespaces": namespaces}
    async with http.post(f"{base}/ui/login", data=form, allow_redirects=False) as response:
        assert response.status == 303 and response.headers["Location"] == "/ui/approvals"
        cookie = response.headers["Set-Cookie"]
        assert "HttpOnly" in cookie and "SameSite=Strict" in cookie and "Path=/ui" in cookie
        assert "good-token" not in cookie
    async with http.get(f"{base}/ui/approvals") as response:
        assert response.status == 200
        return await response.text()


async def test_pages_need_a_session_and_say_so_safely(served: tuple[str, World]) -> None:
    base, _ = served
    async with aiohttp.ClientSession(cookie_jar=aiohttp.CookieJar(unsafe=True)) as http:
        async with http.get(f"{base}/ui/approvals", allow_redirects=False) as response:
            assert response.status == 303 and response.headers["Location"] == "/ui/login"
        async with http.get(f"{base}/ui/login") as response:
            assert response.status == 200
            assert "script-src 'self'" in response.headers["Content-Security-Policy"]
            assert response.headers["X-Frame-Options"] == "DENY"
            assert 'label for="token"' in await response.text()
        async with http.post(f"{base}/ui/approvals/team-a/deploy-1", data={}) as response:
            assert response.status == 401
        # The REST API still wants a bearer token: the cookie path is only /ui.
        async with http.get(f"{base}/namespaces/team-a/tools") as response:
            assert response.status == 401
        async with http.get(f"{base}/ui/static/ui.js") as response:
            assert response.status == 200 and "EventSource" in await response.text()


async def test_sign_in_needs_the_forms_nonce_and_a_token_the_api_server_accepts(
    served: tuple[str, World],
) -> None:
    base, _ = served
    async with aiohttp.ClientSession(cookie_jar=aiohttp.CookieJar(unsafe=True)) as http:
        async with http.post(
            f"{base}/ui/login", data={"nonce": "forged", "token": "good-token"}
        ) as response:
            assert response.status == 403
        async with http.get(f"{base}/ui/login") as response:
            nonce = _field(await response.text(), "nonce")
        async with http.post(
            f"{base}/ui/login", data={"nonce": nonce, "token": "bad-token"}
        ) as response:
            assert response.status == 401
            assert "did not accept" in await response.text()


async def test_a_reviewer_sees_the_call_whole_and_decides_it_with_csrf(
    served: tuple[str, World],
) -> None:
    base, world = served
    async with aiohttp.ClientSession(cookie_jar=aiohttp.CookieJar(unsafe=True)) as http:
        html = await _signed_in(http, base)
        assert "deploy 1.0.0" in html and "class external" in html and REQUEST_HASH in html
        # Issue 28: what the agent sent is what the reviewer reads (flagged, not hidden).
        assert "hunter2" in html and "REDACTED" not in html
        assert ">Approve</button>" in html
        csrf = _field(html, "csrf")
        action = f"{base}/ui/approvals/team-a/deploy-1"
        decision = {"decision": "Approved", "expires": "3600", "comment": "ok"}
        hashed = {"requestHash": REQUEST_HASH}
        async with http.post(action, data={**decision, **hashed}) as response:
            assert response.status == 403 and "CSRF" in await response.text()
        async with http.post(
            action,
            data={**decision, **hashed, "csrf": csrf},
            headers={"Origin": "https://evil.example"},
        ) as response:
            assert response.status == 403
        async with http.post(
            action, data={**decision, "requestHash": "sha256:other", "csrf": csrf}
        ) as response:
            assert response.status == 409
        assert world.created == []
        async with http.post(
            action, data={**decision, **hashed, "csrf": csrf}, allow_redirects=False
        ) as response:
            assert response.status == 303
        (approval,) = world.created
        assert approval["spec"]["reviewer"] == "alice"
        assert approval["spec"]["invocationUid"] == "u1"
        assert approval["spec"]["reviewerGroups"] == ["system:authenticated", "reviewers"]
        assert approval["spec"]["comment"] == "ok" and approval["spec"]["expiresAt"]


async def test_without_the_reviewer_role_no_form_and_refused_namespaces_are_named(
    served: tuple[str, World],
) -> None:
    base, world = served
    world.reviewers = set()
    async with aiohttp.ClientSession(cookie_jar=aiohttp.CookieJar(unsafe=True)) as http:
        html = await _signed_in(http, base, "team-a team-b")
        assert ">Approve</button>" not in html and "You may not decide" in html
        assert "You may not list tool invocations in team-b" in html
        async with http.get(f"{base}/ui/runs?namespace=team-a&run=r") as response:
            assert response.status == 200
        async with http.get(f"{base}/ui/runs?namespace=Not_A_Name") as response:
            assert response.status == 422
        async with http.get(f"{base}/ui/uncertain") as response:
            assert response.status == 200 and "No call is Uncertain" in await response.text()


async def test_the_event_stream_says_when_the_api_server_refuses_the_watch(
    served: tuple[str, World],
) -> None:
    base, _ = served
    async with aiohttp.ClientSession(cookie_jar=aiohttp.CookieJar(unsafe=True)) as http:
        await _signed_in(http, base)
        async with http.get(f"{base}/ui/events") as response:
            assert response.status == 200
            assert response.headers["Content-Type"].startswith("text/event-stream")
            seen = b""
            while b"REFUSED" not in seen:
                line = await asyncio.wait_for(response.content.readline(), timeout=10)
                assert line, seen
                seen += line
    assert b"event: change" in seen and b'"namespace":"team-a"' in seen


async def test_the_page_says_when_calls_are_refused_for_a_missing_admission_binding() -> None:
    """Identity fails closed; the reviewers learn why every call is refused from the page."""
    from datetime import UTC, datetime

    from tooladapter.enums import AdmissionFault, AdmissionKind
    from tooladapter.pipeline.validation.shipped import Problem

    world = World()
    settings = Settings(gateway=GatewaySettings(host="127.0.0.1", port=_free_port()))
    deps = Deps(reviews=world, pool=world, store=MemoryStore(), settings=settings, kube=None)  # type: ignore[arg-type]
    missing = Problem(
        AdmissionKind.BINDING, "tooladapter-invocation-caller", AdmissionFault.MISSING
    )
    deps.admission.observe((missing,), at=datetime.now(UTC), observed={})
    gateway = Gateway(deps, None)
    await gateway.serve()
    base = f"http://127.0.0.1:{gateway.port}"
    try:
        async with aiohttp.ClientSession(cookie_jar=aiohttp.CookieJar(unsafe=True)) as http:
            html = await _signed_in(http, base)
            assert 'data-testid="admission-alert"' in html
            assert (
                "ValidatingAdmissionPolicyBinding tooladapter-invocation-caller is missing" in html
            )
            deps.admission.observe((), at=datetime.now(UTC), observed={})
            async with http.get(f"{base}/ui/approvals") as response:
                assert "admission-alert" not in await response.text()
    finally:
        await gateway.stop()
