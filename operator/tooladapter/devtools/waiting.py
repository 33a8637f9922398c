"""Bounded waits on a cluster that converges."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def wait_for(
    predicate: Callable[[], T | None], *, timeout: float, what: str, interval: float = 0.2
) -> T:
    """Poll `predicate` until it returns something truthy, or fail naming `what`."""
    deadline = time.monotonic() + timeout
    last: object = None
    while time.monotonic() < deadline:
        try:
            value = predicate()
        except Exception as exc:  # the API may be briefly unavailable; keep the last error
            last = exc
        else:
            last = value
            if value:
                return value
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}; last: {last!r}")
