"""Handing freed heap back to the operating system.

After a burst of calls glibc keeps the freed pages of its heap for reuse, so the operator's
resident memory stays at its high-water mark long after the burst. `malloc_trim` returns
them; it costs about a millisecond and runs with the periodic workers.
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


def release_free_heap() -> None:
    gc.collect()
    if _TRIM is not None:
        _TRIM(0)
