"""The reference's integration events (issue 30): which receipt stands for which
CloudEvents, with the reference's payload fields, stable ids; the outbox delivers every
link's events at least once across a refusing sink and a takeover. Pure and in-memory
(the sink is a function)."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from tests.unit.fake_cluster import MemoryStore
from tooladapter.artifacts.chain import ReceiptChains
from tooladapter.outbox import DELIVERED, Outbox, SinkRefused, delivered_key
from tooladapter.receipts.core.cloudevents import (
    EventType,
    descriptor_event,
    event_id,
    receipt_events,
)
from tooladapter.receipts.core.signing import Signer
from tooladapter.settings import EventSinkSettings, Settings

NS, UID = "team-a", "00000000-0000-4000-8000-0000000000aa"
REF = "sha256:" + "c" * 64
TOOL_INVOKED_FIELDS = {
    "invocationId", "tenantId", "projectId", "runId", "attemptId", "toolId", "toolVersion",
    "effectiveClass", "state", "policyDecisionId", "approvalId", "requestHash", "resultHash",
}  # fmt: skip


def receipt(state: str = "Observed", **extra: Any) -> dict[str, Any]:
    return {
        "schema": "tool-invocation-v1",
        "invocationId": "uid-1",
        "invocationName": "call-1",
        "tenantId": NS,
        "tenantUid": UID,
        "projectId": NS,
        "toolId": "lister",
        "toolVersion": "1.0.0",
        "effectiveClass": "read",
        "state": state,
        "policyDecisionId": "pd-1",
        "approvalId": None,
        "requestHash": "sha256:" + "a" * 64,
        "resultHash": "sha256:" + "b" * 64,
        "runId": "run-1",
        "attemptId": None,
        "message": None,
        "deniedStage": None,
        "sandbox": {"kind": "None", "poolId": None, "leaseId": None},
        "endedAt": "2026-12-03T12:00:00Z",
        "writtenAt": "2026-12-03T12:00:00Z",
        "duplicateOf": None,
        "effectConfirmation": None,
        **extra,
    }


def types(events: list[dict[str, Any]]) -> list[str]:
    return [e["type"] for e in events]


def test_an_observed_call_is_tool_invoked_with_the_references_payload() -> None:
    (event,) = receipt_events(receipt(), REF, source="/tooladapter")
    assert event["specversion"] == "1.0"
    assert event["type"] == "tool-execution.invocations.v1.tool-invoked"
    assert event["source"] == "/tooladapter/namespaces/team-a"
    assert event["subject"] == "toolinvocations/call-1"
    assert event["id"] == event_id(REF, EventType.TOOL_INVOKED)
    assert event["time"] == "2026-12-03T12:00:00Z"
    assert set(event["data"]) == TOOL_INVOKED_FIELDS
    assert event["data"]["state"] == "Observed" and event["data"]["toolId"] == "lister"


@pytest.mark.parametrize(
    ("state", "expected"),
    [
        ("Failed", [EventType.TOOL_INVOKED]),
        ("Cancelled", [EventType.TOOL_INVOKED]),
        ("Denied", [EventType.TOOL_INVOCATION_DENIED]),
        ("Uncertain", [EventType.TOOL_EFFECT_UNCERTAIN]),
    ],
)
def test_each_end_sends_the_references_event(state: str, expected: list[EventType]) -> None:
    events = receipt_events(
        receipt(
            state, message="not granted", deniedStage="permission", failureClass="policy-denied"
        ),
        REF,
        source="/t",
    )
    assert types(events) == [e.value for e in expected]
    if state == "Denied":
        assert events[0]["data"] == {
            "invocationId": "uid-1",
            "tenantId": NS,
            "toolId": "lister",
            "reason": "policy-denied",
            "stage": "permission",
        }


def test_a_confirmation_is_tool_invoked_under_another_id_and_a_duplicate_sends_none() -> None:
    uncertain = receipt_events(receipt("Uncertain"), REF, source="/t")
    other = "sha256:" + "d" * 64
    confirmed = receipt_events(
        receipt("Uncertain", effectConfirmation={"recorded": True, "effectHappened": True}),
        other,
        source="/t",
    )
    assert types(confirmed) == [EventType.TOOL_INVOKED.value]
    assert confirmed[0]["id"] != uncertain[0]["id"]
    assert receipt_events(receipt(duplicateOf="first"), REF, source="/t") == []


def test_a_leased_call_sends_its_lease_and_release() -> None:
    sandbox = {"kind": "Container", "poolId": "default", "leaseId": "lease-1"}
    events = receipt_events(receipt(sandbox=sandbox), REF, source="/t")
    assert types(events) == [
        EventType.SANDBOX_LEASED.value,
        EventType.SANDBOX_RELEASED.value,
        EventType.TOOL_INVOKED.value,
    ]
    assert events[0]["data"] == {
        "leaseId": "lease-1",
        "invocationId": "uid-1",
        "tenantId": NS,
        "kind": "Container",
        "poolId": "default",
    }
    assert set(events[1]["data"]) == {"leaseId", "tenantId", "reason"}
    assert len({e["id"] for e in events}) == 3


def test_descriptor_events_carry_the_references_fields_and_one_id_per_generation() -> None:
    spec = {"toolId": "lister", "version": "1.0.0", "sideEffectClass": "read", "kind": "native"}
    kw: dict[str, Any] = {
        "source": "/t", "namespace": NS, "name": "lister", "uid": "d-1", "spec": spec,
        "time": "2026-12-03T12:00:00Z",
    }  # fmt: skip
    activated = descriptor_event(EventType.TOOL_DESCRIPTOR_ACTIVATED, generation=1, **kw)
    assert activated["data"] == {
        "toolId": "lister",
        "version": "1.0.0",
        "tenantId": NS,
        "sideEffectClass": "read",
        "kind": "native",
    }
    again = descriptor_event(EventType.TOOL_DESCRIPTOR_ACTIVATED, generation=1, **kw)
    assert again["id"] == activated["id"]
    retired = descriptor_event(EventType.TOOL_DESCRIPTOR_RETIRED, generation=2, reason="r", **kw)
    assert retired["data"]["reason"] == "r" and retired["id"] != activated["id"]


# -- the outbox --------------------------------------------------------------------------


class Sink:
    """A sink that refuses while `down`, and records what it took."""

    def __init__(self) -> None:
        self.down = False
        self.took: list[dict[str, Any]] = []

    async def post(self, session: Any, event: dict[str, Any]) -> None:
        if self.down:
            raise SinkRefused("HTTP 503")
        self.took.append(event)


def outbox_over(store: MemoryStore, chains: ReceiptChains, sink: Sink) -> Outbox:
    box = Outbox(store, chains, Settings(event_sink=EventSinkSettings(url="http://sink.invalid/")))
    box.post = sink.post  # type: ignore[method-assign]
    return box


def written(store: MemoryStore, count: int) -> ReceiptChains:
    signer = Signer.of(Ed25519PrivateKey.generate())
    chains = ReceiptChains(store, lambda: signer)
    for n in range(count):
        body = receipt(invocationId=f"uid-{n}", invocationName=f"call-{n}")
        data, _, _ = chains.append(body, namespace=NS, uid=UID)
        store.put(data)
    return chains


async def test_a_refusing_sink_loses_nothing_and_a_takeover_sends_the_rest_once() -> None:
    store, sink = MemoryStore(), Sink()
    chains = written(store, 3)
    box = outbox_over(store, chains, sink)
    sink.down = True
    with pytest.raises(SinkRefused):
        await box.deliver(None)  # type: ignore[arg-type]
    assert not [k for k in store.keys if "/delivered/" in k]
    sink.down = False
    assert await box.deliver(None) == 3  # type: ignore[arg-type]
    first_ids = [e["id"] for e in sink.took]
    assert len(set(first_ids)) == 3
    assert delivered_key(NS, UID, 3) in store.keys

    # More links; the first operator is gone before delivering them: a new one (its
    # chains learnt from the store) sends those, and only those.
    later = ReceiptChains(store, chains.signer)
    for n in range(3, 5):
        data, _, _ = later.append(receipt(invocationId=f"uid-{n}"), namespace=NS, uid=UID)
        store.put(data)
    successor = outbox_over(store, ReceiptChains(store, chains.signer), sink)
    successor.namespaces = lambda: [(NS, UID)]
    assert await successor.deliver(None) == 2  # type: ignore[arg-type]
    assert len(sink.took) == 5 and len({e["id"] for e in sink.took}) == 5


async def test_a_crash_between_a_post_and_its_marker_resends_the_same_id() -> None:
    store, sink = MemoryStore(), Sink()
    chains = written(store, 1)
    box = outbox_over(store, chains, sink)
    box.mark = lambda *a: None  # type: ignore[method-assign]  # the crash: no marker
    await box.deliver(None)  # type: ignore[arg-type]
    again = outbox_over(store, chains, sink)
    again.namespaces = lambda: [(NS, UID)]
    await again.deliver(None)  # type: ignore[arg-type]
    assert len(sink.took) == 2 and sink.took[0]["id"] == sink.took[1]["id"]


async def test_descriptor_events_wait_in_the_outbox_until_the_sink_takes_them() -> None:
    store, sink = MemoryStore(), Sink()
    box = outbox_over(store, written(store, 0), sink)
    event = descriptor_event(
        EventType.TOOL_DESCRIPTOR_ACTIVATED, source="/t", namespace=NS, name="lister",
        uid="d-1", generation=1, spec={"toolId": "lister"}, time="2026-12-03T12:00:00Z",
    )  # fmt: skip
    box.enqueue(event)
    box.enqueue(event)  # seen twice: kept once
    sink.down = True
    with pytest.raises(SinkRefused):
        await box.deliver(None)  # type: ignore[arg-type]
    sink.down = False
    await box.deliver(None)  # type: ignore[arg-type]
    await box.deliver(None)  # type: ignore[arg-type]
    assert [e["id"] for e in sink.took] == [event["id"]]
    assert DELIVERED + event["id"] in store.keys


async def test_without_a_sink_nothing_is_kept_or_sent() -> None:
    store = MemoryStore()
    box = Outbox(store, written(store, 1), Settings())
    assert not box.enabled
    box.enqueue({"id": "x"})
    await asyncio.wait_for(box.run(), 1)  # returns at once
    assert not [k for k in store.keys if "outbox" in k or "delivered" in k]


def test_no_argument_command_line_or_result_leaves_in_an_event() -> None:
    """An agent's arguments and a tool's output stay in the receipt and the store; the
    events carry the reference's fields and a denial's reason, nothing more."""
    secret = "s3cr3t-value-from-the-agent"
    body = receipt(
        commandLine=["curl", "-H", f"Authorization: {secret}"],
        argumentsHash="sha256:" + "e" * 64,
        result={"originalBytes": 10, "originalSha256": None, "truncated": False, "exitCode": 0},
        resultRef="sha256:" + "f" * 64,
        egress=[{"host": "example.com", "bytesUp": 1}],
        caller={"kind": "agent", "name": "system:serviceaccount:team-a:agent-1"},
        stages=[{"stage": "execute", "detail": secret}],
        message=secret,
    )
    sandbox = {"kind": "Container", "poolId": "default", "leaseId": "lease-1"}
    for state in ("Observed", "Uncertain", "Failed", "Denied"):
        for event in receipt_events({**body, "state": state, "sandbox": sandbox}, REF, source="/t"):
            text = json.dumps(event)
            assert secret not in text and "example.com" not in text
            assert "serviceaccount" not in text and "e" * 64 not in text
