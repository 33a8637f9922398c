"""RFC 3339 timestamps as Kubernetes writes them (UTC, `Z`), with microseconds so stage
logs can be broken down by stage. The one writer and the one reader of times; and the one
expiry check of the in-memory tables that remember an answer for a while."""

from __future__ import annotations

import time
from collections.abc import MutableMapping
from datetime import UTC, datetime, timedelta
from typing import TypeVar

K = TypeVar("K")


def now_iso() -> str:
    return to_iso(datetime.now(UTC))


def to_iso(moment: datetime) -> str:
    return moment.astimezone(UTC).isoformat(timespec="microseconds").replace("+00:00", "Z")


def in_seconds(seconds: float) -> str:
    """The RFC 3339 time `seconds` from now."""
    return to_iso(datetime.now(UTC) + timedelta(seconds=seconds))


def parse_time(text: str) -> datetime:
    """An RFC 3339 timestamp with an offset (`Z` or `+hh:mm`); raises `ValueError`."""
    parsed = datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
    if parsed.tzinfo is None:
        raise ValueError(f"timestamp {text!r} has no UTC offset (RFC 3339 needs 'Z' or '+hh:mm')")
    return parsed


def unexpired(expiries: MutableMapping[K, float], key: K) -> bool:
    """Whether `key`'s expiry (a `time.monotonic()` moment) is still ahead; one that has
    passed is dropped from `expiries`."""
    expires = expiries.get(key)
    if expires is None:
        return False
    if expires <= time.monotonic():
        del expiries[key]
        return False
    return True
