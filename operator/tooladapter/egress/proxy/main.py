"""`python -m tooladapter egress-proxy`: the proxy process.

Settings are `EgressSettings` (TOOLADAPTER_EGRESS_*) plus TOOLADAPTER_NAMESPACES, which
limits it to the leases of the namespaces one operator serves. It logs in like the operator
(KUBECONFIG, or in-cluster), lists the grants before it accepts a connection, and stops on
SIGTERM/SIGINT after closing its listener.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import ipaddress
import logging
import signal

from tooladapter.egress.core.rules import MAX_HEAD, AddressPolicy, parse_hosts_override
from tooladapter.egress.core.trust import verified_context
from tooladapter.egress.proxy.leases import LeaseTable
from tooladapter.egress.proxy.records import Recorder
from tooladapter.egress.proxy.server import EgressProxy
from tooladapter.kube import egress as kegress
from tooladapter.kube.client import Kube
from tooladapter.metrics import serve
from tooladapter.naming import LeaseNames
from tooladapter.settings import Settings

logger = logging.getLogger("tooladapter.egress")

#: The log line of a proxy that is ready (grants listed, listener open).
READY = "egress proxy listening"
HOUSEKEEPING_SECONDS = 5.0


async def run(settings: Settings) -> None:
    egress = settings.egress
    overrides = parse_hosts_override(egress.hosts)
    cluster = tuple(ipaddress.ip_network(c, strict=False) for c in egress.cluster_cidrs)
    kube = await Kube.connect()
    namespace = egress.namespace

    async def fetch(uid: str) -> dict[str, object] | None:
        return await kegress.read_grant(kube, namespace, LeaseNames.for_uid(uid).egress)

    async def write(uid: str, invocation: str, key: str, text: str) -> None:
        await kegress.write_records(
            kube,
            namespace=namespace,
            name=LeaseNames.for_uid(uid).egress,
            key=key,
            text=text,
            uid=uid,
            invocation_ref=invocation,
        )

    leases = LeaseTable(fetch, settings.serves)
    recorder = Recorder(write)
    proxy = EgressProxy(
        leases,
        recorder,
        addresses=AddressPolicy(cluster=cluster, overrides=overrides),
        upstream_tls=verified_context(egress.ca_file),
        idle_seconds=egress.idle_seconds,
    )
    ready = asyncio.Event()
    watcher = asyncio.create_task(
        kegress.follow_grants(kube, namespace, leases.handle, ready=ready)
    )
    server: asyncio.Server | None = None
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    try:
        await asyncio.wait_for(ready.wait(), timeout=60)
        serve(egress.metrics_port)
        server = await asyncio.start_server(
            proxy.serve, host=egress.listen, port=egress.proxy_port, limit=MAX_HEAD
        )
        logger.info(
            "%s on %s:%s (grants in namespace %s, %d mapped host(s))",
            READY,
            egress.listen,
            egress.proxy_port,
            namespace,
            len(overrides),
        )
        while not stop.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), HOUSEKEEPING_SECONDS)
            leases.expire()
            recorder.keep_only(set(leases.leases))
    finally:
        if server is not None:
            server.close()
        watcher.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await watcher
        await recorder.drain()
        await kube.close()


def main() -> None:
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    for name in ("kubernetes_asyncio", "urllib3", "aiohttp.client"):
        logging.getLogger(name).setLevel(logging.WARNING)
    asyncio.run(functools.partial(run, Settings.from_env())())
