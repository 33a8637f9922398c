"""The lazy kubernetes_asyncio packages (`kube.lean`): the same names, imported on use."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

from tooladapter.kube.lean import exports


def run_fresh(code: str) -> str:
    """`code` in a new interpreter (this one imported the client long ago)."""
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


def test_the_operator_s_imports_load_no_model_or_api_it_does_not_use() -> None:
    out = run_fresh(
        """
        import sys
        import tooladapter.launcher  # as `tooladapter run` starts: the launcher first,
        import tooladapter.main  # then kopf and everything the operator imports
        loaded = [m for m in sys.modules if m.startswith("kubernetes_asyncio.client.models.")]
        apis = [m for m in sys.modules if m.startswith("kubernetes_asyncio.client.api.")]
        print(len(loaded), len(apis))
        """
    )
    models, apis = map(int, out.split())
    # The eager packages import ~700 models and ~60 APIs; a handful is used at start.
    assert models < 50 and apis < 20, (models, apis)


def test_every_name_of_the_eager_packages_resolves_to_its_own_module_s_class() -> None:
    out = run_fresh(
        """
        import importlib
        import tooladapter.kube  # installs the lazy packages
        from kubernetes_asyncio import client
        from kubernetes_asyncio.client import CoreV1Api, V1DeleteOptions
        import kubernetes_asyncio.client.models as models
        checked = 0
        for package in (client, client.api, client.models):
            for name in package.__all__:
                value = getattr(package, name)
                assert value is not None, name
                checked += 1
        # the client's deserializer looks models up by name on the models package
        assert getattr(models, "V1Pod").__name__ == "V1Pod"
        assert CoreV1Api is client.api.CoreV1Api
        assert V1DeleteOptions(propagation_policy="Foreground").propagation_policy
        assert client.ApiClient.__module__ == "kubernetes_asyncio.client.api_client"
        print(checked)
        """
    )
    assert int(out) > 700


def test_nothing_changes_when_the_client_was_imported_first() -> None:
    out = run_fresh(
        """
        import sys, types
        import kubernetes_asyncio.client
        eager = sys.modules["kubernetes_asyncio.client"]
        from tooladapter.kube import lean
        print(lean.install(), sys.modules["kubernetes_asyncio.client"] is eager)
        """
    )
    assert out.split() == ["False", "True"]


def test_a_package_init_that_runs_more_than_imports_is_not_replaced(tmp_path: Path) -> None:
    init = tmp_path / "__init__.py"
    init.write_text('"""doc"""\n__version__ = "1"\nfrom a.b import C as D\nfrom a.e import F\n')
    assert exports(init) == {"D": "a.b", "F": "a.e"}
    init.write_text("from a.b import C\nregister(C)\n")
    assert exports(init) is None
    init.write_text("from a.b import *\n")
    assert exports(init) is None
