"""A real S3-compatible server on loopback for the tests and the demo: SeaweedFS, built
from its pinned Go module and run by `hack/s3/run.sh` (`hack/s3/build.sh` builds it).

Two identities: `admin` creates buckets; `operator` may only read, write and list the
buckets it is given, which is all an s3 artifact store needs. Both keys are random per
server.
"""

from __future__ import annotations

import json
import os
import secrets
import subprocess
from pathlib import Path
from typing import TYPE_CHECKING, Any

import boto3
from botocore.config import Config

from tooladapter.devtools.cluster import ROOT
from tooladapter.devtools.groups import stop_group, tail_of
from tooladapter.devtools.host import free_port
from tooladapter.devtools.waiting import wait_for

if TYPE_CHECKING:
    from types_boto3_s3 import S3Client

HACK = ROOT / "hack" / "s3"
REGION = "us-east-1"


def build() -> Path:
    """The cached server binary, built first if needed (`make s3-server` builds it ahead)."""
    out = subprocess.run(
        [str(HACK / "build.sh")], check=True, capture_output=True, text=True, timeout=3600
    )
    return Path(out.stdout.strip().splitlines()[-1])


class S3Server:
    """`hack/s3/run.sh` in its own process group, on free loopback ports, data and log
    under `workdir`; `buckets` are writable by the operator identity."""

    def __init__(self, workdir: Path, buckets: tuple[str, ...]) -> None:
        self.workdir = workdir
        self.buckets = buckets
        self.port = free_port()
        # All chosen once: a restart (an outage in a test) comes back at the same places.
        self.ports = {
            "S3_MASTER_PORT": str(free_port()),
            "S3_VOLUME_PORT": str(free_port()),
            "S3_FILER_PORT": str(free_port()),
            "S3_GRPC_PORTS": ",".join(str(free_port()) for _ in range(4)),
            "S3_ADMIN_PORTS": f"{free_port()},{free_port()}",
        }
        self.endpoint = f"http://127.0.0.1:{self.port}"
        self.admin_key = ("admin-" + secrets.token_hex(6), secrets.token_urlsafe(24))
        self.operator_key = ("op-" + secrets.token_hex(6), secrets.token_urlsafe(24))
        self.log_path = workdir / "weed.log"
        self.proc: subprocess.Popen[bytes] | None = None

    def identities(self) -> dict[str, Any]:
        def identity(name: str, key: tuple[str, str], actions: list[str]) -> dict[str, Any]:
            return {
                "name": name,
                "credentials": [{"accessKey": key[0], "secretKey": key[1]}],
                "actions": actions,
            }

        granted = [f"{a}:{b}" for b in self.buckets for a in ("Read", "Write", "List")]
        return {
            "identities": [
                identity("admin", self.admin_key, ["Admin", "Read", "Write", "List", "Tagging"]),
                identity("operator", self.operator_key, granted),
            ]
        }

    def start(self, timeout: float = 120) -> None:
        build()
        config = self.workdir / "s3.json"
        config.write_text(json.dumps(self.identities()))
        config.chmod(0o600)
        env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
        env.update(
            self.ports,
            S3_PORT=str(self.port),
            S3_CONFIG=str(config),
            S3_BUCKETS=",".join(self.buckets),
        )
        with self.log_path.open("ab") as log:
            self.proc = subprocess.Popen(
                [str(HACK / "run.sh"), str(self.workdir / "data")],
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        admin = self.client(self.admin_key)

        def ready() -> str | None:
            if self.proc is not None and self.proc.poll() is not None:
                return "exited"
            names = {b["Name"] for b in admin.list_buckets().get("Buckets", [])}
            return "ready" if names.issuperset(self.buckets) else None

        try:
            seen = wait_for(ready, timeout=timeout, what=f"the S3 server at {self.endpoint}")
        except AssertionError:
            self.stop()
            raise
        if seen == "exited":
            raise AssertionError(f"the S3 server exited:\n{self.tail()}")

    def client(self, key: tuple[str, str] | None = None) -> S3Client:
        """A client as the operator (or as `key`), path-style, failing fast."""
        access, secret = key or self.operator_key
        return boto3.session.Session().client(
            "s3",
            endpoint_url=self.endpoint,
            aws_access_key_id=access,
            aws_secret_access_key=secret,
            config=Config(
                region_name=REGION,
                s3={"addressing_style": "path"},
                retries={"mode": "standard", "max_attempts": 1},
                connect_timeout=2,
                read_timeout=10,
            ),
        )

    def operator_env(self, bucket: str, prefix: str = "") -> dict[str, str]:
        """The environment of an operator storing its artifacts in `bucket`."""
        return {
            "TOOLADAPTER_ARTIFACT_BACKEND": "s3",
            "TOOLADAPTER_S3_ENDPOINT": self.endpoint,
            "TOOLADAPTER_S3_BUCKET": bucket,
            "TOOLADAPTER_S3_PREFIX": prefix,
            "TOOLADAPTER_S3_REGION": REGION,
            "TOOLADAPTER_S3_PATH_STYLE": "true",
            "AWS_ACCESS_KEY_ID": self.operator_key[0],
            "AWS_SECRET_ACCESS_KEY": self.operator_key[1],
        }

    def stop(self) -> None:
        stop_group(self.proc)

    def tail(self, lines: int = 60) -> str:
        return tail_of(self.log_path, lines)
