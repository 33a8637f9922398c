"""The artifact store the settings choose (`TOOLADAPTER_ARTIFACT_BACKEND`)."""

from __future__ import annotations

from tooladapter.artifacts.file import LocalArtifactStore
from tooladapter.artifacts.protocol import ArtifactStore
from tooladapter.enums import ArtifactBackend
from tooladapter.settings import Settings


def open_store(settings: Settings) -> ArtifactStore:
    """The configured store, checked where a check is possible. Blocking (an s3 store
    talks to its bucket once): call it off the event loop."""
    if settings.artifacts.backend == ArtifactBackend.S3:
        # Imported here: boto3 costs a file-backed operator (and every unit test) nothing.
        from tooladapter.artifacts.s3 import S3ArtifactStore, S3Location

        return S3ArtifactStore.connect(S3Location.of(settings.artifacts))
    return LocalArtifactStore(settings.artifacts.directory)
