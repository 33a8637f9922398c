"""An MCP client's cancellation interrupts its call: the table of calls in flight, a
cancellation before or after the invocation is known, at another replica, and a 2026-07-28
request cut off (not by a shutdown); the session a cancellation names; a uid told from a
name (GET by uid)."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

from tooladapter.gateway.cancelling import GRACE_SECONDS, CallTracker, McpCalls
from tooladapter.gateway.context import Caller
from tooladapter.gateway.mcp_endpoint import SessionSeal, derived_key
from tooladapter.gateway.params import is_uid
from tooladapter.gateway.routes.invocations import resolve_invocation
from tooladapter.kube.callers import CallerIdentity
from tooladapter.kube.errors import CallerApiError
from tooladapter.mcp.core.cancels import CALL_LABEL

USER = "system:serviceaccount:ns:agent"


class FakeApi:
    """The caller's objects: invocations by name; what was patched and listed."""

    error = CallerApiError

    def __init__(self, *objs: dict[str, Any]) -> None:
        self.objs = {o["metadata"]["name"]: o for o in objs}
        self.patched: list[str] = []
        self.listed: list[tuple[str | None, str | None]] = []

    @property
    def objects(self) -> FakeApi:
        return self

    async def get(self, plural: str, namespace: str, name: str) -> dict[str, Any]:
        if name not in self.objs:
            raise CallerApiError(404, "not found")
        return self.objs[name]

    async def json_patch(
        self, plural: str, namespace: str, name: str, ops: list[dict[str, Any]]
    ) -> dict[str, Any]:
        self.patched.append(name)
        self.objs[name]["spec"]["interrupt"] = True
        return self.objs[name]

    async def list(
        self,
        plural: str,
        namespace: str,
        *,
        field_selector: str | None = None,
        label_selector: str | None = None,
    ) -> list[dict[str, Any]]:
        self.listed.append((field_selector, label_selector))
        key = (label_selector or "").partition("=")[2]
        return [
            o for o in self.objs.values() if o["metadata"].get("labels", {}).get(CALL_LABEL) == key
        ]


def call(name: str, state: str = "Executing", label: str | None = None) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "resourceVersion": "1"}
    if label:
        meta["labels"] = {CALL_LABEL: label}
    return {"metadata": meta, "spec": {"interrupt": False}, "status": {"state": state}}


def caller_with(api: FakeApi) -> Caller:
    return Caller(CallerIdentity(username=USER), api)  # type: ignore[arg-type]


async def test_a_cancellation_for_a_call_in_flight_here_interrupts_its_invocation() -> None:
    api = FakeApi(call("c1"))
    calls = McpCalls()
    tracker = CallTracker(calls, "k1", closing_cancels=False)
    assert tracker.label == {CALL_LABEL: "k1"}
    await tracker.bound(caller_with(api), "ns", "c1")
    await calls.cancel(caller_with(api), "ns", "k1")
    assert api.patched == ["c1"] and not api.listed


async def test_a_cancellation_before_the_invocation_is_known_applies_once_it_is() -> None:
    api = FakeApi(call("c1"))
    calls = McpCalls()
    tracker = CallTracker(calls, "k1", closing_cancels=False)
    await calls.cancel(caller_with(api), "ns", "k1")  # nothing created yet, nothing found
    assert api.patched == []
    await tracker.bound(caller_with(api), "ns", "c1")
    assert api.patched == ["c1"]


async def test_a_call_followed_elsewhere_is_found_by_its_label_among_the_callers_own() -> None:
    api = FakeApi(call("c1", label="k1"), call("c2", state="Observed", label="k1"), call("c3"))
    await McpCalls().cancel(caller_with(api), "ns", "k1")
    assert api.patched == ["c1"]  # the ended one is left alone, the unlabelled one unseen
    assert api.listed == [(f"spec.caller.name={USER}", f"{CALL_LABEL}=k1")]


async def test_a_cut_off_handshake_era_request_waits_a_while_for_its_cancellation(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    api = FakeApi(call("c1"))
    calls = McpCalls()
    tracker = CallTracker(calls, "k1", closing_cancels=False)
    await tracker.bound(caller_with(api), "ns", "c1")
    tracker.ended(caller_with(api), "ns", answered=False)
    assert api.patched == []  # a disconnect is no cancellation in these eras
    await calls.cancel(caller_with(api), "ns", "k1")
    assert api.patched == ["c1"] and not api.listed

    # Past the grace period it is forgotten (a later cancellation looks it up instead).
    now = time.monotonic()
    monkeypatch.setattr(time, "monotonic", lambda: now + GRACE_SECONDS + 1)
    calls.open("k2")
    assert "k1" not in calls.calls


async def test_an_answered_request_is_forgotten_at_once() -> None:
    calls = McpCalls()
    tracker = CallTracker(calls, "k1", closing_cancels=False)
    tracker.ended(caller_with(FakeApi()), "ns", answered=True)
    assert calls.calls == {}


async def test_a_2026_request_cut_off_by_its_client_interrupts_its_call_not_by_a_shutdown() -> None:
    api = FakeApi(call("c1"), call("c2"), call("c3"))
    calls = McpCalls()
    cut = CallTracker(calls, None, closing_cancels=True)
    assert cut.label == {}
    await cut.bound(caller_with(api), "ns", "c1")
    cut.ended(caller_with(api), "ns", answered=False)
    answered = CallTracker(calls, None, closing_cancels=True)
    await answered.bound(caller_with(api), "ns", "c2")
    answered.ended(caller_with(api), "ns", answered=True)
    await calls.drain()
    assert api.patched == ["c1"]

    calls.stopping = True
    stopped = CallTracker(calls, None, closing_cancels=True)
    await stopped.bound(caller_with(api), "ns", "c3")
    stopped.ended(caller_with(api), "ns", answered=False)
    await calls.drain()
    assert api.patched == ["c1"]


async def test_a_2026_request_cut_off_while_creating_interrupts_what_it_created() -> None:
    api = FakeApi(call("c1"))
    calls = McpCalls()
    tracker = CallTracker(calls, None, closing_cancels=True)
    created: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
    tracker.creating = created
    tracker.ended(caller_with(api), "ns", answered=False)
    created.set_result(api.objs["c1"])
    await calls.drain()
    assert api.patched == ["c1"]


def test_each_session_has_its_own_id_that_opens_only_for_its_caller() -> None:
    seal = SessionSeal(derived_key(b"k" * 32, b"session"))
    one = seal.seal(namespace="ns", username=USER, url=False)
    two = seal.seal(namespace="ns", username=USER, url=True)
    first = seal.session_id(one, namespace="ns", username=USER)
    assert first and first != seal.session_id(two, namespace="ns", username=USER)
    assert seal.session_id(one, namespace="ns", username=USER) == first
    assert seal.session_id(one, namespace="other", username=USER) == ""
    assert seal.session_id(one, namespace="ns", username="system:anonymous") == ""
    assert seal.session_id("forged", namespace="ns", username=USER) == ""


def test_a_uid_is_told_from_a_name() -> None:
    assert is_uid("0b7f6a2e-5c1d-4e8f-9a3b-2c4d6e8f0a1b")
    for value in (
        "call-1",
        "0B7F6A2E-5C1D-4E8F-9A3B-2C4D6E8F0A1B",
        "0b7f6a2e5c1d4e8f9a3b2c4d6e8f0a1b",
    ):
        assert not is_uid(value), value


# ------------------------------------------------------------------ GET by name or uid

UID_B = "0b7f6a2e-5c1d-4e8f-9a3b-2c4d6e8f0a1b"


class Namespace:
    """Invocations by name, each with its uid, read as a caller who may read them all."""

    def __init__(self, *pairs: tuple[str, str]) -> None:
        self.objs = {name: {"metadata": {"name": name, "uid": uid}} for name, uid in pairs}
        self.reads: list[str] = []

    async def read(self, name: str) -> dict[str, Any]:
        self.reads.append(name)
        if name not in self.objs:
            raise CallerApiError(404, "not found")
        return self.objs[name]

    async def name_of_uid(self, uid: str) -> str | None:
        return next((n for n, o in self.objs.items() if o["metadata"]["uid"] == uid), None)


async def test_a_uid_reads_the_invocation_that_has_it() -> None:
    ns = Namespace(("call-b", UID_B))
    found = await resolve_invocation(UID_B, ns.read, ns.name_of_uid)
    assert found["metadata"]["name"] == "call-b"
    assert (await resolve_invocation("call-b", ns.read, ns.name_of_uid)) is ns.objs["call-b"]


async def test_an_invocation_named_after_another_calls_uid_is_never_read_for_that_uid() -> None:
    """Attack: agent A creates an invocation named after agent B's call's uid (uids are on
    every listing); B's harness reading its call by uid through the gateway was handed A's
    object, with A's result (outside B's data-flow scope)."""
    ns = Namespace(("call-b", UID_B), (UID_B, "1a2b3c4d-0000-4000-8000-000000000001"))
    found = await resolve_invocation(UID_B, ns.read, ns.name_of_uid)
    assert found["metadata"]["name"] == "call-b"


async def test_a_uid_shaped_name_with_no_call_of_that_uid_is_read_by_name() -> None:
    ns = Namespace((UID_B, "1a2b3c4d-0000-4000-8000-000000000001"))
    found = await resolve_invocation(UID_B, ns.read, ns.name_of_uid)
    assert found is ns.objs[UID_B]
    with pytest.raises(CallerApiError):
        await resolve_invocation("1a2b3c4d-0000-4000-8000-00000000ffff", ns.read, ns.name_of_uid)
