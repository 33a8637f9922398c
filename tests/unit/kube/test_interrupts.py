"""Interrupting as the requester: read, write on the version read, read again when the call
changed meanwhile; an ended call is never written."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from tooladapter.enums import InterruptStanding
from tooladapter.kube.errors import CallerApiError
from tooladapter.kube.interrupts import ATTEMPTS, interrupt


class FakeObjects:
    """One invocation; `changes` are states it moves to, one per read, before the write
    that names the version read lands."""

    error = CallerApiError

    def __init__(self, state: str, changes: list[str] | None = None) -> None:
        self.obj: dict[str, Any] = {
            "metadata": {"name": "c", "resourceVersion": "1"},
            "spec": {"interrupt": False},
            "status": {"state": state},
        }
        self.changes = list(changes or [])
        self.patches: list[dict[str, Any]] = []

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

    async def merge_patch(
        self, plural: str, namespace: str, name: str, patch: dict[str, Any]
    ) -> dict[str, Any]:
        self.patches.append(patch)
        if patch["metadata"]["resourceVersion"] != self.obj["metadata"]["resourceVersion"]:
            raise CallerApiError(409, "the object has been modified")
        self.obj["spec"]["interrupt"] = True
        self._bump(self.obj["status"]["state"])
        return copy.deepcopy(self.obj)


async def test_a_running_call_is_interrupted_on_the_version_read() -> None:
    objects = FakeObjects("Executing")
    done = await interrupt(objects, "ns", "c")  # type: ignore[arg-type]
    assert done.standing is InterruptStanding.REQUESTED
    assert done.obj["spec"]["interrupt"] is True
    assert objects.patches == [{"spec": {"interrupt": True}, "metadata": {"resourceVersion": "1"}}]


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


async def test_a_call_that_keeps_changing_gives_up_with_the_conflict() -> None:
    objects = FakeObjects("Executing", changes=["Executing"] * (ATTEMPTS + 2))
    with pytest.raises(CallerApiError) as caught:
        await interrupt(objects, "ns", "c")  # type: ignore[arg-type]
    assert caught.value.status == 409 and len(objects.patches) == ATTEMPTS


async def test_refusals_are_the_requesters_to_read() -> None:
    with pytest.raises(CallerApiError) as caught:
        await interrupt(FakeObjects("Executing"), "ns", "missing")  # type: ignore[arg-type]
    assert caught.value.status == 404
