"""The exit codes scripts can rely on, one per outcome (docs/reference/exit-codes.md lists
them). An invocation's terminal state maps onto them, and so does an API error status."""

from __future__ import annotations

from collections.abc import Mapping
from enum import IntEnum
from typing import Any

from tooladapter.enums import InvocationState
from tooladapter.review import readout


class ExitCode(IntEnum):
    OK = 0
    """Success: the call was Observed without a tool error (or previewed), the command did
    what it said."""
    ERROR = 1
    """Anything else: the API server unreachable, an object in the wrong state."""
    USAGE = 2
    """Bad options or arguments, or an object the API server refuses as invalid."""
    DENIED = 3
    """The call was Denied (or a dry-run says it would be); an approval did not bind."""
    FAILED = 4
    """The call Failed: it provably never started acting (safe to try again)."""
    UNCERTAIN = 5
    """The call's effect is Uncertain: an operator must confirm it."""
    CANCELLED = 6
    """The call was Cancelled (interrupted)."""
    PENDING = 7
    """Not finished within --timeout (still waiting, e.g. for an approval), or left running
    by a second Ctrl-C on `invoke`: the call goes on; `result` of a call that has not ended."""
    NOT_FOUND = 8
    """No such tool, invocation, receipt, result or workspace."""
    FORBIDDEN = 9
    """The API server (RBAC or an admission policy) forbade the action, or you are not
    authenticated."""
    MISMATCH = 10
    """`receipt verify`, `result`: the bytes do not hash to the reference. `receipts verify`: an
    invocation's status (`receiptRef`, `auditRef`) names a receipt other than the one its
    chain holds at the sequence the status records (re-pointed), the store serves other
    bytes under a receipt's name (rewritten), or the chain's head is not the receipt the
    published head names."""
    TOOL_ERROR = 11
    """The tool ran to its end and answered with an error (Observed with result.isError: a
    non-zero exit code, an HTTP error status): its effect may have happened, so unlike
    FAILED it is no invitation to run the call again."""
    BAD_SIGNATURE = 12
    """`receipt verify`, `receipts verify`: a receipt is not validly signed by a key of the
    key set (rewritten, forged, unsigned, or signed by a retired key after its period)."""
    CHAIN_BROKEN = 13
    """`receipts verify`: a sequence number of the chain is missing (a receipt removed, from
    the middle or the end), the store no longer serves the receipt a link names (removed),
    a link holds a receipt of another place, or links to another previous receipt."""


_STATE_CODES = {
    InvocationState.OBSERVED: ExitCode.OK,
    InvocationState.DENIED: ExitCode.DENIED,
    InvocationState.FAILED: ExitCode.FAILED,
    InvocationState.UNCERTAIN: ExitCode.UNCERTAIN,
    InvocationState.CANCELLED: ExitCode.CANCELLED,
}


def for_state(state: str | None) -> ExitCode:
    """The exit code of an invocation that stopped in `state` (PENDING unless terminal)."""
    try:
        known = InvocationState(state or "")
    except ValueError:
        # A terminal state this version does not know (e.g. a dry-run's Previewed) is read
        # by the command that asked for it; anything else is not finished.
        return ExitCode.PENDING
    return _STATE_CODES.get(known, ExitCode.PENDING)


def for_outcome(status: Mapping[str, Any]) -> ExitCode:
    """The exit code of an invocation's `status`: by state, and TOOL_ERROR for a tool that
    answered with an error (Observed with isError). A duplicate carries its first call's
    state, so it exits as that call did (Denied `duplicate` when that call was deleted before
    it ended)."""
    if readout.tool_error(status):
        return ExitCode.TOOL_ERROR
    return for_state(status.get("state"))


def for_api_status(status: int) -> ExitCode:
    """The exit code of an API error with HTTP `status` (0: no answer at all)."""
    if status == 404:
        return ExitCode.NOT_FOUND
    if status in (401, 403):
        return ExitCode.FORBIDDEN
    if status in (400, 422):
        return ExitCode.USAGE
    return ExitCode.ERROR


class CliError(Exception):
    """A command's failure: a message for stderr and the exit code."""

    def __init__(self, message: str, code: ExitCode = ExitCode.ERROR) -> None:
        super().__init__(message)
        self.message = message
        self.code = code
