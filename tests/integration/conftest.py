"""Fixtures of the operator integration tests: one operator process per configuration, a
fresh namespace per test, agents with real ServiceAccount tokens, the operator's log
printed when a test fails.

`operator` is the session's operator with the default settings, serving `SESSION-*`.
`configured(settings)` is the operator of one configuration (retention, capacity wait,
a default timeout, ...): started the first time a test asks for that configuration and
shared by every later test that asks for the same one, each configuration serving its own
namespace prefix (`Configured.namespace`). Tests that kill the operator, restart it or read
its log start one of their own.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Generator, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pluggy
import pytest
from kubernetes import client

from tests.integration.objects import Agent
from tooladapter.devtools import (
    SESSION,
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


@dataclass(frozen=True)
class Configured:
    """The operator of one configuration and the namespace prefix it serves."""

    operator: OperatorProcess
    scope: str

    def namespace(self, api: client.ApiClient, labels: dict[str, str] | None = None) -> Namespace:
        return Namespace(api, labels, prefix=self.scope)


@pytest.fixture(scope="session")
def configured(
    api: client.ApiClient, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Callable[[Mapping[str, str]], Configured]]:
    started: dict[frozenset[tuple[str, str]], Configured] = {}

    def operator_for(settings: Mapping[str, str]) -> Configured:
        key = frozenset(settings.items())
        if key not in started:
            # `SESSION-*` is the session operator's; `SESSION` + `c<n>-*` never matches it.
            scope = f"{SESSION}c{len(started)}"
            op = OperatorProcess(
                tmp_path_factory.mktemp(f"operator-c{len(started)}"),
                {**settings, "TOOLADAPTER_NAMESPACES": f"{scope}-*"},
            )
            op.start()
            started[key] = Configured(op, scope)
        return started[key]

    yield operator_for
    for each in started.values():
        each.operator.stop()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: Any
) -> Generator[None, pluggy.Result[pytest.TestReport], None]:
    outcome = yield
    report = outcome.get_result()
    if report.when == "call" and report.failed:
        # Every operator the test ran (the session's, a traced or second one, a proxy).
        for name, value in (getattr(item, "funcargs", None) or {}).items():
            if isinstance(value, Configured):
                value = value.operator
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
