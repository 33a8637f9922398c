"""Suite-wide rules: under `make test` (TOOLADAPTER_REQUIRE_CLUSTER=1) a skipped test is a
failed test, so nothing that did not run can be counted as passing; property tests have no
per-example deadline."""

from __future__ import annotations

import os
from collections.abc import Generator
from typing import Any

import pluggy
import pytest
from hypothesis import settings

# Property tests judge results, never speed: hypothesis's per-example deadline (200 ms) is a
# timed assertion, and on a loaded node it failed examples that were right.
settings.register_profile("tooladapter", deadline=None)
settings.load_profile("tooladapter")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: Any
) -> Generator[None, pluggy.Result[pytest.TestReport], None]:
    outcome = yield
    report = outcome.get_result()
    if report.skipped and os.environ.get("TOOLADAPTER_REQUIRE_CLUSTER") == "1":
        report.outcome = "failed"
        report.longrepr = f"skipped under make test, which must run everything: {report.longrepr}"


#: Sockets and pipes the synchronous Kubernetes client, MCP clients and test servers leave to
#: the garbage collector warn whenever the collector runs, inside whichever test is running
#: then: on the real cluster a ResourceWarning is reported, never an error. Every other
#: warning is an error everywhere (`filterwarnings` in pyproject.toml), and unit tests keep
#: ResourceWarning an error too.
_CLUSTER_SUITES = ("integration", "cluster", "deploy")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        parts = item.path.parts
        if "tests" in parts and parts[parts.index("tests") + 1] in _CLUSTER_SUITES:
            item.add_marker(pytest.mark.filterwarnings("default::ResourceWarning"))
            item.add_marker(
                pytest.mark.filterwarnings(
                    "default:Exception ignored in:pytest.PytestUnraisableExceptionWarning"
                )
            )
