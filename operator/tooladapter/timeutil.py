"""RFC 3339 timestamps as Kubernetes writes them (UTC, `Z`), with microseconds so stage
logs can be broken down by stage. The one writer and the one reader of times."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta


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
