"""Returning freed heap to the OS after a burst."""

from __future__ import annotations

import sys

from tooladapter import memory


def test_release_free_heap_runs_and_finds_glibc_on_linux() -> None:
    memory.release_free_heap()
    if sys.platform.startswith("linux"):
        assert memory._TRIM is not None
