"""The artifact store: receipts and results, addressed by the sha256 of their bytes.

A small `ArtifactStore` protocol so an S3-compatible store can follow the local one. The
reference is the content hash itself (`sha256:<hex>`), so anyone holding a reference can
check what they read: `sha256(read(ref)) == ref`.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
from pathlib import Path
from typing import Protocol


class ArtifactStore(Protocol):
    def put(self, data: bytes) -> str:
        """Store `data`; return its reference `sha256:<hex>`. Idempotent."""

    def get(self, ref: str) -> bytes:
        """The bytes of `ref`; raises KeyError when absent."""


def content_ref(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


class LocalArtifactStore:
    """Files under `root/sha256/<2 hex>/<64 hex>`, written atomically (rename)."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def path_of(self, ref: str) -> Path:
        algo, _, digest = ref.partition(":")
        if (
            algo != "sha256"
            or len(digest) != 64
            or not all(c in "0123456789abcdef" for c in digest)
        ):
            raise KeyError(f"not an artifact reference: {ref!r}")
        return self.root / "sha256" / digest[:2] / digest

    def put(self, data: bytes) -> str:
        ref = content_ref(data)
        path = self.path_of(ref)
        if path.exists():
            return ref
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-")
        try:
            with os.fdopen(fd, "wb") as fh:
                fh.write(data)
                fh.flush()
                os.fsync(fh.fileno())
            os.replace(tmp, path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
        return ref

    def get(self, ref: str) -> bytes:
        path = self.path_of(ref)
        try:
            return path.read_bytes()
        except FileNotFoundError:
            raise KeyError(ref) from None
