"""Issue 40's attack pass on the HTTP side of issuers (a TLS issuer on loopback, from
`test_issuers`): where the operator posts a client secret, and what it reads back."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from aiohttp import web

from tests.unit.executors.test_issuers import ISSUER, certs, issuer
from tooladapter.credentials.issuers import IssuerRefused, IssuerUnreachable
from tooladapter.egress.core.trust import verified_context
from tooladapter.executors import issuers as issuers_module
from tooladapter.executors.issuers import MAX_ANSWER_BYTES, HttpIssuers, basic_authorization

pytestmark = pytest.mark.timeout(10)

__all__ = ["certs"]  # the fixture, used by name

SECRET = "client-s3cret-value"


async def _token(_: web.Request) -> web.Response:
    return web.json_response({"access_token": "t0k", "expires_in": 60})


def _issuers(certs: Any, **kw: Any) -> HttpIssuers:
    return HttpIssuers(hosts={ISSUER: "127.0.0.1"}, tls=verified_context(str(certs.ca)), **kw)


@pytest.mark.parametrize("spelling", [ISSUER, ISSUER + ".", ISSUER.upper()])
async def test_a_mapped_name_is_not_trusted_unless_listed(certs: Any, spelling: str) -> None:
    """`TOOLADAPTER_EGRESS_HOSTS` says where a name is; only `TOOLADAPTER_TRUSTED_ISSUERS`
    lets the operator post a client secret to a non-public address."""
    async with issuer(certs, _token) as (port, seen):
        mapped = _issuers(certs)
        listed = _issuers(certs, trusted=(ISSUER,))
        try:
            with pytest.raises(IssuerUnreachable, match="non-public"):
                await mapped.token(f"https://{spelling}:{port}/token", "c", SECRET, {})
            assert seen == []
            minted = await listed.token(f"https://{spelling}:{port}/token", "c", SECRET, {})
        finally:
            await mapped.close()
            await listed.close()
    assert minted.access_token == "t0k"
    assert len(seen) == 1


@pytest.mark.parametrize(
    "userinfo", [f"user:{SECRET}@", "user@", f"{ISSUER}:443@"], ids=["password", "user", "host"]
)
async def test_a_token_url_with_userinfo_is_refused_before_sending(
    certs: Any, userinfo: str
) -> None:
    """aiohttp itself would raise a bare ValueError (credentials in the URL beside an
    Authorization header): an unexpected error, not a refusal of the URL."""
    async with issuer(certs, _token) as (port, seen):
        issuers = _issuers(certs, trusted=(ISSUER,))
        try:
            with pytest.raises(IssuerUnreachable) as refused:
                await issuers.token(f"https://{userinfo}{ISSUER}:{port}/token", "c", SECRET, {})
        finally:
            await issuers.close()
    assert seen == []
    assert SECRET not in str(refused.value)


async def test_a_redirect_to_an_internal_address_is_not_followed(certs: Any) -> None:
    followed: list[str] = []

    async def redirect(_: web.Request) -> web.Response:
        return web.Response(status=307, headers={"Location": "https://127.0.0.1:1/steal"})

    async def internal(request: web.Request) -> web.Response:
        followed.append(request.path)
        return web.json_response({"access_token": "t0k"})

    async with issuer(certs, redirect, redirect) as (port, seen):
        issuers = _issuers(certs, trusted=(ISSUER,))
        try:
            with pytest.raises(IssuerUnreachable, match="HTTP 307"):
                await issuers.token(f"https://{ISSUER}:{port}/token", "c", SECRET, {})
            assert (
                await issuers.revoke(f"https://{ISSUER}:{port}/revoke", "c", SECRET, "t", 1.0)
                is False
            )
        finally:
            await issuers.close()
    assert [r["path"] for r in seen] == ["/token", "/revoke"]
    assert followed == []


async def test_an_error_that_echoes_the_authorization_header_keeps_only_the_code(
    certs: Any,
) -> None:
    async def echo(request: web.Request) -> web.Response:
        body = {
            "error": "invalid_client",
            "error_description": f"bad: {request.headers['Authorization']}",
            "form": dict(await request.post()),
        }
        return web.Response(status=401, text=json.dumps(body), content_type="application/json")

    async with issuer(certs, echo) as (port, _):
        issuers = _issuers(certs, trusted=(ISSUER,))
        try:
            with pytest.raises(IssuerRefused) as refused:
                await issuers.token(
                    f"https://{ISSUER}:{port}/token", "c", SECRET, {"subject_token": "subj"}
                )
        finally:
            await issuers.close()
    assert refused.value.error == "invalid_client"
    said = str(refused.value) + repr(refused.value.args)
    for value in (SECRET, basic_authorization("c", SECRET), "subj"):
        assert value not in said


async def test_a_huge_answer_is_cut_at_the_bound_and_is_no_token(certs: Any) -> None:
    async def huge(_: web.Request) -> web.StreamResponse:
        padding = "x" * (4 * MAX_ANSWER_BYTES)
        return web.json_response({"access_token": "t0k", "padding": padding})

    async with issuer(certs, huge) as (port, _):
        issuers = _issuers(certs, trusted=(ISSUER,))
        try:
            with pytest.raises(IssuerUnreachable, match="larger than"):
                await issuers.token(f"https://{ISSUER}:{port}/token", "c", SECRET, {})
        finally:
            await issuers.close()


async def test_an_answer_in_many_small_chunks_is_read_whole(certs: Any) -> None:
    """A token answer that arrives in pieces is one answer (a single `read(n)` returns only
    what has arrived)."""
    body = json.dumps({"access_token": "t" * 2000, "expires_in": 60}).encode()

    async def chunked(request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse(headers={"Content-Type": "application/json"})
        response.enable_chunked_encoding()
        await response.prepare(request)
        for start in range(0, len(body), 100):
            await response.write(body[start : start + 100])
            await asyncio.sleep(0.001)
        await response.write_eof()
        return response

    async with issuer(certs, chunked) as (port, _):
        issuers = _issuers(certs, trusted=(ISSUER,))
        try:
            minted = await issuers.token(f"https://{ISSUER}:{port}/token", "c", SECRET, {})
        finally:
            await issuers.close()
    assert minted.access_token == "t" * 2000


async def test_an_issuer_that_answers_slowly_is_bounded(
    certs: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Headers at once, then the body byte by byte: the bound is on the whole answer."""
    monkeypatch.setattr(issuers_module, "TOKEN_TIMEOUT_SECONDS", 0.3)
    release = asyncio.Event()

    async def drip(request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse(headers={"Content-Type": "application/json"})
        response.enable_chunked_encoding()
        await response.prepare(request)
        await response.write(b'{"access_token": ')
        await release.wait()
        return response

    async with issuer(certs, drip) as (port, _):
        issuers = _issuers(certs, trusted=(ISSUER,))
        try:
            with pytest.raises(IssuerUnreachable, match="no answer in"):
                await issuers.token(f"https://{ISSUER}:{port}/token", "c", SECRET, {})
        finally:
            release.set()
            await issuers.close()
