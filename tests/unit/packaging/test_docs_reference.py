"""The reference pages in docs/reference/ are generated from the code (hack/docs_gen.py):
the committed pages must be what the code says now, as crds/ must be what the models say."""

from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[3]


def _generator() -> ModuleType:
    spec = importlib.util.spec_from_file_location("docs_gen", ROOT / "hack" / "docs_gen.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("docs_gen", module)
    spec.loader.exec_module(module)
    return module


def test_the_committed_reference_pages_are_what_the_code_generates() -> None:
    generated = _generator().generate()
    stale = [
        name
        for name, text in generated.items()
        if not (ROOT / "docs" / "reference" / name).is_file()
        or (ROOT / "docs" / "reference" / name).read_text() != text
    ]
    assert not stale, f"docs/reference/ is stale ({', '.join(stale)}): run `make docs-reference`"


def test_every_setting_read_from_the_environment_is_in_the_settings_page() -> None:
    page = _generator().settings_page()
    source = "".join(
        path.read_text() for path in (ROOT / "operator" / "tooladapter" / "settings").glob("*.py")
    )

    for name in set(re.findall(r'"(TOOLADAPTER_[A-Z0-9_]+)"', source)):
        assert f"`{name}`" in page, name


def test_every_exit_code_has_its_meaning() -> None:
    from tooladapter.cli.exitcodes import ExitCode

    page = _generator().exit_codes_page()
    for code in ExitCode:
        assert f"| `{int(code)}` | `{code.name}` | " in page
        row = next(line for line in page.splitlines() if f"`{code.name}`" in line)
        assert not row.endswith("|  |"), f"{code.name} has no docstring"
