"""What every artifact store promises, and the content-addressed layout they share.

A reference is the content hash itself (`sha256:<64 hex>`), so anyone holding one can check
what they read: `sha256(get(ref)) == ref`. Stores check it too: `get` refuses bytes that do
not hash to their reference, whoever wrote them.
"""

from __future__ import annotations

import hashlib
from typing import Protocol

_HEX = frozenset("0123456789abcdef")


class ArtifactStore(Protocol):
    def put(self, data: bytes) -> str:
        """Store `data` once; return its reference `sha256:<hex>`. Idempotent, never
        overwrites. Blocking: call it off the event loop."""

    def get(self, ref: str) -> bytes:
        """The bytes of `ref`, checked against it; raises KeyError when absent and
        `CorruptArtifact` when the stored bytes are not the ones `ref` names."""


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
