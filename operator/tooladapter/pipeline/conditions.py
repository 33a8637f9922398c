"""An invocation's conditions, derived from its state: what `kubectl wait` waits on.

`Finished` is True once the call is in a terminal state (any of them, a dry run's
Previewed included); `Succeeded` is True once it is Observed without a tool error, False
(reason `ToolError`) when Observed with one, False once it ended any other way, Unknown
while it runs. Both are derived, never decided: the flow's one status writer
sets them from the state on every write, so they can never disagree with it.
"""

from __future__ import annotations

from collections.abc import Sequence

from tooladapter.enums import FailureClass, InvocationState
from tooladapter.model import Condition

FINISHED = "Finished"
SUCCEEDED = "Succeeded"
#: The Succeeded reason of a call Observed with the tool's own error (`result.isError`).
TOOL_ERROR_REASON = "ToolError"
#: Failure classes of an Observed call: the tool answered, with an error.
TOOL_ERRORS = frozenset({FailureClass.TOOL_ERROR, FailureClass.OUTPUT_INVALID})
#: Bound of a condition's message (status.message is bounded already; this is its copy).
MESSAGE_CHARS = 1024


def reason_of(value: str) -> str:
    """A condition reason (CamelCase, as Kubernetes wants) from a state or failure class."""
    return "".join(part[:1].upper() + part[1:] for part in value.split("-"))


def invocation_conditions(
    state: InvocationState,
    *,
    failure_class: FailureClass | None,
    message: str | None,
    previous: Sequence[Condition],
    now: str,
) -> list[Condition]:
    """The conditions for `state`, keeping `lastTransitionTime` of unchanged statuses."""
    text = (message or "")[:MESSAGE_CHARS]
    if state is InvocationState.OBSERVED and failure_class in TOOL_ERRORS:
        # The tool ran and answered with an error: finished, not succeeded, not retryable.
        succeeded = ("False", TOOL_ERROR_REASON, text)
    elif state is InvocationState.OBSERVED:
        succeeded = ("True", InvocationState.OBSERVED.value, text)
    elif state is InvocationState.PREVIEWED:
        succeeded = ("False", "DryRun", "a dry run is evaluated, never executed")
    elif state.terminal:
        succeeded = ("False", reason_of(failure_class or state.value), text)
    else:
        # While it runs, the message says what it waits for (a quota, an approval).
        succeeded = ("Unknown", state.value, text)
    finished = ("True" if state.terminal else "False", state.value, text if state.terminal else "")
    before = {c.type: c for c in previous}
    out = []
    for kind, (status, reason, msg) in ((FINISHED, finished), (SUCCEEDED, succeeded)):
        old = before.get(kind)
        same = old is not None and old.status == status and old.last_transition_time
        out.append(
            Condition(
                type=kind,
                status=status,
                reason=reason,
                message=msg,
                last_transition_time=old.last_transition_time if same and old else now,
            )
        )
    return out
