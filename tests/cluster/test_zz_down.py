"""`make cluster-down` leaves no process of the cluster running (issue 2, item 6).

Destructive: it stops the local cluster. Marked cluster_down so that it runs
only when asked for (`pytest -m cluster_down tests/cluster`), after the other
tests. With TOOLADAPTER_RESTORE_CLUSTER=1 it runs `make cluster-up` afterwards.
"""

from __future__ import annotations

import os
import socket
import subprocess
from pathlib import Path
from typing import Any

import pytest
from cluster_helpers import (
    LOCAL_KUBECONFIG,
    REPO_ROOT,
    kubeconfig_path,
    sandbox_container,
    wait_until,
)

pytestmark = [pytest.mark.cluster, pytest.mark.cluster_down]

RUN_DIR = Path(os.environ.get("TOOLADAPTER_CACHE", Path.home() / ".cache" / "tooladapter")) / "run"
CONTAINERD_SOCK = "/run/tooladapter/containerd/containerd.sock"
# 10249 and 10256: kube-proxy (an add-on, issue 15).
PORTS = (6443, 2379, 2380, 10248, 10249, 10250, 10256, 10257, 10259, 20244)


def _make(target: str) -> subprocess.CompletedProcess[str]:
    if (REPO_ROOT / "Makefile").is_file():
        cmd = ["make", "--no-print-directory", "-C", str(REPO_ROOT), target]
    else:
        cmd = [
            "make",
            "--no-print-directory",
            "-C",
            str(REPO_ROOT),
            "-f",
            "hack/cluster.mk",
            target,
        ]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=900, check=False)


def _exe(pid: int) -> str:
    try:
        return os.readlink(f"/proc/{pid}/exe")
    except OSError:
        return ""


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""


def _alive(pid: int) -> bool:
    """True for a live process (a zombie waiting to be reaped does not count)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[-1].split()[0] != "Z"


def _cluster_processes() -> dict[int, str]:
    """Processes that belong to the cluster: recorded components, our containerd's
    shims, and anything in the kubepods cgroups."""
    found: dict[int, str] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        pid = int(entry.name)
        if not _alive(pid):
            continue
        exe = _exe(pid)
        if "containerd-shim" in exe and CONTAINERD_SOCK in _cmdline(pid):
            found[pid] = exe
            continue
        try:
            cgroups = (entry / "cgroup").read_text()
        except OSError:
            continue
        if any(line.split(":", 2)[-1].startswith("/kubepods") for line in cgroups.splitlines()):
            found[pid] = exe or _cmdline(pid)
    return found


def _recorded_pids() -> dict[int, str]:
    pids: dict[int, str] = {}
    for pidfile in (RUN_DIR / "pids").glob("*.pid"):
        try:
            pids[int(pidfile.read_text().strip())] = pidfile.stem
        except ValueError:
            continue
    return pids


def _port_open(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(1)
        return s.connect_ex(("127.0.0.1", port)) == 0


@pytest.mark.skipif(os.geteuid() != 0, reason="the local cluster runs as root")
def test_cluster_down_leaves_no_process_running(core: Any, namespace: str) -> None:
    from kubernetes import client

    if os.environ.get("CLUSTER", "local") != "local" or kubeconfig_path() != LOCAL_KUBECONFIG:
        pytest.skip("only for the local cluster of this checkout")
    # A running pod, so that there are container processes to stop as well.
    pod = client.V1Pod(
        metadata=client.V1ObjectMeta(name="bystander"),
        spec=client.V1PodSpec(
            automount_service_account_token=False,
            containers=[sandbox_container("main", ["/bin/sleep", "3600"])],
        ),
    )
    core.create_namespaced_pod(namespace, pod)
    wait_until(
        "pod bystander to run",
        lambda: core.read_namespaced_pod_status("bystander", namespace).status.phase == "Running",
        timeout=120,
    )
    recorded = _recorded_pids()
    assert recorded, f"no running local cluster recorded in {RUN_DIR}/pids"
    alive_before = {pid: name for pid, name in recorded.items() if _alive(pid)}
    assert len(alive_before) >= 7, (
        alive_before
    )  # containerd, etcd, 3 control plane, kubelet, kube-router
    assert len(_cluster_processes()) >= 3, "expected the pod's shim, pause and sleep processes"

    result = _make("cluster-down")
    assert result.returncode == 0, result.stdout + result.stderr

    try:
        still = {pid: name for pid, name in alive_before.items() if _alive(pid)}
        assert not still, f"components still running after cluster-down: {still}"
        leftovers = _cluster_processes()
        assert not leftovers, f"cluster processes left: {leftovers}"
        assert not [p for p in PORTS if _port_open(p)], "cluster ports still open"
        services = subprocess.run(
            ["iptables", "-t", "nat", "-S", "KUBE-SERVICES"], capture_output=True, check=False
        )
        assert services.returncode != 0, "kube-proxy's Service rules are left"
        assert not LOCAL_KUBECONFIG.exists()
        assert not Path(CONTAINERD_SOCK).exists()
    finally:
        if os.environ.get("TOOLADAPTER_RESTORE_CLUSTER") == "1":
            up = _make("cluster-up")
            assert up.returncode == 0, up.stdout + up.stderr
