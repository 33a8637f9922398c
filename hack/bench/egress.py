"""`python -m bench egress`: what the egress proxy adds to one request (no cluster).

A request as a sandbox's `wget` makes it (a new connection, one GET, the answer read to
the end) against a local HTTP server, directly and through the proxy (`tooladapter.egress`,
in this process, with one lease fed to it as its watch would), BENCH_EGRESS_REQUESTS times
each (default 500), alternating. Prints the median and 95th percentile of both and the
difference; writes BENCH_REPORT (default bench-egress.json).

Then https, as `curl https://...` makes it (a new connection, CONNECT, a TLS handshake,
one GET, the answer read to the end) against a local TLS server, side by side: a host
without a credential (the proxy tunnels it end to end) and one with a credential (the
proxy ends TLS with a leaf of the lease CA, opens verified TLS upstream and adds the
header): `https_tunnel`, `https_terminated` and what termination adds.
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import ssl
import statistics
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from tooladapter.devtools.tls import make_certificates
from tooladapter.egress.core.lease import CredentialGrant, LeaseGrant, build_grant_secret
from tooladapter.egress.core.lease_ca import make_lease_ca
from tooladapter.egress.core.rules import AddressPolicy
from tooladapter.egress.proxy.leases import LeaseTable
from tooladapter.egress.proxy.records import Recorder
from tooladapter.egress.proxy.server import EgressProxy
from tooladapter.timeutil import in_seconds

BODY = b'{"weather": "sunny"}'


async def _upstream(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    await reader.readuntil(b"\r\n\r\n")
    writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % len(BODY) + BODY)
    await writer.drain()
    writer.close()


async def _request(port: int, request: bytes) -> float:
    started = time.perf_counter()
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(request)
    await writer.drain()
    answer = await reader.read(-1)
    elapsed = time.perf_counter() - started
    writer.close()
    if not answer.startswith(b"HTTP/1.1 200"):
        raise RuntimeError(answer[:200])
    return elapsed


async def _https(port: int, authority: str, auth: bytes, trust: ssl.SSLContext) -> float:
    started = time.perf_counter()
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(
        f"CONNECT {authority} HTTP/1.1\r\nHost: {authority}\r\nProxy-Authorization: Basic ".encode()
        + auth
        + b"\r\n\r\n"
    )
    await writer.drain()
    await reader.readuntil(b"\r\n\r\n")
    await writer.start_tls(trust, server_hostname=authority.rsplit(":", 1)[0])
    writer.write(f"GET /w HTTP/1.1\r\nHost: {authority}\r\n\r\n".encode())
    await writer.drain()
    answer = await reader.read(-1)
    elapsed = time.perf_counter() - started
    writer.close()
    if not answer.startswith(b"HTTP/1.1 200"):
        raise RuntimeError(answer[:200])
    return elapsed


async def run_https(requests: int) -> dict[str, Any]:
    """https through the proxy: an end-to-end tunnel and a terminated one, alternating."""
    with tempfile.TemporaryDirectory() as directory:
        certs = make_certificates(Path(directory), ["tunnel.bench.test", "cred.bench.test"])
        server_tls = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        server_tls.load_cert_chain(certs.cert, certs.key)
        upstream = await asyncio.start_server(_upstream, "127.0.0.1", 0, ssl=server_tls)
        port = upstream.sockets[0].getsockname()[1]
        tunnel, cred = f"tunnel.bench.test:{port}", f"cred.bench.test:{port}"
        now = datetime.now(UTC)
        ca = make_lease_ca(uid="bench", hosts=[cred], not_after=now + timedelta(hours=1), now=now)
        grant = LeaseGrant(
            "bench",
            "bench",
            "bench",
            (tunnel, cred),
            (CredentialGrant(name="k", hosts=(cred,), header="Authorization", key="c-0"),),
            in_seconds(3600),
        )
        token = "bench-token"
        leases = LeaseTable(lambda uid: asyncio.sleep(0, None))
        secret = build_grant_secret(
            namespace="bench",
            grant=grant,
            token=token,
            values={"c-0": "Bearer bench-value", "c-0-raw": "bench-value"},
            ca=ca,
        )
        await leases.handle("ADDED", [secret])
        proxy = EgressProxy(
            leases,
            Recorder(None),
            addresses=AddressPolicy(
                overrides={"tunnel.bench.test": "127.0.0.1", "cred.bench.test": "127.0.0.1"}
            ),
            upstream_tls=ssl.create_default_context(cafile=str(certs.ca)),
        )
        server = await asyncio.start_server(proxy.serve, "127.0.0.1", 0)
        proxy_port = server.sockets[0].getsockname()[1]
        auth = base64.b64encode(f"bench:{token}".encode())
        trust_upstream = ssl.create_default_context(cafile=str(certs.ca))
        trust_lease = ssl.create_default_context(cadata=ca.cert_pem)
        tunnelled: list[float] = []
        terminated: list[float] = []
        for _ in range(min(50, requests)):  # warm up (and the leaf made once)
            await _https(proxy_port, tunnel, auth, trust_upstream)
            await _https(proxy_port, cred, auth, trust_lease)
        for _ in range(requests):
            tunnelled.append(await _https(proxy_port, tunnel, auth, trust_upstream))
            terminated.append(await _https(proxy_port, cred, auth, trust_lease))
        await asyncio.sleep(0.2)
        server.close()
        upstream.close()
    t, m = _summary(tunnelled), _summary(terminated)
    return {
        "https_tunnel": t,
        "https_terminated": m,
        "terminated_added_p50_ms": round(m["p50_ms"] - t["p50_ms"], 3),
        "terminated_added_p95_ms": round(m["p95_ms"] - t["p95_ms"], 3),
    }


def _summary(samples: list[float]) -> dict[str, float]:
    ordered = sorted(samples)
    return {
        "p50_ms": round(statistics.median(ordered) * 1000, 3),
        "p95_ms": round(ordered[int(len(ordered) * 0.95) - 1] * 1000, 3),
        "mean_ms": round(statistics.fmean(ordered) * 1000, 3),
    }


async def run(requests: int) -> dict[str, Any]:
    upstream = await asyncio.start_server(_upstream, "127.0.0.1", 0)
    port = upstream.sockets[0].getsockname()[1]
    grant = LeaseGrant("bench", "bench", "bench", (f"api.bench.test:{port}",), (), in_seconds(3600))
    token = "bench-token"
    leases = LeaseTable(lambda uid: asyncio.sleep(0, None))
    await leases.handle(
        "ADDED",
        [build_grant_secret(namespace="bench", grant=grant, token=token, values={})],
    )
    proxy = EgressProxy(
        leases,
        Recorder(None),
        addresses=AddressPolicy(overrides={"api.bench.test": "127.0.0.1"}),
    )
    server = await asyncio.start_server(proxy.serve, "127.0.0.1", 0)
    proxy_port = server.sockets[0].getsockname()[1]
    auth = base64.b64encode(f"bench:{token}".encode())
    direct_request = f"GET /w HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n\r\n".encode()
    proxied_request = (
        f"GET http://api.bench.test:{port}/w HTTP/1.1\r\nHost: api.bench.test:{port}\r\n"
        "Proxy-Authorization: Basic ".encode()
        + auth
        + b"\r\n\r\n"
    )
    direct: list[float] = []
    proxied: list[float] = []
    for _ in range(min(50, requests)):  # warm up
        await _request(port, direct_request)
        await _request(proxy_port, proxied_request)
    for _ in range(requests):
        direct.append(await _request(port, direct_request))
        proxied.append(await _request(proxy_port, proxied_request))
    await asyncio.sleep(0.2)  # the last connection's teardown
    server.close()
    upstream.close()
    d, p = _summary(direct), _summary(proxied)
    return {
        "requests": requests,
        "direct": d,
        "proxied": p,
        "added_p50_ms": round(p["p50_ms"] - d["p50_ms"], 3),
        "added_p95_ms": round(p["p95_ms"] - d["p95_ms"], 3),
    }


def main() -> None:
    requests = int(os.environ.get("BENCH_EGRESS_REQUESTS", "500"))
    report = asyncio.run(run(requests))
    report.update(asyncio.run(run_https(requests)))
    print(
        f"egress proxy, {requests} requests each (new connection + GET, local server): "
        f"direct p50 {report['direct']['p50_ms']} ms p95 {report['direct']['p95_ms']} ms; "
        f"proxied p50 {report['proxied']['p50_ms']} ms p95 {report['proxied']['p95_ms']} ms; "
        f"added p50 {report['added_p50_ms']} ms"
    )
    print(
        f"https through the proxy, {requests} requests each (new connection + CONNECT + TLS "
        f"+ GET): end-to-end tunnel p50 {report['https_tunnel']['p50_ms']} ms "
        f"p95 {report['https_tunnel']['p95_ms']} ms; terminated (lease CA, credential added) "
        f"p50 {report['https_terminated']['p50_ms']} ms "
        f"p95 {report['https_terminated']['p95_ms']} ms; "
        f"termination adds p50 {report['terminated_added_p50_ms']} ms"
    )
    path = Path(os.environ.get("BENCH_REPORT", "bench-egress.json"))
    path.write_text(json.dumps(report, indent=2) + "\n")
