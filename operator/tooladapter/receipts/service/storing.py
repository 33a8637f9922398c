"""Writes to the artifact store, retried in place until the store takes them.

The store may be down (an s3 bucket across the network): a write it refuses is made again
(`STORE_RETRY_DELAYS`), with a metric and, once, `on_failure` (a warning event on the call),
so an end is delayed by a store outage, never lost.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

from tooladapter.enums import ArtifactKind
from tooladapter.metrics import ARTIFACT_STORE_ERRORS

logger = logging.getLogger("tooladapter.invocations")

T = TypeVar("T")

#: Who hears of a store's first refusal of a write: its kind, and the error.
OnFailure = Callable[[ArtifactKind, Exception], None]

#: Delays between attempts to store an artifact; the last repeats until the store takes it.
STORE_RETRY_DELAYS = (1, 2, 5, 10, 30)
#: Store I/O (an fsync, a request to a bucket) blocks a thread for as long as the store
#: takes: its own threads, so a hung store never holds the loop's default executor, which
#: resolves every host name the operator connects to.
_STORE_IO = ThreadPoolExecutor(max_workers=4, thread_name_prefix="tooladapter-store")


class _WriteFailed(Exception):
    """One write of a `store_all` trip failed: which kind, and why."""

    def __init__(self, kind: ArtifactKind, error: Exception) -> None:
        super().__init__(f"{type(error).__name__}: {error}")
        self.kind = kind
        self.error = error


async def store_all(
    writes: Sequence[tuple[ArtifactKind, Callable[[], object]]],
    *,
    of: str,
    on_failure: OnFailure | None = None,
) -> None:
    """Every write in order, in one trip to the store's threads, made again (whole) until
    the store takes them all; the writes must be idempotent."""

    def run() -> None:
        for kind, write in writes:
            as_kind(kind, write)

    if writes:
        await until_stored(run, ArtifactKind.RECEIPT, of=of, on_failure=on_failure)


def as_kind(kind: ArtifactKind, write: Callable[[], object]) -> None:
    """`write()`, a failure of it named by the artifact's kind (as `until_stored` reports
    it): for a trip that makes writes of several kinds."""
    try:
        write()
    except Exception as exc:
        raise _WriteFailed(kind, exc) from exc


async def read_once(read: Callable[[], T]) -> T:
    """`read()` on the store's threads, once: a reader that fails closed hears of the
    store's refusal at once, never waits through retries."""
    return await asyncio.get_running_loop().run_in_executor(_STORE_IO, read)


async def until_stored(
    put: Callable[[], T],
    kind: ArtifactKind,
    *,
    of: str,
    on_failure: OnFailure | None = None,
) -> T:
    """`put()` on the store's threads (an fsync, a request to a bucket), tried until the store
    takes it; `on_failure` hears of the first refusal."""
    attempt = 0
    while True:
        try:
            return await asyncio.get_running_loop().run_in_executor(_STORE_IO, put)
        except asyncio.CancelledError:
            raise
        except Exception as error:
            exc, kind = (
                (error.error, error.kind) if isinstance(error, _WriteFailed) else (error, kind)
            )
            ARTIFACT_STORE_ERRORS.labels(str(kind)).inc()
            delay = STORE_RETRY_DELAYS[min(attempt, len(STORE_RETRY_DELAYS) - 1)]
            attempt += 1
            logger.warning(
                "%s: the artifact store did not take the %s (%s: %s); attempt %d, next in %ss",
                of,
                kind,
                type(exc).__name__,
                exc,
                attempt,
                delay,
            )
            if attempt == 1 and on_failure is not None:
                on_failure(kind, exc)
            await asyncio.sleep(delay)
