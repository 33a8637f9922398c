"""Processes the test helpers start in their own process group (operator, S3 server,
OTLP collector): stopped together with their children, their logs tailed on failure."""

from __future__ import annotations

import os
import signal
import subprocess
from pathlib import Path


def stop_group(proc: subprocess.Popen[bytes] | None) -> None:
    """SIGTERM the process group, SIGKILL it if it has not ended within 20 s."""
    if proc is not None and proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)


def tail_of(path: Path, lines: int) -> str:
    """The last `lines` lines of a log file ("" before it exists)."""
    if not path.exists():
        return ""
    return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
