"""The invocation state machine: the reference's table plus its documented extensions."""

from __future__ import annotations

import itertools

import pytest

from tooladapter.enums import TERMINAL_STATES, InvocationState
from tooladapter.pipeline.states import (
    EXTENSIONS,
    REFERENCE_TRANSITIONS,
    TRANSITIONS,
    IllegalTransition,
    allowed_targets,
    can_transition,
    is_terminal,
    transition,
)

S = InvocationState

#: The reference's diagram, written out independently of the module.
REFERENCE = {
    (S.RECEIVED, S.VALIDATED),
    (S.RECEIVED, S.DENIED),
    (S.VALIDATED, S.AUTHORIZED),
    (S.VALIDATED, S.DENIED),
    (S.AUTHORIZED, S.AWAITING_APPROVAL),
    (S.AUTHORIZED, S.BROKERED),
    (S.AUTHORIZED, S.DENIED),
    (S.AWAITING_APPROVAL, S.BROKERED),
    (S.AWAITING_APPROVAL, S.DENIED),
    (S.BROKERED, S.EXECUTING),
    (S.EXECUTING, S.OBSERVED),
    (S.EXECUTING, S.FAILED),
    (S.EXECUTING, S.UNCERTAIN),
    (S.EXECUTING, S.CANCELLED),
}
#: Before Executing nothing with an effect has started: every earlier state can end
#: Cancelled (interrupt), Denied (the re-check before acting) or Failed (before any effect).
BEFORE_EXECUTING = (S.RECEIVED, S.VALIDATED, S.AUTHORIZED, S.AWAITING_APPROVAL, S.BROKERED)
EXTENDED = {
    (state, end) for state in BEFORE_EXECUTING for end in (S.CANCELLED, S.DENIED, S.FAILED)
} - REFERENCE
#: A dry run goes from Received to Previewed and nowhere else.
EXTENDED |= {(S.RECEIVED, S.PREVIEWED)}
#: A duplicate ends from Received in its first call's state (it ran nothing).
EXTENDED |= {(S.RECEIVED, S.OBSERVED), (S.RECEIVED, S.UNCERTAIN)}
LEGAL = REFERENCE | EXTENDED


def test_the_table_is_the_reference_plus_the_extensions() -> None:
    table = {(a, b) for a, targets in TRANSITIONS.items() for b in targets}
    assert table == LEGAL
    assert {(a, b) for a, t in REFERENCE_TRANSITIONS.items() for b in t} == REFERENCE
    assert {(a, b) for a, t in EXTENSIONS.items() for b in t} - REFERENCE == EXTENDED


@pytest.mark.parametrize(("current", "target"), sorted(LEGAL))
def test_every_legal_transition_is_allowed(current: S, target: S) -> None:
    assert transition(current, target) is target
    assert can_transition(current, target)


@pytest.mark.parametrize(
    ("current", "target"),
    [pair for pair in itertools.product(InvocationState, repeat=2) if pair not in LEGAL],
)
def test_every_pair_not_in_the_table_raises(current: S, target: S) -> None:
    with pytest.raises(IllegalTransition) as caught:
        transition(current, target)
    assert isinstance(caught.value, ValueError)
    assert (caught.value.current, caught.value.target) == (current, target)
    assert f"illegal state transition {current} -> {target}" in str(caught.value)


def test_the_message_says_what_is_possible() -> None:
    with pytest.raises(IllegalTransition, match="can be Cancelled, Failed, Observed, Uncertain"):
        transition(S.EXECUTING, S.VALIDATED)
    with pytest.raises(IllegalTransition, match="Observed is terminal"):
        transition(S.OBSERVED, S.EXECUTING)
    with pytest.raises(IllegalTransition, match="already Executing"):
        transition(S.EXECUTING, S.EXECUTING)


def test_denied_and_failed_come_from_every_state_before_executing() -> None:
    # The re-check right before acting can deny from Brokered; nothing after Executing
    # began can be Denied (the effect may have happened).
    assert {a for a, b in LEGAL if b is S.DENIED} == set(BEFORE_EXECUTING)
    assert {a for a, b in LEGAL if b is S.FAILED} == {*BEFORE_EXECUTING, S.EXECUTING}


def test_only_a_received_call_can_end_previewed_and_nothing_leaves_it() -> None:
    assert {a for a, b in LEGAL if b is S.PREVIEWED} == {S.RECEIVED}
    assert is_terminal(S.PREVIEWED)
    assert allowed_targets(S.PREVIEWED) == frozenset()


@pytest.mark.parametrize("state", list(InvocationState))
def test_terminal_states_have_no_way_out(state: S) -> None:
    assert is_terminal(state) is (state in TERMINAL_STATES)
    assert (allowed_targets(state) == frozenset()) is is_terminal(state)
