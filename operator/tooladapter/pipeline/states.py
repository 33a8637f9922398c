"""The invocation state machine: the reference's transition table, as data.

Every state change of a ToolInvocation goes through `transition`, so an illegal jump
(a resumed pipeline replaying a stale step, two writers racing) raises instead of
silently corrupting the record. Terminal states have no way out: an operator's effect
confirmation of an Uncertain call is recorded beside the state, not as a transition.
"""

from __future__ import annotations

from tooladapter.enums import TERMINAL_STATES, InvocationState

S = InvocationState

#: The reference's stateDiagram, verbatim.
REFERENCE_TRANSITIONS: dict[InvocationState, frozenset[InvocationState]] = {
    S.RECEIVED: frozenset({S.VALIDATED, S.DENIED}),
    S.VALIDATED: frozenset({S.AUTHORIZED, S.DENIED}),
    S.AUTHORIZED: frozenset({S.AWAITING_APPROVAL, S.BROKERED, S.DENIED}),
    S.AWAITING_APPROVAL: frozenset({S.BROKERED, S.DENIED}),
    S.BROKERED: frozenset({S.EXECUTING}),
    S.EXECUTING: frozenset({S.OBSERVED, S.FAILED, S.UNCERTAIN, S.CANCELLED}),
}

#: Extensions the reference does not draw but Kubernetes needs. Before Executing nothing
#: with an effect has started, so from every earlier state the call can end:
#: - Cancelled: an interrupt (`spec.interrupt`) arrives; the call ends rather than running;
#: - Denied: the re-check right before acting (Brokered) finds the namespace frozen, the
#:   grant revoked, a deny policy added or the descriptor changed while the call waited;
#: - Failed: a deterministic error or a `transient` one (the sandbox Job refused by a
#:   ResourceQuota or an admission webhook, a descriptor the executor cannot run) before any
#:   effect: Failed, never Uncertain, and never retried forever.
#: Queueing (rate limits) is a stage inside a state, not a state of its own.
BEFORE_EXECUTING = (S.RECEIVED, S.VALIDATED, S.AUTHORIZED, S.AWAITING_APPROVAL, S.BROKERED)
EXTENSIONS: dict[InvocationState, frozenset[InvocationState]] = {
    state: frozenset({S.CANCELLED, S.DENIED, S.FAILED}) for state in BEFORE_EXECUTING
}

#: A duplicate (its idempotency key held by an earlier call of the same request) runs
#: nothing: from Received it ends in whatever state its first call ended, Observed and
#: Uncertain included, carrying that call's receipt (`status.duplicateOf`): the reference's
#: "the same idempotency key within scope returns the existing receipt".
EXTENSIONS[S.RECEIVED] = EXTENSIONS[S.RECEIVED] | {S.OBSERVED, S.UNCERTAIN}

#: A dry run (`spec.dryRun`) is evaluated from Received straight to its own terminal state,
#: Previewed: it never executes, so no other state is ever written for it.
EXTENSIONS[S.RECEIVED] = EXTENSIONS[S.RECEIVED] | {S.PREVIEWED}

TRANSITIONS: dict[InvocationState, frozenset[InvocationState]] = {
    state: REFERENCE_TRANSITIONS.get(state, frozenset()) | EXTENSIONS.get(state, frozenset())
    for state in InvocationState
}


class IllegalTransition(ValueError):
    """A state change the transition table does not allow."""

    def __init__(self, current: InvocationState, target: InvocationState) -> None:
        self.current = current
        self.target = target
        allowed = sorted(t.value for t in TRANSITIONS[current])
        if current == target:
            detail = f"the invocation is already {current.value}"
        elif not allowed:
            detail = f"{current.value} is terminal: no transition leaves it"
        else:
            detail = f"from {current.value} the next state can be {', '.join(allowed)}"
        super().__init__(f"illegal state transition {current.value} -> {target.value}: {detail}")


def allowed_targets(current: InvocationState) -> frozenset[InvocationState]:
    """The states `current` may move to."""
    return TRANSITIONS[current]


def can_transition(current: InvocationState, target: InvocationState) -> bool:
    return target in TRANSITIONS[current]


def transition(current: InvocationState, target: InvocationState) -> InvocationState:
    """`target` if `current -> target` is in the table, else `IllegalTransition`.

    Staying in the same state is not a transition and raises too.
    """
    if target not in TRANSITIONS[current]:
        raise IllegalTransition(current, target)
    return target


def is_terminal(state: InvocationState) -> bool:
    return state in TERMINAL_STATES
