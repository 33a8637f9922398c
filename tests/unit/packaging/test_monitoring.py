"""The alert rules and the dashboard shipped with the chart: promtool accepts the rules and
their unit tests pass, the dashboard is well-formed, and both name only metrics the operator
exports."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml
from prometheus_client import REGISTRY

import tooladapter.metrics  # noqa: F401  (registers the counters and the histogram)
from tooladapter.census import Census

ROOT = Path(__file__).resolve().parents[3]
MONITORING = ROOT / "hack" / "monitoring"
RULES = MONITORING / "rules.yaml"
DASHBOARD = MONITORING / "dashboard.json"
#: Metric names in PromQL: ours and the client library's process metrics.
METRIC = re.compile(r"\b((?:tooladapter|process)_[a-zA-Z0-9_]+)\b")

SUFFIXES = {
    "counter": ("_total", "_created"),
    "histogram": ("_bucket", "_sum", "_count", "_created"),
    "summary": ("_sum", "_count", "_created"),
}


def exported_metrics() -> set[str]:
    """Every series name the operator's /metrics can carry (the registry's families and the
    census's gauges)."""
    names: set[str] = set()
    for family in [*REGISTRY.collect(), *Census().collect()]:
        for suffix in SUFFIXES.get(family.type, ("",)):
            names.add(family.name + suffix)
    return names


def promtool(*args: str) -> subprocess.CompletedProcess[str]:
    binary = shutil.which("promtool")
    if binary is None:
        pytest.fail("no promtool: `make promtool` installs Debian's prometheus package")
    return subprocess.run(
        [binary, *args], capture_output=True, text=True, check=False, cwd=MONITORING
    )


def rules() -> list[dict[str, Any]]:
    doc = yaml.safe_load(RULES.read_text())
    return [rule for group in doc["groups"] for rule in group["rules"]]


def test_promtool_accepts_the_rules() -> None:
    done = promtool("check", "rules", "rules.yaml")
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"SUCCESS: {len(rules())} rules found" in done.stdout


def test_the_rules_unit_tests_pass() -> None:
    done = promtool("test", "rules", "rules-test.yaml")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "SUCCESS" in done.stdout


def test_every_alert_has_a_unit_test_that_sees_it_fire() -> None:
    tests = yaml.safe_load((MONITORING / "rules-test.yaml").read_text())["tests"]
    fired = {
        case["alertname"]
        for test in tests
        for case in test.get("alert_rule_test", [])
        if case.get("exp_alerts")
    }
    assert fired == {rule["alert"] for rule in rules()}


def test_the_alerts_name_only_exported_metrics() -> None:
    known = exported_metrics()
    for rule in rules():
        named = set(METRIC.findall(rule["expr"]))
        assert named, rule["alert"]
        assert named <= known, (rule["alert"], named - known)
        assert rule["labels"]["severity"] in ("warning", "critical")
        assert rule["annotations"]["summary"] and rule["annotations"]["description"]


# --------------------------------------------------------------------------- dashboard

TARGET = {
    "type": "object",
    "required": ["refId", "expr", "datasource"],
    "properties": {
        "refId": {"type": "string", "pattern": "^[A-Z]$"},
        "expr": {"type": "string", "minLength": 1},
        "legendFormat": {"type": "string"},
    },
}
PANEL = {
    "type": "object",
    "required": ["id", "type", "title", "gridPos", "targets", "datasource"],
    "properties": {
        "id": {"type": "integer", "minimum": 1},
        "type": {"enum": ["stat", "timeseries", "gauge", "table", "bargauge"]},
        "title": {"type": "string", "minLength": 1},
        "datasource": {
            "type": "object",
            "required": ["type", "uid"],
            "properties": {"type": {"const": "prometheus"}, "uid": {"const": "${datasource}"}},
        },
        "gridPos": {
            "type": "object",
            "required": ["h", "w", "x", "y"],
            "properties": {
                "h": {"type": "integer", "minimum": 1},
                "w": {"type": "integer", "minimum": 1, "maximum": 24},
                "x": {"type": "integer", "minimum": 0, "maximum": 23},
                "y": {"type": "integer", "minimum": 0},
            },
        },
        "targets": {"type": "array", "minItems": 1, "items": TARGET},
    },
}
DASHBOARD_SCHEMA = {
    "type": "object",
    "required": ["title", "uid", "schemaVersion", "panels", "templating", "time"],
    "properties": {
        "title": {"type": "string", "minLength": 1},
        "uid": {"type": "string", "pattern": "^[a-zA-Z0-9_-]{1,40}$"},
        "schemaVersion": {"type": "integer", "minimum": 30},
        "panels": {"type": "array", "minItems": 1, "items": PANEL},
        "templating": {
            "type": "object",
            "required": ["list"],
            "properties": {
                "list": {
                    "type": "array",
                    "items": {
                        "type": "object",
                        "required": ["name", "type"],
                        "properties": {"type": {"enum": ["datasource", "query", "custom"]}},
                    },
                }
            },
        },
    },
}


def dashboard() -> dict[str, Any]:
    return dict(json.loads(DASHBOARD.read_text()))


def test_the_dashboard_matches_its_schema() -> None:
    jsonschema.validate(dashboard(), DASHBOARD_SCHEMA)


def test_panels_have_unique_ids_and_do_not_overlap() -> None:
    panels = dashboard()["panels"]
    assert len({p["id"] for p in panels}) == len(panels)
    cells: dict[tuple[int, int], str] = {}
    for panel in panels:
        grid = panel["gridPos"]
        assert grid["x"] + grid["w"] <= 24, panel["title"]
        for x in range(grid["x"], grid["x"] + grid["w"]):
            for y in range(grid["y"], grid["y"] + grid["h"]):
                assert (x, y) not in cells, (panel["title"], cells.get((x, y)))
                cells[(x, y)] = panel["title"]
        refs = [t["refId"] for t in panel["targets"]]
        assert len(set(refs)) == len(refs), panel["title"]


def test_every_panel_expression_names_exported_metrics_only() -> None:
    known = exported_metrics()
    for panel in dashboard()["panels"]:
        for target in panel["targets"]:
            named = set(METRIC.findall(target["expr"]))
            assert named, (panel["title"], target["expr"])
            assert named <= known, (panel["title"], named - known)


def test_every_variable_a_query_uses_is_defined() -> None:
    doc = dashboard()
    defined = {v["name"] for v in doc["templating"]["list"]}
    used = set(re.findall(r"\$\{?(\w+)", json.dumps(doc["panels"])))
    assert used <= defined, used - defined
    # Every gauge the census exports is on the dashboard.
    shown = json.dumps(doc["panels"])
    assert all(family.name in shown for family in Census().collect())
