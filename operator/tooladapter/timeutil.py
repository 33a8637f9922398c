"""RFC 3339 timestamps as Kubernetes writes them (UTC, `Z`), with microseconds so stage
logs can be broken down by stage."""

from __future__ import annotations

from datetime import UTC, datetime


def now_iso() -> str:
    return datetime.now(UTC).isoformat(timespec="microseconds").replace("+00:00", "Z")


def parse_time(value: str) -> datetime:
    return datetime.fromisoformat(value.replace("Z", "+00:00"))
