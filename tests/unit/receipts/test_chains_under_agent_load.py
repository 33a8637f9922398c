"""Attack pass 7 on signed, chained receipts (issue 30): what an agent (a requester in its
own namespace) can do to the receipt chain writer and the event outbox."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from tests.unit.fake_cluster import MemoryStore
from tooladapter import outbox
from tooladapter.artifacts.chain import ReceiptChains, StoredLinks, chain_prefix
from tooladapter.model import ToolInvocationSpec, ToolInvocationStatus
from tooladapter.outbox import Outbox, SinkRefused, delivered_key
from tooladapter.receipts.core.chain import verify
from tooladapter.receipts.core.cloudevents import EventType, descriptor_event
from tooladapter.receipts.core.signing import KeySet, PublicKey, Signer
from tooladapter.receipts.service import keys as gateway_keys
from tooladapter.receipts.service.writer import ReceiptInput, ReceiptWriter
from tooladapter.settings import Settings
from tooladapter.settings.event_sink import EventSinkSettings

FLOOD, QUIET = "team-flood", "team-quiet"
UIDS = {
    FLOOD: "00000000-0000-4000-8000-00000000f100",
    QUIET: "00000000-0000-4000-8000-00000000a000",
}


class GatedStore(MemoryStore):
    """A store whose chain links of one namespace wait for a gate (a slow bucket)."""

    def __init__(self, gated: str) -> None:
        super().__init__()
        self.gated = chain_prefix(gated, UIDS[gated])
        self.gate = threading.Event()
        self.waiting = threading.Event()

    def put_key(self, key: str, data: bytes) -> None:
        if key.startswith(self.gated):
            self.waiting.set()
            self.gate.wait(30)
        super().put_key(key, data)


def _spec(namespace: str) -> ToolInvocationSpec:
    return ToolInvocationSpec.model_validate(
        {
            "tool": {"id": "echo", "version": "1.0.0"},
            "arguments": {"n": 1},
            "caller": {"kind": "agent", "name": f"system:serviceaccount:{namespace}:agent"},
        }
    )


async def _write(store: MemoryStore, chains: ReceiptChains, namespace: str, n: int) -> None:
    await ReceiptWriter(store, chains).write(
        ReceiptInput(
            namespace=namespace,
            name=f"call-{n}",
            uid=f"uid-{namespace}-{n}",
            spec=_spec(namespace),
            status=ToolInvocationStatus(),
            tool_kind="native",
            sandbox_kind=None,
            sandbox_pool=None,
            command_line=[],
            written_at="2026-12-03T20:00:00Z",
            audit=None,
            namespace_uid=UIDS[namespace],
        )
    )


async def test_one_namespaces_flood_of_receipts_never_holds_another_namespaces() -> None:
    """Hit: the chain lock was taken on the store's shared threads (4), so a namespace
    with many calls ending while its store writes were slow held every thread (one writing,
    the others waiting for its chain's lock) and another namespace's receipt, hence its
    calls' ends, waited behind the whole flood: what known-limits says does not happen."""
    store = GatedStore(FLOOD)
    signer = Signer.of(Ed25519PrivateKey.generate())
    chains = ReceiptChains(store, lambda: signer)
    flood = [asyncio.create_task(_write(store, chains, FLOOD, n)) for n in range(8)]
    try:
        await asyncio.to_thread(store.waiting.wait, 10)
        assert store.waiting.is_set()
        # The flood's first link is held by its slow store; the quiet namespace's receipt
        # is written meanwhile (the bound only fails the test, it never paces it).
        await asyncio.wait_for(_write(store, chains, QUIET, 0), 10)
        assert any(k.startswith(chain_prefix(QUIET, UIDS[QUIET])) for k in store.keys)
    finally:
        store.gate.set()
        await asyncio.gather(*flood)
    links = [k for k in store.keys if k.startswith(chain_prefix(FLOOD, UIDS[FLOOD]))]
    assert len(links) == 8


class PickySink:
    """A sink that is up, and answers a refusal of every event of one namespace."""

    def __init__(self, refused_namespace: str) -> None:
        self.refused_namespace = refused_namespace
        self.took: list[dict[str, Any]] = []
        self.refusals = 0

    async def post(self, session: Any, event: dict[str, Any]) -> None:
        if event["source"].endswith(f"/namespaces/{self.refused_namespace}"):
            self.refusals += 1
            raise SinkRefused("HTTP 500", answered=True)
        self.took.append(event)


def _chained(store: MemoryStore, chains: ReceiptChains, namespace: str, count: int) -> None:
    for n in range(count):
        data, _, _ = chains.append(
            {
                "schema": "tool-invocation-v1",
                "invocationId": f"uid-{namespace}-{n}",
                "invocationName": f"call-{n}",
                "tenantId": namespace,
                "tenantUid": UIDS[namespace],
                "state": "Observed",
                "writtenAt": "2026-12-03T20:00:00Z",
            },
            namespace=namespace,
            uid=UIDS[namespace],
        )
        store.put(data)


async def test_an_event_the_sink_refuses_holds_only_its_own_chain(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Hit: a round stopped at the first refusal, whichever chain it was in, so an event
    of one tenant's that the sink would not take (say a NUL in the run id its agent chose,
    where the sink stores events in PostgreSQL) held every other tenant's events forever."""
    store = MemoryStore()
    signer = Signer.of(Ed25519PrivateKey.generate())
    chains = ReceiptChains(store, lambda: signer)
    _chained(store, chains, FLOOD, 2)  # first known, so first in every round
    _chained(store, chains, QUIET, 3)
    sink = PickySink(FLOOD)
    box = Outbox(store, chains, Settings(event_sink=EventSinkSettings(url="http://sink.invalid/")))
    box.post = sink.post  # type: ignore[method-assign]

    assert await box.deliver(None) == 3  # type: ignore[arg-type]
    assert {e["subject"] for e in sink.took} == {f"toolinvocations/call-{n}" for n in range(3)}
    assert all(e["source"].endswith(f"/namespaces/{QUIET}") for e in sink.took)
    assert delivered_key(QUIET, UIDS[QUIET], 3) in store.keys
    assert delivered_key(FLOOD, UIDS[FLOOD], 1) not in store.keys
    # The refused chain waits its backoff, alone: the next round does not post to it.
    assert await box.deliver(None) == 0  # type: ignore[arg-type]
    assert sink.refusals == 1

    # Once the sink takes it, the refused chain's events go, in order, none lost.
    monkeypatch.setattr(outbox, "BACKOFF", (0,))
    box._held.clear()
    sink.refused_namespace = "nobody"
    assert await box.deliver(None) == 2  # type: ignore[arg-type]
    assert delivered_key(FLOOD, UIDS[FLOOD], 2) in store.keys


async def test_a_sink_that_cannot_be_reached_still_holds_every_chain() -> None:
    store = MemoryStore()
    signer = Signer.of(Ed25519PrivateKey.generate())
    chains = ReceiptChains(store, lambda: signer)
    _chained(store, chains, FLOOD, 1)
    _chained(store, chains, QUIET, 1)
    posts = 0

    async def unreachable(session: Any, event: dict[str, Any]) -> None:
        nonlocal posts
        posts += 1
        raise SinkRefused("ClientConnectorError")

    box = Outbox(store, chains, Settings(event_sink=EventSinkSettings(url="http://sink.invalid/")))
    box.post = unreachable  # type: ignore[method-assign]
    with pytest.raises(SinkRefused):
        await box.deliver(None)  # type: ignore[arg-type]
    assert posts == 1  # one try per round while it is down, not one per chain


T0 = "2020-01-01T00:00:00Z"


class CountingStore(MemoryStore):
    def __init__(self) -> None:
        super().__init__()
        self.reads = 0

    def get_key(self, key: str) -> bytes:
        self.reads += 1
        return super().get_key(key)


def test_receipts_verify_reads_a_long_chain_a_link_at_a_time() -> None:
    """Hit: `receipts verify` read every link of the chain into memory before checking the
    first, so a namespace whose agents made calls enough (millions over a year, each link a
    few KiB) made its verification need gigabytes: it now reads a link when it checks it."""
    store = CountingStore()
    signer = Signer.of(Ed25519PrivateKey.generate())
    chains = ReceiptChains(store, lambda: signer)
    _chained(store, chains, QUIET, 30)
    store.reads = 0
    links = StoredLinks(store, QUIET, UIDS[QUIET])
    assert store.reads == 0 and len(links) == 30
    report = verify(
        links,
        namespace=QUIET,
        incarnation=UIDS[QUIET],
        keys=KeySet.of(
            [PublicKey(signer.keyid, signer.private.public_key(), "2020-01-01T00:00:00Z")]
        ),
    )
    assert report.ok, report.wire()
    assert report.checked == 30 and store.reads == 30
    assert StoredLinks(store, QUIET, UIDS[QUIET], since=29).sequences == [29, 30]


async def test_a_burst_at_receipt_keys_makes_one_read_of_the_api_server(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Hit: `GET /receipt-keys` needs no token and passes no door, and its cache was read
    again by every request that came while a read was in flight: anyone reaching the
    gateway turned each of a burst of requests into a read of the API server with the
    operator's own client. One read at a time now, the waiters served its answer."""
    reads = 0
    gate = asyncio.Event()

    async def slow_read(kube: Any, namespace: str, name: str) -> KeySet:
        nonlocal reads
        reads += 1
        await gate.wait()
        return KeySet()

    async def slow_heads(kube: Any, namespace: str, name: str) -> dict[Any, Any]:
        nonlocal reads
        reads += 1
        await gate.wait()
        return {}

    monkeypatch.setattr(gateway_keys, "read_public", slow_read)
    monkeypatch.setattr(gateway_keys, "read_heads", slow_heads)
    held = gateway_keys.ReceiptKeys(object(), Settings())  # type: ignore[arg-type]
    burst: list[asyncio.Task[Any]] = [asyncio.create_task(held.keys()) for _ in range(50)]
    burst += [asyncio.create_task(held.head(QUIET, UIDS[QUIET])) for _ in range(50)]
    await asyncio.sleep(0)  # every request of the burst is waiting now
    gate.set()
    await asyncio.gather(*burst)
    assert reads == 2


class ListingStore(MemoryStore):
    def __init__(self) -> None:
        super().__init__()
        self.listed: list[str] = []

    def list(self, prefix: str) -> list[str]:
        self.listed.append(prefix)
        return list(super().list(prefix))


def _activated(n: int) -> dict[str, Any]:
    return descriptor_event(
        EventType.TOOL_DESCRIPTOR_ACTIVATED, source="/t", namespace=QUIET, name=f"tool-{n}",
        uid=f"d-{n}", generation=1, spec={"toolId": f"tool-{n}"}, time="2026-12-03T20:00:00Z",
    )  # fmt: skip


async def test_the_descriptor_outbox_is_not_listed_whole_every_round(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Hit: every round (each second) listed every descriptor event ever kept and every
    marker, so a workspace admin toggling a descriptor's `retired` (two events a toggle,
    kept forever) made each round of every tenant's delivery longer (0.5 s of listing a
    round at 10,000 toggles on the file store; a page of ListObjectsV2 per 1,000 on s3).
    Listed at the first round and every RELIST_SECONDS; between, this process's own."""
    store = ListingStore()
    signer = Signer.of(Ed25519PrivateKey.generate())
    box = Outbox(
        store,
        ReceiptChains(store, lambda: signer),
        Settings(event_sink=EventSinkSettings(url="http://x/")),
    )
    took: list[dict[str, Any]] = []

    async def post(session: Any, event: dict[str, Any]) -> None:
        took.append(event)

    box.post = post  # type: ignore[method-assign]
    box.enqueue(_activated(0))
    await box.deliver(None)  # type: ignore[arg-type]
    assert outbox.DESCRIPTORS in store.listed and outbox.DELIVERED in store.listed
    store.listed.clear()
    box.enqueue(_activated(1))
    for _ in range(3):
        await box.deliver(None)  # type: ignore[arg-type]
    assert outbox.DESCRIPTORS not in store.listed and outbox.DELIVERED not in store.listed
    assert [e["subject"] for e in took] == ["tooldescriptors/tool-0", "tooldescriptors/tool-1"]

    # What another replica kept is found at the next listing.
    other = Outbox(
        store,
        ReceiptChains(store, lambda: signer),
        Settings(event_sink=EventSinkSettings(url="http://x/")),
    )
    other.enqueue(_activated(2))
    monkeypatch.setattr(outbox, "RELIST_SECONDS", 0.0)
    await box.deliver(None)  # type: ignore[arg-type]
    assert [e["subject"] for e in took][-1] == "tooldescriptors/tool-2" and len(took) == 3
