"""The artifact store: receipts and results, addressed by the sha256 of their bytes, each in
a key space of its own (`Space`).

One `ArtifactStore` protocol (`protocol`), two backends: files on a volume (`file`) and
objects in an S3-compatible bucket (`s3`), chosen by the settings (`factory`).
"""

from __future__ import annotations

from tooladapter.artifacts.factory import open_store
from tooladapter.artifacts.file import LocalArtifactStore
from tooladapter.artifacts.protocol import (
    ArtifactStore,
    ArtifactStoreError,
    CorruptArtifact,
    Space,
    content_ref,
    digest_of,
    index_key,
    index_prefix,
    relative_key,
    verified,
)

__all__ = [
    "ArtifactStore",
    "ArtifactStoreError",
    "CorruptArtifact",
    "LocalArtifactStore",
    "Space",
    "content_ref",
    "digest_of",
    "index_key",
    "index_prefix",
    "open_store",
    "relative_key",
    "verified",
]
