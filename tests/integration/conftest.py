"""Fixtures of the operator integration tests: one operator process for the session, a
fresh namespace per test, agents with real ServiceAccount tokens, the operator's log
printed when a test fails."""

from __future__ import annotations

import os
from collections.abc import Generator, Iterator
from pathlib import Path
from typing import Any

import pluggy
import pytest
from kubernetes import client

from tests.integration.objects import Agent
from tooladapter.devtools import (
    Namespace,
    OperatorProcess,
    admin_client,
    kubeconfig,
)


@pytest.fixture(scope="session")
def api() -> client.ApiClient:
    path = Path(kubeconfig())
    if not path.is_file():
        pytest.fail(f"no kubeconfig at {path}: run `make cluster-up` (or set KUBECONFIG)")
    return admin_client()


@pytest.fixture(scope="session")
def operator(
    api: client.ApiClient, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[OperatorProcess]:
    op = OperatorProcess(tmp_path_factory.mktemp("operator"))
    op.start()
    yield op
    op.stop()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: Any
) -> Generator[None, pluggy.Result[pytest.TestReport], None]:
    outcome = yield
    report = outcome.get_result()
    if report.when == "call" and report.failed:
        # Every operator the test ran (the session's, a traced or second one, a proxy).
        for name, value in (getattr(item, "funcargs", None) or {}).items():
            if isinstance(value, OperatorProcess):
                report.sections.append((f"{name} log (tail)", value.tail(120)))


@pytest.fixture
def ns(api: client.ApiClient, operator: OperatorProcess) -> Iterator[Namespace]:
    namespace = Namespace(api)
    yield namespace
    if os.environ.get("TOOLADAPTER_KEEP_NAMESPACES") != "1":
        namespace.delete()


@pytest.fixture
def agent(api: client.ApiClient, ns: Namespace) -> Agent:
    return Agent.create(api, ns.name, "agent-1")
