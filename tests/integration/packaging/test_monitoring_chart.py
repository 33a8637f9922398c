"""The chart's monitoring objects, rendered by helm (the local cluster's): off by default; on,
a PrometheusRule carrying hack/monitoring/rules.yaml and a dashboard ConfigMap the API server
accepts (server-side dry run)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from tooladapter.devtools import ROOT

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(120)]

CHART = ROOT / "charts" / "tooladapter"
MONITORING = ROOT / "hack" / "monitoring"
#: helm template's default Kubernetes version depends on how helm was built.
KUBE = ["--kube-version=1.34.0"]
ON = [
    "--set=monitoring.prometheusRule.enabled=true",
    "--set=monitoring.prometheusRule.labels.release=prometheus",
    "--set=monitoring.dashboard.enabled=true",
]


def helm() -> str:
    found = os.environ.get("HELM") or shutil.which("helm")
    local = ROOT / ".cluster" / "bin" / "helm"
    if not found and local.exists():
        found = str(local)
    if not found:
        pytest.fail("no helm binary: `make cluster-up` puts one in .cluster/bin")
    return found


def render(*args: str) -> list[dict[str, Any]]:
    done = subprocess.run(
        [helm(), "template", "tooladapter", str(CHART), "-n", "tooladapter-system", *KUBE, *args],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return [d for d in yaml.safe_load_all(done.stdout) if d]


def monitoring_objects(docs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [
        d
        for d in docs
        if d["kind"] == "PrometheusRule" or d["metadata"]["name"] == "tooladapter-dashboard"
    ]


def test_monitoring_is_off_by_default() -> None:
    assert monitoring_objects(render()) == []


def test_enabled_the_chart_ships_the_rules_and_the_dashboard(tmp_path: Path) -> None:
    docs = monitoring_objects(render(*ON))
    (rule,) = [d for d in docs if d["kind"] == "PrometheusRule"]
    assert rule["apiVersion"] == "monitoring.coreos.com/v1"
    assert rule["metadata"]["labels"]["release"] == "prometheus"
    # The very rules promtool tested, their {{ $labels }} templates left to Prometheus.
    assert rule["spec"] == yaml.safe_load((MONITORING / "rules.yaml").read_text())
    (config_map,) = [d for d in docs if d["kind"] == "ConfigMap"]
    assert config_map["metadata"]["labels"]["grafana_dashboard"] == "1"
    dashboard = json.loads(config_map["data"]["tooladapter.json"])
    assert dashboard == json.loads((MONITORING / "dashboard.json").read_text())
    manifest = tmp_path / "dashboard.yaml"
    manifest.write_text(
        yaml.safe_dump(
            {**config_map, "metadata": {**config_map["metadata"], "namespace": "default"}}
        )
    )
    done = subprocess.run(
        ["kubectl", "apply", "--dry-run=server", "-f", str(manifest)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
