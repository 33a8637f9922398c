"""Handing freed heap back to the operating system, and keeping the collector's pauses short.

After a burst of calls glibc keeps the freed pages of its heap for reuse, so the operator's
resident memory stays at its high-water mark long after the burst. `malloc_trim` returns
them; it costs about a millisecond and runs with the periodic workers.

A full collection walks every tracked object: after start-up some 160,000 (modules, classes,
kopf, pydantic's schemas, the SDKs), 100-200 ms during which no call moves, each time the
periodic workers run or the collector's own oldest generation fills. `freeze_start_up`
moves what start-up built, which lives as long as the process, out of every later
collection (`gc.freeze`): a collection then walks only what calls made since.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import gc
import logging

logger = logging.getLogger(__name__)


def _load_trim() -> ctypes._NamedFuncPointer | None:
    name = ctypes.util.find_library("c")
    if name is None:
        return None
    try:
        return ctypes.CDLL(name).malloc_trim
    except (OSError, AttributeError):  # not glibc (musl, macOS): nothing to trim
        return None


_TRIM = _load_trim()


def freeze_start_up() -> None:
    """Collect start-up's garbage, then keep the survivors out of later collections."""
    gc.collect()
    gc.freeze()


def release_free_heap() -> None:
    gc.collect()
    if _TRIM is not None:
        _TRIM(0)
