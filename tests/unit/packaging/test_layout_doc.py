"""The module and test map in `docs/contributing/layout.md` is the tree, not a memory of it.

A newcomer finds where a concern lives from that page; it once named CLI modules that did
not exist and left out whole packages. Every path it names must exist, and every package
and top-level module of the operator, and every test folder, must be named.
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
PAGE = ROOT / "docs" / "contributing" / "layout.md"
PACKAGE = ROOT / "operator" / "tooladapter"

#: `operator/tooladapter/x/`, `tests/unit/receipts/`, `hack/demo.py`, `Dockerfile*`: what a
#: backticked token that starts like a repository path names.
_PATH = re.compile(
    r"`((?:operator|tests|hack|crds|manifests|charts|docs)/[^`\s]*|Dockerfile[^`\s]*)`"
)


def _named() -> set[str]:
    return {m.group(1).rstrip("/") for m in _PATH.finditer(PAGE.read_text())}


def _exists(path: str) -> bool:
    if "*" in path:
        return any(ROOT.glob(path))
    return (ROOT / path).exists()


def test_every_path_the_page_names_exists() -> None:
    missing = sorted(p for p in _named() if not _exists(p))
    assert not missing, f"layout.md names paths that do not exist: {missing}"


def test_every_package_and_top_level_module_is_named() -> None:
    named = _named()
    wanted = {
        str(p.parent.relative_to(ROOT))
        for p in PACKAGE.rglob("__init__.py")
        if "__pycache__" not in p.parts and p.parent != PACKAGE
    }
    wanted |= {
        str(p.relative_to(ROOT)) for p in PACKAGE.glob("*.py") if p.name not in {"__init__.py"}
    }
    missing = sorted(wanted - named)
    assert not missing, f"layout.md does not name: {missing}"


def test_every_test_folder_is_named() -> None:
    named = _named()
    wanted = {
        str(p.relative_to(ROOT))
        for kind in ("unit", "integration", "cluster", "deploy")
        for p in [ROOT / "tests" / kind, *(ROOT / "tests" / kind).iterdir()]
        if p.is_dir() and p.name != "__pycache__" and any(p.glob("test_*.py"))
    }
    missing = sorted(wanted - named)
    assert not missing, f"layout.md's test map does not name: {missing}"


def test_every_module_of_the_core_packages_is_named_in_its_row() -> None:
    """The row of a package names its modules (the doors' many small modules aside)."""
    text = PAGE.read_text()
    skipped = {"cli", "devtools", "routes", "ui"}
    missing = []
    for init in PACKAGE.rglob("__init__.py"):
        package = init.parent
        if package == PACKAGE or package.name in skipped or "__pycache__" in package.parts:
            continue
        rel = str(package.relative_to(ROOT))
        rows = [line for line in text.splitlines() if f"`{rel}/`" in line]
        for module in package.glob("*.py"):
            name = module.stem
            if name != "__init__" and not any(
                f"`{name}`" in row or f"`{name}/`" in row for row in rows
            ):
                missing.append(f"{rel}/{module.name}")
    assert not missing, f"layout.md does not name these modules in their package's row: {missing}"


def test_no_test_file_is_named_after_its_history() -> None:
    """A test file says what it guards, not the wave or pass that found it."""
    history = re.compile(r"wave\d|pass\d|_holes|legacy|_attacks_wave")
    named = sorted(
        str(p.relative_to(ROOT))
        for p in (ROOT / "tests").rglob("test_*.py")
        if history.search(p.name)
    )
    assert not named, f"test files named after history: {named}"
