"""Connection records: logged, counted, and written to the lease's records ConfigMap.

Each lease's records are written as one JSON list under this replica's key, right after a
connection ends (coalesced: at most one write in flight per lease, the next one carries
everything since), so they are there when the operator ends the call and builds the
receipt: the pod's connections have closed before its Job can complete. Beyond its caps a
book folds connections into counted records rather than dropping them (`LeaseRecords`), so
no number of requests a sandbox makes hides another connection.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
import socket
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from tooladapter.egress.core.lease import RECORDS_PREFIX
from tooladapter.egress.core.tally import LeaseRecords
from tooladapter.enums import EgressVerdict
from tooladapter.metrics import EGRESS_CONNECTIONS
from tooladapter.model import EgressRecord
from tooladapter.timeutil import now_iso

logger = logging.getLogger("tooladapter.egress")

#: Writes one lease's records: (lease uid, invocation "namespace/name", key, JSON text).
Writer = Callable[[str, str, str, str], Awaitable[None]]


def replica_key(name: str | None = None) -> str:
    """`records.<this replica>`: ConfigMap keys allow [-._a-zA-Z0-9]."""
    raw = name or socket.gethostname()
    return RECORDS_PREFIX + (re.sub(r"[^-._a-zA-Z0-9]", "-", raw)[:200] or "proxy")


@dataclass
class _Book:
    invocation: str
    records: LeaseRecords = field(default_factory=LeaseRecords)
    dirty: bool = False
    writing: asyncio.Task[None] | None = None


class Recorder:
    def __init__(self, write: Writer | None, key: str | None = None) -> None:
        self.write = write
        self.key = key or replica_key()
        self.books: dict[str, _Book] = {}

    def record(
        self,
        *,
        lease: str | None,
        tenant: str | None,
        invocation: str | None,
        host: str,
        port: int,
        method: str,
        verdict: EgressVerdict,
        reason: str = "",
        bytes_up: int = 0,
        bytes_down: int = 0,
    ) -> EgressRecord:
        entry = EgressRecord(
            host=host[:255],
            port=port,
            method=method[:16],
            verdict=verdict,
            reason=reason[:512],
            bytes_up=bytes_up,
            bytes_down=bytes_down,
            at=now_iso(),
        )
        EGRESS_CONNECTIONS.labels(tenant or "unknown", str(verdict)).inc()
        logger.info(
            "egress lease=%s tenant=%s %s %s:%s %s%s up=%d down=%d",
            lease or "-",
            tenant or "-",
            method[:16],
            host[:255],
            port,
            verdict,
            f" ({reason[:200]})" if reason else "",
            bytes_up,
            bytes_down,
        )
        if lease and invocation and self.write is not None:
            book = self.books.setdefault(lease, _Book(invocation))
            book.records.add(entry)
            book.dirty = True
            if book.writing is None or book.writing.done():
                book.writing = asyncio.ensure_future(self._flush(lease, book))
        return entry

    async def _flush(self, lease: str, book: _Book) -> None:
        assert self.write is not None
        while book.dirty:
            book.dirty = False
            text = json.dumps(book.records.wire(), separators=(",", ":"))
            try:
                await self.write(lease, book.invocation, self.key, text)
            except Exception:
                logger.warning("egress records of lease %s not written", lease, exc_info=True)
                return

    def keep_only(self, open_leases: set[str]) -> None:
        """Books of ended leases go once their last write is done."""
        for lease, book in list(self.books.items()):
            if lease in open_leases or (book.writing is not None and not book.writing.done()):
                continue
            del self.books[lease]

    async def drain(self) -> None:
        pending = [b.writing for b in self.books.values() if b.writing is not None]
        if pending:
            await asyncio.gather(*pending, return_exceptions=True)
