"""The gateway's server without a cluster: listener errors, TLS, unauthenticated requests,
the review cache and the ASGI bridge (nothing here needs the API server)."""

from __future__ import annotations

import asyncio
import json
import socket
import ssl
import subprocess
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import web

from tooladapter.gateway import Gateway, GatewayPortTaken, check_port
from tooladapter.gateway.asgi import serve_asgi
from tooladapter.gateway.auth import ReviewCache
from tooladapter.gateway.context import Deps
from tooladapter.kube.callers import CallerIdentity
from tooladapter.settings import GatewaySettings, Settings


class _Unused:
    """Stands in for the API clients: these tests never reach them."""

    def __getattr__(self, name: str) -> Any:
        raise AssertionError(f"the API was used: {name}")

    async def close(self) -> None:
        return None


def _deps(settings: Settings) -> Deps:
    return Deps(
        reviews=_Unused(),  # type: ignore[arg-type]
        pool=_Unused(),  # type: ignore[arg-type]
        store=_Unused(),
        settings=settings,
        kube=_Unused(),  # type: ignore[arg-type]
    )


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


async def test_a_taken_port_is_named_in_one_clear_error() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        settings = Settings(gateway=GatewaySettings(host="127.0.0.1", port=port))
        gateway = Gateway(_deps(settings), None)
        with pytest.raises(GatewayPortTaken) as caught:
            await gateway.serve()
        await gateway.stop()
        with pytest.raises(GatewayPortTaken) as checked:
            check_port(settings)
    for message in (str(caught.value), str(checked.value)):
        assert f"127.0.0.1:{port} is already in use" in message
        assert "TOOLADAPTER_GATEWAY_PORT" in message and "\n" not in message


async def test_port_zero_disables_the_gateway() -> None:
    assert await Gateway.start(Settings(gateway=GatewaySettings(port=0))) is None


async def test_health_openapi_and_a_401_problem_without_a_token() -> None:
    settings = Settings(gateway=GatewaySettings(host="127.0.0.1", port=_free_port()))
    gateway = Gateway(_deps(settings), None)
    await gateway.serve()
    base = f"http://127.0.0.1:{gateway.port}"
    try:
        async with aiohttp.ClientSession() as http:
            async with http.get(f"{base}/healthz") as response:
                assert response.status == 200 and await response.json() == {"status": "ok"}
            async with http.get(f"{base}/openapi.json") as response:
                assert (await response.json())["openapi"] == "3.1.0"
            async with http.get(f"{base}/namespaces/team-a/tools") as response:
                assert response.status == 401
                assert response.content_type == "application/problem+json"
                assert response.headers["WWW-Authenticate"].startswith("Bearer")
                assert (await response.json())["status"] == 401
            async with http.get(f"{base}/nowhere") as response:
                assert response.status == 404
                assert (await response.json())["type"].endswith("/not-found")
            async with http.delete(f"{base}/healthz") as response:
                assert response.status == 405 and "GET" in response.headers["Allow"]
    finally:
        await gateway.stop()


def _self_signed(directory: Path) -> tuple[Path, Path]:
    cert, key = directory / "tls.crt", directory / "tls.key"
    subprocess.run(
        [
            "openssl",
            "req",
            "-x509",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
            "-nodes",
            "-days",
            "1",
            "-subj",
            "/CN=127.0.0.1",
            "-addext",
            "subjectAltName=IP:127.0.0.1",
            "-keyout",
            str(key),
            "-out",
            str(cert),
        ],
        check=True,
        capture_output=True,
    )
    return cert, key


async def test_with_a_certificate_and_key_the_gateway_speaks_tls(tmp_path: Path) -> None:
    cert, key = _self_signed(tmp_path)
    settings = Settings(
        gateway=GatewaySettings(
            host="127.0.0.1",
            port=_free_port(),
            tls_cert=cert,
            tls_key=key,
        )
    )
    gateway = Gateway(_deps(settings), None)
    await gateway.serve()
    trust = ssl.create_default_context(cafile=str(cert))
    try:
        async with aiohttp.ClientSession() as http:
            url = f"https://127.0.0.1:{gateway.port}/healthz"
            async with http.get(url, ssl=trust) as response:
                assert response.status == 200
            with pytest.raises(aiohttp.ClientError):
                async with http.get(f"http://127.0.0.1:{gateway.port}/healthz") as response:
                    await response.read()
    finally:
        await gateway.stop()


def test_a_certificate_without_a_key_is_refused() -> None:
    with pytest.raises(ValueError, match="go together"):
        GatewaySettings(tls_cert=Path("/x.crt"))


def test_the_review_cache_expires_and_stays_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    now = [1000.0]
    monkeypatch.setattr("tooladapter.gateway.auth.time.monotonic", lambda: now[0])
    cache = ReviewCache(ttl_seconds=10, max_entries=2)
    who = CallerIdentity(username="alice")
    cache.put("t1", who)
    assert cache.get("t1") == who and cache.get("t2") is None
    assert "t1" not in "".join(cache.entries)  # keyed by hash, never the token
    now[0] += 10
    assert cache.get("t1") is None
    for token in ("a", "b", "c"):
        cache.put(token, who)
    assert len(cache.entries) == 2 and cache.get("a") is None and cache.get("c") == who


async def test_the_asgi_bridge_streams_and_passes_state() -> None:
    seen: dict[str, Any] = {}

    async def app(scope: Any, receive: Any, send: Any) -> None:
        seen["state"] = scope["state"]
        seen["body"] = (await receive())["body"]
        await send({"type": "http.response.start", "status": 201, "headers": [(b"x-a", b"1")]})
        await send({"type": "http.response.body", "body": b"one ", "more_body": True})
        await send({"type": "http.response.body", "body": b"two"})
        seen["after"] = await asyncio.wait_for(receive(), timeout=5)

    async def handler(request: web.Request) -> web.StreamResponse:
        return await serve_asgi(app, request, {"k": "v"})

    web_app = web.Application()
    web_app.router.add_post("/x", handler)
    runner = web.AppRunner(web_app)
    await runner.setup()
    port = _free_port()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    try:
        async with aiohttp.ClientSession() as http:
            async with http.post(f"http://127.0.0.1:{port}/x", data=b"hello") as response:
                assert response.status == 201 and response.headers["x-a"] == "1"
                assert await response.read() == b"one two"
    finally:
        await runner.cleanup()
    assert seen == {"state": {"k": "v"}, "body": b"hello", "after": {"type": "http.disconnect"}}
    assert json.dumps(seen["state"])  # plain data


class _SlowReviews:
    """A TokenReview that takes a while (a loaded API server), counting its calls."""

    def __init__(self) -> None:
        self.calls = 0
        self.release = asyncio.Event()

    async def identify(self, token: str) -> CallerIdentity | None:
        self.calls += 1
        await self.release.wait()
        return CallerIdentity(username="agent", groups=()) if token == "good" else None


async def test_concurrent_requests_with_one_token_share_one_review() -> None:
    """Many requests with one token arriving while its review is slow cost one review and
    one take of the address's failed-authentication limit: none is refused as if it had
    failed (the limit's burst here is 1)."""
    from aiohttp.test_utils import make_mocked_request

    from tooladapter.gateway import auth
    from tooladapter.gateway.context import DEPS

    settings = Settings(gateway=GatewaySettings(auth_failures_burst=1))
    reviews = _SlowReviews()
    app = web.Application()
    app[DEPS] = Deps(
        reviews=reviews,  # type: ignore[arg-type]
        pool=_Unused(),  # type: ignore[arg-type]
        store=_Unused(),
        settings=settings,
        kube=_Unused(),  # type: ignore[arg-type]
    )
    auth.install(app, settings)

    def request() -> web.Request:
        return make_mocked_request("GET", "/namespaces/a/tools", app=app)

    waiting = [asyncio.ensure_future(auth.identify(request(), "good")) for _ in range(32)]
    bad = [asyncio.ensure_future(auth.identify(request(), "bad")) for _ in range(3)]
    await asyncio.sleep(0)
    reviews.release.set()
    identities = await asyncio.gather(*waiting)
    assert {i.username for i in identities} == {"agent"}
    refusals = await asyncio.gather(*bad, return_exceptions=True)
    # The bad token's requests shared one review too: one failure, not three.
    assert all(getattr(r, "kind", None) is not None for r in refusals), refusals
    assert reviews.calls == 2
    assert app[auth.REVIEWS].pending == {}


async def test_a_calls_result_is_routed_documented_and_never_served_without_a_token() -> None:
    settings = Settings(gateway=GatewaySettings(host="127.0.0.1", port=_free_port()))
    gateway = Gateway(_deps(settings), None)
    await gateway.serve()
    base = f"http://127.0.0.1:{gateway.port}"
    path = "/namespaces/{namespace}/tool-invocations/{name}/result"
    try:
        async with aiohttp.ClientSession() as http:
            async with http.get(f"{base}/openapi.json") as response:
                operation = (await response.json())["paths"][path]["get"]
            assert operation["operationId"] == "getToolInvocationResult"
            assert "text/plain" in operation["responses"]["200"]["content"]
            async with http.get(f"{base}/namespaces/t/tool-invocations/c1/result") as response:
                # The store (`_Unused`) is never reached before the caller is known.
                assert response.status == 401
    finally:
        await gateway.stop()
