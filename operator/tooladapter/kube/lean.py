"""kubernetes_asyncio without its eager imports: every API and model class on first use.

`kubernetes_asyncio.client` (and its `api` and `models` packages) import all of their
~900 generated modules when first imported: about 35 MB of the operator's resident memory,
a quarter of it at rest, for the dozen API groups and handful of models it uses. `install`
puts lazy stand-ins for those three packages into `sys.modules` before anything imports
them: the same names, each imported from its own module when first asked for (PEP 562),
so `from kubernetes_asyncio.client import CoreV1Api`, `client.V1DeleteOptions(...)` and
the client's deserializer (`getattr(models, "V1Pod")`) work as before.

The stand-ins are built from the packages' own `__init__.py` (every `from M import N` line),
so they follow the installed version. If the layout is not the expected one, or the
packages are already imported, nothing is changed: the client is then imported eagerly,
as without this module.
"""

from __future__ import annotations

import ast
import importlib
import sys
import types
from collections.abc import Callable
from importlib.util import find_spec
from pathlib import Path

ROOT = "kubernetes_asyncio"
#: The eager packages, parents first.
PACKAGES = (f"{ROOT}.client", f"{ROOT}.client.api", f"{ROOT}.client.models")


def exports(init: Path) -> dict[str, str] | None:
    """`name -> module` for every `from module import name` of a package's `__init__`;
    None when it holds anything else that runs (then it is not safe to skip)."""
    names: dict[str, str] = {}
    for node in ast.parse(init.read_text()).body:
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            if node.module == "__future__":
                continue
            for alias in node.names:
                if alias.name == "*":
                    return None
                names[alias.asname or alias.name] = node.module
        elif isinstance(node, ast.Assign) or (
            isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)
        ):
            continue  # __version__, __all__, the docstring
        else:
            return None
    return names


def lazy_package(name: str, path: Path, names: dict[str, str]) -> types.ModuleType:
    module = types.ModuleType(name)
    module.__path__ = [str(path)]
    module.__file__ = str(path / "__init__.py")
    module.__package__ = name
    module.__all__ = sorted(names)  # type: ignore[attr-defined]

    def resolve(attr: str) -> object:
        if attr in names:
            value = getattr(importlib.import_module(names[attr]), attr)
        elif (path / f"{attr}.py").exists() or (path / attr / "__init__.py").exists():
            value = importlib.import_module(f"{name}.{attr}")
        else:
            raise AttributeError(f"module {name!r} has no attribute {attr!r}")
        setattr(module, attr, value)  # found once; later lookups are plain attributes
        return value

    getter: Callable[[str], object] = resolve
    module.__getattr__ = getter  # type: ignore[method-assign]
    return module


def install() -> bool:
    """Put the lazy packages in place; False (nothing changed) when it cannot."""
    if any(name in sys.modules for name in (ROOT, *PACKAGES)):
        return False
    spec = find_spec(ROOT)
    if spec is None or spec.origin is None:
        return False
    root = Path(spec.origin).parent
    modules: list[types.ModuleType] = []
    for name in PACKAGES:
        path = root.joinpath(*name.split(".")[1:])
        try:
            names = exports(path / "__init__.py")
        except (OSError, SyntaxError):
            return False
        if names is None:
            return False
        modules.append(lazy_package(name, path, names))
    for module in modules:
        sys.modules[module.__name__] = module
    parent = importlib.import_module(ROOT)
    client, api, models = modules
    # Bound as the import system binds a loaded submodule to its parent.
    parent.client = client  # type: ignore[attr-defined]
    client.api = api  # type: ignore[attr-defined]
    client.models = models  # type: ignore[attr-defined]
    return True
