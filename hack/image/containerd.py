"""Importing an image archive into the local cluster's containerd (no registry).

"The local cluster" is the one `make cluster-up` runs on this machine: its kubeconfig is
the one under the checkout recorded in `~/.cache/tooladapter/run/owner`, and its
containerd listens on `/run/tooladapter/containerd/containerd.sock` (hack/cluster/lib.sh).
Any other KUBECONFIG (kind, a remote cluster) gets archives, never a surprise import.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

SOCKET = Path("/run/tooladapter/containerd/containerd.sock")
NAMESPACE = "k8s.io"


def cache_root() -> Path:
    return Path(os.environ.get("TOOLADAPTER_CACHE", Path.home() / ".cache/tooladapter"))


def local_cluster(kubeconfig: str | None) -> bool:
    """Whether `kubeconfig` is the running local cluster's and its containerd is up."""
    owner = cache_root() / "run" / "owner"
    if not kubeconfig or not owner.is_file() or not SOCKET.is_socket():
        return False
    local = Path(owner.read_text().strip()) / "kubeconfig"
    return local.is_file() and Path(kubeconfig).resolve() == local.resolve()


def _ctr(*args: str) -> str:
    return subprocess.run(
        ["ctr", "--address", str(SOCKET), "-n", NAMESPACE, *args],
        check=True,
        capture_output=True,
        text=True,
    ).stdout


def imported_digest(tag: str) -> str | None:
    for line in _ctr("images", "ls", f"name=={tag}").splitlines()[1:]:
        fields = line.split()
        if len(fields) >= 3 and fields[0] == tag:
            return fields[2]
    return None


def load(archive: Path, tag: str, digest: str) -> bool:
    """Import `archive` unless containerd already has `tag` at `digest`; returns whether
    it imported."""
    if imported_digest(tag) == digest:
        return False
    _ctr("images", "import", str(archive))
    if imported_digest(tag) != digest:
        raise SystemExit(f"containerd does not show {tag} at {digest} after the import")
    return True
