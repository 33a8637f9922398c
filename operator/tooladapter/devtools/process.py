"""The operator as its own process, exactly as `make run` starts it."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

from tooladapter.devtools.cluster import ROOT, SESSION, kubeconfig
from tooladapter.devtools.host import free_port
from tooladapter.devtools.waiting import wait_for

#: The log line of an operator that is ready (it leads its scope and watches).
STARTED = "tooladapter started"


class OperatorProcess:
    """The operator as `make run` starts it, in its own process group, with its log kept."""

    #: The `tooladapter` subcommand this process runs.
    COMMAND: tuple[str, ...] = ("run",)
    LOG_NAME = "operator.log"

    def __init__(self, workdir: Path, env: dict[str, str] | None = None) -> None:
        self.workdir = workdir
        self.artifacts = workdir / "artifacts"
        self.log_path = workdir / self.LOG_NAME
        self.metrics_port = free_port()
        #: The gateway (HTTP API, MCP) on loopback, a port of its own per process.
        self.gateway_port = free_port()
        self.env = {
            **os.environ,
            "KUBECONFIG": kubeconfig(),
            "TOOLADAPTER_ARTIFACT_DIR": str(self.artifacts),
            "TOOLADAPTER_METRICS_PORT": str(self.metrics_port),
            "TOOLADAPTER_GATEWAY_PORT": str(self.gateway_port),
            # The reviewers' page links MCP clients get (URL elicitation) point here.
            "TOOLADAPTER_GATEWAY_PUBLIC_URL": f"http://127.0.0.1:{self.gateway_port}",
            "TOOLADAPTER_GATEWAY_HOST": "127.0.0.1",
            "TOOLADAPTER_RECONCILE_INTERVAL_SECONDS": "3",
            "TOOLADAPTER_SANDBOX_RETAIN_SECONDS": "30",
            "TOOLADAPTER_NAMESPACES": f"{SESSION}-*",
            **(env or {}),
        }
        self.proc: subprocess.Popen[bytes] | None = None
        self.starts = 0
        #: Where the log of the latest start begins.
        self.offset = 0

    @property
    def gateway_url(self) -> str:
        return f"http://127.0.0.1:{self.env['TOOLADAPTER_GATEWAY_PORT']}"

    def start(self, until: str = STARTED, timeout: float = 60) -> None:
        """Start the process and wait until its log says `until` (by default that it is
        ready; a standby says "standby: ..." and is ready only once it leads)."""
        self.starts += 1
        # The child keeps its own descriptor of the log; ours closes once it started.
        with self.log_path.open("ab") as log:
            log.write(f"\n===== start {self.starts} =====\n".encode())
            log.flush()
            self.offset = self.log_path.stat().st_size
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "tooladapter", *self.COMMAND],
                cwd=ROOT,
                env=self.env,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        self.wait_log(until, timeout=timeout)

    def wait_log(self, text: str, *, timeout: float) -> None:
        """Wait until the log of the latest start contains `text`; fail as soon as the
        process exits without having said it."""

        def seen_or_exited() -> str | None:
            if self.says(text):
                return "seen"
            if self.proc is not None and self.proc.poll() is not None:
                return "exited"
            return None

        if wait_for(seen_or_exited, timeout=timeout, what=f"operator log {text!r}") == "exited":
            code = self.proc.returncode if self.proc is not None else None
            raise AssertionError(f"operator exited with {code}:\n{self.tail()}")

    def says(self, text: str) -> bool:
        """Whether the log of the latest start contains `text` (now)."""
        with self.log_path.open("rb") as fh:
            fh.seek(self.offset)
            return text.encode() in fh.read()

    def kill(self) -> None:
        """SIGKILL, as a crash: no cleanup runs."""
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=30)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                # A clean stop takes well under a second; on a loaded node its cleanup (the
                # flows cancelled, then the Lease released) was seen to pass 20 s.
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.kill()

    def tail(self, lines: int = 80) -> str:
        if not self.log_path.exists():
            return ""
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])

    def log_text(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""


class EgressProxyProcess(OperatorProcess):
    """The egress proxy as `python -m tooladapter egress-proxy` (host mode): its port and
    metrics port are free ones, its scope the operator's unless `env` says otherwise."""

    COMMAND = ("egress-proxy",)
    LOG_NAME = "egress-proxy.log"

    def __init__(self, workdir: Path, env: dict[str, str] | None = None) -> None:
        self.port = free_port("0.0.0.0")  # noqa: S104
        super().__init__(
            workdir,
            {
                "TOOLADAPTER_EGRESS_PROXY_PORT": str(self.port),
                "TOOLADAPTER_EGRESS_METRICS_PORT": str(free_port()),
                **(env or {}),
            },
        )
        self.metrics_port = int(self.env["TOOLADAPTER_EGRESS_METRICS_PORT"])

    def start(self, until: str = "egress proxy listening", timeout: float = 60) -> None:
        super().start(until, timeout)


@contextlib.contextmanager
def operator_running(workdir: Path, env: dict[str, str] | None = None) -> Iterator[OperatorProcess]:
    op = OperatorProcess(workdir, env)
    op.start()
    try:
        yield op
    finally:
        op.stop()
