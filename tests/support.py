"""Shared test helpers: real clients for real identities, bounded waits, the operator process.

Nothing here fakes Kubernetes: clients talk to the API server of KUBECONFIG, identities are
ServiceAccount tokens issued by it (TokenRequest), and the operator runs as its own process
exactly as `make run` starts it.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

from kubernetes import client, config

ROOT = Path(__file__).resolve().parent.parent
#: Namespaces of this test session start with this prefix, and the operator this session
#: starts watches only those (TOOLADAPTER_NAMESPACES), so concurrent sessions on one
#: cluster never process each other's invocations.
SESSION = f"ta{uuid.uuid4().hex[:6]}"
GROUP, VERSION = "tooladapter.dev", "v1alpha1"
T = TypeVar("T")


def kubeconfig() -> str:
    return os.environ.get("KUBECONFIG") or str(ROOT / ".cluster" / "kubeconfig")


def admin_client() -> client.ApiClient:
    return config.new_client_from_config(config_file=kubeconfig())


def wait_for(
    predicate: Callable[[], T | None], *, timeout: float, what: str, interval: float = 0.2
) -> T:
    """Poll `predicate` until it returns something truthy, or fail naming `what`."""
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        try:
            last = predicate()
        except Exception as exc:  # the API may be briefly unavailable; keep the last error
            last = exc
        else:
            if last:
                return last
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}; last: {last!r}")


def node_ip() -> str:
    """The node's own address: the first IPv4 address of the default route's interface."""
    routes = json.loads(subprocess.check_output(["ip", "-j", "-4", "route", "show", "default"]))
    dev = routes[0]["dev"]
    addrs = json.loads(subprocess.check_output(["ip", "-j", "-4", "addr", "show", "dev", dev]))
    return str(addrs[0]["addr_info"][0]["local"])


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


class Namespace:
    """A fresh namespace with tooladapter labels; deleted (not awaited) afterwards."""

    def __init__(self, api: client.ApiClient, labels: dict[str, str] | None = None) -> None:
        self.api = api
        self.name = unique(SESSION)
        core = client.CoreV1Api(api)
        core.create_namespace(
            {
                "metadata": {
                    "name": self.name,
                    "labels": {"tooladapter.dev/test": "true", **(labels or {})},
                }
            }
        )
        wait_for(
            lambda: any(
                sa.metadata.name == "default"
                for sa in core.list_namespaced_service_account(self.name).items
            ),
            timeout=60,
            what=f"default serviceaccount in {self.name}",
        )

    def delete(self) -> None:
        with contextlib.suppress(Exception):
            client.CoreV1Api(self.api).delete_namespace(self.name)


def token_for(api: client.ApiClient, namespace: str, sa: str, seconds: int = 3600) -> str:
    core = client.CoreV1Api(api)
    with contextlib.suppress(client.ApiException):
        core.create_namespaced_service_account(namespace, {"metadata": {"name": sa}})
    result = core.create_namespaced_service_account_token(
        sa, namespace, {"spec": {"expirationSeconds": seconds}}
    )
    return str(result.status.token)


def client_with_token(api: client.ApiClient, token: str) -> client.ApiClient:
    cfg = client.Configuration()
    admin = api.configuration
    cfg.host = admin.host
    cfg.ssl_ca_cert = admin.ssl_ca_cert
    cfg.verify_ssl = admin.verify_ssl
    cfg.api_key = {"authorization": token}
    cfg.api_key_prefix = {"authorization": "Bearer"}
    return client.ApiClient(cfg)


def sa_user(namespace: str, sa: str) -> str:
    return f"system:serviceaccount:{namespace}:{sa}"


class OperatorProcess:
    """The operator as `make run` starts it, in its own process group, with its log kept."""

    def __init__(self, workdir: Path, env: dict[str, str] | None = None) -> None:
        self.workdir = workdir
        self.artifacts = workdir / "artifacts"
        self.log_path = workdir / "operator.log"
        self.metrics_port = free_port()
        self.env = {
            **os.environ,
            "KUBECONFIG": kubeconfig(),
            "TOOLADAPTER_ARTIFACT_DIR": str(self.artifacts),
            "TOOLADAPTER_METRICS_PORT": str(self.metrics_port),
            "TOOLADAPTER_RECONCILE_INTERVAL_SECONDS": "3",
            "TOOLADAPTER_SANDBOX_RETAIN_SECONDS": "30",
            "TOOLADAPTER_NAMESPACES": f"{SESSION}-*",
            **(env or {}),
        }
        self.proc: subprocess.Popen[bytes] | None = None
        self.starts = 0

    def start(self) -> None:
        self.starts += 1
        log = self.log_path.open("ab")
        log.write(f"\n===== start {self.starts} =====\n".encode())
        log.flush()
        offset = self.log_path.stat().st_size
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tooladapter", "run"],
            cwd=ROOT,
            env=self.env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        wait_for(lambda: self._started_since(offset), timeout=60, what="operator start-up")

    def _started_since(self, offset: int) -> bool:
        if self.proc is not None and self.proc.poll() is not None:
            raise AssertionError(f"operator exited with {self.proc.returncode}:\n{self.tail()}")
        with self.log_path.open("rb") as fh:
            fh.seek(offset)
            return b"tooladapter started" in fh.read()

    def kill(self) -> None:
        """SIGKILL, as a crash: no cleanup runs."""
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=30)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.kill()

    def tail(self, lines: int = 80) -> str:
        if not self.log_path.exists():
            return ""
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])

    def log_text(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""


@contextlib.contextmanager
def operator_running(workdir: Path, env: dict[str, str] | None = None) -> Iterator[OperatorProcess]:
    op = OperatorProcess(workdir, env)
    op.start()
    try:
        yield op
    finally:
        op.stop()
