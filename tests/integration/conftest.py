"""Fixtures of the operator integration tests: one operator process per configuration, a
fresh namespace per test, agents with real ServiceAccount tokens, the operator's log
printed when a test fails.

`operator` is the session's operator with the default settings, serving `SESSION-*`.
`egress_operator(scope, hosts, ca)` starts an operator and an egress proxy pointed at each
other, serving `scope-*` (the egress and credential tests share it).
`configured(settings)` is the operator of one configuration (retention, capacity wait,
a default timeout, ...): started the first time a test asks for that configuration and
shared by every later test that asks for the same one, each configuration serving its own
namespace prefix (`Configured.namespace`). Tests that kill the operator, restart it or read
its log start one of their own.
"""

from __future__ import annotations

import contextlib
import json
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
    EgressProxyProcess,
    Namespace,
    OperatorProcess,
    admin_client,
    kubeconfig,
    node_ip,
)

#: Warm pools are on by default (issue 41), which would move most sandboxed calls of these
#: tests off the cold Job path they assert (its Job, NetworkPolicy, gate, deadline, restart
#: and quota rules). Every operator the suite starts keeps pools off unless its settings
#: turn them on (the warm pool and workspace tests do; `OperatorProcess` inherits this
#: environment, and a test's own settings win).
os.environ.setdefault("TOOLADAPTER_WARM_POOL_SIZE", "0")

#: An operator and the egress proxy it hands leases to.
EgressPair = tuple[OperatorProcess, EgressProxyProcess]


@pytest.fixture(scope="session")
def api() -> client.ApiClient:
    path = Path(kubeconfig())
    if not path.is_file():
        pytest.fail(f"no kubeconfig at {path}: run `make cluster-up` (or set KUBECONFIG)")
    return admin_client()


#: What the operator keeps finalizers on (its `settle` finalizer, kopf's own).
FINALIZED = ("toolinvocations", "tooldescriptors", "toolapprovals", "toolpolicies", "mcpservers")


@pytest.fixture(scope="session", autouse=True)
def no_finalizer_outlives_its_operator(api: client.ApiClient) -> Iterator[None]:
    """After every operator of this session stopped (this fixture is torn down last): the
    objects left in this session's deleted namespaces lose the operator's finalizers. A test
    deletes its namespace without waiting, and its operator may stop before it lets a call
    go; nothing would then ever remove the finalizer, the namespace would stay Terminating,
    and `make uninstall` would wait for ever on the CRDs (seen in CI)."""
    yield
    core = client.CoreV1Api(api)
    custom = client.CustomObjectsApi(api)
    for namespace in core.list_namespace(label_selector="tooladapter.dev/test=true").items:
        name = str(namespace.metadata.name)
        if not name.startswith(SESSION) or namespace.metadata.deletion_timestamp is None:
            continue  # another worker's, or not deleted by its test
        for plural in FINALIZED:
            with contextlib.suppress(client.ApiException):
                listed: dict[str, Any] = custom.list_namespaced_custom_object(  # type: ignore[assignment]  # a dict, as the API server sent it
                    "tooladapter.dev", "v1alpha1", name, plural
                )
                for item in listed.get("items", []):
                    kept = [
                        f
                        for f in item["metadata"].get("finalizers") or []
                        if not f.startswith("tooladapter.dev/")
                    ]
                    if kept != (item["metadata"].get("finalizers") or []):
                        custom.patch_namespaced_custom_object(
                            "tooladapter.dev",
                            "v1alpha1",
                            name,
                            plural,
                            item["metadata"]["name"],
                            {"metadata": {"finalizers": kept or None}},
                        )


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


@pytest.fixture(scope="session")
def egress_operator(
    api: client.ApiClient, tmp_path_factory: pytest.TempPathFactory
) -> Callable[..., contextlib.AbstractContextManager[EgressPair]]:
    """A factory: `with egress_operator(scope, hosts, ca, **settings) as (operator, proxy)`
    runs an operator and an egress proxy (`python -m tooladapter egress-proxy` on this host,
    as `make run` runs it) serving only `scope-*`. The proxy reaches each test host name of
    `hosts` on this node's address and trusts `ca` for TLS upstreams; `settings` go to both."""

    @contextlib.contextmanager
    def start(
        scope: str, hosts: list[str], ca: Path, settings: Mapping[str, str] | None = None
    ) -> Iterator[EgressPair]:
        node = node_ip()
        shared = {**(settings or {}), "TOOLADAPTER_NAMESPACES": f"{scope}-*"}
        proxy = EgressProxyProcess(
            tmp_path_factory.mktemp("egress-proxy"),
            {
                **shared,
                "TOOLADAPTER_EGRESS_HOSTS": ",".join(f"{host}={node}" for host in hosts),
                "TOOLADAPTER_EGRESS_CA_FILE": str(ca),
            },
        )
        proxy.start()
        operator = OperatorProcess(
            tmp_path_factory.mktemp("egress-operator"),
            {
                **shared,
                "TOOLADAPTER_EGRESS_PROXY_PORT": str(proxy.port),
                "TOOLADAPTER_EGRESS_PROXY_ADDRESS": node,
            },
        )
        try:
            operator.start()
            yield operator, proxy
        finally:
            operator.stop()
            proxy.stop()

    return start


#: Seconds each test file took in a recent whole run (hack/test_durations.py writes it).
DURATIONS = Path(__file__).with_name("durations.json")
#: A file the record does not know yet is assumed to take this long.
UNKNOWN_FILE_SECONDS = 30.0


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Longest files first: with a file per worker at a time, the last to finish are short
    ones, so the workers end together instead of one waiting on another's long file."""
    try:
        seconds: dict[str, float] = json.loads(DURATIONS.read_text())
    except (OSError, ValueError):
        return
    root = Path(__file__).resolve().parent.parent.parent

    def cost(item: pytest.Item) -> float:
        name = item.path.resolve().relative_to(root).as_posix()
        return seconds.get(name, UNKNOWN_FILE_SECONDS)

    # sorted() is stable: the tests of one file keep their order (and stay together).
    items[:] = sorted(items, key=lambda item: -cost(item))


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
