"""Fixtures of the data-flow tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.integration.dataflow.tools import LOOPBACK
from tests.integration.servers import Recorder, recording_server


@pytest.fixture
def sink() -> Iterator[Recorder]:
    """Where the `send` tool sends: it records every request."""
    with recording_server(LOOPBACK) as server:
        yield server
