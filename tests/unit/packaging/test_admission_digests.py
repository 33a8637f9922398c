"""The digests the operator verifies the admission policies against: generated from
manifests/admission/ (stale when the manifests change without `make crds`), and the same for
the objects the chart renders, under the default names and another release's."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

import pytest
import yaml

from tests.unit.packaging.test_chart import render
from tooladapter.enums import AdmissionKind
from tooladapter.pipeline.validation.shipped import Observed, compare
from tooladapter.pipeline.validation.shipped_digests import SHIPPED

ROOT = Path(__file__).resolve().parents[3]


def _generator() -> ModuleType:
    path = ROOT / "hack" / "admission_digests.py"
    spec = importlib.util.spec_from_file_location("admission_digests", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_shipped_digests_are_generated_from_the_manifests() -> None:
    generator = _generator()
    assert generator.MODULE.read_text() == generator.module_text(), (
        "manifests/admission/ changed: run `make crds` (hack/admission_digests.py)"
    )
    assert len(SHIPPED) == 22


def test_a_changed_manifest_changes_its_digest() -> None:
    generator = _generator()
    texts = [p.read_text() for p in sorted((ROOT / "manifests" / "admission").glob("*.yaml"))]
    edited = [
        t.replace('validationActions: ["Deny"]', 'validationActions: ["Warn"]') for t in texts
    ]
    before = generator.digests(generator.admission_objects(texts))
    after = generator.digests(generator.admission_objects(edited))
    changed = {key for key in before if before[key] != after[key]}
    assert changed == {key for key in before if key[0] is AdmissionKind.BINDING}


@pytest.mark.parametrize(
    ("prefix", "namespace"), [("tooladapter", "tooladapter-system"), ("second", "elsewhere")]
)
def test_the_chart_renders_the_shipped_digests(prefix: str, namespace: str) -> None:
    docs = render(f"--set=prefix={prefix}", namespace=namespace)
    kinds = {k.value for k in AdmissionKind}
    observed = {
        (AdmissionKind(d["kind"]), d["metadata"]["name"]): Observed(d["spec"])
        for d in docs
        if d["kind"] in kinds
    }
    assert len(observed) == len(SHIPPED)
    assert compare(observed, prefix=prefix, namespace=namespace) == ()


def test_the_operator_is_told_its_release_prefix_and_namespace() -> None:
    docs = render("--set=prefix=second", namespace="elsewhere")
    (deployment,) = [
        d for d in docs if d["kind"] == "Deployment" and "operator" in d["metadata"]["name"]
    ]
    env = {
        e["name"]: e.get("value")
        for e in deployment["spec"]["template"]["spec"]["containers"][0]["env"]
    }
    assert env["TOOLADAPTER_ADMISSION_PREFIX"] == "second"
    assert env["TOOLADAPTER_ADMISSION_NAMESPACE"] == "elsewhere"


def test_the_yaml_of_the_manifests_is_what_the_generator_reads() -> None:
    docs = [
        d
        for p in sorted((ROOT / "manifests" / "admission").glob("*.yaml"))
        for d in yaml.safe_load_all(p.read_text())
        if d
    ]
    assert {(AdmissionKind(d["kind"]), d["metadata"]["name"]) for d in docs} == set(SHIPPED)
