"""The operator under test: a snapshot of its source, and its process, supervised: killed
on demand and started again, and started again when it exits on its own (as a
Deployment's pod would be).

Every start runs the same code: the package is copied once, at the beginning, into the
workdir (from the working tree by default, or from git HEAD, or from another directory),
so edits made to the checkout while the run goes on never reach the operator under test.
"""

from __future__ import annotations

import io
import re
import shutil
import subprocess
import tarfile
import threading
import time
from pathlib import Path
from typing import Any

from tooladapter.devtools import OperatorProcess
from tooladapter.devtools.process import STARTED

from .config import ROOT

#: How long one wait for "tooladapter started" may take before it is looked at again.
START_WAIT = 90.0
#: An operator that cannot start for this long breaks the run (an infrastructure failure).
GIVE_UP = 300.0


def git(*args: str) -> str:
    return subprocess.run(
        ["git", *args], cwd=ROOT, capture_output=True, text=True, check=False
    ).stdout.rstrip()


def snapshot_source(source: str, into: Path) -> dict[str, Any]:
    """Copy the `tooladapter` package into `into` (a PYTHONPATH entry); say what it is."""
    into.mkdir(parents=True, exist_ok=True)
    info: dict[str, Any] = {"source": source, "head": git("rev-parse", "HEAD")}
    if source == "HEAD":
        data = subprocess.run(
            ["git", "archive", "HEAD", "operator/tooladapter"],
            cwd=ROOT,
            capture_output=True,
            check=True,
        ).stdout
        with tarfile.open(fileobj=io.BytesIO(data)) as tar:
            tar.extractall(into / "_head", filter="data")
        shutil.move(into / "_head" / "operator" / "tooladapter", into / "tooladapter")
        shutil.rmtree(into / "_head")
        return info
    package = (
        ROOT / "operator" / "tooladapter" if source == "tree" else Path(source) / "tooladapter"
    )
    shutil.copytree(package, into / "tooladapter", ignore=shutil.ignore_patterns("__pycache__"))
    if source == "tree":
        changed = git("status", "--porcelain", "--", "operator/tooladapter")
        info["uncommitted_changes"] = [line[3:] for line in changed.splitlines()]
    return info


class SupervisedOperator:
    def __init__(self, workdir: Path, env: dict[str, str], source: str) -> None:
        src = workdir / "src"
        self.source = snapshot_source(source, src)
        self.op = OperatorProcess(workdir, {**env, "PYTHONPATH": str(src)})
        self.broken = ""
        self.lock = threading.RLock()
        self.ready = threading.Event()
        self.ready_at = 0.0
        self.stopping = threading.Event()
        self.kills: list[dict[str, Any]] = []
        self.exits: list[dict[str, Any]] = []
        self.start_failures: list[str] = []
        self.thread = threading.Thread(target=self.watch, name="operator watchdog", daemon=True)

    @property
    def artifacts(self) -> Path:
        return self.op.artifacts

    @property
    def log_path(self) -> Path:
        return self.op.log_path

    def start(self) -> None:
        with self.lock:
            self.start_until_ready(give_up=120)
        if self.broken:
            raise RuntimeError(self.broken)
        self.thread.start()

    def alive(self) -> bool:
        return self.op.proc is not None and self.op.proc.poll() is None

    def start_until_ready(self, give_up: float = GIVE_UP) -> float:
        """(Lock held.) Start the process, or keep waiting for the one running, until it
        leads its scope and says it started; return the seconds that took."""
        began = time.monotonic()
        self.ready.clear()
        while not self.stopping.is_set():
            if time.monotonic() - began > give_up:
                self.broken = (
                    f"the operator did not start within {give_up:.0f} s:\n{self.op.tail(30)}"
                )
                self.op.kill()
                break
            try:
                if self.alive():
                    self.op.wait_log(STARTED, timeout=START_WAIT)
                else:
                    self.op.start(timeout=START_WAIT)
                break
            except AssertionError as exc:
                self.start_failures.append(f"{time.strftime('%H:%M:%S')} {str(exc)[:300]}")
                if not self.alive():
                    time.sleep(1.0)
        self.ready_at = time.monotonic()
        self.ready.set()
        return self.ready_at - began

    def kill_and_restart(self) -> dict[str, Any]:
        """SIGKILL (no clean-up runs, the Lease stays held), then start a new process,
        which leads once the dead holder's Lease has expired."""
        with self.lock:
            if self.broken:
                return {"at": time.time(), "ended": time.time(), "skipped": self.broken[:200]}
            was_ready = self.ready.is_set()
            was_alive = self.alive()
            pid = self.op.proc.pid if self.op.proc is not None else None
            killed_at = time.time()
            self.op.kill()
            took = self.start_until_ready()
            record = {
                "at": killed_at,
                "pid": pid,
                "was_leading": was_ready and was_alive,
                "had_exited_already": not was_alive,
                "leading_again_after_s": round(took, 2),
                "ended": time.time(),
            }
            self.kills.append(record)
            return record

    def watch(self) -> None:
        while not self.stopping.wait(0.5):
            if not self.lock.acquire(blocking=False):
                continue
            try:
                if self.stopping.is_set() or self.broken or self.alive() or self.op.proc is None:
                    continue
                code = self.op.proc.returncode
                exited_at = time.time()
                why = self.last_words()
                took = self.start_until_ready()
                self.exits.append(
                    {
                        "at": exited_at,
                        "code": code,
                        "why": why,
                        "leading_again_after_s": round(took, 2),
                        "ended": time.time(),
                    }
                )
            finally:
                self.lock.release()

    def last_words(self) -> str:
        """The critical line of the latest start's log (why it stopped), if any."""
        text = self.op.log_text()[self.op.offset :]
        found = re.findall(r".*(?:CRITICAL|exiting now|Traceback).*", text)
        return found[-1][:300] if found else ""

    def stop(self) -> None:
        self.stopping.set()
        with self.lock:
            self.op.stop()
        self.thread.join(timeout=5)

    def log_lines(self, needle: str, limit: int = 40) -> list[str]:
        lines = [line[:400] for line in self.op.log_text().splitlines() if needle in line]
        return lines[-limit:]
