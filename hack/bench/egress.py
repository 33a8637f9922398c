"""`python -m bench egress`: what the egress proxy adds to one request (no cluster).

A request as a sandbox's `wget` makes it (a new connection, one GET, the answer read to
the end) against a local HTTP server, directly and through the proxy (`tooladapter.egress`,
in this process, with one lease fed to it as its watch would), BENCH_EGRESS_REQUESTS times
each (default 500), alternating. Prints the median and 95th percentile of both and the
difference; writes BENCH_REPORT (default bench-egress.json).
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import statistics
import time
from pathlib import Path
from typing import Any

from tooladapter.egress.core.lease import LeaseGrant, build_grant_secret
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
    print(
        f"egress proxy, {requests} requests each (new connection + GET, local server): "
        f"direct p50 {report['direct']['p50_ms']} ms p95 {report['direct']['p95_ms']} ms; "
        f"proxied p50 {report['proxied']['p50_ms']} ms p95 {report['proxied']['p95_ms']} ms; "
        f"added p50 {report['added_p50_ms']} ms"
    )
    path = Path(os.environ.get("BENCH_REPORT", "bench-egress.json"))
    path.write_text(json.dumps(report, indent=2) + "\n")
