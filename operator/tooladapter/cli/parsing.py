"""What the user types, turned into plain data: arguments, durations, receipt references.

Pure functions; each raises `CliError(..., USAGE)` with a message naming the bad input.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from datetime import UTC, datetime, timedelta
from typing import Any

from tooladapter.cli.exitcodes import CliError, ExitCode
from tooladapter.pipeline.hashing import SHA256_PREFIX

_DURATION = re.compile(r"^(\d+)([smhd])$")
_UNIT_SECONDS = {"s": 1, "m": 60, "h": 3600, "d": 86_400}
_HEX64 = re.compile(r"^[0-9a-f]{64}$")


def usage(message: str) -> CliError:
    return CliError(message, ExitCode.USAGE)


def parse_arguments(pairs: Iterable[str], args_json: str | None) -> dict[str, Any]:
    """The call's arguments: `--args-json` (an object) first, then each `--arg`.

    `key=value` sets a string; `key:=json` sets any JSON value (`count:=3`,
    `dry:=true`, `files:=["a","b"]`), as httpie spells it. A later key wins."""
    arguments: dict[str, Any] = {}
    if args_json is not None:
        try:
            loaded = json.loads(args_json)
        except ValueError as err:
            raise usage(f"--args-json is not JSON: {err}") from err
        if not isinstance(loaded, dict):
            raise usage("--args-json must be a JSON object")
        arguments.update(loaded)
    for pair in pairs:
        key, value = _split_pair(pair)
        arguments[key] = value
    return arguments


def _split_pair(pair: str) -> tuple[str, Any]:
    eq = pair.find("=")
    if eq <= 0:
        raise usage(f"--arg {pair!r}: expected key=value or key:=json")
    if pair[eq - 1] == ":":
        key = pair[: eq - 1]
        try:
            value: Any = json.loads(pair[eq + 1 :])
        except ValueError as err:
            raise usage(f"--arg {pair!r}: the value after := is not JSON: {err}") from err
    else:
        key, value = pair[:eq], pair[eq + 1 :]
    if not key:
        raise usage(f"--arg {pair!r}: empty key")
    return key, value


def parse_duration(text: str) -> timedelta:
    """`90s`, `15m`, `2h`, `7d` (a whole number and a unit)."""
    match = _DURATION.match(text.strip())
    if not match or int(match.group(1)) <= 0:
        raise usage(f"{text!r} is not a duration like 90s, 15m, 2h or 7d")
    return timedelta(seconds=int(match.group(1)) * _UNIT_SECONDS[match.group(2)])


def parse_expiry(text: str, *, now: datetime) -> str:
    """`--expires`: a duration from `now` or an RFC 3339 time; as `YYYY-MM-DDTHH:MM:SSZ`."""
    if _DURATION.match(text.strip()):
        moment = now + parse_duration(text)
    else:
        try:
            moment = datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
        except ValueError as err:
            raise usage(f"--expires {text!r}: not a duration (1h) or an RFC 3339 time") from err
        if moment.tzinfo is None:
            raise usage(f"--expires {text!r}: give a time zone (e.g. Z)")
        if moment <= now:
            raise usage(f"--expires {text!r} is in the past")
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_ref(text: str) -> str:
    """A receipt reference, `sha256:<64 hex>` or the bare hex, as `sha256:<hex>`."""
    value = text.strip().lower()
    digest = value.removeprefix(SHA256_PREFIX)
    if not _HEX64.match(digest):
        raise usage(f"{text!r} is not a receipt reference (sha256:<64 hex digits>)")
    return SHA256_PREFIX + digest


def looks_like_ref(text: str) -> bool:
    return bool(_HEX64.match(text.strip().lower().removeprefix(SHA256_PREFIX)))


_NAME_CHARS = re.compile(r"[^a-z0-9-]+")


def name_prefix(tool_id: str) -> str:
    """A `metadata.generateName` from a tool id (ids may hold `.` and `_`, names may not)."""
    cleaned = _NAME_CHARS.sub("-", tool_id.lower()).strip("-")[:40] or "call"
    return f"{cleaned}-"
