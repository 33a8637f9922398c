"""The canary listener sandboxes use to prove their NetworkPolicy is enforced.

It accepts and closes connections and logs nothing: a sandbox's gate init container
connects until it no longer can (see `sandbox.podspec.GATE_SCRIPT`).
"""

from __future__ import annotations

import asyncio
import json
import logging
import subprocess

logger = logging.getLogger("tooladapter.canary")


def default_route_address() -> str | None:
    """This host's IPv4 address on its default-route interface (what pods reach it by)."""
    try:
        routes = json.loads(subprocess.check_output(["ip", "-j", "-4", "route", "show", "default"]))
        dev = routes[0]["dev"]
        addrs = json.loads(subprocess.check_output(["ip", "-j", "-4", "addr", "show", "dev", dev]))
        return str(addrs[0]["addr_info"][0]["local"])
    except (OSError, subprocess.CalledProcessError, ValueError, LookupError):
        return None


async def _close(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    writer.close()


async def start_canary(
    host: str | None, port: int
) -> tuple[asyncio.Server, tuple[str, int]] | None:
    """Listen on all addresses; return the server and the (host, port) pods should probe."""
    address = host or default_route_address()
    if address is None:
        logger.warning("no canary address: sandboxes start without the network gate")
        return None
    server = await asyncio.start_server(_close, host="0.0.0.0", port=port)  # noqa: S104
    bound = server.sockets[0].getsockname()[1]
    logger.info("network-gate canary on %s:%s", address, bound)
    return server, (address, int(bound))
