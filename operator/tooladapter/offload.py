"""CPU-heavy work on agent-influenced data, off the event loop, one job per tenant at a time.

Sanitizing a large result, validating large arguments and hashing them are linear in their
size (RE2 for every regular expression, no quadratic keyword), but a megabyte still costs
tens to hundreds of milliseconds of CPU: on the event loop that is time every other
tenant's call waits. So large jobs run on a small thread pool. RE2 matches without the GIL
and pure Python is preempted every `sys.getswitchinterval()` (5 ms), so the loop keeps
serving other calls while a job runs (measured: a 0.4 s RE2 match on a worker left the
loop's longest pause at 8 ms).

Fairness: a tenant (namespace) runs one large job at a time, so a flood of slow calls in
one namespace holds at most one worker while other tenants' jobs take the rest; small
jobs (the common case) run inline and never queue behind anyone.
"""

from __future__ import annotations

import asyncio
import functools
from collections import Counter
from collections.abc import AsyncIterator, Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from contextlib import asynccontextmanager
from typing import Any, ParamSpec, TypeVar

P = ParamSpec("P")
T = TypeVar("T")

#: Jobs on at most this much data run inline (a few milliseconds at most).
INLINE_BYTES = 32 * 1024
#: Worker threads for large jobs (the development VM has two cores).
WORKERS = 2

_POOL = ThreadPoolExecutor(max_workers=WORKERS, thread_name_prefix="tooladapter-cpu")
_locks: dict[tuple[int, str], asyncio.Lock] = {}
_users: Counter[tuple[int, str]] = Counter()


@asynccontextmanager
async def _turn(tenant: str) -> AsyncIterator[None]:
    key = (id(asyncio.get_running_loop()), tenant)
    lock = _locks.setdefault(key, asyncio.Lock())
    _users[key] += 1
    try:
        async with lock:
            yield
    finally:
        _users[key] -= 1
        if not _users[key]:
            del _users[key]
            _locks.pop(key, None)


def rough_size(arguments: Mapping[str, Any]) -> int:
    """0 for the common small call's arguments (a few scalars and short strings), else
    "large" (`run` puts work over them on the pool)."""
    small = len(arguments) <= 32 and all(
        value is None
        or isinstance(value, bool | int | float)
        or (isinstance(value, str) and len(value) <= 1024)
        for value in arguments.values()
    )
    return 0 if small else INLINE_BYTES + 1


async def run(
    tenant: str, size: int, fn: Callable[P, T], /, *args: P.args, **kwargs: P.kwargs
) -> T:
    """`fn(*args, **kwargs)`: inline when `size` (bytes of data it works on, estimated)
    is small, else on the pool in the tenant's turn."""
    if size <= INLINE_BYTES:
        return fn(*args, **kwargs)
    async with _turn(tenant):
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(_POOL, functools.partial(fn, *args, **kwargs))
