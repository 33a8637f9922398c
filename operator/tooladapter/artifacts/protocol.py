"""What every artifact store promises, and the content-addressed layout they share.

A reference is the content hash itself (`sha256:<64 hex>`), so anyone holding one can check
what they read: `sha256(get(ref)) == ref`. Stores check it too: `get` refuses bytes that do
not hash to their reference, whoever wrote them.
"""

from __future__ import annotations

import hashlib
import re
from typing import Protocol

_HEX = frozenset("0123456789abcdef")
#: A named key's segments: no `.`/`..`, no hidden files (the file store's temporaries).
_SEGMENT = re.compile(r"^[A-Za-z0-9_:-][A-Za-z0-9._:-]{0,127}$")
#: Named keys live beside the content-addressed `sha256/...` objects, under `index/`.
INDEX_ROOT = "index/"


class ArtifactStore(Protocol):
    def put(self, data: bytes) -> str:
        """Store `data` once; return its reference `sha256:<hex>`. Idempotent, never
        overwrites. Blocking: call it off the event loop."""

    def get(self, ref: str) -> bytes:
        """The bytes of `ref`, checked against it; raises KeyError when absent and
        `CorruptArtifact` when the stored bytes are not the ones `ref` names."""

    def put_key(self, key: str, data: bytes) -> None:
        """Store `data` under the named `key` (`index/...`, see `index_key`) once: a key
        already holding the same bytes is left as it is; one holding others raises
        `CorruptArtifact` (never overwritten). Blocking."""

    def get_key(self, key: str) -> bytes:
        """The bytes under `key`; KeyError when absent. Blocking."""

    def list(self, prefix: str) -> list[str]:
        """The keys under the folder `prefix` (`index/.../`), sorted. Blocking."""


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


def relative_key(ref: str) -> str:
    """`sha256/<2 hex>/<64 hex>`: the layout of every backend (a file path, an object key)."""
    digest = digest_of(ref)
    return f"sha256/{digest[:2]}/{digest}"


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
