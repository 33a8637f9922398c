"""The Helm release under test: installed with `make deploy`, read back from Helm and the
cluster, its pods killed the way a node kills them.

The release is the one `make deploy` makes (DEPLOY_RELEASE in DEPLOY_NAMESPACE, the same
environment variables the Makefile reads). On a shared cluster, run a second release beside
the first with its own prefix and namespace scope, e.g.

    DEPLOY_RELEASE=tachart DEPLOY_NAMESPACE=ta-chart \\
    DEPLOY_ARGS="--set prefix=tachart --set namespaces=tachart-*" make deploy-test

(DEPLOY_TEST_SKIP_DEPLOY=1 reuses the installed release instead of running `make deploy`.)
"""

from __future__ import annotations

import json
import os
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kubernetes import client

from tooladapter.devtools import ROOT, node_ip, unique, wait_for
from tooladapter.kube.leases import lease_name

CHART = ROOT / "charts" / "tooladapter"
#: The local cluster's containerd (hack/cluster/lib.sh): a pod's process can be SIGKILLed
#: through it, as an OOM kill or a node crash would end it, with no clean stop.
CONTAINERD_SOCK = Path("/run/tooladapter/containerd/containerd.sock")
OPERATOR_SELECTOR = "app.kubernetes.io/component=operator"


def helm() -> str:
    return os.environ.get("HELM", "helm")


def run(*argv: str, timeout: float = 600) -> str:
    done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=False)
    if done.returncode:
        raise AssertionError(f"{' '.join(argv)} failed ({done.returncode}):\n{done.stderr}")
    return done.stdout


def make(target: str, **variables: str) -> None:
    """A Makefile target with this process's environment (DEPLOY_*, KUBECONFIG) and
    `variables` on its command line (REGISTRY=...)."""
    argv = ["make", "--no-print-directory", target, *(f"{k}={v}" for k, v in variables.items())]
    done = subprocess.run(argv, cwd=ROOT, text=True, check=False, timeout=900)
    assert done.returncode == 0, f"make {target} failed ({done.returncode})"


@dataclass
class Release:
    api: client.ApiClient
    name: str
    namespace: str

    @classmethod
    def from_env(cls, api: client.ApiClient) -> Release:
        return cls(
            api,
            os.environ.get("DEPLOY_RELEASE", "tooladapter"),
            os.environ.get("DEPLOY_NAMESPACE", "tooladapter-system"),
        )

    def values(self) -> dict[str, Any]:
        """The release's computed values (chart defaults with every override)."""
        out = run(helm(), "get", "values", self.name, "-n", self.namespace, "-a", "-o", "json")
        values: dict[str, Any] = json.loads(out)
        return values

    @property
    def prefix(self) -> str:
        return str(self.values()["prefix"])

    @property
    def scope(self) -> tuple[str, ...]:
        raw = str(self.values()["namespaces"])
        return tuple(p.strip() for p in raw.split(",") if p.strip())

    def tenant_prefix(self) -> str:
        """A namespace name prefix inside the release's scope."""
        scope = self.scope
        if not scope:
            return "tadeploy"
        glob = scope[0]
        assert glob.endswith("-*") and "*" not in glob[:-1], (
            f"namespaces={glob!r}: the deploy tests need a scope of the form <prefix>-*"
        )
        return glob[:-2]

    def selector(self) -> str:
        return f"app.kubernetes.io/instance={self.name},{OPERATOR_SELECTOR}"

    def pods(self) -> list[Any]:
        core = client.CoreV1Api(self.api)
        return [
            p
            for p in core.list_namespaced_pod(self.namespace, label_selector=self.selector()).items
            if p.metadata.deletion_timestamp is None
        ]

    def lease(self) -> dict[str, Any] | None:
        name = lease_name(self.scope)
        try:
            lease = client.CoordinationV1Api(self.api).read_namespaced_lease(name, self.namespace)
        except client.ApiException as exc:
            if exc.status == 404:
                return None
            raise
        return {
            "holder": lease.spec.holder_identity or "",
            "transitions": lease.spec.lease_transitions or 0,
        }

    def leader_pod(self) -> Any:
        """The pod whose process holds the Lease (its identity starts with the pod name)."""

        def found() -> Any:
            lease = self.lease()
            if not lease or not lease["holder"]:
                return None
            host = lease["holder"].split("_", 1)[0]
            return next((p for p in self.pods() if p.metadata.name == host), None)

        return wait_for(found, timeout=120, what="a pod of the release holding the Lease")

    def upgrade(self, *values: str) -> None:
        """`helm upgrade --reuse-values` with `values` (`--set=...` flags), waiting for the
        roll."""
        run(
            helm(),
            "upgrade",
            self.name,
            str(CHART),
            "--namespace",
            self.namespace,
            "--reuse-values",
            *values,
            "--wait",
            "--timeout=5m",
        )

    def wait_ready(self, replicas: int, timeout: float = 300) -> None:
        def ready() -> bool:
            pods = self.pods()
            return len(pods) == replicas and all(
                any(c.type == "Ready" and c.status == "True" for c in p.status.conditions or [])
                for p in pods
            )

        wait_for(ready, timeout=timeout, what=f"{replicas} ready operator pods", interval=1)

    def logs(self, tail: int = 150) -> str:
        out = []
        core = client.CoreV1Api(self.api)
        for pod in self.pods():
            for previous in (True, False):
                try:
                    text = core.read_namespaced_pod_log(
                        pod.metadata.name, self.namespace, tail_lines=tail, previous=previous
                    )
                except client.ApiException:
                    continue
                label = "previous container" if previous else "current container"
                out.append(f"===== {pod.metadata.name} ({label}) =====\n{text}")
        return "\n".join(out)


def is_local_node(api: client.ApiClient, pod: Any) -> bool:
    """Whether `pod` runs on this machine's node of the local cluster (its containerd is
    reachable here)."""
    if not CONTAINERD_SOCK.exists():
        return False
    node = client.CoreV1Api(api).read_node(pod.spec.node_name)
    addresses = {a.address for a in node.status.addresses or []}
    return node_ip() in addresses


def kill(api: client.ApiClient, pod: Any) -> str:
    """End the operator in `pod` without a clean stop, and say how.

    On the local cluster: SIGKILL to the container's process through containerd (the
    kubelet restarts the container, which comes back as a standby). Elsewhere: delete the
    pod with no grace period, which still lets the process see a SIGTERM first."""
    (status,) = pod.status.container_statuses
    if is_local_node(api, pod):
        container = status.container_id.split("://", 1)[1]
        run(
            "ctr",
            "--address",
            str(CONTAINERD_SOCK),
            "-n",
            "k8s.io",
            "tasks",
            "kill",
            "--signal",
            "SIGKILL",
            container,
        )
        return "SIGKILL through containerd"
    client.CoreV1Api(api).delete_namespaced_pod(
        pod.metadata.name, pod.metadata.namespace, grace_period_seconds=0
    )
    return "pod deleted with grace period 0"


def token() -> str:
    return unique("t").split("-", 1)[1]
