"""The Helm chart carries exact copies of crds/ and manifests/ (helm cannot read outside)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_chart_copies_match_their_sources() -> None:
    spec = importlib.util.spec_from_file_location("sync_chart", ROOT / "hack" / "sync_chart.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    pairs = module.sources()
    assert pairs, "nothing to sync"
    stale = [
        str(dst.relative_to(ROOT))
        for dst, src in pairs.items()
        if not dst.exists() or dst.read_bytes() != src.read_bytes()
    ]
    assert not stale, f"run `make crds`: chart copies drifted: {stale}"
    carried = {
        p
        for p in (
            *(ROOT / "charts/tooladapter/crds").glob("*"),
            *(ROOT / "charts/tooladapter/files").rglob("*"),
        )
        if p.is_file()
    }
    assert carried == set(pairs), "the chart carries files that have no source"
