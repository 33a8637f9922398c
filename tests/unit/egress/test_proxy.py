"""The egress proxy over real sockets on this machine (no cluster): tokens, allow-lists,
SNI, resolved addresses, credential injection over verified TLS, records."""

from __future__ import annotations

import asyncio
import base64
import logging
import ssl
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import REGISTRY

from tests.unit.egress.test_rules import client_hello
from tooladapter.devtools.tls import make_certificates
from tooladapter.egress.core.lease import CredentialGrant, LeaseGrant, build_grant_secret
from tooladapter.egress.core.rules import AddressPolicy
from tooladapter.egress.proxy.leases import LeaseTable
from tooladapter.egress.proxy.records import Recorder
from tooladapter.egress.proxy.server import EgressProxy
from tooladapter.enums import EgressVerdict
from tooladapter.timeutil import in_seconds

SECRET_VALUE = "s3cr3t-api-key-value"


@dataclass
class Upstream:
    port: int
    heads: list[bytes] = field(default_factory=list)
    raw: list[bytes] = field(default_factory=list)


async def http_upstream(tls: ssl.SSLContext | None = None) -> tuple[asyncio.Server, Upstream]:
    """Answers one request per connection with its head as the body."""
    state = Upstream(0)

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = await reader.readuntil(b"\r\n\r\n")
        state.heads.append(head)
        writer.write(
            b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\nConnection: close\r\n\r\n" % len(head) + head
        )
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0, ssl=tls)
    state.port = server.sockets[0].getsockname()[1]
    return server, state


async def raw_upstream() -> tuple[asyncio.Server, Upstream]:
    """Keeps whatever arrives (for CONNECT: the forwarded ClientHello)."""
    state = Upstream(0)

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        state.raw.append(await reader.read(65536))
        writer.write(b"upstream-bytes")
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    state.port = server.sockets[0].getsockname()[1]
    return server, state


def grant_secret(
    uid: str, allow: list[str], credentials: list[CredentialGrant] | None = None
) -> tuple[dict[str, Any], str]:
    token = f"token-of-{uid}"
    grant = LeaseGrant(
        uid, "tenant-a", f"call-{uid}", tuple(allow), tuple(credentials or ()), in_seconds(60)
    )
    # As the operator writes it (`flow.brokering.credential_grants`): the header's value
    # under the key, the bare value (what an answer must never hand back) under `-raw`.
    values: dict[str, str] = {}
    for c in credentials or ():
        values[c.key] = f"Bearer {SECRET_VALUE}"
        values[f"{c.key}-raw"] = SECRET_VALUE
    body = build_grant_secret(namespace="sys", grant=grant, token=token, values=values)
    return body, token


@dataclass
class Rig:
    proxy_port: int
    leases: LeaseTable
    written: dict[str, list[dict[str, Any]]]
    recorder: Recorder
    plain: Upstream
    tls: Upstream
    raw: Upstream
    tokens: dict[str, str]
    grants: dict[str, dict[str, Any]]


@pytest.fixture
async def rig(tmp_path: Path) -> AsyncIterator[Rig]:
    certs = make_certificates(tmp_path, ["tls.example.test"])
    server_tls = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server_tls.load_cert_chain(certs.cert, certs.key)
    client_tls = ssl.create_default_context(cafile=str(certs.ca))
    plain_server, plain = await http_upstream()
    tls_server, tls = await http_upstream(server_tls)
    raw_server, raw = await raw_upstream()
    written: dict[str, list[dict[str, Any]]] = {}

    async def write(uid: str, invocation: str, key: str, text: str) -> None:
        import json

        written[uid] = json.loads(text)

    async def fetch(uid: str) -> dict[str, Any] | None:
        return grants.get(uid)

    leases = LeaseTable(fetch)
    recorder = Recorder(write, key="records.test")
    a, token_a = grant_secret(
        "lease-a",
        [
            f"api.example.test:{plain.port}",
            f"tls.example.test:{tls.port}",
            f"raw.example.test:{raw.port}",
            "loop.example.test",
            "nowhere.example.test",
            "10.1.0.0/24",
        ],
        [
            CredentialGrant(
                name="api",
                hosts=(f"tls.example.test:{tls.port}",),
                header="Authorization",
                key="credential-0",
            )
        ],
    )
    b, token_b = grant_secret("lease-b", [f"b.example.test:{plain.port}"])
    # lease-b is known only through a lookup (as when the watch lags).
    grants = {"lease-b": b}
    await leases.handle("ADDED", [a])
    resolved = {"loop.example.test": ["127.0.0.1"]}

    async def resolve(host: str, port: int) -> list[str]:
        return resolved.get(host, [])

    proxy = EgressProxy(
        leases,
        recorder,
        addresses=AddressPolicy(
            overrides={
                "api.example.test": "127.0.0.1",
                "tls.example.test": "127.0.0.1",
                "raw.example.test": "127.0.0.1",
                "b.example.test": "127.0.0.1",
            }
        ),
        resolve=resolve,
        upstream_tls=client_tls,
    )
    server = await asyncio.start_server(proxy.serve, "127.0.0.1", 0)
    yield Rig(
        server.sockets[0].getsockname()[1],
        leases,
        written,
        recorder,
        plain,
        tls,
        raw,
        {"lease-a": token_a, "lease-b": token_b},
        {"lease-a": a, "lease-b": b},
    )
    for s in (server, plain_server, tls_server, raw_server):
        s.close()


def auth(user: str, token: str) -> bytes:
    return b"Proxy-Authorization: Basic " + base64.b64encode(f"{user}:{token}".encode()) + b"\r\n"


async def exchange(port: int, request: bytes, then: bytes = b"") -> bytes:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(request)
    if then:
        await reader.readuntil(b"\r\n\r\n")
        writer.write(then)
    await writer.drain()
    data = await asyncio.wait_for(reader.read(-1), 10)
    writer.close()
    return data


def get(target: str, headers: bytes = b"") -> bytes:
    host = target.split("/")[2]
    return f"GET {target} HTTP/1.1\r\nHost: {host}\r\n".encode() + headers + b"\r\n"


async def records_of(rig: Rig, uid: str, count: int) -> list[dict[str, Any]]:
    for _ in range(200):
        await rig.recorder.drain()
        if len(rig.written.get(uid, [])) >= count:
            return rig.written[uid]
        await asyncio.sleep(0.01)
    raise AssertionError(f"{uid}: {rig.written.get(uid)}")


async def test_an_allowed_host_is_forwarded_without_the_proxy_token(rig: Rig) -> None:
    answer = await exchange(
        rig.proxy_port,
        get(f"http://api.example.test:{rig.plain.port}/v1", auth("lease-a", rig.tokens["lease-a"])),
    )
    assert answer.startswith(b"HTTP/1.1 200")
    assert b"GET /v1 HTTP/1.1" in rig.plain.heads[0]
    assert rig.tokens["lease-a"].encode() not in rig.plain.heads[0]
    assert b"Proxy-Authorization" not in rig.plain.heads[0]
    (record,) = await records_of(rig, "lease-a", 1)
    assert record["verdict"] == "allowed" and record["bytesUp"] > 0 and record["bytesDown"] > 0
    assert record["host"] == "api.example.test" and record["port"] == rig.plain.port


@pytest.mark.parametrize(
    ("target", "verdict"),
    [
        ("http://other.example.test:{plain}/", EgressVerdict.NOT_ALLOWED),
        ("http://127.0.0.1:{plain}/", EgressVerdict.IP_LITERAL),
        ("http://loop.example.test/", EgressVerdict.PRIVATE_ADDRESS),
        ("http://api.example.test/", EgressVerdict.NOT_ALLOWED),  # port 80, not the entry's
    ],
)
async def test_refusals_send_nothing_upstream_and_are_recorded(
    rig: Rig, target: str, verdict: EgressVerdict
) -> None:
    url = target.format(plain=rig.plain.port)
    answer = await exchange(rig.proxy_port, get(url, auth("lease-a", rig.tokens["lease-a"])))
    assert answer.startswith(b"HTTP/1.1 403")
    assert rig.plain.heads == []
    (record,) = await records_of(rig, "lease-a", 1)
    assert record["verdict"] == verdict.value


async def test_a_refusal_says_why_in_its_status_line_and_body(rig: Rig) -> None:
    """Issue 44: "CONNECT tunnel failed, response 502" was all a client could show; the
    status line (what `curl -v` and git's trace print) and the body now carry the reason."""
    token = auth("lease-a", rig.tokens["lease-a"])
    connect = b"CONNECT nowhere.example.test:443 HTTP/1.1\r\nHost: nowhere.example.test:443\r\n"
    answer = await exchange(rig.proxy_port, connect + token + b"\r\n")
    head, _, body = answer.partition(b"\r\n\r\n")
    assert head.split(b"\r\n")[0] == (
        b"HTTP/1.1 502 Bad Gateway: nowhere.example.test did not resolve"
    )
    assert body == (
        b"tooladapter egress proxy: 502 Bad Gateway: nowhere.example.test did not resolve\n"
    )
    listed = await exchange(rig.proxy_port, get("http://other.example.test/", token))
    assert listed.startswith(b"HTTP/1.1 403 Forbidden: other.example.test:80 is not on the ")
    (record, _) = await records_of(rig, "lease-a", 2)
    assert record["reason"] == "nowhere.example.test did not resolve"


async def test_a_token_opens_only_its_own_lease_and_only_while_it_lasts(rig: Rig) -> None:
    b_target = f"http://b.example.test:{rig.plain.port}/"
    # Lease A's token under lease B's name, and lease B's token for lease A's host: 407.
    wrong = await exchange(rig.proxy_port, get(b_target, auth("lease-b", rig.tokens["lease-a"])))
    assert wrong.startswith(b"HTTP/1.1 407")
    a_target = f"http://api.example.test:{rig.plain.port}/"
    other = await exchange(rig.proxy_port, get(a_target, auth("lease-b", rig.tokens["lease-b"])))
    assert other.startswith(b"HTTP/1.1 403")  # lease B is valid, but its list lacks A's host
    none = await exchange(rig.proxy_port, get(a_target))
    assert none.startswith(b"HTTP/1.1 407")
    # Lease B, learned by lookup, works for its own host; then it ends.
    ok = await exchange(rig.proxy_port, get(b_target, auth("lease-b", rig.tokens["lease-b"])))
    assert ok.startswith(b"HTTP/1.1 200")
    await rig.leases.handle("DELETED", [rig.grants["lease-b"]])
    ended = await exchange(rig.proxy_port, get(b_target, auth("lease-b", rig.tokens["lease-b"])))
    assert ended.startswith(b"HTTP/1.1 407")
    assert len(rig.plain.heads) == 1


async def test_connect_needs_an_sni_naming_the_connect_host(rig: Rig) -> None:
    port = rig.raw.port
    connect = f"CONNECT raw.example.test:{port} HTTP/1.1\r\nHost: raw.example.test:{port}\r\n"
    request = connect.encode() + auth("lease-a", rig.tokens["lease-a"]) + b"\r\n"
    refused = await exchange(rig.proxy_port, request, client_hello("evil.example.test"))
    assert b"upstream-bytes" not in refused and rig.raw.raw == []
    plain_http = await exchange(rig.proxy_port, request, b"GET / HTTP/1.1\r\n\r\n")
    assert b"upstream-bytes" not in plain_http and rig.raw.raw == []
    hello = client_hello("raw.example.test")
    allowed = await exchange(rig.proxy_port, request, hello)
    assert allowed.endswith(b"upstream-bytes") and rig.raw.raw == [hello]
    verdicts = [r["verdict"] for r in await records_of(rig, "lease-a", 3)]
    assert verdicts == ["sni-mismatch", "sni-mismatch", "allowed"]


async def test_a_credentialed_host_gets_the_header_over_verified_tls(rig: Rig) -> None:
    target = f"http://tls.example.test:{rig.tls.port}/private"
    answer = await exchange(
        rig.proxy_port,
        get(
            target,
            auth("lease-a", rig.tokens["lease-a"]) + b"Authorization: Bearer sandbox-made-up\r\n",
        ),
    )
    assert answer.startswith(b"HTTP/1.1 200")
    (head,) = rig.tls.heads
    assert f"Authorization: Bearer {SECRET_VALUE}".encode() in head
    assert b"sandbox-made-up" not in head
    # The sandbox's answer carries the upstream's echo here (a test server); real APIs
    # do not echo credentials, and the operator redacts the value anyway.
    (record,) = await records_of(rig, "lease-a", 1)
    assert record["verdict"] == "allowed" and SECRET_VALUE not in str(record)


async def test_an_upstream_with_an_untrusted_certificate_is_not_sent_the_credential(
    rig: Rig,
) -> None:
    rig_tls = ssl.create_default_context()  # the system CAs only: the test CA is unknown
    proxy = EgressProxy(
        rig.leases,
        rig.recorder,
        addresses=AddressPolicy(overrides={"tls.example.test": "127.0.0.1"}),
        upstream_tls=rig_tls,
    )
    server = await asyncio.start_server(proxy.serve, "127.0.0.1", 0)
    try:
        answer = await exchange(
            server.sockets[0].getsockname()[1],
            get(f"http://tls.example.test:{rig.tls.port}/", auth("lease-a", rig.tokens["lease-a"])),
        )
    finally:
        server.close()
    assert answer.startswith(b"HTTP/1.1 502") and rig.tls.heads == []
    (record,) = await records_of(rig, "lease-a", 1)
    assert record["verdict"] == "upstream-failed"


async def test_a_probe_that_sends_nothing_is_not_a_request_but_garbage_is(
    rig: Rig, caplog: pytest.LogCaptureFixture
) -> None:
    """The kubelet's TCP probes open and close the proxy port every few seconds."""
    labels = {"tenant": "unknown", "verdict": str(EgressVerdict.BAD_REQUEST)}

    def counted() -> float:
        return REGISTRY.get_sample_value("tooladapter_egress_connections_total", labels) or 0.0

    before = counted()
    with caplog.at_level(logging.INFO, logger="tooladapter.egress"):
        _reader, writer = await asyncio.open_connection("127.0.0.1", rig.proxy_port)
        writer.close()
        await writer.wait_closed()
        answer = await exchange(rig.proxy_port, b"not a request\r\n\r\n")
    assert answer.startswith(b"HTTP/1.1 400")
    await rig.recorder.drain()
    lines = [r.getMessage() for r in caplog.records if "bad-request" in r.getMessage()]
    assert len(lines) == 1, lines
    assert counted() == before + 1
