"""Attacks on the gateway and the egress proxy that need no cluster: each states the
promise it breaks, and each that was a hit is pinned here as a regression test (the
cluster-side attempts and the full list of misses are in
`tests/integration/gateway/test_door_attacks.py`).

Hits fixed (unit-pinned here):

- a forwarded request's bytes after its head were relayed raw: a second request pipelined
  behind the first (another `Host`, no head checks, no credential swap) reached the
  upstream, and `Transfer-Encoding` + `Content-Length` could desynchronise it;
- a bare LF (or CR, NUL) inside a header line passed the head parser and went upstream,
  where a lenient server reads a second `Host` the proxy never checked;
- an upstream reflecting request headers handed the injected credential to the sandbox
  in clear (the operator's exact-value redaction caught it in an agent's one-argv shell
  output; a command that transforms its input would not be caught): now masked;
- connections without a limit: one sandbox could open heads by the thousand (30 s each)
  or one lease keep hundreds of tunnels; made-up lease uids each cost a GET of a grant;
- the gateway: a body nested thousands deep was a 500 with a traceback per request; a
  trickled body held its handler forever; an idle or half-sent connection stayed an
  hour (aiohttp's default keep-alive), and their number was unbounded, in the process
  whose descriptors the operator needs for its own API calls.
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest

from tests.unit.egress.test_proxy import SECRET_VALUE, Rig, auth, exchange, get, records_of, rig
from tooladapter.egress.core.addresses import address_kind
from tooladapter.egress.core.framing import ChunkedEnd, Framing, Masker, body_framing
from tooladapter.egress.core.rules import (
    AddressPolicy,
    AllowList,
    BadRequest,
    forward_target,
    judge_target,
    parse_request_head,
    upstream_head,
)
from tooladapter.egress.proxy import server as proxy_module
from tooladapter.egress.proxy.leases import LeaseTable
from tooladapter.enums import EgressVerdict
from tooladapter.gateway import Gateway
from tooladapter.gateway import bodies as bodies_module
from tooladapter.gateway import server as server_module
from tooladapter.gateway.context import Deps
from tooladapter.gateway.guard import Limits
from tooladapter.kube.callers import CallerIdentity
from tooladapter.settings import GatewaySettings, Settings

__all__ = ["rig"]


async def closed(reader: asyncio.StreamReader) -> bool:
    """Whether the other side closes the connection (or resets it) without a byte."""
    try:
        return await asyncio.wait_for(reader.read(), 10) == b""
    except ConnectionResetError:
        return True


# --------------------------------------------------------------------------- pure: heads


@pytest.mark.parametrize(
    "smuggled",
    [
        b"X-Note: a\nHost: internal.example.test\r\n",
        b"X-Note: a\rHost: internal.example.test\r\n",
        b"X-Note: a\x00b\r\n",
    ],
)
def test_a_bare_line_break_inside_a_header_is_refused(smuggled: bytes) -> None:
    raw = b"GET http://api.example.test/ HTTP/1.1\r\nHost: api.example.test\r\n" + smuggled
    with pytest.raises(BadRequest, match="control character"):
        parse_request_head(raw + b"\r\n")


def test_a_line_break_in_the_request_target_is_refused() -> None:
    with pytest.raises(BadRequest):
        parse_request_head(b"GET http://api.example.test/x\nHost:evil HTTP/1.1\r\n\r\n")


def test_a_tab_in_a_header_value_is_still_accepted() -> None:
    head = parse_request_head(b"GET http://a.test/ HTTP/1.1\r\nX-T: a\tb\r\n\r\n")
    assert head.header("x-t") == "a\tb"


@pytest.mark.parametrize(
    ("headers", "framing"),
    [
        ([], Framing()),
        ([("Content-Length", "12")], Framing(length=12)),
        ([("Content-Length", "12"), ("content-length", " 12")], Framing(length=12)),
        ([("Transfer-Encoding", "chunked")], Framing(chunked=True)),
    ],
)
def test_a_request_body_is_framed_by_one_length_or_chunks(
    headers: list[tuple[str, str]], framing: Framing
) -> None:
    head = parse_request_head(
        b"POST http://a.test/ HTTP/1.1\r\n"
        + b"".join(f"{k}: {v}\r\n".encode() for k, v in headers)
        + b"\r\n"
    )
    assert body_framing(head) == framing


@pytest.mark.parametrize(
    "headers",
    [
        [("Transfer-Encoding", "chunked"), ("Content-Length", "5")],  # CL.TE / TE.CL
        [("Transfer-Encoding", "gzip, chunked")],
        [("Transfer-Encoding", "chunked"), ("Transfer-Encoding", "chunked")],
        [("Transfer-Encoding", "xchunked")],
        [("Content-Length", "5"), ("Content-Length", "6")],
        [("Content-Length", "-1")],
        [("Content-Length", "0x10")],
        [("Content-Length", "1" * 40)],
    ],
)
def test_ambiguous_request_framing_is_refused(headers: list[tuple[str, str]]) -> None:
    head = parse_request_head(
        b"POST http://a.test/ HTTP/1.1\r\n"
        + b"".join(f"{k}: {v}\r\n".encode() for k, v in headers)
        + b"\r\n"
    )
    with pytest.raises(BadRequest):
        body_framing(head)


def test_a_chunked_body_ends_where_its_last_chunk_and_trailers_end() -> None:
    body = b"5;ext=1\r\nhello\r\n0\r\nX-Trailer: t\r\n\r\n"
    smuggled = b"GET /admin HTTP/1.1\r\nHost: internal\r\n\r\n"
    data = body + smuggled
    for step in (1, 3, len(data)):  # byte at a time, odd pieces, all at once
        tracker = ChunkedEnd()
        consumed = 0
        end: int | None = None
        for at in range(0, len(data), step):
            end = tracker.feed(data[at : at + step])
            if end is not None:
                consumed += end
                break
            consumed += len(data[at : at + step])
        assert end is not None and consumed == len(body), step


@pytest.mark.parametrize(
    "body",
    [b"zz\r\nhello\r\n", b"5\r\nhello-and-more\r\n", b"\r\n", b"1" * 5000 + b"\r\n"],
)
def test_a_malformed_chunked_body_is_refused(body: bytes) -> None:
    with pytest.raises(BadRequest):
        ChunkedEnd().feed(body)


def test_a_credentialed_request_asks_for_an_uncompressed_answer() -> None:
    head = parse_request_head(b"GET http://a.test/ HTTP/1.1\r\nAccept-Encoding: gzip, br\r\n\r\n")
    sent = upstream_head(head, forward_target(head), inject=("Authorization", "Bearer x"))
    assert b"gzip" not in sent and b"Accept-Encoding: identity\r\n" in sent
    plain = upstream_head(head, forward_target(head))
    assert b"Accept-Encoding: gzip, br" in plain  # untouched without a credential


def test_the_masker_hides_a_value_split_across_any_reads() -> None:
    secret = b"s3cr3t-api-key-value"
    stream = b"head " + secret + b" middle " + secret + b" tail"
    for step in range(1, len(stream) + 1):
        masker = Masker(secret)
        out = b"".join(masker.feed(stream[i : i + step]) for i in range(0, len(stream), step))
        out += masker.flush()
        assert secret not in out and len(out) == len(stream), step
        assert out.count(b"*" * len(secret)) == 2


# --------------------------------------------------------------------------- pure: addresses


@pytest.mark.parametrize(
    "host",
    ["2130706433", "0x7f.1", "017700000001", "0x7f000001", "127.1", "0177.0.0.1", "127.0.0.1."],
)
def test_other_spellings_of_loopback_are_names_off_the_list(host: str) -> None:
    # Not on any host entry, so refused before anything resolves; and a resolver that
    # turned one into 127.0.0.1 would still meet the address check.
    allow = AllowList.parse(["*.example.test", "api.example.test"])
    assert judge_target(allow, host, 443, default_port=443).verdict in (
        EgressVerdict.NOT_ALLOWED,
        EgressVerdict.IP_LITERAL,
    )
    (_, verdict) = AddressPolicy().permitted(allow, host, ["127.0.0.1"], mapped=False)
    assert verdict.verdict == EgressVerdict.PRIVATE_ADDRESS


@pytest.mark.parametrize(
    "address",
    ["::ffff:127.0.0.1", "::ffff:7f00:1", "64:ff9b::7f00:1", "2002:7f00:1::", "::127.0.0.1"],
)
def test_ipv6_spellings_of_loopback_are_refused_as_literals_and_as_resolved(
    address: str,
) -> None:
    allow = AllowList.parse(["api.example.test"])
    assert judge_target(allow, f"[{address}]", 443, default_port=443).verdict == (
        EgressVerdict.IP_LITERAL
    )
    (_, verdict) = AddressPolicy().permitted(allow, "api.example.test", [address], mapped=False)
    assert verdict.verdict == EgressVerdict.PRIVATE_ADDRESS, address_kind(address)


def test_metadata_spelled_as_mapped_ipv6_is_refused_even_under_an_allow_all_cidr() -> None:
    allow = AllowList.parse(["0.0.0.0/0", "::/0"])
    policy = AddressPolicy()
    for address in ("169.254.169.254", "::ffff:169.254.169.254", "fd00:ec2::254"):
        reason = policy.refusal(allow, address, mapped=False)
        assert reason is not None and "metadata" in reason, address


# --------------------------------------------------------------------------- proxy, sockets


async def test_a_request_pipelined_behind_the_first_never_reaches_the_upstream(
    rig: Rig,
) -> None:
    target = f"http://api.example.test:{rig.plain.port}/first"
    first = get(target, auth("lease-a", rig.tokens["lease-a"]) + b"Content-Length: 0\r\n")
    second = b"GET /second HTTP/1.1\r\nHost: internal.example.test\r\n\r\n"
    answer = await exchange(rig.proxy_port, first + second)
    assert answer.startswith(b"HTTP/1.1 200")
    assert len(rig.plain.heads) == 1 and b"/second" not in b"".join(rig.plain.heads)


async def test_a_chunked_body_goes_up_and_a_request_smuggled_after_it_does_not(
    rig: Rig,
) -> None:
    target = f"http://api.example.test:{rig.plain.port}/upload"
    head = get(target, auth("lease-a", rig.tokens["lease-a"]) + b"Transfer-Encoding: chunked\r\n")
    head = head.replace(b"GET ", b"POST ", 1)
    body = b"3\r\nabc\r\n0\r\n\r\n"
    answer = await exchange(rig.proxy_port, head + body + b"GET /smuggled HTTP/1.1\r\n\r\n")
    assert answer.startswith(b"HTTP/1.1 200")
    assert b"/smuggled" not in b"".join(rig.plain.heads)
    (record,) = await records_of(rig, "lease-a", 1)
    up = len(upstream_head(parse_request_head(head), forward_target(parse_request_head(head))))
    assert record["verdict"] == "allowed" and record["bytesUp"] == up + len(body)


async def test_te_and_cl_together_are_refused_before_anything_goes_upstream(rig: Rig) -> None:
    target = f"http://api.example.test:{rig.plain.port}/smuggle"
    request = get(
        target,
        auth("lease-a", rig.tokens["lease-a"])
        + b"Content-Length: 4\r\nTransfer-Encoding: chunked\r\n",
    )
    answer = await exchange(rig.proxy_port, request + b"0\r\n\r\nGET /x HTTP/1.1\r\n\r\n")
    assert answer.startswith(b"HTTP/1.1 400") and rig.plain.heads == []
    (record,) = await records_of(rig, "lease-a", 1)
    assert record["verdict"] == "bad-request" and "smuggling" in record["reason"]


async def test_a_host_header_smuggled_with_a_bare_lf_is_refused(rig: Rig) -> None:
    target = f"http://api.example.test:{rig.plain.port}/"
    request = get(target, auth("lease-a", rig.tokens["lease-a"]) + b"X: a\nHost: evil\r\n")
    answer = await exchange(rig.proxy_port, request)
    assert answer.startswith(b"HTTP/1.1 400") and rig.plain.heads == []


async def test_an_upstream_echoing_the_credential_shows_the_sandbox_only_stars(
    rig: Rig,
) -> None:
    # The rig's TLS upstream answers with the request head it got: an echo endpoint.
    target = f"http://tls.example.test:{rig.tls.port}/echo"
    answer = await exchange(
        rig.proxy_port,
        get(target, auth("lease-a", rig.tokens["lease-a"]) + b"Accept-Encoding: gzip\r\n"),
    )
    (head,) = rig.tls.heads
    assert f"Authorization: Bearer {SECRET_VALUE}".encode() in head  # the upstream got it
    assert b"Accept-Encoding: identity" in head
    assert answer.startswith(b"HTTP/1.1 200")
    assert SECRET_VALUE.encode() not in answer
    # The header as sent is masked whole (its every form is: issue 38's attack pass).
    assert b"Authorization: " + b"*" * len(f"Bearer {SECRET_VALUE}") in answer
    # The answer is framed again (issue 28): chunked, and its last chunk came.
    headers, _, body = answer.partition(b"\r\n\r\n")
    assert b"Transfer-Encoding: chunked" in headers and b"Content-Length" not in headers
    assert body.endswith(b"\r\n0\r\n\r\n")


async def test_a_peer_with_too_many_unfinished_heads_gets_no_more(
    rig: Rig, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(proxy_module, "MAX_PENDING_PER_PEER", 3)
    held = [await asyncio.open_connection("127.0.0.1", rig.proxy_port) for _ in range(3)]
    for _, writer in held:
        writer.write(b"GET http://api.example.test/ HTTP/1.1\r\n")  # never finished
        await writer.drain()
    reader, writer = await asyncio.open_connection("127.0.0.1", rig.proxy_port)
    assert await closed(reader)  # closed, nothing read
    writer.close()
    for _, w in held:
        w.close()
    # Once they are gone, the peer is served again.
    target = f"http://api.example.test:{rig.plain.port}/after"

    async def served() -> bytes:
        try:
            return await exchange(
                rig.proxy_port, get(target, auth("lease-a", rig.tokens["lease-a"]))
            )
        except ConnectionResetError:  # the held heads are not noticed gone yet
            return b""

    for _ in range(200):
        answer = await served()
        if answer:
            break
        await asyncio.sleep(0.05)
    assert answer.startswith(b"HTTP/1.1 200")


async def test_a_lease_holds_a_bounded_number_of_connections(
    rig: Rig, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(proxy_module, "MAX_LEASE_CONNECTIONS", 2)
    connect = (
        f"CONNECT raw.example.test:{rig.raw.port} HTTP/1.1\r\n".encode()
        + auth("lease-a", rig.tokens["lease-a"])
        + b"\r\n"
    )
    tunnels = []
    for _ in range(2):
        reader, writer = await asyncio.open_connection("127.0.0.1", rig.proxy_port)
        writer.write(connect)
        await writer.drain()
        assert (await reader.readuntil(b"\r\n\r\n")).startswith(b"HTTP/1.1 200")
        tunnels.append(writer)  # then silent: waiting for a ClientHello
    refused = await exchange(rig.proxy_port, connect)
    assert refused.startswith(b"HTTP/1.1 429")
    for writer in tunnels:
        writer.close()
    records = await records_of(rig, "lease-a", 1)
    assert EgressVerdict.TOO_MANY_CONNECTIONS.value in [r["verdict"] for r in records]


async def test_a_connect_that_never_sends_a_client_hello_is_closed(
    rig: Rig, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(proxy_module, "HELLO_TIMEOUT_SECONDS", 0.5)
    reader, writer = await asyncio.open_connection("127.0.0.1", rig.proxy_port)
    writer.write(
        f"CONNECT raw.example.test:{rig.raw.port} HTTP/1.1\r\n".encode()
        + auth("lease-a", rig.tokens["lease-a"])
        + b"\r\n"
    )
    await writer.drain()
    assert (await reader.readuntil(b"\r\n\r\n")).startswith(b"HTTP/1.1 200")
    assert await asyncio.wait_for(reader.read(), 10) == b""
    writer.close()
    assert rig.raw.raw == []  # the upstream was never dialled
    (record,) = await records_of(rig, "lease-a", 1)
    assert record["verdict"] == "sni-mismatch" and "no ClientHello" in record["reason"]


async def test_a_head_sent_a_byte_at_a_time_is_cut_at_the_head_deadline(
    rig: Rig, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(proxy_module, "HEAD_TIMEOUT_SECONDS", 0.5)
    reader, writer = await asyncio.open_connection("127.0.0.1", rig.proxy_port)

    async def trickle() -> None:
        for byte in b"GET http://api.example.test/ HTTP/1.1\r\nX-Slow: " + b"a" * 10_000:
            writer.write(bytes([byte]))
            await writer.drain()
            await asyncio.sleep(0.01)

    feeder = asyncio.ensure_future(trickle())
    try:
        answer = await asyncio.wait_for(reader.read(), 10)
    finally:
        feeder.cancel()
        writer.close()
    assert answer.startswith(b"HTTP/1.1 400")


async def test_made_up_lease_uids_cost_a_bounded_number_of_grant_lookups() -> None:
    fetched: list[str] = []

    async def fetch(uid: str) -> dict[str, Any] | None:
        fetched.append(uid)
        return None

    table = LeaseTable(fetch)
    for n in range(500):
        assert await table.authenticate(f"made-up-{n}", "token") is None
    assert 1 <= len(fetched) <= 2 * 10  # one second's budget (two if the second turned)


# --------------------------------------------------------------------------- gateway


class _Reviews:
    async def identify(self, token: str) -> CallerIdentity | None:
        return CallerIdentity("system:serviceaccount:team-a:agent") if token == "good" else None

    async def allowed(self, *args: object, **kwargs: object) -> bool:
        return True


class _Api:
    async def list(self, *args: object, **kwargs: object) -> list[dict[str, Any]]:
        return []


class _Pool:
    def as_caller(self, token: str) -> _Api:
        return _Api()

    async def close(self) -> None:
        return None


class _Unused:
    async def close(self) -> None:
        return None


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture
async def gateway() -> AsyncIterator[Gateway]:
    settings = Settings(gateway=GatewaySettings(host="127.0.0.1", port=_free_port()))
    deps = Deps(
        reviews=_Reviews(),  # type: ignore[arg-type]
        pool=_Pool(),  # type: ignore[arg-type]
        store=_Unused(),  # type: ignore[arg-type]
        settings=settings,
        kube=_Unused(),  # type: ignore[arg-type]
    )
    gw = Gateway(deps, None)
    await gw.serve()
    yield gw
    await gw.stop()


HEADERS = {"Authorization": "Bearer good", "Content-Type": "application/json"}


@pytest.mark.parametrize(
    "path",
    ["/namespaces/team-a/tools/t/dry-run", "/namespaces/team-a/tool-invocations/x/confirm-effect"],
)
async def test_a_body_nested_thousands_deep_is_a_400_not_a_500(
    gateway: Gateway, path: str, caplog: pytest.LogCaptureFixture
) -> None:
    deep = b'{"arguments": ' + b"[" * 50_000 + b"]" * 50_000 + b"}"
    async with aiohttp.ClientSession() as http:
        async with http.post(
            f"http://127.0.0.1:{gateway.port}{path}", data=deep, headers=HEADERS
        ) as answer:
            assert answer.status == 400
            assert "nested too deeply" in (await answer.json())["detail"]
    assert "Traceback" not in caplog.text and "RecursionError" not in caplog.text


async def test_deep_mcp_arguments_are_a_json_rpc_parse_error(gateway: Gateway) -> None:
    deep = b"[" * 50_000 + b"]" * 50_000
    body = b'{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"t","arguments":'
    async with aiohttp.ClientSession() as http:
        async with http.post(
            f"http://127.0.0.1:{gateway.port}/namespaces/team-a/mcp",
            data=body + deep + b"}}",
            headers={**HEADERS, "Accept": "application/json, text/event-stream"},
        ) as answer:
            assert answer.status == 400
            assert (await answer.json())["error"]["code"] == -32700


async def test_a_trickled_body_is_cut_at_the_body_deadline(
    gateway: Gateway, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(bodies_module, "BODY_SECONDS", 0.5)
    reader, writer = await asyncio.open_connection("127.0.0.1", gateway.port)
    writer.write(
        b"POST /namespaces/team-a/tools/t/dry-run HTTP/1.1\r\nHost: x\r\n"
        b"Authorization: Bearer good\r\nContent-Length: 100000\r\n\r\n{"
    )
    await writer.drain()
    answer = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 10)
    writer.close()
    assert answer.startswith(b"HTTP/1.1 400")


async def test_a_half_sent_head_is_closed_at_the_keep_alive_timeout(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(server_module, "KEEPALIVE_SECONDS", 0.5)
    settings = Settings(gateway=GatewaySettings(host="127.0.0.1", port=_free_port()))
    gw = Gateway(
        Deps(
            reviews=_Reviews(),  # type: ignore[arg-type]
            pool=_Pool(),  # type: ignore[arg-type]
            store=_Unused(),  # type: ignore[arg-type]
            settings=settings,
            kube=_Unused(),  # type: ignore[arg-type]
        ),
        None,
    )
    await gw.serve()
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", gw.port)
        writer.write(b"GET /healthz HTTP/1.1\r\nHost: x\r\n")  # no blank line, ever
        await writer.drain()
        assert await asyncio.wait_for(reader.read(), 20) == b""
        writer.close()
    finally:
        await gw.stop()


async def test_connections_beyond_the_per_peer_bound_are_closed_unread(
    gateway: Gateway,
) -> None:
    gateway.limits.per_peer = 4
    held = [await asyncio.open_connection("127.0.0.1", gateway.port) for _ in range(4)]
    reader, writer = await asyncio.open_connection("127.0.0.1", gateway.port)
    writer.write(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
    assert await closed(reader)
    writer.close()
    for _, w in held:
        w.close()
    # The held ones going away frees the peer again.
    async with aiohttp.ClientSession() as http:
        for _ in range(200):
            try:
                async with http.get(f"http://127.0.0.1:{gateway.port}/healthz") as answer:
                    assert answer.status == 200
                    break
            except aiohttp.ClientError:
                await asyncio.sleep(0.05)
        else:
            raise AssertionError("the peer was never served again")
    assert gateway.limits.open.total() <= 4


def test_the_connection_limits_count_in_all_and_per_peer() -> None:
    limits = Limits(total=3, per_peer=2)
    assert limits.admit("a") and limits.admit("a") and not limits.admit("a")
    assert limits.admit("b") and not limits.admit("c")  # the total is reached
    limits.release("a")
    assert limits.admit("c") and not limits.admit("c")
