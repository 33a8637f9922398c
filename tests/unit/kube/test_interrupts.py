"""Interrupting as the requester: read, write while the call stands as read (uid and state),
read again when its state moved on meanwhile; an ended call is never written; metadata
moving under the door (another agent rewriting managedFields) never holds it off."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from tooladapter.enums import InterruptStanding
from tooladapter.kube.errors import CallerApiError
from tooladapter.kube.interrupts import ATTEMPTS, interrupt


class FakeObjects:
    """One invocation; `changes` are states it moves to, one per read, before the write
    lands (its tests applied as the API server applies them: all or nothing, 422)."""

    error = CallerApiError

    def __init__(self, state: str, changes: list[str] | None = None) -> None:
        self.obj: dict[str, Any] = {
            "metadata": {"name": "c", "uid": "u1", "resourceVersion": "1"},
            "spec": {"interrupt": False},
            "status": {"state": state},
        }
        self.changes = list(changes or [])
        self.patches: list[list[dict[str, Any]]] = []

    def _bump(self, state: str) -> None:
        self.obj["status"]["state"] = state
        meta = self.obj["metadata"]
        meta["resourceVersion"] = str(int(meta["resourceVersion"]) + 1)

    async def get(self, plural: str, namespace: str, name: str) -> dict[str, Any]:
        if name != "c":
            raise CallerApiError(404, "not found")
        seen = copy.deepcopy(self.obj)
        if self.changes:
            self._bump(self.changes.pop(0))  # changes right after it was read
        return seen

    async def json_patch(
        self, plural: str, namespace: str, name: str, ops: list[dict[str, Any]]
    ) -> dict[str, Any]:
        self.patches.append(ops)
        for op in ops:
            if op["op"] == "test":
                where, _, key = op["path"].lstrip("/").partition("/")
                if (self.obj.get(where) or {}).get(key) != op["value"]:
                    raise CallerApiError(422, f"testing value {op['path']} failed")
        for op in ops:
            if op["op"] == "add":
                assert op["path"] == "/spec/interrupt"
                self.obj["spec"]["interrupt"] = op["value"]
        self._bump(self.obj["status"]["state"])
        return copy.deepcopy(self.obj)


async def test_a_running_call_is_interrupted_while_it_stands_as_read() -> None:
    objects = FakeObjects("Executing")
    done = await interrupt(objects, "ns", "c")  # type: ignore[arg-type]
    assert done.standing is InterruptStanding.REQUESTED
    assert done.obj["spec"]["interrupt"] is True
    assert objects.patches == [
        [
            {"op": "test", "path": "/metadata/uid", "value": "u1"},
            {"op": "test", "path": "/status/state", "value": "Executing"},
            {"op": "add", "path": "/spec/interrupt", "value": True},
        ]
    ]


async def test_a_call_that_ended_between_the_read_and_the_write_is_answered_as_ended() -> None:
    objects = FakeObjects("Executing", changes=["Observed"])
    done = await interrupt(objects, "ns", "c")  # type: ignore[arg-type]
    assert done.standing is InterruptStanding.ENDED
    assert objects.obj["spec"]["interrupt"] is False  # the one write was refused


async def test_an_ended_or_already_interrupted_call_is_not_written() -> None:
    ended = FakeObjects("Uncertain")
    assert (await interrupt(ended, "ns", "c")).standing is InterruptStanding.ENDED  # type: ignore[arg-type]
    asked = FakeObjects("Executing")
    asked.obj["spec"]["interrupt"] = True
    done = await interrupt(asked, "ns", "c")  # type: ignore[arg-type]
    assert done.standing is InterruptStanding.ALREADY_REQUESTED
    assert not ended.patches and not asked.patches


async def test_a_call_whose_state_moved_on_is_read_again_and_interrupted_as_it_stands() -> None:
    objects = FakeObjects("Authorized", changes=["Brokered", "Executing"])
    done = await interrupt(objects, "ns", "c")  # type: ignore[arg-type]
    assert done.standing is InterruptStanding.REQUESTED
    assert objects.obj["spec"]["interrupt"] is True
    assert len(objects.patches) == 3  # Authorized and Brokered refused, Executing written


async def test_another_agent_moving_the_calls_metadata_never_holds_the_interrupt_off() -> None:
    """Attack: an agent with patch on toolinvocations rewrites another agent's call's
    metadata.managedFields (no admission policy can pin it) on every read, moving its
    resourceVersion: a door that wrote on the version read answered 409 after 8 rounds and
    the call could not be interrupted from any door."""
    objects = FakeObjects("Executing", changes=["Executing"] * (ATTEMPTS + 2))
    done = await interrupt(objects, "ns", "c")  # type: ignore[arg-type]
    assert done.standing is InterruptStanding.REQUESTED
    assert objects.obj["spec"]["interrupt"] is True and len(objects.patches) == 1


async def test_a_call_whose_state_keeps_changing_gives_up_with_the_refusal() -> None:
    objects = FakeObjects("Received", changes=[f"S{i}" for i in range(ATTEMPTS + 2)])
    with pytest.raises(CallerApiError) as caught:
        await interrupt(objects, "ns", "c")  # type: ignore[arg-type]
    assert caught.value.status == 422 and len(objects.patches) == ATTEMPTS


async def test_a_write_refused_for_another_reason_is_not_tried_again() -> None:
    objects = FakeObjects("Executing")

    async def refuse(plural: str, namespace: str, name: str, ops: Any) -> dict[str, Any]:
        objects.patches.append([])
        raise CallerApiError(422, "spec.interrupt: Invalid value")

    objects.json_patch = refuse  # type: ignore[method-assign]
    with pytest.raises(CallerApiError):
        await interrupt(objects, "ns", "c")  # type: ignore[arg-type]
    assert len(objects.patches) == 1


async def test_a_call_without_a_state_that_ended_before_the_write_is_answered_as_ended() -> None:
    objects = FakeObjects("Executing")
    del objects.obj["status"]["state"]

    async def ends_first(plural: str, namespace: str, name: str, ops: Any) -> dict[str, Any]:
        assert [op["op"] for op in ops] == ["test", "add"]  # the uid only: no state to test
        objects.obj["status"]["state"] = "Denied"
        objects.obj["spec"]["interrupt"] = True
        return copy.deepcopy(objects.obj)

    objects.json_patch = ends_first  # type: ignore[method-assign]
    done = await interrupt(objects, "ns", "c")  # type: ignore[arg-type]
    assert done.standing is InterruptStanding.ENDED


async def test_refusals_are_the_requesters_to_read() -> None:
    with pytest.raises(CallerApiError) as caught:
        await interrupt(FakeObjects("Executing"), "ns", "missing")  # type: ignore[arg-type]
    assert caught.value.status == 404
