"""The HTTP side of issuers: a token endpoint at a non-public address is refused unless
the platform trusts its host (the operator posts client secrets there; a name the test
resolver maps is no exception); TLS is verified; the client authenticates by HTTP Basic; a
refusal keeps the issuer's error code; revocation is bounded."""

from __future__ import annotations

import asyncio
import base64
import ssl
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web

from tooladapter.credentials.issuers import IssuerRefused, IssuerUnreachable
from tooladapter.devtools.tls import make_certificates
from tooladapter.egress.core.trust import verified_context
from tooladapter.executors.issuers import HttpIssuers

pytestmark = pytest.mark.timeout(10)

ISSUER = "issuer.example.test"


@asynccontextmanager
async def issuer(
    certs: Any, token: Any, revoke: Any = None
) -> AsyncIterator[tuple[int, list[dict[str, Any]]]]:
    seen: list[dict[str, Any]] = []

    async def record(request: web.Request) -> None:
        form = await request.post()
        seen.append(
            {
                "path": request.path,
                "authorization": request.headers.get("Authorization"),
                "form": {k: str(v) for k, v in form.items()},
            }
        )

    async def on_token(request: web.Request) -> web.Response:
        await record(request)
        return await token(request)

    async def on_revoke(request: web.Request) -> web.Response:
        await record(request)
        return await (revoke or (lambda _: _ok()))(request)

    app = web.Application()
    app.router.add_post("/token", on_token)
    app.router.add_post("/revoke", on_revoke)
    runner = web.AppRunner(app)
    await runner.setup()
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(certs.cert, certs.key)
    site = web.TCPSite(runner, "127.0.0.1", 0, ssl_context=context)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    try:
        yield port, seen
    finally:
        await runner.cleanup()


async def _ok() -> web.Response:
    return web.Response(status=200)


@pytest.fixture
def certs(tmp_path: Path) -> Any:
    return make_certificates(tmp_path, [ISSUER])


async def test_a_private_address_is_refused_unless_trusted(certs: Any) -> None:
    async def token(_: web.Request) -> web.Response:
        return web.json_response({"access_token": "t0k", "expires_in": 60})

    async with issuer(certs, token) as (port, seen):
        url = f"https://{ISSUER}:{port}/token"
        public_only = HttpIssuers(tls=verified_context(str(certs.ca)))
        trusted = HttpIssuers(trusted=("127.0.0.1",), tls=verified_context(str(certs.ca)))
        mapped = HttpIssuers(
            trusted=(ISSUER,), hosts={ISSUER: "127.0.0.1"}, tls=verified_context(str(certs.ca))
        )
        try:
            with pytest.raises(IssuerUnreachable, match="non-public"):
                await public_only.token(f"https://127.0.0.1:{port}/token", "c", "s", {})
            assert seen == []
            # Trusted: the address passes, and TLS is still verified (the certificate
            # names the issuer, not the address): nothing is sent either.
            with pytest.raises(IssuerUnreachable) as unverified:
                await trusted.token(f"https://127.0.0.1:{port}/token", "c", "s", {})
            assert "non-public" not in str(unverified.value)
            assert seen == []
            minted = await mapped.token(url, "client", "s3cret", {"grant_type": "x"})
        finally:
            for each in (public_only, trusted, mapped):
                await each.close()
    assert (minted.access_token, minted.expires_in) == ("t0k", 60)
    (request,) = seen
    assert request["authorization"] == "Basic " + base64.b64encode(b"client:s3cret").decode()
    assert request["form"] == {"grant_type": "x"}


async def test_a_refusal_is_the_issuers_error_code(certs: Any) -> None:
    async def token(_: web.Request) -> web.Response:
        return web.json_response({"error": "invalid_client"}, status=401)

    async with issuer(certs, token) as (port, _):
        issuers = HttpIssuers(
            trusted=(ISSUER,), hosts={ISSUER: "127.0.0.1"}, tls=verified_context(str(certs.ca))
        )
        try:
            with pytest.raises(IssuerRefused) as refused:
                await issuers.token(f"https://{ISSUER}:{port}/token", "c", "s", {})
        finally:
            await issuers.close()
    assert refused.value.error == "invalid_client"


async def test_revocation_is_true_when_confirmed_and_false_when_slow(certs: Any) -> None:
    slow = asyncio.Event()

    async def token(_: web.Request) -> web.Response:
        return web.json_response({"access_token": "t0k"})

    async def revoke(request: web.Request) -> web.Response:
        if slow.is_set():
            await asyncio.sleep(1)
        return web.Response(status=200)

    async with issuer(certs, token, revoke) as (port, seen):
        issuers = HttpIssuers(
            trusted=(ISSUER,), hosts={ISSUER: "127.0.0.1"}, tls=verified_context(str(certs.ca))
        )
        url = f"https://{ISSUER}:{port}/revoke"
        try:
            assert await issuers.revoke(url, "c", "s", "t0k", 2.0) is True
            slow.set()
            assert await issuers.revoke(url, "c", "s", "t0k", 0.2) is False
        finally:
            await issuers.close()
    assert seen[0]["form"] == {"token": "t0k", "token_type_hint": "access_token"}
