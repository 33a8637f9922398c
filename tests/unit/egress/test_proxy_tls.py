"""https with a credential, over real sockets: the proxy ends the client's TLS with a leaf
of the lease CA for a credential's host and sends each request on over verified TLS,
adding the credential only where its host, method and path match; other hosts stay end to
end."""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import json
import ssl
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from cryptography import x509

from tests.unit.egress.test_proxy import SECRET_VALUE, Upstream, auth, http_upstream
from tooladapter.devtools.tls import make_certificates
from tooladapter.egress.core.lease import CredentialGrant, LeaseGrant, build_grant_secret
from tooladapter.egress.core.lease_ca import LeaseCA, make_lease_ca
from tooladapter.egress.core.rules import AddressPolicy
from tooladapter.egress.proxy.leases import LeaseTable
from tooladapter.egress.proxy.records import Recorder
from tooladapter.egress.proxy.server import EgressProxy
from tooladapter.timeutil import in_seconds

HOST = "api.example.test"
OTHER = "other.example.test"


@dataclass
class TlsRig:
    proxy_port: int
    upstream: Upstream
    ca: LeaseCA
    test_ca: Path
    token: str
    written: dict[str, list[dict[str, Any]]]
    recorder: Recorder


@pytest.fixture
async def tls_rig(tmp_path: Path) -> AsyncIterator[TlsRig]:
    async with start_rig(tmp_path) as rig:
        yield rig


@contextlib.asynccontextmanager
async def start_rig(
    tmp_path: Path,
    *,
    header_value: str = f"Bearer {SECRET_VALUE}",
    handle: Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]] | None = None,
) -> AsyncIterator[TlsRig]:
    """The proxy with lease `lease-t` (a credential for HOST, `header_value` its header
    value), HOST and OTHER served over TLS of a test CA by `handle` (default: an echo of
    the request head, `http_upstream`)."""
    certs = make_certificates(tmp_path, [HOST, OTHER])
    server_tls = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server_tls.load_cert_chain(certs.cert, certs.key)
    if handle is None:
        upstream_server, upstream_state = await http_upstream(server_tls)
    else:
        upstream_server = await asyncio.start_server(handle, "127.0.0.1", 0, ssl=server_tls)
        upstream_state = Upstream(upstream_server.sockets[0].getsockname()[1])
    port = upstream_state.port
    now = dt.datetime.now(dt.UTC)
    ca = make_lease_ca(
        uid="lease-t", hosts=[f"{HOST}:{port}"], not_after=now + dt.timedelta(minutes=5), now=now
    )
    grant = LeaseGrant(
        "lease-t",
        "tenant-a",
        "call-t",
        (f"{HOST}:{port}", f"{OTHER}:{port}"),
        (
            CredentialGrant(
                name="api",
                hosts=(f"{HOST}:{port}",),
                header="Authorization",
                key="credential-0",
                methods=("GET",),
                paths=("/private/",),
            ),
        ),
        in_seconds(300),
    )
    token = "token-of-lease-t"
    secret = build_grant_secret(
        namespace="sys",
        grant=grant,
        token=token,
        values={"credential-0": header_value, "credential-0-raw": SECRET_VALUE},
        ca=ca,
    )
    written: dict[str, list[dict[str, Any]]] = {}

    async def write(uid: str, invocation: str, key: str, text: str) -> None:
        written[uid] = json.loads(text)

    async def fetch(uid: str) -> dict[str, Any] | None:
        return None

    leases = LeaseTable(fetch)
    await leases.handle("ADDED", [secret])
    recorder = Recorder(write, key="records.test")
    proxy = EgressProxy(
        leases,
        recorder,
        addresses=AddressPolicy(overrides={HOST: "127.0.0.1", OTHER: "127.0.0.1"}),
        upstream_tls=ssl.create_default_context(cafile=str(certs.ca)),
    )
    server = await asyncio.start_server(proxy.serve, "127.0.0.1", 0)
    try:
        yield TlsRig(
            server.sockets[0].getsockname()[1],
            upstream_state,
            ca,
            certs.ca,
            token,
            written,
            recorder,
        )
    finally:
        server.close()
        upstream_server.close()


async def through(
    rig: TlsRig,
    host: str,
    request: bytes,
    *,
    trust: ssl.SSLContext,
    server_name: str | None = None,
) -> tuple[bytes, ssl.SSLObject | None]:
    """CONNECT to `host`, TLS with `trust` (SNI `server_name`, default `host`), send
    `request`, read the answer to its end: (answer, the TLS object)."""
    reader, writer = await asyncio.open_connection("127.0.0.1", rig.proxy_port)
    authority = f"{host}:{rig.upstream.port}"
    writer.write(
        f"CONNECT {authority} HTTP/1.1\r\nHost: {authority}\r\n".encode()
        + auth("lease-t", rig.token)
        + b"\r\n"
    )
    await writer.drain()
    assert (await reader.readuntil(b"\r\n\r\n")).startswith(b"HTTP/1.1 200")
    await writer.start_tls(trust, server_hostname=server_name or host)
    tls = writer.get_extra_info("ssl_object")
    writer.write(request)
    await writer.drain()
    try:
        answer = await asyncio.wait_for(reader.read(-1), 10)
    finally:
        writer.close()
    return answer, tls


def lease_trust(rig: TlsRig) -> ssl.SSLContext:
    """A client as the pod is: trusting the lease CA (the bundle), offering h2 as well."""
    context = ssl.create_default_context(cadata=rig.ca.cert_pem)
    context.set_alpn_protocols(["h2", "http/1.1"])
    return context


def request(method: str, path: str, host: str, port: int, body: bytes = b"") -> bytes:
    return (
        f"{method} {path} HTTP/1.1\r\nHost: {host}:{port}\r\n"
        f"Authorization: Bearer made-up\r\nContent-Length: {len(body)}\r\n\r\n"
    ).encode() + body


async def records(rig: TlsRig, count: int) -> list[dict[str, Any]]:
    for _ in range(200):
        await rig.recorder.drain()
        if len(rig.written.get("lease-t", [])) >= count:
            return rig.written["lease-t"]
        await asyncio.sleep(0.01)
    raise AssertionError(rig.written)


async def test_https_to_a_credential_host_carries_the_credential_and_masks_its_echo(
    tls_rig: TlsRig,
) -> None:
    port = tls_rig.upstream.port
    answer, tls = await through(
        tls_rig, HOST, request("GET", "/private/repo", HOST, port), trust=lease_trust(tls_rig)
    )
    assert answer.startswith(b"HTTP/1.1 200")
    (head,) = tls_rig.upstream.heads
    assert f"Authorization: Bearer {SECRET_VALUE}".encode() in head
    assert b"made-up" not in head and f"Host: {HOST}:{port}".encode() in head
    # The upstream echoes the head it got: the value comes back masked.
    assert SECRET_VALUE.encode() not in answer and b"GET /private/repo" in answer
    # The client was served a leaf of the lease CA, over HTTP/1.1 only.
    assert tls is not None and tls.selected_alpn_protocol() == "http/1.1"
    leaf = x509.load_der_x509_certificate(tls.getpeercert(binary_form=True) or b"")
    assert leaf.issuer == tls_rig.ca.certificate().subject
    (record,) = await records(tls_rig, 1)
    assert record["verdict"] == "allowed" and record["method"] == "GET"
    assert SECRET_VALUE not in str(record)


@pytest.mark.parametrize(
    ("method", "path"), [("GET", "/public"), ("POST", "/private/repo"), ("GET", "/private/../x")]
)
async def test_another_path_or_method_in_the_tunnel_goes_up_without_the_credential(
    tls_rig: TlsRig, method: str, path: str
) -> None:
    port = tls_rig.upstream.port
    answer, _ = await through(
        tls_rig, HOST, request(method, path, HOST, port, b"x"), trust=lease_trust(tls_rig)
    )
    assert answer.startswith(b"HTTP/1.1 200")
    (head,) = tls_rig.upstream.heads
    assert SECRET_VALUE.encode() not in head and b"Authorization: Bearer made-up" in head


@pytest.mark.parametrize("override", ["X-HTTP-Method-Override: POST", "X-HTTP-Method: DELETE"])
async def test_a_get_overriding_its_method_in_the_tunnel_goes_up_without_the_credential(
    tls_rig: TlsRig, override: str
) -> None:
    # The credential is GET-only; a server honouring the header would act on the other.
    port = tls_rig.upstream.port
    plain = request("GET", "/private/repo", HOST, port)
    overriding = plain.replace(b"\r\n\r\n", f"\r\n{override}\r\n\r\n".encode(), 1)
    answer, _ = await through(tls_rig, HOST, overriding, trust=lease_trust(tls_rig))
    assert answer.startswith(b"HTTP/1.1 200")
    (head,) = tls_rig.upstream.heads
    assert SECRET_VALUE.encode() not in head and b"Authorization: Bearer made-up" in head
    assert override.encode() in head


@pytest.mark.parametrize("host_header", [OTHER, f"{HOST}:1", "evil.test", None])
async def test_a_host_inside_the_tunnel_other_than_the_connect_host_is_refused(
    tls_rig: TlsRig, host_header: str | None
) -> None:
    port = tls_rig.upstream.port
    line = b"" if host_header is None else f"Host: {host_header}\r\n".encode()
    answer, _ = await through(
        tls_rig,
        HOST,
        b"GET /private/repo HTTP/1.1\r\n" + line + b"\r\n",
        trust=lease_trust(tls_rig),
    )
    assert answer.startswith(b"HTTP/1.1 421") and tls_rig.upstream.heads == []
    assert port and (await records(tls_rig, 1))[0]["verdict"] == "bad-request"


async def test_an_sni_other_than_the_connect_host_ends_the_handshake(tls_rig: TlsRig) -> None:
    trust = lease_trust(tls_rig)
    trust.check_hostname = False  # the attacker's client: it would take any certificate
    with pytest.raises((ssl.SSLError, ConnectionError)):
        await through(
            tls_rig,
            HOST,
            request("GET", "/private/repo", OTHER, tls_rig.upstream.port),
            trust=trust,
            server_name=OTHER,
        )
    assert tls_rig.upstream.heads == []
    (record,) = await records(tls_rig, 1)
    assert record["verdict"] == "sni-mismatch"


async def test_a_host_without_a_credential_stays_end_to_end(tls_rig: TlsRig) -> None:
    port = tls_rig.upstream.port
    # The client trusts the test CA only: it sees the upstream's own certificate.
    trust = ssl.create_default_context(cafile=str(tls_rig.test_ca))
    answer, tls = await through(
        tls_rig, OTHER, request("GET", "/private/repo", OTHER, port), trust=trust
    )
    assert answer.startswith(b"HTTP/1.1 200")
    assert tls is not None
    leaf = x509.load_der_x509_certificate(tls.getpeercert(binary_form=True) or b"")
    assert leaf.issuer != tls_rig.ca.certificate().subject
    (head,) = tls_rig.upstream.heads
    assert SECRET_VALUE.encode() not in head and b"made-up" in head


async def test_a_client_that_does_not_trust_the_lease_ca_gets_no_tunnel(tls_rig: TlsRig) -> None:
    trust = ssl.create_default_context(cafile=str(tls_rig.test_ca))
    with pytest.raises(ssl.SSLCertVerificationError):
        await through(
            tls_rig, HOST, request("GET", "/private/repo", HOST, tls_rig.upstream.port), trust=trust
        )
    assert tls_rig.upstream.heads == []


async def test_an_http2_client_gets_no_h2_and_its_preface_goes_nowhere(tls_rig: TlsRig) -> None:
    trust = ssl.create_default_context(cadata=tls_rig.ca.cert_pem)
    trust.set_alpn_protocols(["h2"])
    answer, tls = await through(tls_rig, HOST, b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", trust=trust)
    assert tls is not None and tls.selected_alpn_protocol() is None
    assert answer.startswith(b"HTTP/1.1 400") and tls_rig.upstream.heads == []
