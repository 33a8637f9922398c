"""Integration events delivered at least once to `TOOLADAPTER_EVENT_SINK`, from a durable
outbox in the artifact store.

The outbox of the invocation events is the receipt chains themselves: every receipt is a
link of its namespace incarnation's chain (`artifacts.chain`), written before its call's end
is persisted, and the events a receipt stands for (`pipeline.integration_events`) are
derived from it. What was delivered is a write-once marker per link,
`index/ns/<ns>/<uid>/delivered/<sequence>`, written after the sink took every event of the
link (2xx). So an operator crash loses nothing (the link is there, its marker is not), a
sink outage only delays (links wait, in order), and a new leader delivers what the previous
one had not: it finds each chain's end and its last marker in the store. The descriptor
events have an outbox of their own: `index/outbox/descriptors/<event id>` (written once,
when the transition is seen), delivered markers `index/outbox/delivered/<event id>`.

Bound: the outbox is never larger than the receipts themselves (the store keeps those
anyway: retention deletes invocations, never receipts), and the deliverer holds one link's
events in memory at a time. Delivery is in order per chain, one HTTP POST per event
(structured mode, `application/cloudevents+json`), retried with backoff (1, 2, 5, 10, 30,
60 s) while the sink refuses or is unreachable: a refusal the sink answers (non-2xx) backs
off that chain alone (or the descriptor events), the other chains go on, so an event of one
tenant's the sink will not take never holds another's; an unreachable sink holds every
chain. `tooladapter_event_outbox_depth` and
`tooladapter_event_deliveries_total{result}` say how it goes. At least once: a crash between
a POST and its marker sends that event again, with the same `id` (receivers deduplicate by
`source` + `id`, as CloudEvents says).

No sink configured: nothing is delivered and no marker written; a sink configured later
receives every chain's events from its beginning.
"""

from __future__ import annotations

import asyncio
import json
import logging
import ssl
from collections import deque
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, Final

import aiohttp

from tooladapter.artifacts import ArtifactStore
from tooladapter.artifacts.chain import DIGITS, ReceiptChains, chain_key, named_ref, sequence_of
from tooladapter.artifacts.index import incarnation_prefix
from tooladapter.metrics import EVENT_DELIVERIES, EVENT_OUTBOX_DEPTH
from tooladapter.receipts.core.chain import Head
from tooladapter.receipts.core.cloudevents import CONTENT_TYPE, receipt_events
from tooladapter.receipts.core.signing import receipt_of
from tooladapter.settings import Settings

logger = logging.getLogger("tooladapter.events")

DESCRIPTORS: Final = "index/outbox/descriptors/"
DELIVERED: Final = "index/outbox/delivered/"
BACKOFF: Final = (1, 2, 5, 10, 30, 60)
#: How often the deliverer reads on past the chain ends it knows (another writer's links).
FOLLOW_SECONDS: Final = 10.0
#: Links delivered per chain before the next chain gets its turn.
TURN: Final = 50
#: How often the deliverer lists the descriptor events' outbox again (what another replica
#: kept, or a previous leader); between listings it follows what this process keeps.
RELIST_SECONDS: Final = 60.0
#: The lane of the descriptor events in `Outbox._held` (a chain's lane is its key).
DESCRIPTOR_LANE: Final = ("", "descriptors")


def delivered_prefix(namespace: str, uid: str) -> str:
    return f"{incarnation_prefix(namespace, uid)}delivered/"


def delivered_key(namespace: str, uid: str, sequence: int) -> str:
    return f"{delivered_prefix(namespace, uid)}{sequence:0{DIGITS}d}"


class SinkRefused(Exception):
    """The sink did not take an event (its status, or why it could not be reached)."""

    def __init__(self, why: str, *, answered: bool = False) -> None:
        super().__init__(why)
        #: The sink answered (a status other than 2xx): it is up, and refused this event.
        self.answered = answered


class Outbox:
    def __init__(
        self,
        store: ArtifactStore,
        chains: ReceiptChains,
        settings: Settings,
        namespaces: Callable[[], Iterable[tuple[str, str]]] = lambda: (),
    ) -> None:
        self.store = store
        self.chains = chains
        self.sink = settings.event_sink.url
        self.source = settings.event_sink.source
        self.ca_file = settings.event_sink.ca_file
        self.token_file = settings.event_sink.token_file
        #: The served namespace incarnations (the catalog's): chains to look at at start.
        self.namespaces = namespaces
        self._cursors: dict[tuple[str, str], int] = {}
        self._ends: dict[tuple[str, str], Head] = {}
        self._followed = 0.0
        self._failures = 0
        #: Chains (and the descriptor events, `DESCRIPTOR_LANE`) whose event the sink refused:
        #: their refusals in a row, and when they are tried again. The others go on meanwhile.
        self._held: dict[tuple[str, str], tuple[int, float]] = {}
        #: Descriptor events kept by this process since the last listing (`enqueue`, on
        #: threads), and the undelivered ones known, by id.
        self._fresh: deque[dict[str, Any]] = deque()
        self._described: dict[str, dict[str, Any]] = {}
        self._listed_at: float | None = None
        self.wake = asyncio.Event()

    @property
    def enabled(self) -> bool:
        return bool(self.sink)

    # ------------------------------------------------------------------ the outbox

    def enqueue(self, event: dict[str, Any]) -> None:
        """Keep a descriptor event for delivery (blocking, off the loop: set `wake` after,
        on the loop; written once per id)."""
        if not self.enabled:
            return
        self.store.put_key(DESCRIPTORS + str(event["id"]), json.dumps(event).encode())
        self._fresh.append(event)

    def _cursor(self, namespace: str, uid: str) -> int:
        key = (namespace, uid)
        if key not in self._cursors:
            marks = [sequence_of(k) for k in self.store.list(delivered_prefix(namespace, uid))]
            self._cursors[key] = max((m for m in marks if m is not None), default=0)
        return self._cursors[key]

    def _chains(self) -> dict[tuple[str, str], Head]:
        """Every chain to deliver from, with its end as known now."""
        found = dict(self._ends)
        for key, head in self.chains.heads().items():
            if head.sequence > found.get(key, Head()).sequence:
                found[key] = head
        for key in [*self.chains.hinted(), *self.namespaces()]:
            if key not in found:
                found[key] = self.chains.ensure_head(*key)
        self._ends = found
        return found

    def _follow(self, now: float) -> None:
        """Read on past the known ends (links another writer appended), now and then."""
        if now - self._followed < FOLLOW_SECONDS:
            return
        self._followed = now
        for (namespace, uid), head in list(self._ends.items()):
            self._ends[(namespace, uid)] = self.chains.forward(namespace, uid, head)

    def pending(self) -> list[tuple[tuple[str, str], int, Head]]:
        """(chain, cursor, end) of every chain with undelivered links (blocking)."""
        out = []
        for key, head in self._chains().items():
            cursor = self._cursor(*key)
            if head.sequence > cursor:
                out.append((key, cursor, head))
        return out

    def undelivered_descriptor_events(self, now: float | None = None) -> list[dict[str, Any]]:
        """The descriptor events not delivered yet. The outbox keeps every transition ever
        (a workspace admin toggling a descriptor adds two each time), so it is listed at
        the first round and then every `RELIST_SECONDS` only (what another replica or a
        previous leader kept); between, what this process kept since is added."""
        if now is None or self._listed_at is None or now - self._listed_at >= RELIST_SECONDS:
            done = {k.rsplit("/", 1)[-1] for k in self.store.list(DELIVERED)}
            listed: dict[str, dict[str, Any]] = {}
            for key in self.store.list(DESCRIPTORS):
                if key.rsplit("/", 1)[-1] in done:
                    continue
                try:
                    event = json.loads(self.store.get_key(key))
                except (KeyError, ValueError):
                    continue
                listed[str(event.get("id"))] = event
            self._described = listed
            self._listed_at = now
        while self._fresh:
            event = self._fresh.popleft()
            self._described.setdefault(str(event["id"]), event)
        return list(self._described.values())

    def link_events(self, namespace: str, uid: str, sequence: int) -> list[dict[str, Any]]:
        ref = named_ref(self.store.get_key(chain_key(namespace, uid, sequence)))
        if ref is None:
            raise KeyError(f"the link at sequence {sequence} names no receipt")
        receipt = receipt_of(self.store.get(ref))
        return receipt_events(receipt or {}, ref, source=self.source)

    def mark(self, namespace: str, uid: str, sequence: int) -> None:
        self.store.put_key(delivered_key(namespace, uid, sequence), b"delivered")
        self._cursors[(namespace, uid)] = sequence

    # ------------------------------------------------------------------ delivery

    def _ssl(self) -> ssl.SSLContext | bool:
        if self.ca_file is None:
            return True
        return ssl.create_default_context(cafile=str(self.ca_file))

    def _headers(self) -> dict[str, str]:
        headers = {"Content-Type": CONTENT_TYPE}
        if self.token_file is not None:
            # Read per round: a projected or rotated token file is always current.
            token = Path(self.token_file).read_text().strip()
            if token:
                headers["Authorization"] = f"Bearer {token}"
        return headers

    async def post(self, session: aiohttp.ClientSession, event: dict[str, Any]) -> None:
        assert self.sink is not None
        try:
            async with session.post(
                self.sink, data=json.dumps(event).encode(), headers=self._headers()
            ) as resp:
                await resp.read()
                status = resp.status
        except (aiohttp.ClientError, TimeoutError, OSError) as exc:
            raise SinkRefused(type(exc).__name__) from None
        if not 200 <= status <= 299:
            raise SinkRefused(f"HTTP {status}", answered=True)

    def _waits(self, lane: tuple[str, str], now: float) -> bool:
        held = self._held.get(lane)
        return held is not None and now < held[1]

    def _hold(self, lane: tuple[str, str], now: float, exc: SinkRefused) -> None:
        """The sink answered a refusal of this lane's next event: that lane backs off, alone
        (an event one tenant's call made unstorable for the sink never holds another's)."""
        failures = self._held.get(lane, (0, 0.0))[0]
        delay = BACKOFF[min(failures, len(BACKOFF) - 1)]
        self._held[lane] = (failures + 1, now + delay)
        EVENT_DELIVERIES.labels("failed").inc()
        what = "the descriptor events" if lane == DESCRIPTOR_LANE else "/".join(lane)
        logger.warning(
            "event sink refused an event (%s) of %s; its next try in %ss", exc, what, delay
        )

    async def deliver(self, session: aiohttp.ClientSession) -> int:
        """One round: every pending link's and descriptor's events, in order per chain; the
        number of events delivered. A refusal the sink answered holds only its chain (or
        the descriptor events), with a backoff of its own; a sink that cannot be reached
        raises `SinkRefused` (every lane waits for it)."""
        sent = 0
        loop = asyncio.get_running_loop()
        await asyncio.to_thread(self._follow, loop.time())
        pending = await asyncio.to_thread(self.pending)
        described = await asyncio.to_thread(self.undelivered_descriptor_events, loop.time())
        EVENT_OUTBOX_DEPTH.set(sum(h.sequence - c for _, c, h in pending) + len(described))
        now = loop.time()
        if described and not self._waits(DESCRIPTOR_LANE, now):
            try:
                for event in described:
                    await self.post(session, event)
                    EVENT_DELIVERIES.labels("delivered").inc()
                    sent += 1
                    await asyncio.to_thread(
                        self.store.put_key, DELIVERED + event["id"], b"delivered"
                    )
                    self._described.pop(str(event["id"]), None)
                self._held.pop(DESCRIPTOR_LANE, None)
            except SinkRefused as exc:
                if not exc.answered:
                    raise
                self._hold(DESCRIPTOR_LANE, now, exc)
        for (namespace, uid), cursor, head in pending:
            lane = (namespace, uid)
            if self._waits(lane, now):
                continue
            try:
                for sequence in range(cursor + 1, min(head.sequence, cursor + TURN) + 1):
                    events = await asyncio.to_thread(self.link_events, namespace, uid, sequence)
                    for event in events:
                        await self.post(session, event)
                        EVENT_DELIVERIES.labels("delivered").inc()
                        sent += 1
                    await asyncio.to_thread(self.mark, namespace, uid, sequence)
                self._held.pop(lane, None)
            except SinkRefused as exc:
                if not exc.answered:
                    raise
                self._hold(lane, now, exc)
        return sent

    async def run(self) -> None:
        """Forever (the leader's worker): rounds every second, or when woken; after a
        refusal, the next round waits the backoff."""
        if not self.enabled:
            return
        timeout = aiohttp.ClientTimeout(total=15)
        connector = aiohttp.TCPConnector(ssl=self._ssl())
        async with aiohttp.ClientSession(timeout=timeout, connector=connector) as session:
            while True:
                try:
                    await self.deliver(session)
                    self._failures = 0
                    delay: float = 1.0
                except SinkRefused as exc:
                    EVENT_DELIVERIES.labels("failed").inc()
                    delay = BACKOFF[min(self._failures, len(BACKOFF) - 1)]
                    self._failures += 1
                    logger.warning("event sink refused an event (%s); next try in %ss", exc, delay)
                except Exception:
                    delay = BACKOFF[min(self._failures, len(BACKOFF) - 1)]
                    self._failures += 1
                    logger.warning("event delivery round failed", exc_info=True)
                self.wake.clear()
                try:
                    await asyncio.wait_for(self.wake.wait(), delay)
                except TimeoutError:
                    pass
