"""How the doors (MCP, REST, CLI, the reviewers' page) read an ended call's outcome.

Pure functions over an invocation's `status` (plain data):

- A tool error: the tool ran to its end and answered with an error: `Observed` with
  `result.isError` (and the exit code or HTTP status). Its effect may have happened: never
  "safe to retry".
- A duplicate (same idempotency key, same caller, same request): it ends in the first
  call's state with its receiptRef and result, and `duplicateOf` naming that call.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tooladapter.enums import FailureClass, InvocationState

#: Failure classes of a tool that ran and answered with an error.
TOOL_ERROR_CLASSES = frozenset({FailureClass.TOOL_ERROR, FailureClass.OUTPUT_INVALID})


def state_of(obj: Mapping[str, Any]) -> InvocationState | None:
    """The invocation's state, or None when it has none (yet) or one this version does not
    know."""
    raw = (obj.get("status") or {}).get("state")
    try:
        return InvocationState(raw) if raw else None
    except ValueError:
        return None


def _result(status: Mapping[str, Any]) -> Mapping[str, Any]:
    result = status.get("result")
    return result if isinstance(result, Mapping) else {}


def duplicate_of(status: Mapping[str, Any]) -> str | None:
    """The first call this one duplicates, or None."""
    first = status.get("duplicateOf")
    return str(first) if first else None


def tool_error(status: Mapping[str, Any]) -> bool:
    """The tool ran to its end and answered with an error: `Observed` with `result.isError`
    (or a tool-error failure class)."""
    if status.get("state") != InvocationState.OBSERVED:
        return False
    return bool(_result(status).get("isError")) or (
        status.get("failureClass") in TOOL_ERROR_CLASSES
    )


def error_detail(status: Mapping[str, Any]) -> str:
    """What the tool answered, in a few words: `exit code 2`, `HTTP 500`, or ``."""
    result = _result(status)
    parts = []
    if result.get("exitCode") is not None:
        parts.append(f"exit code {result['exitCode']}")
    if result.get("httpStatus") is not None:
        parts.append(f"HTTP {result['httpStatus']}")
    return ", ".join(parts)


def outcome_label(status: Mapping[str, Any]) -> str:
    """The state as a person should read it: `Observed` alone is a success; a tool error
    and a duplicate say so (`Observed: tool error (exit code 2)`)."""
    state = str(status.get("state") or "")
    words = []
    if tool_error(status):
        detail = error_detail(status)
        words.append(f"tool error ({detail})" if detail else "tool error")
    first = duplicate_of(status)
    if first:
        words.append(f"duplicate of {first}")
    return f"{state}: {', '.join(words)}" if words else state
