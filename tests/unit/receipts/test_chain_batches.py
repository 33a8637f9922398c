"""Receipts ending together join their chain in one batch (issue 41, the read path's tail):
one trip to the store's threads and one round of fsyncs for every receipt of a chain that
waited meanwhile, with the chain's promises kept (no fork, no link to nothing, no receipt
signed twice when the store fails part way)."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path
from typing import Any

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from tests.unit.fake_cluster import MemoryStore
from tests.unit.receipts.test_chain import NS, UID, receipt
from tooladapter.artifacts import LocalArtifactStore, content_ref
from tooladapter.artifacts.chain import Appended, ReceiptChains, chain_key, chain_prefix, read_chain
from tooladapter.artifacts.protocol import put_all
from tooladapter.enums import ArtifactKind
from tooladapter.model import ToolInvocationSpec, ToolInvocationStatus
from tooladapter.receipts.core.chain import verify
from tooladapter.receipts.core.signing import KeySet, PublicKey, Signer
from tooladapter.receipts.service import storing
from tooladapter.receipts.service.writer import ReceiptInput, ReceiptWriter


@pytest.fixture
def signer() -> Signer:
    return Signer.of(Ed25519PrivateKey.generate())


def chain_ok(store: MemoryStore, signer: Signer) -> bool:
    keys = KeySet.of([PublicKey(signer.keyid, signer.private.public_key(), "2020-01-01T00:00:00Z")])
    return verify(read_chain(store, NS, UID), namespace=NS, incarnation=UID, keys=keys).ok


def linked_ids(store: MemoryStore) -> list[str]:
    """The invocation each link names, in chain order."""
    return [
        store.receipt(link.ref)["invocationId"]
        for _, link in sorted(read_chain(store, NS, UID).items())
        if link.ref is not None
    ]


class CountingChains(ReceiptChains):
    """Chains that count their trips (`append_all` calls) and the receipts of each."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.trips: list[int] = []

    def append_all(self, receipts: Any, **kwargs: Any) -> None:
        self.trips.append(len(receipts))
        super().append_all(receipts, **kwargs)


class GatedStore(MemoryStore):
    """A store whose first chain link waits for a gate (a slow fsync round)."""

    def __init__(self) -> None:
        super().__init__()
        self.gate = threading.Event()
        self.waiting = threading.Event()

    def put_key(self, key: str, data: bytes) -> None:
        if key.startswith(chain_prefix(NS, UID)) and not self.gate.is_set():
            self.waiting.set()
            self.gate.wait(30)
        super().put_key(key, data)


def entry(n: int) -> ReceiptInput:
    return ReceiptInput(
        namespace=NS,
        name=f"call-{n}",
        uid=f"uid-{n}",
        spec=ToolInvocationSpec.model_validate(
            {
                "tool": {"id": "echo", "version": "1.0.0"},
                "arguments": {"n": n},
                "caller": {"kind": "agent", "name": f"system:serviceaccount:{NS}:agent"},
            }
        ),
        status=ToolInvocationStatus(),
        tool_kind="native",
        sandbox_kind=None,
        sandbox_pool=None,
        command_line=[],
        written_at="2026-12-07T01:00:00Z",
        audit=None,
        namespace_uid=UID,
    )


async def test_receipts_that_wait_for_their_chain_go_in_one_trip(signer: Signer) -> None:
    store = GatedStore()
    chains = CountingChains(store, lambda: signer)
    writer = ReceiptWriter(store, chains)
    entries = [entry(n) for n in range(6)]
    first = asyncio.create_task(writer.write(entries[0]))
    await asyncio.to_thread(store.waiting.wait, 10)
    assert store.waiting.is_set()
    # Five calls end while the first one's trip is on the store's threads.
    rest = [asyncio.create_task(writer.write(e)) for e in entries[1:]]
    await asyncio.sleep(0)
    store.gate.set()
    await asyncio.gather(first, *rest)
    assert chains.trips == [1, 5]
    assert [e.status.receipt.sequence for e in entries if e.status.receipt] == [1, 2, 3, 4, 5, 6]
    # Each call's status names its own receipt, linked at its own number.
    for n, e in enumerate(entries):
        assert store.receipt(e.status.receipt_ref or "")["invocationId"] == f"uid-{n}"
        assert store.get_key(chain_key(NS, UID, n + 1)) == (e.status.receipt_ref or "").encode()
    assert chain_ok(store, signer)


async def test_a_refused_batch_tells_every_call_and_is_stored_once(
    signer: Signer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(storing, "STORE_RETRY_DELAYS", (0,))
    store = GatedStore()
    refusals = 0

    def full_once(data: bytes) -> None:
        nonlocal refusals
        if refusals == 0:  # the batch's first receipt
            refusals += 1
            raise OSError(28, "No space left on device")

    chains = CountingChains(store, lambda: signer)
    writer = ReceiptWriter(store, chains)
    told: list[tuple[str, ArtifactKind]] = []
    entries = [entry(n) for n in range(4)]
    first = asyncio.create_task(writer.write(entries[0]))
    await asyncio.to_thread(store.waiting.wait, 10)
    store.hook = full_once

    def teller(name: str) -> storing.OnFailure:
        return lambda kind, exc: told.append((name, kind))

    rest = [asyncio.create_task(writer.write(e, on_failure=teller(e.name))) for e in entries[1:]]
    await asyncio.sleep(0)
    store.gate.set()
    await asyncio.gather(first, *rest)
    assert sorted(told) == [(f"call-{n}", ArtifactKind.RECEIPT) for n in (1, 2, 3)]
    assert linked_ids(store) == [f"uid-{n}" for n in range(4)]
    assert chain_ok(store, signer)


def test_a_batch_the_store_fails_part_way_keeps_the_links_it_made(signer: Signer) -> None:
    """A trip made again stores the same signed bytes: the links the failed one made are
    found made (the same bytes at their numbers), and no receipt of the batch is signed and
    linked twice, even when the store cannot be read back meanwhile (the same outage)."""
    store = MemoryStore()
    put_key, get_key = store.put_key, store.get_key
    outage = {"link 3": True, "reads": False}

    def fails_third(key: str, data: bytes) -> None:
        if key == chain_key(NS, UID, 3) and outage["link 3"]:
            outage["link 3"], outage["reads"] = False, True
            raise OSError(110, "Connection timed out")
        put_key(key, data)

    def unreadable(key: str) -> bytes:
        if outage["reads"]:
            raise OSError(110, "Connection timed out")
        return get_key(key)

    store.put_key = fails_third  # type: ignore[method-assign]
    store.get_key = unreadable  # type: ignore[method-assign]
    chains = ReceiptChains(store, lambda: signer)
    receipts = [receipt(n) for n in range(5)]
    made: list[Appended] = []
    signed: list[Appended] = []
    with pytest.raises(OSError):
        chains.append_all(receipts, namespace=NS, uid=UID, into=made, signed=signed)
    assert [seq for _, _, seq in signed] == [1, 2, 3, 4, 5]  # kept for the trip made again
    first = list(signed)
    outage["reads"] = False
    chains.append_all(receipts, namespace=NS, uid=UID, into=made, signed=signed)
    assert made == first and not signed
    assert linked_ids(store) == [f"uid-{n}" for n in range(5)]
    assert chain_ok(store, signer)


def test_a_batch_that_lost_a_number_follows_the_winner(signer: Signer) -> None:
    store = MemoryStore()
    first, second = ReceiptChains(store, lambda: signer), ReceiptChains(store, lambda: signer)
    first.append(receipt(0), namespace=NS, uid=UID)
    second.append(receipt(1), namespace=NS, uid=UID)  # takes 2, which `first` thinks free
    made: list[Appended] = []
    first.append_all([receipt(n) for n in (2, 3, 4)], namespace=NS, uid=UID, into=made, signed=[])
    assert [seq for _, _, seq in made] == [3, 4, 5] and first.conflicts == 1
    assert linked_ids(store) == [f"uid-{n}" for n in range(5)]
    assert chain_ok(store, signer)


def test_the_file_store_stores_a_batch_and_stops_at_a_taken_name(tmp_path: Path) -> None:
    store = LocalArtifactStore(tmp_path)
    datas = [b"receipt-a", b"receipt-b"]
    keys = [
        ("index/ns/a/u/chain/000000000001", b"one"),
        ("index/ns/a/u/chain/000000000002", b"two"),
    ]
    assert put_all(store, datas, keys) == 2
    assert [store.get(content_ref(d)) for d in datas] == datas
    assert [store.get_key(k) for k, _ in keys] == [b"one", b"two"]
    # Made again (a trip retried): the same bytes are stored already, never twice.
    assert put_all(store, datas, keys) == 2
    # A name that holds other bytes stops the batch there: never overwritten, nothing after.
    later = [
        ("index/ns/a/u/chain/000000000002", b"other"),
        ("index/ns/a/u/chain/000000000003", b"3"),
    ]
    assert put_all(store, [b"receipt-c"], later) == 0
    assert store.get_key(later[0][0]) == b"two"
    with pytest.raises(KeyError):
        store.get_key(later[1][0])
    assert store.get(content_ref(b"receipt-c")) == b"receipt-c"
    assert not [p for p in tmp_path.rglob(".tmp-*")]  # no temporary left behind


def test_no_name_of_a_batch_appears_before_all_its_bytes_are_synced(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A crash at any point leaves no receipt name nor link naming bytes not on disk."""
    import os

    from tooladapter.artifacts import file as file_store

    order: list[str] = []
    fsync, replace, link = file_store._fsync_path, os.replace, os.link

    def synced(path: str) -> None:
        order.append("sync")
        fsync(path)

    def named(how: Any) -> Any:
        def name(source: str, target: Any) -> None:
            order.append("name")
            how(source, target)

        return name

    monkeypatch.setattr(file_store, "_fsync_path", synced)
    monkeypatch.setattr(os, "replace", named(replace))
    monkeypatch.setattr(os, "link", named(link))
    store = LocalArtifactStore(tmp_path)
    keys = [(f"index/ns/a/u/chain/00000000000{n}", f"{n}".encode()) for n in (1, 2, 3)]
    assert put_all(store, [b"a", b"b", b"c"], keys) == 3
    assert order == ["sync"] * 6 + ["name"] * 6


async def settled(chains: ReceiptChains) -> None:
    """Until the chain's drain has taken every receipt that waited."""
    drain = chains.queue(NS, UID).drain
    if drain is not None:
        await drain


async def test_a_call_whose_end_was_cancelled_while_waiting_is_not_linked(
    signer: Signer,
) -> None:
    """Hit (attack pass on the batches): a call's end cancelled (the operator stopping)
    while its receipt waited was still signed and linked, and its resumed end linked a
    second receipt of the same call."""
    store = GatedStore()
    chains = ReceiptChains(store, lambda: signer)
    writer = ReceiptWriter(store, chains)
    first = asyncio.create_task(writer.write(entry(0)))
    await asyncio.to_thread(store.waiting.wait, 10)
    second = asyncio.create_task(writer.write(entry(1)))
    await asyncio.sleep(0)  # its receipt waits for the chain's next trip
    second.cancel()
    with pytest.raises(asyncio.CancelledError):
        await second
    store.gate.set()
    await first
    await settled(chains)
    assert linked_ids(store) == ["uid-0"]
    await writer.write(entry(1))  # the end, resumed
    assert linked_ids(store) == ["uid-0", "uid-1"]


async def test_a_refused_write_of_one_call_is_told_to_that_call_only(
    signer: Signer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Hit: one call's refused result write was told (a warning event) to every call of
    its batch, each with that call's error text."""
    monkeypatch.setattr(storing, "STORE_RETRY_DELAYS", (0,))
    store = GatedStore()
    private = b"call-2's result"

    def refuse_once(data: bytes) -> None:
        if data == private and not told:
            raise OSError(27, "File too large: call-2's result")

    chains = ReceiptChains(store, lambda: signer)
    writer = ReceiptWriter(store, chains)
    told: list[tuple[str, str]] = []

    def teller(name: str) -> storing.OnFailure:
        return lambda kind, exc: told.append((name, str(exc)))

    first = asyncio.create_task(writer.write(entry(0)))
    await asyncio.to_thread(store.waiting.wait, 10)
    store.hook = refuse_once
    rest = [
        asyncio.create_task(
            writer.write(
                entry(n), results=[private] if n == 2 else [], on_failure=teller(f"call-{n}")
            )
        )
        for n in (1, 2, 3)
    ]
    await asyncio.sleep(0)
    store.gate.set()
    await asyncio.gather(first, *rest)
    assert [name for name, _ in told] == ["call-2"]
    assert linked_ids(store) == [f"uid-{n}" for n in range(4)]


async def test_a_teller_that_fails_stops_no_receipt(
    signer: Signer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Hit: an exception out of one call's `on_failure` ended the chain's drain, failing its
    batch mates whose receipts were stored and cancelling the calls queued behind it."""
    monkeypatch.setattr(storing, "STORE_RETRY_DELAYS", (0,))
    store = GatedStore()
    refused: list[bytes] = []

    def refuse_once(data: bytes) -> None:
        if data == b"fail-me" and not refused:
            refused.append(data)
            raise OSError(5, "Input/output error")

    def broken(kind: ArtifactKind, exc: Exception) -> None:
        raise RuntimeError("the event poster broke")

    chains = ReceiptChains(store, lambda: signer)
    writer = ReceiptWriter(store, chains)
    first = asyncio.create_task(writer.write(entry(0)))
    await asyncio.to_thread(store.waiting.wait, 10)
    store.hook = refuse_once
    batch = [
        asyncio.create_task(writer.write(entry(1), results=[b"fail-me"], on_failure=broken)),
        asyncio.create_task(writer.write(entry(2))),
    ]
    await asyncio.sleep(0)
    store.gate.set()
    assert await asyncio.gather(first, *batch, return_exceptions=True) == [None, None, None]
    assert refused and linked_ids(store) == ["uid-0", "uid-1", "uid-2"]


async def test_a_call_cancelled_while_its_trip_is_made_again_is_not_linked(
    signer: Signer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Hit (second attack pass): a call's end cancelled while the store refused its trip
    (retried for as long as an outage lasts) was still signed and linked once the store
    came back, and its resumed end linked a second receipt of the same call."""
    monkeypatch.setattr(storing, "STORE_RETRY_DELAYS", (0,))
    store = MemoryStore()
    refused = threading.Event()
    down = threading.Event()
    down.set()

    def outage(data: bytes) -> None:
        if down.is_set():
            refused.set()
            raise OSError(110, "Connection timed out")

    store.hook = outage
    chains = ReceiptChains(store, lambda: signer)
    writer = ReceiptWriter(store, chains)
    end = asyncio.create_task(writer.write(entry(1)))
    await asyncio.to_thread(refused.wait, 10)
    assert refused.is_set()
    end.cancel()  # while its trip is being made again
    with pytest.raises(asyncio.CancelledError):
        await end
    down.clear()
    await settled(chains)
    assert linked_ids(store) == []
    await writer.write(entry(1))  # the end, resumed
    assert linked_ids(store) == ["uid-1"]
