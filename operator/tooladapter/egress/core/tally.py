"""Counting a lease's egress so that nothing the sandbox does hides a connection.

A sandbox decides how many requests it makes, so any record kept "first N" lets it push
what matters out: 200 refused requests, then the one allowed connection. Two rules keep the
record whole:

- allowed connections and refusals are capped apart, so refusals never take an allowed
  connection's place;
- beyond a cap nothing is dropped: connections are folded into one record per verdict,
  host and port (a count, bytes summed), and beyond the fold cap into one `others` record
  per verdict, counted whole.

`LeaseRecords` is the proxy's book of one lease (what it writes, the list the artifact store
keeps); `uses` sums those records per verdict, host and port for the status and the
receipt, listing a capped number of hosts of each kind.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from tooladapter.enums import EgressVerdict
from tooladapter.model import EgressRecord, EgressUse

#: Records a proxy keeps in full per lease, of allowed connections and of refusals (apart):
#: with folding, a lease's records stay well inside a ConfigMap's 1 MiB.
MAX_ALLOWED_RECORDS = 400
MAX_REFUSED_RECORDS = 200
#: Folded records per lease and kind (allowed, refused) before the `others` record.
MAX_FOLDED = 50
#: Rows of each kind (allowed, refused) the status and the receipt list by host; the rest
#: of a verdict is one `others` row.
MAX_LISTED_HOSTS = 32

_Key = tuple[str, str, int | None, bool]


def _kind_allowed(verdict: EgressVerdict | str) -> bool:
    return str(verdict) == EgressVerdict.ALLOWED


class LeaseRecords:
    """One lease's records as a proxy keeps them (see the module's docstring)."""

    def __init__(
        self,
        *,
        max_allowed: int = MAX_ALLOWED_RECORDS,
        max_refused: int = MAX_REFUSED_RECORDS,
        max_folded: int = MAX_FOLDED,
    ) -> None:
        self.max_full = {True: max_allowed, False: max_refused}
        self.max_folded = max_folded
        self.full: list[dict[str, Any]] = []
        self.kept = {True: 0, False: 0}
        self.folded: dict[_Key, EgressRecord] = {}
        self.folded_keys = {True: 0, False: 0}

    def add(self, entry: EgressRecord) -> None:
        allowed = _kind_allowed(entry.verdict)
        if self.kept[allowed] < self.max_full[allowed]:
            self.kept[allowed] += 1
            self.full.append(entry.wire())
            return
        key: _Key = (str(entry.verdict), entry.host, entry.port, False)
        if key not in self.folded and self.folded_keys[allowed] >= self.max_folded:
            key = (str(entry.verdict), "", None, True)
        known = self.folded.get(key)
        if known is None:
            if not key[3]:
                self.folded_keys[allowed] += 1
            self.folded[key] = entry.model_copy(
                update={"host": key[1], "port": key[2] or 0, "others": key[3]}
            )
            return
        self.folded[key] = known.model_copy(
            update={
                "count": known.count + entry.count,
                "bytes_up": known.bytes_up + entry.bytes_up,
                "bytes_down": known.bytes_down + entry.bytes_down,
                "at": entry.at or known.at,
            }
        )

    def wire(self) -> list[dict[str, Any]]:
        """Every record: the full ones in order, then the folded ones."""
        return [*self.full, *(record.wire() for record in self.folded.values())]


def uses(records: Iterable[EgressRecord], *, listed: int = MAX_LISTED_HOSTS) -> list[EgressUse]:
    """The records summed per verdict, host and port: allowed rows first (most bytes first),
    then refused rows (most requests first), at most `listed` of each kind; the rest of each
    verdict in one `others` row. Every connection and byte of `records` is counted once."""
    rows: dict[_Key, EgressUse] = {}
    for record in records:
        key: _Key = (str(record.verdict), record.host, record.port, record.others)
        if record.others:
            key = (str(record.verdict), "", None, True)
        row = rows.get(key) or EgressUse(
            host=key[1],
            port=key[2],
            verdict=record.verdict,
            reason=record.reason,
            others=key[3],
        )
        rows[key] = row.model_copy(
            update={
                "connections": row.connections + record.count,
                "bytes_up": row.bytes_up + record.bytes_up,
                "bytes_down": row.bytes_down + record.bytes_down,
                "reason": row.reason or record.reason,
            }
        )
    out: list[EgressUse] = []
    for allowed in (True, False):
        named = [r for r in rows.values() if _kind_allowed(r.verdict) == allowed and not r.others]
        named.sort(
            key=lambda r: (
                (-(r.bytes_up + r.bytes_down), -r.connections, r.host, r.port or 0)
                if allowed
                else (-r.connections, str(r.verdict), r.host, r.port or 0)
            )
        )
        spill: dict[str, EgressUse] = {
            str(r.verdict): r
            for r in rows.values()
            if _kind_allowed(r.verdict) == allowed and r.others
        }
        for row in named[listed:]:
            other = spill.get(str(row.verdict)) or EgressUse(
                verdict=row.verdict, reason=row.reason, others=True
            )
            spill[str(row.verdict)] = other.model_copy(
                update={
                    "connections": other.connections + row.connections,
                    "bytes_up": other.bytes_up + row.bytes_up,
                    "bytes_down": other.bytes_down + row.bytes_down,
                }
            )
        out.extend(named[:listed])
        out.extend(spill[v] for v in sorted(spill))
    return out


def bytes_moved(rows: Iterable[EgressUse]) -> tuple[int, int]:
    """(up, down) over every row: each connection is in exactly one."""
    up = down = 0
    for row in rows:
        up += row.bytes_up
        down += row.bytes_down
    return up, down


__all__ = [
    "MAX_ALLOWED_RECORDS",
    "MAX_FOLDED",
    "MAX_LISTED_HOSTS",
    "MAX_REFUSED_RECORDS",
    "LeaseRecords",
    "bytes_moved",
    "uses",
]
