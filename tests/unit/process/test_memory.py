"""Returning freed heap to the OS after a burst."""

from __future__ import annotations

import sys

from tooladapter import memory


def test_release_free_heap_runs_and_finds_glibc_on_linux() -> None:
    memory.release_free_heap()
    if sys.platform.startswith("linux"):
        assert memory._TRIM is not None


def test_start_up_objects_leave_later_collections_and_new_cycles_still_go() -> None:
    import gc
    import weakref

    class Node:
        def __init__(self) -> None:
            self.other: Node | None = None

    try:
        memory.freeze_start_up()
        assert gc.get_freeze_count() > 0  # what exists now is no longer walked

        a, b = Node(), Node()
        a.other, b.other = b, a  # a cycle made after start-up: only a collection frees it
        gone = weakref.ref(a)
        del a, b
        memory.release_free_heap()
        assert gone() is None
    finally:
        gc.unfreeze()  # the rest of the test session collects as before
