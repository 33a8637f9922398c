"""The faults: operator SIGKILLs, kube-apiserver restarts, sandbox pod deletions.

The local cluster (`make cluster-up`) runs kube-apiserver as a host process whose pid is
recorded in `.cluster/pids/` and in the machine-wide registry (`~/.cache/tooladapter/run/
pids/`). A restart reads its argv, environment and working directory from /proc, stops it
with SIGTERM (SIGKILL after 15 s), starts the same command in a new session (log appended to
`.cluster/logs/kube-apiserver.log`), records the new pid in both places and waits for
/readyz. It holds the cluster scripts' lock meanwhile, so a concurrent `make cluster-up`
waits instead of taking the restarting API server for a dead cluster and rebuilding it.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import random
import shutil
import signal
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from kubernetes import client

from tooladapter.devtools import kubeconfig

from .config import ROOT
from .supervisor import SupervisedOperator

CLUSTER = ROOT / ".cluster"
RUN = Path(os.environ.get("TOOLADAPTER_CACHE") or Path.home() / ".cache" / "tooladapter") / "run"
PID_FILES = (CLUSTER / "pids" / "kube-apiserver.pid", RUN / "pids" / "kube-apiserver.pid")
APISERVER_LOG = CLUSTER / "logs" / "kube-apiserver.log"
MANAGED = "app.kubernetes.io/managed-by=tooladapter"
#: SIGTERM, then SIGKILL after this long (as `make cluster-down` does after 10 s): a
#: kube-apiserver with watches open can take a minute to finish its graceful termination.
STOP_TIMEOUT = 15.0


def local_apiserver() -> tuple[int | None, str]:
    """The pid of this checkout's kube-apiserver, or why there is none to restart."""
    if Path(kubeconfig()).resolve() != (CLUSTER / "kubeconfig").resolve():
        return None, f"KUBECONFIG {kubeconfig()} is not the local cluster's"
    try:
        pid = int(PID_FILES[0].read_text().strip())
    except (OSError, ValueError):
        return None, f"no pid file {PID_FILES[0]}"
    try:
        exe = os.readlink(f"/proc/{pid}/exe")
    except OSError:
        return None, f"pid {pid} of {PID_FILES[0]} is not running"
    if Path(exe).name != "kube-apiserver":
        return None, f"pid {pid} runs {exe}, not kube-apiserver"
    return pid, ""


def running(pid: int, children: dict[int, subprocess.Popen[bytes]]) -> bool:
    child = children.get(pid)
    if child is not None:
        return child.poll() is None
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return False
    return fields[0] not in ("Z", "X")  # a zombie has exited


@contextlib.contextmanager
def cluster_lock(timeout: float) -> Iterator[bool]:
    """The lock `make cluster-up`/`cluster-down` take; yields whether it was acquired."""
    RUN.mkdir(parents=True, exist_ok=True)
    with (RUN / "lock").open("a") as fh:
        deadline = time.monotonic() + timeout
        while True:
            try:
                fcntl.flock(fh.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    yield False
                    return
                time.sleep(0.5)
        try:
            yield True
        finally:
            fcntl.flock(fh.fileno(), fcntl.LOCK_UN)


def kubectl() -> str:
    local = CLUSTER / "bin" / "kubectl"
    return str(local) if local.exists() else (shutil.which("kubectl") or "kubectl")


def apiserver_ready() -> bool:
    try:
        out = subprocess.run(
            [kubectl(), "--kubeconfig", kubeconfig(), "get", "--raw", "/readyz"],
            capture_output=True,
            timeout=10,
            check=False,
        )
    except subprocess.TimeoutExpired:
        return False
    return out.returncode == 0 and out.stdout.strip() == b"ok"


class ApiServerRestarter:
    def __init__(self) -> None:
        self.children: dict[int, subprocess.Popen[bytes]] = {}

    def restart(self) -> dict[str, Any]:
        began = time.time()
        record: dict[str, Any] = {"at": began}
        with cluster_lock(60) as locked:
            if not locked:
                return {**record, "done": False, "why": f"{RUN / 'lock'} held for 60 s"}
            pid, why = local_apiserver()
            if pid is None:
                return {**record, "done": False, "why": why}
            argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[:-1]
            env = dict(
                item.split(b"=", 1)
                for item in Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
                if b"=" in item
            )
            cwd = os.readlink(f"/proc/{pid}/cwd")
            os.kill(pid, signal.SIGTERM)
            deadline = time.monotonic() + STOP_TIMEOUT
            while running(pid, self.children) and time.monotonic() < deadline:
                time.sleep(0.1)
            if running(pid, self.children):
                record["sigkill"] = True
                os.kill(pid, signal.SIGKILL)
                while running(pid, self.children) and time.monotonic() < deadline + 15:
                    time.sleep(0.1)
            record["stopped_after_s"] = round(time.time() - began, 2)
            with APISERVER_LOG.open("ab") as log:
                log.write(f"\n===== restarted by make chaos (was pid {pid}) =====\n".encode())
                log.flush()
                child = subprocess.Popen(
                    argv,
                    env=env,
                    cwd=cwd,
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                )
            self.children[child.pid] = child
            for path in PID_FILES:
                if path.parent.is_dir():
                    path.write_text(f"{child.pid}\n")
            deadline = time.monotonic() + 180
            while not apiserver_ready():
                if child.poll() is not None:
                    return {
                        **record,
                        "done": False,
                        "why": f"new kube-apiserver exited {child.returncode}",
                    }
                if time.monotonic() > deadline:
                    return {**record, "done": False, "why": "not ready within 180 s"}
                time.sleep(0.5)
        ended = time.time()
        return {
            **record,
            "done": True,
            "old_pid": pid,
            "new_pid": child.pid,
            "ready_after_s": round(ended - began, 2),
            "ended": ended,
        }


class PodDeleter:
    """Deletes one random live sandbox pod of the load namespace at each of `times`."""

    def __init__(self, admin: client.ApiClient, namespace: str, times: list[float]) -> None:
        self.core = client.CoreV1Api(admin)
        self.namespace = namespace
        self.times = times
        self.deleted: list[dict[str, Any]] = []
        self.missed: list[str] = []
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=self.run, name="pod deleter", daemon=True)

    def run(self) -> None:
        for at in self.times:
            if self.stopping.wait(max(0.0, at - time.time())):
                return
            self.delete_one(give_up=time.time() + 20)

    def delete_one(self, give_up: float) -> None:
        while not self.stopping.is_set():
            try:
                pods = [
                    p
                    for p in self.core.list_namespaced_pod(
                        self.namespace, label_selector=MANAGED, _request_timeout=(5, 20)
                    ).items
                    if p.status.phase in ("Pending", "Running")
                    and not p.metadata.deletion_timestamp
                ]
                if pods:
                    pod = random.choice(pods)
                    running_now = [
                        c.name for c in pod.status.container_statuses or [] if c.state.running
                    ]
                    self.core.delete_namespaced_pod(
                        pod.metadata.name, self.namespace, _request_timeout=(5, 20)
                    )
                    self.deleted.append(
                        {
                            "at": time.time(),
                            "ended": time.time(),
                            "pod": pod.metadata.name,
                            "invocation_uid": (pod.metadata.labels or {}).get(
                                "tooladapter.dev/invocation-uid"
                            ),
                            "phase": pod.status.phase,
                            "running_containers": running_now,
                        }
                    )
                    return
            except Exception as exc:  # the API server is away, or the pod went
                if time.time() > give_up:
                    self.missed.append(f"{time.strftime('%H:%M:%S')} {type(exc).__name__}")
                    return
            if time.time() > give_up:
                self.missed.append(f"{time.strftime('%H:%M:%S')} no live sandbox pod")
                return
            time.sleep(0.5)


class FaultPlan:
    """Kills and API server restarts in one sequence (one fault at a time), at random
    moments of the load window; a kill waits until the operator leads again after the
    previous fault, plus a random moment of its working life."""

    def __init__(
        self,
        operator: SupervisedOperator,
        restarter: ApiServerRestarter,
        events: list[tuple[float, str]],
    ) -> None:
        self.operator = operator
        self.restarter = restarter
        self.events = sorted(events)
        self.kills: list[dict[str, Any]] = []
        self.restarts: list[dict[str, Any]] = []
        self.stopping = threading.Event()
        self.finished = threading.Event()
        self.thread = threading.Thread(target=self.run, name="faults", daemon=True)

    def run(self) -> None:
        try:
            for at, kind in self.events:
                if self.stopping.wait(max(0.0, at - time.time())):
                    return
                if kind == "kill":
                    while not self.operator.ready.wait(1.0):
                        if self.stopping.is_set():
                            return
                    earliest = self.operator.ready_at + random.uniform(0.5, 3.0)
                    time.sleep(max(0.0, earliest - time.monotonic()))
                    self.kills.append(self.operator.kill_and_restart())
                else:
                    self.restarts.append(self.restarter.restart())
        finally:
            self.finished.set()


def schedule(
    rng: random.Random, start: float, window: float, kills: int, restarts: int, pods: int
) -> tuple[list[tuple[float, str]], list[float]]:
    """Random moments in [start, start + window]: kills anywhere after the first seconds,
    API server restarts one per equal slice of the middle 70 %, pod deletions anywhere."""
    events = [(start + rng.uniform(2.0, window), "kill") for _ in range(kills)]
    if restarts:
        width = 0.7 * window / restarts
        events += [
            (start + 0.15 * window + i * width + rng.uniform(0, width), "apiserver")
            for i in range(restarts)
        ]
    deletions = sorted(start + rng.uniform(5.0, window) for _ in range(pods))
    return events, deletions
