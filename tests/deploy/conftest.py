"""Fixtures of the deploy suite: the Helm-installed operator (`make deploy`, once per
session), a tenant namespace in its scope per test, a recording server for effects, and the
operator pods' logs when a test fails.

Never run against a cluster where `make install` applied the same objects (same prefix):
Helm refuses to take over objects kubectl owns, and `make uninstall` would delete the
release's. `make test` runs `make uninstall` before this suite.
"""

from __future__ import annotations

import os
from collections.abc import Generator, Iterator
from pathlib import Path
from typing import Any

import pluggy
import pytest
from kubernetes import client

from tests.deploy import registry as node_registry
from tests.deploy.release import Release, make
from tests.integration.servers import Recorder, recording_server
from tooladapter.devtools import Namespace, admin_client, kubeconfig, node_ip

pytestmark = pytest.mark.cluster


@pytest.fixture(scope="session")
def api() -> client.ApiClient:
    path = Path(kubeconfig())
    if not path.is_file():
        pytest.fail(f"no kubeconfig at {path}: run `make cluster-up` (or set KUBECONFIG)")
    return admin_client()


@pytest.fixture(scope="session")
def registry() -> str | None:
    """The registry the release pulls its images from (tests/deploy/registry.py)."""
    return node_registry.configured()


@pytest.fixture(scope="session")
def release(api: client.ApiClient, registry: str | None) -> Release:
    """The release as `make deploy` installs or upgrades it (once per session): with a
    registry, from the images `make image-push` put there, pulled on every start."""
    if os.environ.get("DEPLOY_TEST_SKIP_DEPLOY") != "1":
        if registry is None:
            make("deploy")
        else:
            make("image-push", REGISTRY=registry)
            # The caller's DEPLOY_ARGS come last: they win.
            args = f"{node_registry.helm_args(registry)} {os.environ.get('DEPLOY_ARGS', '')}"
            make("deploy", DEPLOY_ARGS=args.strip())
    rel = Release.from_env(api)
    rel.wait_ready(int(rel.values()["replicas"]))
    return rel


@pytest.fixture
def tenant(api: client.ApiClient, release: Release) -> Iterator[Namespace]:
    namespace = Namespace(
        api,
        {"tooladapter.dev/environment-class": "development"},
        prefix=release.tenant_prefix(),
    )
    yield namespace
    namespace.delete()


@pytest.fixture
def server() -> Iterator[Recorder]:
    with recording_server(node_ip()) as recorder:
        yield recorder


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: Any
) -> Generator[None, pluggy.Result[pytest.TestReport], None]:
    outcome = yield
    report = outcome.get_result()
    if report.when == "call" and report.failed:
        rel = item.funcargs.get("release") if hasattr(item, "funcargs") else None
        if isinstance(rel, Release):
            try:
                report.sections.append(("operator pods' logs (tail)", rel.logs()))
            except Exception as exc:  # the release may be gone (uninstall test)
                report.sections.append(("operator pods' logs", f"unavailable: {exc}"))
