"""Appending signed receipts to their namespace incarnation's chain in the artifact store.

Layout: `index/ns/<namespace>/<uid>/chain/<sequence, 12 digits>` holds the reference
(`sha256:<hex>`) of the signed receipt at that place, written once: the first writer of a
number wins it (the file store's link(2), the bucket's `If-None-Match: *`), and a writer
that loses reads the winner's link and tries the next number. So two operators writing
receipts for one namespace (leader election off, or a takeover) leave one unbroken chain,
and steady state costs no request to the API server: the head is kept in memory and only
published, lazily, by `kube.receipt_keys.publish_heads`.

One stored receipt, one truth: the receipt's bytes are stored once, by their content hash
(`sha256/...`), which `receiptRef`, the receipts route and `receipt get` read; the link
only names it. (A link holding a copy of its own made two receipts of one call, and an
auditor who checked the links checked something other than what every reader fetched.)
The receipt is stored before its link claims a number, so a link never names a receipt
that was not written; a writer that loses the number leaves its receipt in the store,
named by no link and so never served (`receipts.service.reader.stored_receipt`).

Blocking (store I/O): called on the store's threads, serialised per chain by a lock; the
receipts that wait meanwhile are gathered on the event loop (`AppendQueue`) and appended in
one batch, one round of fsyncs for all of them.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from tooladapter.artifacts.index import incarnation_prefix
from tooladapter.artifacts.protocol import (
    ArtifactStore,
    ArtifactStoreError,
    CorruptArtifact,
    content_ref,
    digest_of,
    put_all,
)
from tooladapter.receipts.core.chain import Head, Linked, link
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


def link_bytes(ref: str) -> bytes:
    """What a link stores: the reference of its receipt."""
    digest_of(ref)  # KeyError for anything that is not a reference
    return ref.encode()


def named_ref(data: bytes) -> str | None:
    """The receipt reference a link's bytes name (None: the bytes are no reference)."""
    try:
        ref = data.decode("ascii")
        digest_of(ref)
    except (UnicodeDecodeError, KeyError):
        return None
    return ref


def linked_ref(store: ArtifactStore, namespace: str, uid: str, sequence: int) -> str | None:
    """The reference the link at `sequence` names (None: no link there, or not a
    reference). Blocking."""
    try:
        return named_ref(store.get_key(chain_key(namespace, uid, sequence)))
    except KeyError:
        return None


def read_link(store: ArtifactStore, namespace: str, uid: str, sequence: int) -> Linked:
    """The link at `sequence` and the receipt it names (KeyError: no link there)."""
    ref = named_ref(store.get_key(chain_key(namespace, uid, sequence)))
    if ref is None:
        return Linked(None, None)
    try:
        return Linked(ref, store.get(ref))
    except CorruptArtifact:
        return Linked(ref, None, corrupt=True)
    except KeyError:
        return Linked(ref, None)


def read_chain(store: ArtifactStore, namespace: str, uid: str, since: int = 1) -> dict[int, Linked]:
    """Every link of a chain from `since` on, by sequence number, with its receipt."""
    links: dict[int, Linked] = {}
    for key in store.list(chain_prefix(namespace, uid)):
        seq = sequence_of(key)
        if seq is not None and seq >= since:
            links[seq] = read_link(store, namespace, uid, seq)
    return links


class StoredLinks(Mapping[int, Linked]):
    """A chain's links from `since` on, by sequence number, each read from the store (with
    the receipt it names) when asked for: what `receipts verify` walks, one receipt in
    memory at a time (a namespace's calls make its chain as long as they like; `read_chain`
    would hold it all)."""

    def __init__(self, store: ArtifactStore, namespace: str, uid: str, since: int = 1) -> None:
        self.store, self.namespace, self.uid = store, namespace, uid
        found = (sequence_of(key) for key in store.list(chain_prefix(namespace, uid)))
        self.sequences = sorted({seq for seq in found if seq is not None and seq >= since})
        self._known = frozenset(self.sequences)

    def __getitem__(self, sequence: int) -> Linked:
        if sequence not in self._known:
            raise KeyError(sequence)
        return read_link(self.store, self.namespace, self.uid, sequence)

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


#: A link made: the signed receipt's bytes, its reference and its sequence number.
Appended = tuple[bytes, str, int]


@dataclass
class AppendQueue:
    """Receipts waiting to join one chain, gathered on the event loop while a trip of that
    chain is on the store's threads; the next trip appends them all (`append_all`).

    Appends to one chain are one at a time (`_lock`), so without the queue a namespace's
    calls ending at once each waited for the one before it, an fsync round apiece, and a
    flood of them held the store's few shared threads that every other namespace's
    receipts need. Gathered, one trip of the chain is on those threads at a time and
    carries every receipt that came meanwhile, for one round of fsyncs."""

    #: What waits: each entry is the writer's (`receipts.service.writer`).
    waiting: list[Any] = field(default_factory=list)
    #: The task taking the waiting receipts to the store (None: none is running).
    drain: asyncio.Task[None] | None = None


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
        self._queues: dict[tuple[str, str], AppendQueue] = {}
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

    def queue(self, namespace: str, uid: str) -> AppendQueue:
        """The chain's receipts waiting on the event loop for its next trip to the store's
        threads (`AppendQueue`)."""
        with self._guard:
            return self._queues.setdefault((namespace, uid), AppendQueue())

    def _lock(self, key: tuple[str, str]) -> threading.Lock:
        with self._guard:
            return self._locks.setdefault(key, threading.Lock())

    def append(
        self, receipt: Mapping[str, Any], *, namespace: str, uid: str
    ) -> tuple[bytes, str, int]:
        """Sign `receipt` as the next link of the chain of (namespace, uid), store it and
        claim its number: its bytes, reference and sequence number."""
        made: list[Appended] = []
        self.append_all([receipt], namespace=namespace, uid=uid, into=made, signed=[])
        return made[0]

    def append_all(
        self,
        receipts: Sequence[Mapping[str, Any]],
        *,
        namespace: str,
        uid: str,
        into: list[Appended],
        signed: list[Appended],
    ) -> None:
        """Sign each of `receipts` not yet in `into` as the next links of the chain of
        (namespace, uid), store them and claim their numbers, adding each link made to
        `into` (its bytes, reference and sequence number).

        `signed` keeps the links signed but not yet known to be claimed: a trip the store
        failed part way is made again with the same bytes (a link it did make is the same
        bytes at the same number, so storing it again is a no-op), and only a number that
        holds other bytes (another writer's) makes the rest be signed again after it. So
        no receipt of a batch is ever linked twice, whatever the store could tell.

        The receipts are stored before their links claim numbers, so a claimed link always
        names stored bytes; the whole batch is one round of fsyncs (`protocol.put_all`)."""
        key = (namespace, uid)
        with self._lock(key):
            head = self._heads.get(key)
            if head is None:
                head = self.discover(namespace, uid)
            while len(into) < len(receipts):
                if not signed:
                    signed[:] = self._signed(receipts[len(into) :], namespace, uid, head)
                batch = list(signed)
                claimed = put_all(
                    self.store,
                    [data for data, _, _ in batch],
                    [(chain_key(namespace, uid, s), link_bytes(r)) for _, r, s in batch],
                )
                signed.clear()
                head = self._claimed(key, batch, into, claimed) or head
                if claimed < len(batch):
                    # Another writer claimed the next number first: follow the chain to its
                    # end and sign the rest again after it. Never a fork; the receipts just
                    # stored past it are named by no link, so no reader serves them.
                    self.conflicts += 1
                    logger.info(
                        "receipt chain %s/%s: sequence %d was claimed by another writer; "
                        "following it",
                        namespace,
                        uid,
                        head.sequence + 1,
                    )
                    head = self.forward(namespace, uid, head)

    def confirm_signed(
        self, namespace: str, uid: str, *, into: list[Appended], signed: list[Appended]
    ) -> None:
        """Of `signed` (a batch whose trip failed), the links the store holds as made, in
        order, moved to `into`; the rest dropped, to be signed anew. Raises when the store
        cannot be read (nothing is assumed made, nor unmade)."""
        key = (namespace, uid)
        with self._lock(key):
            made = 0
            for _, ref, sequence in signed:
                if linked_ref(self.store, namespace, uid, sequence) != ref:
                    break
                made += 1
            self._claimed(key, list(signed), into, made)
            signed.clear()

    def _signed(
        self, receipts: Sequence[Mapping[str, Any]], namespace: str, uid: str, head: Head
    ) -> list[Appended]:
        """`receipts` signed as the links after `head`, in order."""
        batch: list[Appended] = []
        end = head
        for receipt in receipts:
            body = dict(receipt)
            body["chain"] = link(
                namespace=namespace,
                incarnation=uid,
                sequence=end.sequence + 1,
                previous=end.ref,
                signed_at=now_iso(),
            )
            data = seal(body, self.signer())
            made = (data, content_ref(data), end.sequence + 1)
            batch.append(made)
            end = Head(made[2], made[1])
        return batch

    def _claimed(
        self, key: tuple[str, str], batch: list[Appended], into: list[Appended], claimed: int
    ) -> Head | None:
        """The first `claimed` links of `batch` made: added to `into`, the head moved to the
        last of them (None: none was made)."""
        if not claimed:
            return None
        into.extend(batch[:claimed])
        _, ref, sequence = batch[claimed - 1]
        head = Head(sequence, ref)
        with self._guard:
            self._heads[key] = head
            self.changed.add(key)
        return head

    def forward(self, namespace: str, uid: str, head: Head) -> Head:
        """The chain's end, read on from `head` (a link at a time, up to `PROBE_LIMIT`, then
        by listing)."""
        for _ in range(PROBE_LIMIT):
            try:
                data = self.store.get_key(chain_key(namespace, uid, head.sequence + 1))
            except KeyError:
                return head
            head = Head(head.sequence + 1, self._named(data, namespace, uid, head.sequence + 1))
        return self._listed(namespace, uid) or head

    @staticmethod
    def _named(data: bytes, namespace: str, uid: str, sequence: int) -> str:
        ref = named_ref(data)
        if ref is None:
            # Never chain on after a link that names nothing: the next receipt's `previous`
            # would be made up. The write waits (retried) until a person looks.
            raise ArtifactStoreError(
                f"receipt chain {namespace}/{uid}: the link at sequence {sequence} names no receipt"
            )
        return ref

    def _listed(self, namespace: str, uid: str) -> Head | None:
        keys = [k for k in self.store.list(chain_prefix(namespace, uid)) if sequence_of(k)]
        if not keys:
            return None
        last = keys[-1]
        seq = sequence_of(last)
        assert seq is not None
        return Head(seq, self._named(self.store.get_key(last), namespace, uid, seq))

    def discover(self, namespace: str, uid: str) -> Head:
        """The end of a chain this process has not appended to yet: from the published head
        when there is one, else from the folder's listing."""
        with self._guard:
            hint = self._hints.get((namespace, uid))
        start: Head | None = None
        if hint is not None and hint.sequence > 0:
            # The hint is only where to start reading: the link itself says its receipt
            # (a published head is an object others may write).
            ref = linked_ref(self.store, namespace, uid, hint.sequence)
            start = Head(hint.sequence, ref) if ref is not None else None
        if start is not None:
            head = self.forward(namespace, uid, start)
        else:
            head = self._listed(namespace, uid) or Head()
        if head.sequence:
            logger.info("receipt chain %s/%s continues after %d", namespace, uid, head.sequence)
        return head
