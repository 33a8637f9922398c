"""The invocation state machine: the reference's table plus two documented extensions."""

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
EXTENDED = {
    (S.RECEIVED, S.CANCELLED),
    (S.VALIDATED, S.CANCELLED),
    (S.AUTHORIZED, S.CANCELLED),
    (S.AWAITING_APPROVAL, S.CANCELLED),
    (S.BROKERED, S.CANCELLED),
    (S.BROKERED, S.FAILED),
}
LEGAL = REFERENCE | EXTENDED


def test_the_table_is_the_reference_plus_the_extensions() -> None:
    table = {(a, b) for a, targets in TRANSITIONS.items() for b in targets}
    assert table == LEGAL
    assert {(a, b) for a, t in REFERENCE_TRANSITIONS.items() for b in t} == REFERENCE
    assert {(a, b) for a, t in EXTENSIONS.items() for b in t} == EXTENDED


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


def test_denied_comes_only_from_the_states_the_design_lists() -> None:
    assert {a for a, b in LEGAL if b is S.DENIED} == {
        S.RECEIVED,
        S.VALIDATED,
        S.AUTHORIZED,
        S.AWAITING_APPROVAL,
    }


@pytest.mark.parametrize("state", list(InvocationState))
def test_terminal_states_have_no_way_out(state: S) -> None:
    assert is_terminal(state) is (state in TERMINAL_STATES)
    assert (allowed_targets(state) == frozenset()) is is_terminal(state)
