"""Where receipts and results are stored: the artifact store's backend and its location.

One reader of these variables serves the operator (`artifacts.open_store`) and the CLI's
read-only access to a bucket (`receipts verify --store s3://...`).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Self

from tooladapter.enums import ArtifactBackend
from tooladapter.settings import environ as env
from tooladapter.settings.variables import FromEnv, setting


@dataclass(frozen=True)
class ArtifactSettings(FromEnv):
    """The artifact store (`tooladapter.artifacts`): files on a volume, or an S3 bucket."""

    #: Where receipts and results are stored by content hash: `file` (under
    #: `directory`) or `s3` (the `s3_*` bucket; credentials from the environment's
    #: AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY, never settings).
    backend: ArtifactBackend = setting(
        "TOOLADAPTER_ARTIFACT_BACKEND", env.choice, ArtifactBackend.FILE
    )
    #: The file backend's directory (a PVC when in-cluster).
    directory: Path = setting(
        "TOOLADAPTER_ARTIFACT_DIR",
        env.directory,
        default_factory=lambda: Path.home() / ".tooladapter" / "artifacts",
    )
    #: The s3 backend's endpoint URL (None: AWS's own for `s3_region`), bucket, key
    #: prefix (a folder: a trailing `/` is implied), region and addressing.
    s3_endpoint: str | None = setting("TOOLADAPTER_S3_ENDPOINT", env.endpoint, None)
    s3_bucket: str = setting("TOOLADAPTER_S3_BUCKET", env.stripped, "")
    s3_prefix: str = setting("TOOLADAPTER_S3_PREFIX", env.stripped, "")
    s3_region: str = setting("TOOLADAPTER_S3_REGION", env.stripped, "us-east-1")
    s3_path_style: bool = setting("TOOLADAPTER_S3_PATH_STYLE", env.boolean, False)

    @classmethod
    def from_env(cls) -> Self:
        found = super().from_env()
        if found.backend == ArtifactBackend.S3 and not found.s3_bucket:
            # Fail closed: receipts must go somewhere durable that was chosen, not a default.
            raise ValueError("TOOLADAPTER_ARTIFACT_BACKEND=s3 needs TOOLADAPTER_S3_BUCKET")
        return found
