"""Attack pass (issue 39) on a terminated tunnel, over real sockets: what a sandbox could
send inside the TLS the proxy ends, and what an upstream could answer, to have the
credential sent elsewhere or to see it."""

from __future__ import annotations

import asyncio
import base64
import gzip
import json
import ssl
from pathlib import Path

import pytest

from tests.unit.egress.test_proxy import SECRET_VALUE, auth
from tests.unit.egress.test_proxy_tls import (
    HOST,
    OTHER,
    TlsRig,
    lease_trust,
    records,
    request,
    start_rig,
    through,
)

BASIC = "Basic " + base64.b64encode(f"robot:{SECRET_VALUE}".encode()).decode()


def body_of(answer: bytes) -> bytes:
    """The answer's body as a client reads it: de-chunked, gunzipped when so encoded."""
    head, _, body = answer.partition(b"\r\n\r\n")
    lower = head.lower()
    if b"transfer-encoding: chunked" in lower:
        out, rest = b"", body
        while rest:
            size_line, _, rest = rest.partition(b"\r\n")
            size = int(size_line.split(b";")[0], 16)
            if size == 0:
                break
            out, rest = out + rest[:size], rest[size + 2 :]
        body = out
    if b"content-encoding: gzip" in lower:
        body = gzip.decompress(body)
    return body


def forbidden_forms(value: str) -> list[bytes]:
    raw = value.encode()
    return [raw, base64.b64encode(raw), raw.hex().encode(), json.dumps(value).encode()[1:-1]]


async def test_a_basic_header_echoed_inside_a_terminated_tunnel_is_masked(tmp_path: Path) -> None:
    # The upstream echoes the head: with `Basic base64(user:value)` the value's own forms
    # are not in it, so the header as sent must be masked too (as forwarding does).
    async with start_rig(tmp_path, header_value=BASIC) as rig:
        port = rig.upstream.port
        answer, _ = await through(
            rig, HOST, request("GET", "/private/repo", HOST, port), trust=lease_trust(rig)
        )
        assert BASIC.encode() in rig.upstream.heads[0]
        assert answer.startswith(b"HTTP/1.1 200") and b"GET /private/repo" in answer
        for form in (*forbidden_forms(BASIC), *forbidden_forms(SECRET_VALUE)):
            assert form not in answer, form
        assert BASIC.split(" ")[1].encode() not in answer


async def test_a_reflection_encoded_gzipped_and_chunked_finely_is_masked(tmp_path: Path) -> None:
    heads: list[bytes] = []

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = await reader.readuntil(b"\r\n\r\n")
        heads.append(head)
        text = head.decode("latin-1")
        doc = json.dumps(
            {
                "raw": text,
                "b64": base64.b64encode(head).decode(),
                "hex": head.hex(),
            }
        ).encode()
        body = gzip.compress(doc)
        # gzip although asked for identity, chunked in pieces of 7 bytes.
        writer.write(
            b"HTTP/1.1 200 OK\r\nContent-Encoding: gzip\r\nTransfer-Encoding: chunked\r\n"
            b"X-Echo: " + head.split(b"\r\n")[-3] + b"\r\n\r\n"
        )
        for at in range(0, len(body), 7):
            piece = body[at : at + 7]
            writer.write(b"%x\r\n%s\r\n" % (len(piece), piece))
            await writer.drain()
        writer.write(b"0\r\n\r\n")
        await writer.drain()
        writer.close()

    async with start_rig(tmp_path, header_value=BASIC, handle=handle) as rig:
        port = rig.upstream.port
        answer, _ = await through(
            rig, HOST, request("GET", "/private/repo", HOST, port), trust=lease_trust(rig)
        )
        assert heads and BASIC.encode() in heads[0]
        assert answer.startswith(b"HTTP/1.1 200")
        body = body_of(answer)
        assert b"GET /private/repo" in body
        for form in (*forbidden_forms(BASIC), *forbidden_forms(SECRET_VALUE)):
            assert form not in answer and form not in body, form


async def test_a_pipelined_second_request_for_another_host_goes_nowhere(tmp_path: Path) -> None:
    async with start_rig(tmp_path) as rig:
        await _pipelined(rig)


async def _pipelined(tls_rig: TlsRig) -> None:
    port = tls_rig.upstream.port
    two = request("GET", "/private/repo", HOST, port) + request("GET", "/private/repo", OTHER, port)
    answer, _ = await through(tls_rig, HOST, two, trust=lease_trust(tls_rig))
    assert answer.startswith(b"HTTP/1.1 200") and answer.count(b"HTTP/1.1 ") == 1
    (head,) = tls_rig.upstream.heads  # only the first went up
    assert f"Host: {HOST}:{port}".encode() in head


async def test_an_absolute_form_request_inside_the_tunnel_goes_nowhere(tmp_path: Path) -> None:
    async with start_rig(tmp_path) as rig:
        await _absolute_form(rig)


async def _absolute_form(tls_rig: TlsRig) -> None:
    port = tls_rig.upstream.port
    answer, _ = await through(
        tls_rig,
        HOST,
        f"GET https://{OTHER}:{port}/private/repo HTTP/1.1\r\nHost: {HOST}:{port}\r\n\r\n".encode(),
        trust=lease_trust(tls_rig),
    )
    assert answer.startswith(b"HTTP/1.1 400") and tls_rig.upstream.heads == []


async def test_connect_to_the_credential_hosts_address_is_not_its_name(tmp_path: Path) -> None:
    async with start_rig(tmp_path) as rig:
        await _connect_to_address(rig)


async def _connect_to_address(tls_rig: TlsRig) -> None:
    # 127.0.0.1 serves HOST here: named by address, it is not on the allow-list and is never
    # terminated (`ip_literal` in `_connect`), so no credential can ride on it.
    reader, writer = await asyncio.open_connection("127.0.0.1", tls_rig.proxy_port)
    authority = f"127.0.0.1:{tls_rig.upstream.port}"
    writer.write(
        f"CONNECT {authority} HTTP/1.1\r\nHost: {authority}\r\n".encode()
        + auth("lease-t", tls_rig.token)
        + b"\r\n"
    )
    await writer.drain()
    answer = await asyncio.wait_for(reader.read(-1), 10)
    writer.close()
    assert answer.startswith(b"HTTP/1.1 403") and tls_rig.upstream.heads == []
    (record,) = await records(tls_rig, 1)
    assert record["verdict"] != "allowed"


async def test_a_redirect_to_another_host_is_followed_without_the_credential(
    tmp_path: Path,
) -> None:
    heads: list[bytes] = []

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = await reader.readuntil(b"\r\n\r\n")
        heads.append(head)
        port = writer.get_extra_info("sockname")[1]
        if f"Host: {HOST}".encode() in head:
            location = f"https://{OTHER}:{port}/private/repo"
            writer.write(
                f"HTTP/1.1 302 Found\r\nLocation: {location}\r\nContent-Length: 0\r\n\r\n".encode()
            )
        else:
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % len(head) + head)
        await writer.drain()
        writer.close()

    async with start_rig(tmp_path, handle=handle) as rig:
        port = rig.upstream.port
        answer, _ = await through(
            rig, HOST, request("GET", "/private/repo", HOST, port), trust=lease_trust(rig)
        )
        assert answer.startswith(b"HTTP/1.1 302")
        assert f"https://{OTHER}:{port}/private/repo".encode() in answer
        # The client follows (as curl -L does): a CONNECT to OTHER, end to end.
        trust = ssl.create_default_context(cafile=str(rig.test_ca))
        followed, _ = await through(
            rig, OTHER, request("GET", "/private/repo", OTHER, port), trust=trust
        )
        assert followed.startswith(b"HTTP/1.1 200")
        assert SECRET_VALUE.encode() in heads[0]
        assert len(heads) == 2 and SECRET_VALUE.encode() not in heads[1]
        assert b"made-up" in heads[1]


async def test_an_sni_naming_the_credential_host_on_a_connect_to_another_host_goes_nowhere(
    tmp_path: Path,
) -> None:
    # CONNECT to OTHER (no credential: end to end) with the ClientHello naming HOST: the
    # proxy checks the SNI against the CONNECT host before it dials, so neither a leaf of
    # the lease CA nor the upstream is reached.
    async with start_rig(tmp_path) as rig:
        trust = lease_trust(rig)
        trust.check_hostname = False
        trust.verify_mode = ssl.CERT_NONE
        with pytest.raises((ssl.SSLError, ConnectionError, asyncio.IncompleteReadError)):
            await through(
                rig,
                OTHER,
                request("GET", "/private/repo", HOST, rig.upstream.port),
                trust=trust,
                server_name=HOST,
            )
        assert rig.upstream.heads == []
        (record,) = await records(rig, 1)
        assert record["verdict"] == "sni-mismatch"


async def test_a_reflection_in_chunked_trailers_or_an_interim_response_is_masked(
    tmp_path: Path,
) -> None:
    heads: list[bytes] = []

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = await reader.readuntil(b"\r\n\r\n")
        heads.append(head)
        auth_line = next(line for line in head.split(b"\r\n") if line.startswith(b"Authorization"))
        writer.write(
            b"HTTP/1.1 103 Early Hints\r\nLink: " + auth_line.hex().encode() + b"\r\n\r\n"
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nTrailer: X-Echo\r\n\r\n"
            b"2\r\nok\r\n0\r\nX-Echo: " + base64.b64encode(auth_line) + b"\r\n\r\n"
        )
        await writer.drain()
        writer.close()

    async with start_rig(tmp_path, header_value=BASIC, handle=handle) as rig:
        port = rig.upstream.port
        answer, _ = await through(
            rig, HOST, request("GET", "/private/repo", HOST, port), trust=lease_trust(rig)
        )
        assert heads and BASIC.encode() in heads[0]
        assert b"200 OK" in answer and b"ok" in answer
        for form in (*forbidden_forms(BASIC), *forbidden_forms(SECRET_VALUE)):
            assert form not in answer, form
        line = f"Authorization: {BASIC}".encode()
        assert line.hex().encode() not in answer and base64.b64encode(line) not in answer
