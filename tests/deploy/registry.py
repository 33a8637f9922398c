"""The registry the deploy suite installs from: images pushed with `make image-push`, the
chart pointed at their registry-qualified names with `imagePullPolicy: Always`, so the
operator, the egress proxy and every sandbox Job really pull (issue 32).

On the local cluster this is the node's registry (hack/cluster/addons/registry.sh, at
<node address>:5000); elsewhere DEPLOY_TEST_REGISTRY=host:port[/path] names one the
cluster's nodes can pull from (and this machine can push to: `skopeo login` first if it
needs credentials), and DEPLOY_TEST_REGISTRY=off installs the `localhost/` images as before.
"""

from __future__ import annotations

import os
import re
import urllib.request
from pathlib import Path

from tests.deploy.release import CHART
from tooladapter.devtools import ROOT, kubeconfig, node_ip

#: The node registry's access log (local cluster): every manifest GET is a line.
REGISTRY_LOG = ROOT / ".cluster" / "logs" / "docker-registry.log"


def app_version() -> str:
    """The chart's appVersion: the tag `make image-push` pushes and the chart defaults to."""
    text = (CHART / "Chart.yaml").read_text()
    found = re.search(r'^appVersion:\s*"?([^"\s]+)"?\s*$', text, re.M)
    assert found, "Chart.yaml has no appVersion"
    return found.group(1)


def _answers(registry: str) -> bool:
    host = registry.split("/", 1)[0]
    try:
        with urllib.request.urlopen(f"http://{host}/v2/", timeout=3) as reply:
            return bool(reply.status == 200)
    except OSError:
        return False


def configured() -> str | None:
    """The registry this session installs from, or None (DEPLOY_TEST_REGISTRY=off, or not
    the local cluster and none named)."""
    named = os.environ.get("DEPLOY_TEST_REGISTRY", "").strip()
    if named == "off":
        return None
    if named:
        return named
    local = Path(kubeconfig()).resolve() == (ROOT / ".cluster" / "kubeconfig").resolve()
    if not local or os.environ.get("CLUSTER", "local") == "kind":
        return None
    registry = f"{node_ip()}:{os.environ.get('REGISTRY_PORT', '5000')}"
    if not _answers(registry):
        raise AssertionError(
            f"the node's registry does not answer at http://{registry}/v2/: run `make cluster-up`"
            " (or DEPLOY_TEST_REGISTRY=off to install the imported localhost/ images)"
        )
    return registry


def images(registry: str) -> dict[str, str]:
    """The registry-qualified names of the images the release runs."""
    tag = app_version()
    return {name: f"{registry}/tooladapter-{name}:{tag}" for name in ("operator", "sandbox")}


def helm_args(registry: str) -> str:
    """`helm upgrade` flags (DEPLOY_ARGS) that install from `registry`, pulling every time."""
    refs = images(registry)
    return " ".join(
        [
            f"--set image.repository={refs['operator'].rsplit(':', 1)[0]}",
            "--set image.tag=",
            "--set image.pullPolicy=Always",
            f"--set settings.sandboxImage={refs['sandbox']}",
            "--set settings.imagePullPolicy=Always",
        ]
    )


def manifest_gets(image: str, since: int = 0) -> list[str]:
    """Lines of the node registry's access log (from byte `since`) where containerd asked
    for a manifest of `image` (repository name, e.g. tooladapter-sandbox): a GET, or the
    HEAD with which a pull resolves a tag whose layers the node already holds (each pull
    under `Always` asks the registry either way)."""
    if not REGISTRY_LOG.is_file():
        return []
    with REGISTRY_LOG.open("rb") as f:
        f.seek(since)
        text = f.read().decode(errors="replace")
    return [
        line
        for line in text.splitlines()
        if any(f'"{verb} /v2/{image}/manifests/' in line for verb in ("GET", "HEAD"))
        and "containerd" in line
    ]


def log_size() -> int:
    return REGISTRY_LOG.stat().st_size if REGISTRY_LOG.is_file() else 0
