"""Vendor the Kubernetes OpenAPI (v3) schemas of the kinds the chart renders, for the unit
suite's validation of every rendered object (tests/unit/packaging/test_chart.py) without a cluster.

Reads `kubectl get --raw /openapi/v3/<group-version>` from the cluster of KUBECONFIG (the
local one is 1.34) and keeps only the schemas reachable from `KINDS`, one JSON file per
group-version under tests/unit/data/openapi-<major.minor>/. Run it again when the chart
renders a new kind or the cluster's version moves:

    KUBECONFIG=.cluster/kubeconfig .venv/bin/python hack/vendor_openapi.py
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "tests" / "unit" / "data"

#: group-version path -> the kinds of it the chart renders (their schema names' tails).
KINDS: dict[str, list[str]] = {
    "api/v1": [
        "io.k8s.api.core.v1.ConfigMap",
        "io.k8s.api.core.v1.Namespace",
        "io.k8s.api.core.v1.PersistentVolumeClaim",
        "io.k8s.api.core.v1.Secret",
        "io.k8s.api.core.v1.Service",
        "io.k8s.api.core.v1.ServiceAccount",
    ],
    "apis/apps/v1": ["io.k8s.api.apps.v1.Deployment"],
    "apis/networking.k8s.io/v1": [
        "io.k8s.api.networking.v1.Ingress",
        "io.k8s.api.networking.v1.NetworkPolicy",
    ],
    "apis/policy/v1": ["io.k8s.api.policy.v1.PodDisruptionBudget"],
    "apis/rbac.authorization.k8s.io/v1": [
        "io.k8s.api.rbac.v1.ClusterRole",
        "io.k8s.api.rbac.v1.ClusterRoleBinding",
        "io.k8s.api.rbac.v1.Role",
        "io.k8s.api.rbac.v1.RoleBinding",
    ],
    "apis/admissionregistration.k8s.io/v1": [
        "io.k8s.api.admissionregistration.v1.ValidatingAdmissionPolicy",
        "io.k8s.api.admissionregistration.v1.ValidatingAdmissionPolicyBinding",
    ],
}


def _refs(node: Any) -> set[str]:
    if isinstance(node, dict):
        found = {node["$ref"].rsplit("/", 1)[-1]} if "$ref" in node else set()
        for value in node.values():
            found |= _refs(value)
        return found
    if isinstance(node, list):
        return set().union(*(_refs(v) for v in node)) if node else set()
    return set()


def _kubectl(path: str) -> Any:
    out = subprocess.run(["kubectl", "get", "--raw", path], capture_output=True, check=True)
    return json.loads(out.stdout)


def main() -> None:
    version = _kubectl("/version")
    target = DATA / f"openapi-{version['major']}.{version['minor'].rstrip('+')}"
    target.mkdir(parents=True, exist_ok=True)
    for group, kinds in KINDS.items():
        schemas = _kubectl(f"/openapi/v3/{group}")["components"]["schemas"]
        keep: set[str] = set()
        todo = list(kinds)
        while todo:
            name = todo.pop()
            if name not in keep:
                keep.add(name)
                todo.extend(_refs(schemas[name]) - keep)
        doc = {
            "source": f"kubectl get --raw /openapi/v3/{group} ({version['gitVersion']})",
            "kinds": kinds,
            "components": {"schemas": {k: schemas[k] for k in sorted(keep)}},
        }
        path = target / (group.replace("/", "_") + ".json")
        path.write_text(json.dumps(doc, indent=None, separators=(",", ":"), sort_keys=True))
        print(f"wrote {path.relative_to(ROOT)} ({len(keep)} schemas)")


if __name__ == "__main__":
    try:
        main()
    except subprocess.CalledProcessError as exc:
        sys.exit(f"vendor_openapi: kubectl failed: {exc.stderr.decode().strip()}")
