"""Fair doors: what one caller, one namespace or one client address may hold at once.

- Concurrent requests per caller (authenticated user) and per namespace (the request's
  `{namespace}`), and long-lived streams (the page's live updates, MCP follows of a call)
  per caller and per namespace: beyond a cap the gateway answers 429 with `Retry-After`
  (an MCP follow: a JSON-RPC error naming the same) before it asks the API server anything.
- Failed authentications per client address: a token bucket (`FailureLimiter`); an
  address that spent it gets 429 before its token is reviewed. The address is the peer's,
  or the one a trusted proxy (`TOOLADAPTER_GATEWAY_TRUSTED_PROXIES`) forwarded.

With the caps below the caller connection pool (`kube.callers.CallerPool`) cannot be taken
by one caller: its requests share one pool, capped per caller below the pool's size, and its
streams have their own pool. Pure: no clock of its own beyond `time.monotonic`, no I/O.
"""

from __future__ import annotations

import ipaddress
import time
from collections import Counter
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Final

from tooladapter.settings import Settings

#: Seconds a refused request is told to wait (`Retry-After`).
RETRY_AFTER_SECONDS: Final = 2
#: A key for streams that watch every namespace (the page of a cluster-wide reviewer).
ALL_NAMESPACES: Final = "*"


class Busy(Exception):
    """A cap is full: answer 429 with `Retry-After: retry_after`."""

    def __init__(self, what: str, retry_after: int = RETRY_AFTER_SECONDS, cap: str = "") -> None:
        super().__init__(what)
        self.what = what
        self.retry_after = retry_after
        #: Which cap (a `tooladapter_gateway_refused` label value: a fixed set).
        self.cap = cap


@dataclass(frozen=True)
class Caps:
    caller_requests: int = 32
    namespace_requests: int = 64
    caller_streams: int = 16
    namespace_streams: int = 48


#: What one admission holds: (counter, keys), given back by `Doors.give`.
Held = tuple[Counter[tuple[str, str]], list[tuple[str, str]]]


@dataclass
class Doors:
    """Counts what is held; `take_request`/`request` and `stream` take a slot or raise
    `Busy` (nothing taken then)."""

    caps: Caps = field(default_factory=Caps)
    requests: Counter[tuple[str, str]] = field(default_factory=Counter)
    streams: Counter[tuple[str, str]] = field(default_factory=Counter)

    @staticmethod
    def _keys(caller: str, namespaces: Iterable[str]) -> list[tuple[str, str]]:
        return [("caller", caller), *(("namespace", ns) for ns in dict.fromkeys(namespaces))]

    @staticmethod
    def _take(
        held: Counter[tuple[str, str]],
        keys: list[tuple[str, str]],
        caps: dict[str, int],
        what: str,
    ) -> Held:
        for key in keys:
            if held[key] >= caps[key[0]]:
                raise Busy(
                    f"too many {what} at once for this {key[0]} (at most {caps[key[0]]})",
                    cap=f"{key[0]}-{'streams' if 'stream' in what else 'requests'}",
                )
        for key in keys:
            held[key] += 1
        return held, keys

    def give(self, held: Held) -> None:
        self._give(*held)

    def take_request(self, caller: str, namespace: str | None) -> Held:
        return self.take_requests(caller, [namespace] if namespace else [])

    def take_namespace_requests(self, namespaces: Iterable[str | None]) -> Held:
        """The namespaces' slots of a request whose caller holds its own already (taken once
        the body arrived: a namespace in the URL is any caller's to name)."""
        keys = [("namespace", ns) for ns in dict.fromkeys(namespaces) if ns]
        return self._take(
            self.requests, keys, {"namespace": self.caps.namespace_requests}, "requests"
        )

    def take_requests(self, caller: str, namespaces: Iterable[str]) -> Held:
        """One request of `caller` over `namespaces` (the page's views read several): one
        slot of the caller's and one of each namespace's."""
        keys = self._keys(caller, namespaces)
        caps = {"caller": self.caps.caller_requests, "namespace": self.caps.namespace_requests}
        return self._take(self.requests, keys, caps, "requests")

    @staticmethod
    def _give(held: Counter[tuple[str, str]], keys: list[tuple[str, str]]) -> None:
        for key in keys:
            held[key] -= 1
            if held[key] <= 0:
                del held[key]

    @contextmanager
    def request(self, caller: str, namespace: str | None) -> Iterator[None]:
        held = self.take_request(caller, namespace)
        try:
            yield
        finally:
            self.give(held)

    def take_stream(self, caller: str, namespaces: Iterable[str | None]) -> Held:
        """A live stream or follow of `caller` over `namespaces` (None: every namespace):
        one slot of the caller's and one of each namespace's."""
        keys = self._keys(caller, [ns or ALL_NAMESPACES for ns in namespaces])
        caps = {"caller": self.caps.caller_streams, "namespace": self.caps.namespace_streams}
        return self._take(self.streams, keys, caps, "live streams and follows")

    @contextmanager
    def stream(self, caller: str, namespaces: Iterable[str | None]) -> Iterator[None]:
        held = self.take_stream(caller, namespaces)
        try:
            yield
        finally:
            self.give(held)


def caps_of(settings: Settings) -> Caps:
    return Caps(
        caller_requests=settings.gateway.caller_requests,
        namespace_requests=settings.gateway.namespace_requests,
        caller_streams=settings.gateway.caller_streams,
        namespace_streams=settings.gateway.namespace_streams,
    )


@dataclass
class FailureLimiter:
    """Failed authentications per client address: `burst` at once, then `per_minute`.

    At most `max_addresses` are remembered (the fullest buckets are forgotten first: an
    address that failed least loses nothing by being forgotten)."""

    burst: int = 20
    per_minute: float = 30.0
    max_addresses: int = 10_000
    buckets: dict[str, tuple[float, float]] = field(default_factory=dict)

    def _level(self, address: str, now: float) -> float:
        tokens, at = self.buckets.get(address, (float(self.burst), now))
        return min(float(self.burst), tokens + (now - at) * self.per_minute / 60.0)

    def blocked(self, address: str, now: float | None = None) -> int:
        """0 when `address` may try; else the seconds until it may (at least 1)."""
        if self.burst <= 0:
            return 0
        now = time.monotonic() if now is None else now
        level = self._level(address, now)
        if level >= 1.0:
            return 0
        rate = self.per_minute / 60.0
        return max(1, int((1.0 - level) / rate + 0.999)) if rate > 0 else 60

    def take(self, address: str, now: float | None = None) -> int:
        """Before a review of an unknown token: 0 and one try spent (given back by
        `succeeded`), or the seconds to wait. Spent before the review is answered, so
        concurrent tries cannot all pass a check made before any of them failed."""
        wait = self.blocked(address, now)
        if not wait:
            self.failed(address, now)
        return wait

    def succeeded(self, address: str, now: float | None = None) -> None:
        """The try `take` spent was a valid token: give it back."""
        if self.burst <= 0 or address not in self.buckets:
            return
        now = time.monotonic() if now is None else now
        self.buckets[address] = (min(float(self.burst), self._level(address, now) + 1.0), now)

    def failed(self, address: str, now: float | None = None) -> None:
        if self.burst <= 0:
            return
        now = time.monotonic() if now is None else now
        level = self._level(address, now)
        self.buckets[address] = (max(0.0, level - 1.0), now)
        if len(self.buckets) > self.max_addresses:
            fullest = sorted(self.buckets, key=lambda a: self._level(a, now), reverse=True)
            for gone in fullest[: len(self.buckets) - self.max_addresses]:
                del self.buckets[gone]


def _network(text: str) -> ipaddress.IPv4Network | ipaddress.IPv6Network | None:
    try:
        return ipaddress.ip_network(text.strip(), strict=False)
    except ValueError:
        return None


def _within(address: str, proxies: tuple[str, ...]) -> bool:
    try:
        ip = ipaddress.ip_address(address.strip())
    except ValueError:
        return False
    return any((net := _network(p)) is not None and ip in net for p in proxies)


def client_address(peer: str, forwarded_for: str | None, trusted_proxies: tuple[str, ...]) -> str:
    """The address a request came from: the peer's, unless the peer is a trusted proxy;
    then the right-most `X-Forwarded-For` entry that is not itself a trusted proxy (entries
    left of it were written by the client and prove nothing)."""
    if not forwarded_for or not _within(peer, trusted_proxies):
        return peer
    hops = [h.strip() for h in forwarded_for.split(",") if h.strip()]
    for hop in reversed(hops):
        if not _within(hop, trusted_proxies):
            return hop[:64]
    return peer
