"""What every artifact store promises, and the content-addressed layout they share.

A reference is the content hash itself (`sha256:<64 hex>`), so anyone holding one can check
what they read: `sha256(get(ref)) == ref`. Stores check it too: `get` refuses bytes that do
not hash to their reference, whoever wrote them.

Content lives in one of two key spaces (`Space`): signed receipts under `sha256/...`, and
everything a call's data makes (results, the arguments a reviewer compares with) under
`results/sha256/...`. A tool's output is bytes an agent can shape at will, a receipt
among them: kept apart, a result is never read back, served or verified as a receipt,
whatever it looks like.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence
from enum import StrEnum
from typing import Protocol, runtime_checkable

_HEX = frozenset("0123456789abcdef")
#: A named key's segments: no `.`/`..`, no hidden files (the file store's temporaries).
_SEGMENT = re.compile(r"^[A-Za-z0-9_:-][A-Za-z0-9._:-]{0,127}$")
#: Named keys live beside the content-addressed `sha256/...` objects, under `index/`.
INDEX_ROOT = "index/"


class Space(StrEnum):
    """The key space of content-addressed bytes: a reference names bytes in one space, and
    reading it from another finds nothing."""

    RECEIPTS = ""
    """Signed receipts only (`sha256/...`): what `receiptRef`, the receipts route and
    `receipt get` read."""
    RESULTS = "results/"
    """Results and every other artifact of a call's data (`results/sha256/...`): never a
    receipt, whatever the bytes say."""


class ArtifactStore(Protocol):
    def put(self, data: bytes, space: Space = Space.RECEIPTS) -> str:
        """Store `data` once in `space`; return its reference `sha256:<hex>`. Idempotent,
        never overwrites. Blocking: call it off the event loop."""

    def get(self, ref: str, space: Space = Space.RECEIPTS) -> bytes:
        """The bytes of `ref` in `space`, checked against it; raises KeyError when absent
        and `CorruptArtifact` when the stored bytes are not the ones `ref` names."""

    def put_key(self, key: str, data: bytes) -> None:
        """Store `data` under the named `key` (`index/...`, see `index_key`) once: a key
        already holding the same bytes is left as it is; one holding others raises
        `CorruptArtifact` (never overwritten). Blocking."""

    def get_key(self, key: str) -> bytes:
        """The bytes under `key`; KeyError when absent. Blocking."""

    def list(self, prefix: str) -> list[str]:
        """The keys under the folder `prefix` (`index/.../`), sorted. Blocking."""


@runtime_checkable
class BatchingStore(Protocol):
    """A store that stores a batch with one round of syncs (`put_all`)."""

    def put_all(self, datas: Sequence[bytes], keys: Sequence[tuple[str, bytes]] = ()) -> int:
        """`put` of every `datas`, then `put_key` of each of `keys` in order, stopping at
        the first key that holds other bytes: how many keys were stored. Blocking."""


def put_all(store: ArtifactStore, datas: Sequence[bytes], keys: Sequence[tuple[str, bytes]]) -> int:
    """Every `datas` stored, then each of `keys` in order up to the first that holds other
    bytes: how many keys were stored (the store's own batch when it has one)."""
    if isinstance(store, BatchingStore):
        return store.put_all(datas, keys)
    for data in datas:
        store.put(data)
    for stored, (key, value) in enumerate(keys):
        try:
            store.put_key(key, value)
        except CorruptArtifact:
            return stored
    return len(keys)


class ArtifactStoreError(Exception):
    """The store could not be reached, or refused a request."""


class CorruptArtifact(ArtifactStoreError):
    """The object stored under a reference is not the bytes that reference names."""


def content_ref(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def digest_of(ref: str) -> str:
    """The 64 hex digits of `ref`; KeyError for anything that is not a reference (so a
    caller-supplied string can never name a path or key outside the layout)."""
    algo, _, digest = ref.partition(":")
    if algo != "sha256" or len(digest) != 64 or not _HEX.issuperset(digest):
        raise KeyError(f"not an artifact reference: {ref!r}")
    return digest


def relative_key(ref: str, space: Space = Space.RECEIPTS) -> str:
    """`[results/]sha256/<2 hex>/<64 hex>`: the layout of every backend (a file path, an
    object key)."""
    digest = digest_of(ref)
    return f"{space.value}sha256/{digest[:2]}/{digest}"


def verified(ref: str, data: bytes) -> bytes:
    """`data` when it hashes to `ref`; otherwise `CorruptArtifact`."""
    if content_ref(data) != ref:
        raise CorruptArtifact(f"the stored bytes of {ref} hash to {content_ref(data)}")
    return data


def index_key(key: str) -> str:
    """`key` when it is a named key (`index/<segment>/.../<segment>`); otherwise KeyError,
    so no string names a path or object outside the index."""
    if not key.startswith(INDEX_ROOT) or not all(
        _SEGMENT.match(part) for part in key[len(INDEX_ROOT) :].split("/")
    ):
        raise KeyError(f"not an index key: {key!r}")
    return key


def index_prefix(prefix: str) -> str:
    """`prefix` when it is a folder of named keys (`index/.../`); otherwise KeyError."""
    if not prefix.endswith("/"):
        raise KeyError(f"not an index folder: {prefix!r}")
    if prefix != INDEX_ROOT:
        index_key(prefix[:-1])
    return prefix
