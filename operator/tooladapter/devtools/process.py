"""The operator as its own process, exactly as `make run` starts it."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

from .cluster import ROOT, SESSION, kubeconfig
from .host import free_port
from .waiting import wait_for


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
