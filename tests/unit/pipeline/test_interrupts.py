"""Interrupting a call from a door: where the request stands, and the patch that makes it."""

from __future__ import annotations

from typing import Any

import pytest

from tooladapter.enums import TERMINAL_STATES, InterruptStanding, InvocationState
from tooladapter.pipeline.interrupts import interrupt_patch, standing


def _call(state: str | None, *, interrupt: bool = False, version: str = "7") -> dict[str, Any]:
    obj: dict[str, Any] = {
        "metadata": {"name": "c", "resourceVersion": version},
        "spec": {"interrupt": interrupt},
    }
    if state is not None:
        obj["status"] = {"state": state}
    return obj


@pytest.mark.parametrize("state", sorted(TERMINAL_STATES))
def test_an_ended_call_has_nothing_to_interrupt_even_when_asked_before(state: str) -> None:
    assert standing(_call(state)) is InterruptStanding.ENDED
    assert standing(_call(state, interrupt=True)) is InterruptStanding.ENDED


@pytest.mark.parametrize(
    "state", [None, *(s.value for s in InvocationState if not s.terminal), "SomethingNew"]
)
def test_a_call_that_has_not_ended_is_interrupted_once(state: str | None) -> None:
    assert standing(_call(state)) is InterruptStanding.REQUESTED
    assert standing(_call(state, interrupt=True)) is InterruptStanding.ALREADY_REQUESTED


def test_the_patch_sets_only_the_interrupt_while_the_call_stands_as_decided_on() -> None:
    obj = _call("Executing", version="42")
    obj["metadata"]["uid"] = "u1"
    assert interrupt_patch(obj) == [
        {"op": "test", "path": "/metadata/uid", "value": "u1"},
        {"op": "test", "path": "/status/state", "value": "Executing"},
        {"op": "add", "path": "/spec/interrupt", "value": True},
    ]
    # Never the resourceVersion: anyone with patch can move it (managedFields).
    assert "resourceVersion" not in str(interrupt_patch(obj))
    assert interrupt_patch({"spec": {}}) == [
        {"op": "add", "path": "/spec/interrupt", "value": True}
    ]
