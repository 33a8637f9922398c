"""Copy crds/, manifests/ and hack/monitoring/ into the Helm chart, which cannot read files
outside itself.

`tests/unit/test_chart.py` fails when the copies drift; `make crds` runs this.
"""

from __future__ import annotations

import shutil
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CHART = ROOT / "charts" / "tooladapter"


def sources() -> dict[Path, Path]:
    """chart copy -> source, for every file the chart carries."""
    pairs = {CHART / "crds" / p.name: p for p in sorted((ROOT / "crds").glob("*.yaml"))}
    for sub in ("namespace.yaml", "rbac/operator.yaml", "rbac/roles.yaml"):
        src = ROOT / "manifests" / sub
        pairs[CHART / "files" / src.name] = src
    for src in sorted((ROOT / "manifests" / "admission").glob("*.yaml")):
        pairs[CHART / "files" / f"admission-{src.name}"] = src
    # The alert rules and the dashboard, as templates/prometheusrule.yaml and
    # templates/grafana-dashboard.yaml ship them (verbatim: their {{ }} are Prometheus's); in a
    # folder of their own, out of the manifests' `files/*.yaml`.
    for name in ("rules.yaml", "dashboard.json"):
        pairs[CHART / "files" / "monitoring" / name] = ROOT / "hack" / "monitoring" / name
    return pairs


def main() -> None:
    for directory in (CHART / "crds", CHART / "files"):
        shutil.rmtree(directory, ignore_errors=True)
        directory.mkdir(parents=True)
    for dst, src in sources().items():
        dst.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(src, dst)
        print(f"synced {dst.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
