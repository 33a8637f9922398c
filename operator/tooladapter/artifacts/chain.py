"""Appending signed receipts to their namespace incarnation's chain in the artifact store.

Layout: `index/ns/<namespace>/<uid>/chain/<sequence, 12 digits>` holds the whole signed
receipt (the envelope's bytes), written once: the first writer of a number wins it (the
file store's link(2), the bucket's `If-None-Match: *`), and a writer that loses reads the
winner's link and tries the next number. So two operators writing receipts for one
namespace (leader election off, or a takeover) leave one unbroken chain, and steady state
costs no request to the API server: the head is kept in memory and only published, lazily,
by `kube.receipt_keys.publish_heads`.

Each receipt is also stored by its content hash (`sha256/...`, what `receiptRef` names),
after its link: a crash between the two writes leaves a link without its copy, which the
next writer of the chain (`discover`, at its first append after a start) writes again from
the link's bytes. The store never deletes anything, so retention never removes a link.

Blocking (store I/O): called on the store's threads, serialised per chain by a lock.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Callable, Iterator, Mapping
from typing import Any, Final

from tooladapter.artifacts.index import incarnation_prefix
from tooladapter.artifacts.protocol import ArtifactStore, CorruptArtifact, content_ref
from tooladapter.receipts.core.chain import Head, link
from tooladapter.receipts.core.signing import Signer, seal
from tooladapter.timeutil import now_iso

logger = logging.getLogger("tooladapter.receipts")

DIGITS: Final = 12
#: Forward reads a writer makes past a known head before it lists the folder instead.
PROBE_LIMIT: Final = 64


def chain_prefix(namespace: str, uid: str) -> str:
    return f"{incarnation_prefix(namespace, uid)}chain/"


def chain_key(namespace: str, uid: str, sequence: int) -> str:
    return f"{chain_prefix(namespace, uid)}{sequence:0{DIGITS}d}"


def sequence_of(key: str) -> int | None:
    tail = key.rsplit("/", 1)[-1]
    return int(tail) if len(tail) == DIGITS and tail.isdigit() else None


def read_chain(store: ArtifactStore, namespace: str, uid: str, since: int = 1) -> dict[int, bytes]:
    """Every link of a chain from `since` on, by sequence number (bytes as stored)."""
    links: dict[int, bytes] = {}
    for key in store.list(chain_prefix(namespace, uid)):
        seq = sequence_of(key)
        if seq is not None and seq >= since:
            links[seq] = store.get_key(key)
    return links


class StoredLinks(Mapping[int, bytes]):
    """A chain's links from `since` on, by sequence number, each read from the store when
    asked for: what `receipts verify` walks, one link in memory at a time (a namespace's
    calls make its chain as long as they like; `read_chain` would hold it all)."""

    def __init__(self, store: ArtifactStore, namespace: str, uid: str, since: int = 1) -> None:
        self.store, self.namespace, self.uid = store, namespace, uid
        found = (sequence_of(key) for key in store.list(chain_prefix(namespace, uid)))
        self.sequences = sorted({seq for seq in found if seq is not None and seq >= since})
        self._known = frozenset(self.sequences)

    def __getitem__(self, sequence: int) -> bytes:
        if sequence not in self._known:
            raise KeyError(sequence)
        return self.store.get_key(chain_key(self.namespace, self.uid, sequence))

    def __iter__(self) -> Iterator[int]:
        return iter(self.sequences)

    def __len__(self) -> int:
        return len(self.sequences)


def incarnations(store: ArtifactStore, namespace: str) -> list[str]:
    """The uids of the namespace's incarnations that have a chain in the store."""
    found: set[str] = set()
    prefix = f"index/ns/{namespace}/"
    for key in store.list(prefix):
        parts = key[len(prefix) :].split("/")
        if len(parts) >= 3 and parts[1] == "chain":
            found.add(parts[0])
    return sorted(found)


class ReceiptChains:
    """The chains this process appends to, their heads in memory."""

    def __init__(
        self,
        store: ArtifactStore,
        signer: Callable[[], Signer],
        *,
        hints: Mapping[tuple[str, str], Head] | None = None,
    ) -> None:
        self.store = store
        #: The active signing key (read each append: a rotation takes effect at once).
        self.signer = signer
        self._heads: dict[tuple[str, str], Head] = {}
        #: Heads published before this start (`kube.receipt_keys`): where `discover` starts.
        self._hints: dict[tuple[str, str], Head] = dict(hints or {})
        self._locks: dict[tuple[str, str], threading.Lock] = {}
        self._turns: dict[tuple[str, str], asyncio.Lock] = {}
        self._guard = threading.Lock()
        #: Chains whose head moved since the last publication.
        self.changed: set[tuple[str, str]] = set()
        #: Links another writer claimed first (the forks avoided).
        self.conflicts = 0

    def heads(self) -> dict[tuple[str, str], Head]:
        with self._guard:
            return dict(self._heads)

    def take_changed(self) -> dict[tuple[str, str], Head]:
        with self._guard:
            taken = {k: self._heads[k] for k in self.changed if k in self._heads}
            self.changed.clear()
            return taken

    def hint(self, key: tuple[str, str], head: Head) -> None:
        with self._guard:
            held = self._hints.get(key)
            if held is None or head.sequence > held.sequence:
                self._hints[key] = head

    def mark_changed(self, heads: Mapping[tuple[str, str], Head]) -> None:
        with self._guard:
            self.changed.update(heads)

    def hinted(self) -> list[tuple[str, str]]:
        with self._guard:
            return list(self._hints)

    def ensure_head(self, namespace: str, uid: str) -> Head:
        """The chain's head, discovered (and repaired) unless this process knows it."""
        key = (namespace, uid)
        with self._lock(key):
            head = self._heads.get(key)
            if head is None:
                head = self.discover(namespace, uid)
                with self._guard:
                    self._heads[key] = head
            return head

    def turn(self, namespace: str, uid: str) -> asyncio.Lock:
        """The chain's turn on the store's threads, taken on the event loop before a trip
        that appends to it. Appends to one chain wait for each other (`_lock`); without the
        turn they would wait on the store's few shared threads, and one namespace's flood
        of calls ending would hold every thread and every other namespace's receipts."""
        with self._guard:
            return self._turns.setdefault((namespace, uid), asyncio.Lock())

    def _lock(self, key: tuple[str, str]) -> threading.Lock:
        with self._guard:
            return self._locks.setdefault(key, threading.Lock())

    def append(
        self, receipt: Mapping[str, Any], *, namespace: str, uid: str
    ) -> tuple[bytes, str, int]:
        """Sign `receipt` as the next link of the chain of (namespace, uid) and claim its
        number: its bytes, reference and sequence number. The caller stores the content
        copy next (`store.put(bytes)`), again until the store takes it."""
        key = (namespace, uid)
        with self._lock(key):
            head = self._heads.get(key)
            if head is None:
                head = self.discover(namespace, uid)
            while True:
                seq = head.sequence + 1
                body = dict(receipt)
                body["chain"] = link(
                    namespace=namespace,
                    incarnation=uid,
                    sequence=seq,
                    previous=head.ref,
                    signed_at=now_iso(),
                )
                data = seal(body, self.signer())
                try:
                    self.store.put_key(chain_key(namespace, uid, seq), data)
                except CorruptArtifact:
                    # Another writer claimed this number first: follow the chain to its
                    # end and sign again after it. Never a fork.
                    self.conflicts += 1
                    logger.info(
                        "receipt chain %s/%s: sequence %d was claimed by another writer; "
                        "following it",
                        namespace,
                        uid,
                        seq,
                    )
                    head = self.forward(namespace, uid, head, repair=False)
                    continue
                break
            ref = content_ref(data)
            new = Head(seq, ref)
            with self._guard:
                self._heads[key] = new
                self.changed.add(key)
            return data, ref, seq

    def forward(self, namespace: str, uid: str, head: Head, *, repair: bool) -> Head:
        """The chain's end, read on from `head` (a link at a time, up to `PROBE_LIMIT`, then
        by listing); `repair` stores each link's content copy again (idempotent)."""
        for _ in range(PROBE_LIMIT):
            try:
                data = self.store.get_key(chain_key(namespace, uid, head.sequence + 1))
            except KeyError:
                return head
            if repair:
                self.store.put(data)
            head = Head(head.sequence + 1, content_ref(data))
        return self._listed(namespace, uid, repair=repair) or head

    def _listed(self, namespace: str, uid: str, *, repair: bool) -> Head | None:
        keys = [k for k in self.store.list(chain_prefix(namespace, uid)) if sequence_of(k)]
        if not keys:
            return None
        last = keys[-1]
        data = self.store.get_key(last)
        if repair:
            self.store.put(data)
        seq = sequence_of(last)
        assert seq is not None
        return Head(seq, content_ref(data))

    def discover(self, namespace: str, uid: str) -> Head:
        """The end of a chain this process has not appended to yet, its newest links'
        content copies written again (the repair of a crash between a link and its copy):
        from the published head when there is one, else from the folder's listing."""
        with self._guard:
            hint = self._hints.get((namespace, uid))
        start: Head | None = None
        if hint is not None and hint.sequence > 0:
            # The hint is only where to start reading: the link's own bytes say its digest
            # (a published head is an object others may write).
            try:
                data = self.store.get_key(chain_key(namespace, uid, hint.sequence))
                start = Head(hint.sequence, content_ref(data))
            except KeyError:
                start = None
        if start is not None:
            head = self.forward(namespace, uid, start, repair=True)
        else:
            head = self._listed(namespace, uid, repair=True) or Head()
        if head.sequence:
            logger.info("receipt chain %s/%s continues after %d", namespace, uid, head.sequence)
        return head
