"""Ctrl-C while `invoke --wait` follows a call: the rule of what each stop request does."""

from __future__ import annotations

import pytest

from tooladapter.cli.stopping import StopAction, action_for, left_running_message, wants_interrupt


@pytest.mark.parametrize("interactive", [True, False])
@pytest.mark.parametrize("interrupt_on_exit", [True, False])
def test_a_second_stop_request_always_leaves_the_call_running(
    interactive: bool, interrupt_on_exit: bool
) -> None:
    for count in (2, 3, 10):
        action = action_for(count, interactive=interactive, interrupt_on_exit=interrupt_on_exit)
        assert action is StopAction.LEAVE


def test_the_first_stop_request_asks_on_a_terminal_and_interrupts_when_told_to() -> None:
    assert action_for(1, interactive=True, interrupt_on_exit=False) is StopAction.ASK
    assert action_for(1, interactive=False, interrupt_on_exit=False) is StopAction.LEAVE
    assert action_for(1, interactive=True, interrupt_on_exit=True) is StopAction.INTERRUPT
    assert action_for(1, interactive=False, interrupt_on_exit=True) is StopAction.INTERRUPT


def test_only_yes_interrupts() -> None:
    for answer in ("y\n", "Y", "yes", " YES \n"):
        assert wants_interrupt(answer), answer
    for answer in ("", "\n", "n", "no", "yep", "y y", "\x03"):
        assert not wants_interrupt(answer), answer


def test_leaving_the_call_says_how_to_stop_it() -> None:
    assert left_running_message("call-1", "team-a") == (
        "the call keeps running: tooladapter interrupt call-1 -n team-a"
    )
