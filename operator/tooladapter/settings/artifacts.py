"""Where receipts and results are stored: the artifact store's backend and its location.

One reader of these variables serves the operator (`artifacts.open_store`) and the CLI's
read-only access to a bucket (`receipts verify --store s3://...`).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from tooladapter.enums import ArtifactBackend
from tooladapter.settings import environ as env


@dataclass(frozen=True)
class ArtifactSettings:
    """The artifact store (`tooladapter.artifacts`): files on a volume, or an S3 bucket."""

    #: Where receipts and results are stored by content hash: `file` (under
    #: `directory`) or `s3` (the `s3_*` bucket; credentials from the environment's
    #: AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY, never settings).
    backend: ArtifactBackend = ArtifactBackend.FILE
    #: The file backend's directory (a PVC when in-cluster).
    directory: Path = field(default_factory=lambda: Path.home() / ".tooladapter" / "artifacts")
    #: The s3 backend's endpoint URL (None: AWS's own for `s3_region`), bucket, key
    #: prefix (a folder: a trailing `/` is implied), region and addressing.
    s3_endpoint: str | None = None
    s3_bucket: str = ""
    s3_prefix: str = ""
    s3_region: str = "us-east-1"
    s3_path_style: bool = False

    @classmethod
    def from_env(cls) -> ArtifactSettings:
        base = cls()
        backend = env.choice("TOOLADAPTER_ARTIFACT_BACKEND", base.backend)
        bucket = os.environ.get("TOOLADAPTER_S3_BUCKET", "").strip()
        if backend == ArtifactBackend.S3 and not bucket:
            # Fail closed: receipts must go somewhere durable that was chosen, not a default.
            raise ValueError("TOOLADAPTER_ARTIFACT_BACKEND=s3 needs TOOLADAPTER_S3_BUCKET")
        return cls(
            backend=backend,
            s3_endpoint=env.endpoint("TOOLADAPTER_S3_ENDPOINT"),
            s3_bucket=bucket,
            s3_prefix=os.environ.get("TOOLADAPTER_S3_PREFIX", "").strip(),
            s3_region=os.environ.get("TOOLADAPTER_S3_REGION", "").strip() or base.s3_region,
            s3_path_style=env.boolean("TOOLADAPTER_S3_PATH_STYLE", base.s3_path_style),
            directory=Path(os.environ.get("TOOLADAPTER_ARTIFACT_DIR", str(base.directory))),
        )
