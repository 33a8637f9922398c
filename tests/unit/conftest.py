"""Fixtures of the flow tests: a runtime over the in-memory fakes, and no real retry delays."""

from __future__ import annotations

import pytest

import tooladapter.flow
import tooladapter.receipts.service.storing
from tests.unit.fake_cluster import Harness, make_runtime


@pytest.fixture
def fast_retries(monkeypatch: pytest.MonkeyPatch) -> None:
    """The flow retries at once (its delays, and the guard's, are RETRY_DELAYS; a put the
    artifact store refused is retried after STORE_RETRY_DELAYS)."""
    monkeypatch.setattr(tooladapter.flow, "RETRY_DELAYS", (0, 0, 0, 0, 0))
    monkeypatch.setattr(tooladapter.receipts.service.storing, "STORE_RETRY_DELAYS", (0,))


@pytest.fixture
def h() -> Harness:
    """A runtime over a fresh FakeCluster, with a scripted native executor."""
    return make_runtime()
