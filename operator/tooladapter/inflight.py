"""Bounded work in flight, shared fairly between namespaces (tenants).

At most `capacity` invocations are evaluated or executed at once; the others wait in a
queue per namespace and are started round-robin across the namespaces, so one tenant's
burst of a thousand calls does not delay another tenant's single call behind all of them.

A queued call is only bookkeeping (its key and a callback that starts its flow): no task
exists for it until it is admitted, so memory grows by a few hundred bytes per queued call,
not by a coroutine. A call that waits on something outside the operator (an approval, an
idempotency winner) gives its slot back for the wait (`released`) and queues again, at its
namespace's turn, to go on.
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict, deque
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager

from prometheus_client.core import GaugeMetricFamily

#: Starts an admitted call; called with its slot already taken.
Start = Callable[[], None]


class FairGate:
    def __init__(self, capacity: int) -> None:
        if capacity < 1:
            raise ValueError("the gate needs a capacity of at least 1")
        self.capacity = capacity
        #: Keys holding a slot now.
        self.holders: set[str] = set()
        #: Per namespace, its waiting calls in arrival order: key -> start callback.
        self.queues: dict[str, OrderedDict[str, Start]] = {}
        #: Namespaces with waiting calls, in the order their turn comes.
        self.turns: deque[str] = deque()

    @property
    def busy(self) -> int:
        return len(self.holders)

    def has_room(self) -> bool:
        """A call submitted now starts at once (a slot is free and nobody waits)."""
        return len(self.holders) < self.capacity and not self.turns

    def queued(self, namespace: str | None = None) -> int:
        if namespace is not None:
            return len(self.queues.get(namespace, ()))
        return sum(len(q) for q in self.queues.values())

    def queued_by_namespace(self) -> dict[str, int]:
        return {ns: len(q) for ns, q in self.queues.items()}

    def is_queued(self, key: str) -> bool:
        return any(key in q for q in self.queues.values())

    def position(self, namespace: str, key: str) -> int | None:
        """1-based place of `key` in its namespace's queue (None: not queued)."""
        for index, queued in enumerate(self.queues.get(namespace, ())):
            if queued == key:
                return index + 1
        return None

    def submit(self, namespace: str, key: str, start: Start) -> None:
        """Start `key` now if a slot is free, else when its turn comes. A key already
        holding a slot or already queued is not queued twice."""
        if key in self.holders:
            return
        queue = self.queues.get(namespace)
        if queue is None:
            queue = self.queues[namespace] = OrderedDict()
            self.turns.append(namespace)
        if key in queue:
            return
        queue[key] = start
        self._pump()

    def discard(self, namespace: str, key: str) -> None:
        """Forget a queued call (deleted before its turn); no-op if it is not queued."""
        queue = self.queues.get(namespace)
        if queue is not None and queue.pop(key, None) is not None and not queue:
            self._drop(namespace)

    def release(self, key: str) -> None:
        """Give back `key`'s slot (no-op if it holds none) and admit the next call."""
        if key in self.holders:
            self.holders.discard(key)
            self._pump()

    @asynccontextmanager
    async def released(self, namespace: str, key: str) -> AsyncIterator[None]:
        """Wait without a slot: give it back for the body and queue for it again after.
        A key that held none (a flow started outside the gate) waits as it is."""
        if key not in self.holders:
            yield
            return
        self.release(key)
        try:
            yield
        except asyncio.CancelledError:
            raise  # the flow ends: it needs no slot to come back to
        except BaseException:
            await self.acquire(namespace, key)
            raise
        await self.acquire(namespace, key)

    @asynccontextmanager
    async def handed_over(self, other: FairGate, namespace: str, key: str) -> AsyncIterator[None]:
        """Wait holding a slot of `other` instead of one of this gate's: this gate's slot
        is given back first (nobody holds one gate's slot while queueing for the other's,
        so the two never deadlock), `other`'s is taken at `namespace`'s turn there and kept
        until this gate's slot is taken back, so what such a wait brings back (an answer
        read) is bounded by `other` as well."""
        held = key in self.holders
        if held:
            self.release(key)
        try:
            await other.acquire(namespace, key)
        except asyncio.CancelledError:
            raise  # the flow ends: it needs no slot to come back to
        except BaseException:
            if held:
                await self.acquire(namespace, key)
            raise
        try:
            try:
                yield
            except asyncio.CancelledError:
                raise
            except BaseException:
                if held:
                    await self.acquire(namespace, key)
                raise
            if held:
                await self.acquire(namespace, key)
        finally:
            other.release(key)

    async def acquire(self, namespace: str, key: str) -> None:
        """Wait for a slot for `key` at its namespace's turn."""
        granted: asyncio.Future[None] = asyncio.get_running_loop().create_future()

        def start() -> None:
            if not granted.done():
                granted.set_result(None)

        self.submit(namespace, key, start)
        try:
            await granted
        except asyncio.CancelledError:
            # Cancelled while queued, or granted just before: either way no slot is kept.
            self.discard(namespace, key)
            self.release(key)
            raise

    def collect(self) -> Iterator[GaugeMetricFamily]:
        """Prometheus collector: the queue per tenant and the slots taken, when scraped."""
        queued = GaugeMetricFamily(
            "tooladapter_calls_queued",
            "Invocations waiting for a calls-in-flight slot, by tenant (namespace).",
            labels=["tenant"],
        )
        for namespace, count in sorted(self.queued_by_namespace().items()):
            queued.add_metric([namespace], count)
        yield queued
        yield GaugeMetricFamily(
            "tooladapter_calls_in_flight",
            "Invocations being evaluated or executed (at most TOOLADAPTER_MAX_CALLS_IN_FLIGHT).",
            value=self.busy,
        )

    def _drop(self, namespace: str) -> None:
        del self.queues[namespace]
        self.turns.remove(namespace)

    def _pump(self) -> None:
        while len(self.holders) < self.capacity and self.turns:
            namespace = self.turns.popleft()
            queue = self.queues[namespace]
            key, start = queue.popitem(last=False)
            if queue:
                self.turns.append(namespace)  # its next call waits for the others' turn
            else:
                del self.queues[namespace]
            self.holders.add(key)
            start()
