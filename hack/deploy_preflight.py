"""Before `make deploy`: stop, in one line, when objects the release would own were applied
by `make install` (plain manifests).

Helm refuses to adopt an object it did not create ("invalid ownership metadata"), and it
says so only after it has installed half of the release. The objects `make install`
applies carry `app.kubernetes.io/part-of: tooladapter` and no `meta.helm.sh/release-name`
annotation; the release's carry both. One `kubectl get` finds those the rendered release
would also create (another `prefix` collides with none of them).

    python hack/deploy_preflight.py RELEASE NAMESPACE [helm flags...]
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
CHART = ROOT / "charts" / "tooladapter"
KINDS = (
    "namespaces,serviceaccounts,roles,rolebindings,clusterroles,clusterrolebindings,"
    "validatingadmissionpolicies,validatingadmissionpolicybindings"
)
PART_OF = "app.kubernetes.io/part-of"
CLUSTER_SCOPED = {
    "Namespace",
    "ClusterRole",
    "ClusterRoleBinding",
    "ValidatingAdmissionPolicy",
    "ValidatingAdmissionPolicyBinding",
}

Key = tuple[str, str, str]


def _key(kind: str, namespace: str | None, name: str) -> Key:
    return (kind, "" if kind in CLUSTER_SCOPED else (namespace or ""), name)


def rendered(release: str, namespace: str, flags: list[str]) -> set[Key]:
    helm = os.environ.get("HELM", "helm")
    out = subprocess.run(
        [helm, "template", release, str(CHART), "--namespace", namespace, *flags],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return {
        _key(d["kind"], d["metadata"].get("namespace", namespace), d["metadata"]["name"])
        for d in yaml.safe_load_all(out)
        if d
    }


def unowned() -> dict[Key, str]:
    """Objects labelled part-of tooladapter that no Helm release owns."""
    out = subprocess.run(
        ["kubectl", "get", KINDS, "-A", "-l", f"{PART_OF}=tooladapter", "-o", "json"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    found: dict[Key, str] = {}
    for item in json.loads(out)["items"]:
        meta = item["metadata"]
        if "meta.helm.sh/release-name" not in (meta.get("annotations") or {}):
            key = _key(item["kind"], meta.get("namespace"), meta["name"])
            found[key] = f"{item['kind']} {meta['name']}"
    return found


def main(argv: list[str]) -> int:
    release, namespace, *flags = argv
    try:
        clash = sorted(v for k, v in unowned().items() if k in rendered(release, namespace, flags))
    except subprocess.CalledProcessError as exc:
        print(f"make deploy: preflight failed: {exc.stderr.strip()}", file=sys.stderr)
        return 1
    if clash:
        more = f" (and {len(clash) - 1} more)" if len(clash) > 1 else ""
        print(
            f"make deploy: {clash[0]}{more} came from `make install`, which Helm cannot "
            "take over: run `make uninstall` first",
            file=sys.stderr,
        )
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
