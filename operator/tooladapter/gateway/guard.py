"""Connections the gateway accepts: at most so many in all and per peer address.

The gateway shares its process (and its file descriptors) with the operator, and answers
before anyone is authenticated: without a bound, one client holding thousands of idle
or slowly sent connections would leave the operator no descriptor for its own API calls.
`Guard` wraps each connection's aiohttp protocol; over a bound the connection is closed
as it arrives, before a byte is read. aiohttp's keep-alive timeout (`server.py`) ends
the connections that send nothing, or a head that never completes.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Callable
from typing import Final

#: Connections open at once, in all and from one address.
MAX_CONNECTIONS: Final = 4096
MAX_PER_PEER: Final = 256


class Limits:
    def __init__(self, total: int = MAX_CONNECTIONS, per_peer: int = MAX_PER_PEER) -> None:
        self.total = total
        self.per_peer = per_peer
        self.open: Counter[str] = Counter()

    def admit(self, peer: str) -> bool:
        if self.open.total() >= self.total or self.open[peer] >= self.per_peer:
            return False
        self.open[peer] += 1
        return True

    def release(self, peer: str) -> None:
        self.open[peer] -= 1
        if self.open[peer] <= 0:
            del self.open[peer]


class Guard(asyncio.Protocol):
    """One connection: handed to `inner` (aiohttp's protocol) when `limits` admit it."""

    def __init__(self, inner: asyncio.Protocol, limits: Limits) -> None:
        self.inner = inner
        self.limits = limits
        self.peer: str | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        peername = transport.get_extra_info("peername")
        peer = str(peername[0]) if isinstance(peername, tuple) else "-"
        if not self.limits.admit(peer):
            transport.close()  # nothing was written: closes at once
            return
        self.peer = peer
        self.inner.connection_made(transport)

    def connection_lost(self, exc: Exception | None) -> None:
        if self.peer is None:
            return
        self.limits.release(self.peer)
        self.peer = None
        self.inner.connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        if self.peer is not None:
            self.inner.data_received(data)

    def eof_received(self) -> bool | None:
        return self.inner.eof_received() if self.peer is not None else None

    def pause_writing(self) -> None:
        if self.peer is not None:
            self.inner.pause_writing()

    def resume_writing(self) -> None:
        if self.peer is not None:
            self.inner.resume_writing()


def guarded(factory: Callable[[], asyncio.Protocol], limits: Limits) -> Callable[[], Guard]:
    return lambda: Guard(factory(), limits)
