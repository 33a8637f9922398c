"""The invocation flow, state by state, against the in-memory cluster: where each call goes
next and why it stops there (Observed, waiting for approval, or Denied at a named stage)."""

from __future__ import annotations

import asyncio
import copy
from collections.abc import Callable
from typing import Any

import pytest
from prometheus_client import REGISTRY

from tests.unit.fake_cluster import (
    CALLER,
    NAMESPACE,
    REVIEWER,
    Harness,
    ScriptedExecutor,
    approval,
    credential,
    descriptor,
    hash_of,
    http_descriptor,
    invocation,
    make_runtime,
    namespace_uid,
    policy,
)
from tooladapter.artifacts import Space
from tooladapter.catalog import approval_key
from tooladapter.enums import EventLevel, FailureClass, InvocationState, Resource, ToolKind
from tooladapter.executors import Outcome
from tooladapter.flow import run_invocation
from tooladapter.handlers.confirmations import record_confirmation
from tooladapter.receipts.core.signing import receipt_of
from tooladapter.settings import Settings

pytestmark = [pytest.mark.timeout(10), pytest.mark.usefixtures("fast_retries")]

SHARED_WRITE_SCHEMA = {
    "type": "object",
    "properties": {"path": {"type": "string"}},
    "required": ["path"],
}


def sample(name: str, **labels: str) -> float:
    """The sum of a metric's samples whose labels include `labels`."""
    total = 0.0
    for metric in REGISTRY.collect():
        for s in metric.samples:
            if s.name == name and all(s.labels.get(k) == v for k, v in labels.items()):
                total += s.value
    return total


def stages(status: dict) -> list[tuple[str, str]]:
    return [(s["stage"], s["outcome"]) for s in status["stages"]]


def native(h: Harness) -> ScriptedExecutor:
    executor = h.executors[ToolKind.NATIVE]
    assert isinstance(executor, ScriptedExecutor)
    return executor


def read_tool(h: Harness, tool: str = "lister") -> None:
    h.publish(descriptor(tool))
    h.cluster.grant(tools=[tool], classes=["read"])


def writer_tool(h: Harness, tool: str = "writer") -> None:
    h.publish(descriptor(tool, side_effect_class="shared-write", inputSchema=SHARED_WRITE_SCHEMA))
    h.cluster.grant(tools=[tool], classes=["shared-write"])


def writer_call(name: str = "write-1") -> dict:
    return invocation(name, tool="writer", arguments={"path": "/data/x"})


# --------------------------------------------------------------------------- the whole walk


async def test_a_read_call_walks_from_received_to_observed_writing_status_once(h: Harness) -> None:
    read_tool(h)
    body = h.submit(invocation(arguments={"q": 1}))

    stored = await h.run(body)

    status = stored["status"]
    assert status["state"] == "Observed"
    assert stages(status) == [
        ("validation", "passed"),
        ("permission", "passed"),
        ("policy", "passed"),
        ("classification", "passed"),
        ("approval", "not-required"),
        ("credentials", "none"),
        ("sandbox", "none"),
        ("execute", "started"),
        ("sanitize", "done"),
        ("execute", "observed"),
        ("audit", "receipt"),
    ]
    assert status["effectiveClass"] == "read"
    assert status["declaredClass"] == "read"
    assert status["requestHash"] == hash_of(body)
    assert status["result"]["structuredContent"] == {"ok": True}
    assert h.store.get(status["resultRef"], Space.RESULTS) == b'{"ok": true}'
    # The stages in between are safe to repeat: a read call is written only at its end.
    assert [w["state"] for w in h.cluster.writes_of("call-1")] == ["Observed"]
    (call,) = native(h).executed
    assert (call.caller, call.arguments, call.effective_class) == (CALLER, {"q": 1}, "read")
    assert native(h).resumed == []
    # Nobody acts on a call that did what was asked: its record is the receipt.
    assert h.events.reasons() == []


async def test_with_events_all_an_observed_call_also_posts_tool_invoked() -> None:
    h = make_runtime(settings=Settings(events=EventLevel.ALL))
    read_tool(h)

    stored = await h.run(h.submit(invocation()))

    assert stored["status"]["state"] == "Observed"
    (event,) = h.events.of("ToolInvoked")
    assert stored["status"]["receiptRef"] in event.message


async def test_with_write_every_state_each_state_is_persisted_in_table_order() -> None:
    h = make_runtime(settings=Settings(write_every_state=True))
    read_tool(h)

    await h.run(h.submit(invocation()))

    assert [w["state"] for w in h.cluster.writes_of("call-1")] == [
        "Validated",
        "Authorized",
        "Brokered",
        "Executing",
        "Observed",
    ]


async def test_a_descriptor_not_yet_in_the_catalog_is_found_on_the_api_server(h: Harness) -> None:
    h.cluster.put(
        Resource.DESCRIPTORS, {**descriptor(), "status": {"active": True, "healthy": True}}
    )
    h.cluster.grant(tools=["lister"], classes=["read"])

    stored = await h.run(h.submit(invocation()))

    assert stored["status"]["state"] == "Observed"
    assert h.cluster.calls_of("list_all")


async def test_a_finished_call_is_left_alone(h: Harness) -> None:
    read_tool(h)
    await h.run(h.submit(invocation()))
    writes = len(h.cluster.status_writes)

    await h.run(h.cluster.invocation("call-1"))

    assert len(h.cluster.status_writes) == writes
    assert len(native(h).executed) == 1


async def test_a_deleted_or_recreated_invocation_is_not_walked(h: Harness) -> None:
    read_tool(h)
    gone = invocation("gone", status={"state": "Received"})
    await asyncio.wait_for(run_invocation(h.rt, gone), 5)  # a listing's body; object gone

    old = invocation("again", status={"state": "Received"})
    h.submit(invocation("again", status={"state": "Received"}))  # same name, new uid
    await asyncio.wait_for(run_invocation(h.rt, old), 5)

    assert h.cluster.status_writes == []
    assert native(h).executed == []


# --------------------------------------------------------------------------- approval


async def test_a_shared_write_call_waits_in_awaiting_approval_with_its_request_time_persisted(
    h: Harness,
) -> None:
    writer_tool(h)
    body = h.submit(writer_call())
    task = h.start(body)
    try:
        stored = await h.cluster.wait_for_state("write-1", InvocationState.AWAITING_APPROVAL)
        status = stored["status"]
        assert status["approvalRequestedAt"]
        assert status["requestHash"] == hash_of(body)
        assert status["effectiveClass"] == "shared-write"
        assert stages(status)[-1] == ("approval", "waiting")
        await asyncio.sleep(0)
        assert not task.done()
        assert native(h).executed == []
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


async def test_an_approval_of_the_exact_request_binds_and_the_call_proceeds_to_observed(
    h: Harness,
) -> None:
    writer_tool(h)
    task = h.start(h.submit(writer_call()))
    waiting = await h.cluster.wait_for_state("write-1", InvocationState.AWAITING_APPROVAL)
    requested_at = waiting["status"]["approvalRequestedAt"]

    h.approve_waiting("write-1", comment="ok", name="yes")
    await asyncio.wait_for(task, 5)

    status = h.cluster.invocation("write-1")["status"]
    assert status["state"] == "Observed"
    assert status["approvalRequestedAt"] == requested_at
    assert status["approval"]["name"] == "yes"
    assert status["approval"]["reviewer"] == REVIEWER
    assert status["approval"]["requestHash"] == waiting["status"]["requestHash"]
    assert ("approval", "bound") in stages(status)
    # The stored receipt names the approval; the status summary does not repeat it
    # (status.approval.name is the same).
    assert h.store.receipt(status["receiptRef"])["approvalId"] == "yes"
    assert "approvalId" not in status["receipt"]
    bound = h.cluster.stored(Resource.APPROVALS, NAMESPACE, "yes")["status"]
    assert bound["bound"] is True and bound["boundTo"] == "write-1"
    # Executing is on the API server before a call with an effect starts.
    assert [w["state"] for w in h.cluster.writes_of("write-1")] == [
        "AwaitingApproval",
        "Executing",
        "Observed",
    ]
    assert len(native(h).executed) == 1


async def test_a_rejection_denies_the_call_at_approval(h: Harness) -> None:
    writer_tool(h)
    body = h.submit(writer_call())
    h.pre_approve(body, decision="Rejected", comment="not today")

    stored = await h.run(body)

    status = stored["status"]
    assert status["state"] == "Denied"
    assert status["deniedStage"] == "approval"
    assert status["failureClass"] == "policy-denied"
    assert "not today" in status["message"]
    assert ("approval", "rejected") in stages(status)
    assert native(h).executed == []
    assert h.events.reasons() == ["ToolApprovalRequested", "ToolInvocationDenied"]


async def test_an_approval_of_other_arguments_never_binds_and_says_why(h: Harness) -> None:
    writer_tool(h)
    body = h.submit(writer_call())
    stale = h.add_approval(
        approval("write-1", "sha256:" + "0" * 64, h.digest_of(body), name="stale")
    )
    task = h.start(body)
    try:
        await h.cluster.wait_for_state("write-1", InvocationState.AWAITING_APPROVAL)
        for _ in range(20):
            await asyncio.sleep(0)
        reason = h.cluster.stored(Resource.APPROVALS, NAMESPACE, stale["metadata"]["name"])
        assert reason["status"]["bound"] is False
        assert "request hash" in reason["status"]["reason"]
        assert not task.done()

        h.pre_approve(body, name="right")
        await asyncio.wait_for(task, 5)
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
    assert h.cluster.invocation("write-1")["status"]["approval"]["name"] == "right"


async def test_a_callers_own_approval_does_not_bind(h: Harness) -> None:
    writer_tool(h)
    body = h.submit(writer_call())
    h.pre_approve(body, reviewer=CALLER, name="self")
    task = h.start(body)
    try:
        await h.cluster.wait_for_state("write-1", InvocationState.AWAITING_APPROVAL)
        for _ in range(20):
            await asyncio.sleep(0)
        status = h.cluster.stored(Resource.APPROVALS, NAMESPACE, "self")["status"]
        assert status["bound"] is False
        assert "own caller" in status["reason"]
        assert native(h).executed == []
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


async def test_an_interrupt_while_waiting_for_approval_cancels_the_call(h: Harness) -> None:
    writer_tool(h)
    body = h.submit(writer_call())
    task = h.start(body)
    await h.cluster.wait_for_state("write-1", InvocationState.AWAITING_APPROVAL)

    h.rt.interrupt_event(body["metadata"]["uid"]).set()
    await asyncio.wait_for(task, 5)

    status = h.cluster.invocation("write-1")["status"]
    assert status["state"] == "Cancelled"
    assert status["failureClass"] == "cancelled"
    assert native(h).executed == []


# --------------------------------------------------------------------------- validation


async def test_arguments_violating_the_schema_are_denied_at_validation(h: Harness) -> None:
    writer_tool(h)

    stored = await h.run(h.submit(invocation("bad", tool="writer", arguments={"path": 7})))

    status = stored["status"]
    assert status["state"] == "Denied"
    assert status["deniedStage"] == "validation"
    assert status["failureClass"] == "validation"
    assert "input schema" in status["message"]
    assert h.cluster.calls_of("can") == []
    assert native(h).executed == []


async def test_a_tool_that_is_not_published_is_denied_at_validation(h: Harness) -> None:
    stored = await h.run(h.submit(invocation(tool="nowhere")))

    assert stored["status"]["state"] == "Denied"
    assert stored["status"]["deniedStage"] == "validation"
    assert "not published" in stored["status"]["message"]


async def test_an_inactive_tool_is_denied_at_validation(h: Harness) -> None:
    h.publish(descriptor(), active=False)
    h.cluster.grant(tools=["lister"], classes=["read"])

    stored = await h.run(h.submit(invocation()))

    assert stored["status"]["deniedStage"] == "validation"
    assert "not active" in stored["status"]["message"]


async def test_a_tool_activated_by_another_replica_is_read_again_before_it_is_refused(
    h: Harness,
) -> None:
    """The watch lags the API server: another replica activated the tool a moment ago, the
    catalog still holds it inactive (seen in CI with two operators on one namespace)."""
    stale = h.publish(descriptor(), active=False)
    fresh = copy.deepcopy(stale)
    fresh["status"] = {"active": True, "healthy": True}
    h.cluster.put(Resource.DESCRIPTORS, fresh)
    h.cluster.grant(tools=["lister"], classes=["read"])

    stored = await h.run(h.submit(invocation()))

    assert stored["status"]["state"] == "Observed", stored["status"]


async def test_an_unhealthy_mcp_tool_is_denied_as_transient(h: Harness) -> None:
    mcp = {"server": "srv", "tool": "t", "pinnedDigest": "sha256:" + "a" * 64}
    h.publish(descriptor("remote", kind="mcp", mcp=mcp), healthy=False)

    stored = await h.run(h.submit(invocation(tool="remote")))

    assert stored["status"]["deniedStage"] == "validation"
    assert stored["status"]["failureClass"] == "transient"


async def test_an_invocation_whose_spec_does_not_parse_is_denied_with_a_receipt(
    h: Harness,
) -> None:
    body = invocation()
    body["spec"]["tool"]["id"] = "Not A Tool Id!"

    stored = await h.run(h.submit(body))

    status = stored["status"]
    assert status["state"] == "Denied"
    assert status["deniedStage"] == "validation"
    assert "spec.tool.id" in status["message"]
    assert h.store.get(status["receiptRef"])


# --------------------------------------------------------------------------- authorization


async def test_a_caller_without_the_tool_grant_is_denied_at_permission(h: Harness) -> None:
    h.publish(descriptor())
    h.cluster.grant(classes=["read"])

    stored = await h.run(h.submit(invocation()))

    status = stored["status"]
    assert status["state"] == "Denied"
    assert status["deniedStage"] == "permission"
    assert status["failureClass"] == "permission-denied"
    assert "tooldescriptors/lister" in status["message"]
    assert native(h).executed == []


async def test_a_caller_without_the_class_grant_is_denied_at_permission(h: Harness) -> None:
    h.publish(descriptor())
    h.cluster.grant(tools=["lister"])

    stored = await h.run(h.submit(invocation()))

    assert stored["status"]["deniedStage"] == "permission"
    assert "sideeffectclasses/read" in stored["status"]["message"]


async def test_a_production_namespace_raises_a_write_and_the_grant_is_asked_for_production(
    h: Harness,
) -> None:
    writer_tool(h)  # granted shared-write, not production
    h.label_namespace({"tooladapter.dev/environment-class": "production"})

    stored = await h.run(h.submit(writer_call()))

    assert stored["status"]["deniedStage"] == "permission"
    assert "sideeffectclasses/production" in stored["status"]["message"]


async def test_a_frozen_namespace_denies_a_shared_write_at_classification(h: Harness) -> None:
    writer_tool(h)
    h.label_namespace({"tooladapter.dev/frozen": "true"})

    stored = await h.run(h.submit(writer_call()))

    status = stored["status"]
    assert status["state"] == "Denied"
    assert status["deniedStage"] == "classification"
    assert status["failureClass"] == "policy-denied"
    assert native(h).executed == []


async def test_a_frozen_namespace_still_serves_a_read(h: Harness) -> None:
    read_tool(h)
    h.label_namespace({"tooladapter.dev/frozen": "true"})

    stored = await h.run(h.submit(invocation()))

    assert stored["status"]["state"] == "Observed"


async def test_a_tool_on_the_policy_deny_list_is_denied_at_policy(h: Harness) -> None:
    read_tool(h)
    h.add_policy(policy(tools={"deny": [{"id": "lister", "reason": "retired"}]}))

    stored = await h.run(h.submit(invocation()))

    status = stored["status"]
    assert status["state"] == "Denied"
    assert status["deniedStage"] == "policy"
    assert "deny list" in status["message"]
    assert status["policyDecisionId"]


async def test_a_class_above_the_policy_ceiling_is_denied_at_policy(h: Harness) -> None:
    writer_tool(h)
    h.add_policy(policy(maxClass="read"))

    stored = await h.run(h.submit(writer_call()))

    assert stored["status"]["deniedStage"] == "policy"
    assert native(h).executed == []


async def test_a_tool_policy_that_does_not_parse_fails_closed(h: Harness) -> None:
    read_tool(h)
    h.add_policy(policy("broken", maxClass="everything"))

    stored = await h.run(h.submit(invocation()))

    status = stored["status"]
    assert status["state"] == "Denied"
    assert status["deniedStage"] == "policy"
    assert status["failureClass"] == "policy-denied"
    assert f"ToolPolicy {NAMESPACE}/broken is invalid" in status["message"]
    assert native(h).executed == []


async def test_a_tool_policy_with_an_invalid_rule_fails_closed(h: Harness) -> None:
    read_tool(h)
    h.add_policy(policy("bad-range", tools={"deny": [{"id": "other", "versions": ">=oops"}]}))

    stored = await h.run(h.submit(invocation()))

    assert stored["status"]["deniedStage"] == "policy"
    assert "invalid and denies every call" in stored["status"]["message"]


async def test_a_missing_credential_secret_denies_at_credentials() -> None:
    http = ScriptedExecutor()
    h = make_runtime(executors={ToolKind.HTTP: http})
    h.publish(
        http_descriptor(
            "lister",
            "https://api.example.test/items",
            credentials=[credential("api-key", hosts=["api.example.test"])],
        ),
    )
    h.cluster.grant(tools=["lister"], classes=["read"])

    stored = await h.run(h.submit(invocation()))

    status = stored["status"]
    assert status["deniedStage"] == "credentials"
    assert status["failureClass"] == "credentials"
    assert http.executed == []


# --------------------------------------------------------------------------- admission


async def test_a_duplicate_idempotency_key_ends_as_the_first_call_with_its_receipt(
    h: Harness,
) -> None:
    read_tool(h)
    first = h.submit(invocation("first", idempotencyKey="k-1"))
    winner = await h.run(first)
    second = h.submit(invocation("second", idempotencyKey="k-1"))
    before = sample("tooladapter_denials_total")

    loser = await h.run(second)

    status = loser["status"]
    assert status["state"] == "Observed"
    assert "deniedStage" not in status
    assert "failureClass" not in status
    assert status["duplicateOf"] == "first"
    assert status["duplicateOfUid"] == first["metadata"]["uid"]
    assert status["receiptRef"] == winner["status"]["receiptRef"]
    assert status["resultRef"] == winner["status"]["resultRef"]
    assert status["result"] == winner["status"]["result"]
    # Not a denial, not an invocation: counted as a duplicate only.
    assert sample("tooladapter_denials_total") == before
    assert sample("tooladapter_duplicates_total", tenant=NAMESPACE, state="Observed") >= 1
    assert not [e for e in h.events.posted if e.obj.get("name") == "second"]
    # Its own receipt is its audit record.
    assert status["auditRef"] != status["receiptRef"]
    assert h.store.receipt(status["auditRef"])["duplicateOf"] == "first"
    assert len(native(h).executed) == 1


async def test_a_duplicate_waits_for_a_running_winner_then_ends_as_it_did(
    h: Harness,
) -> None:
    read_tool(h)
    winner = h.submit(
        invocation("first", idempotencyKey="k-1", status={"state": "AwaitingApproval"})
    )
    h.cluster.claims[(NAMESPACE, CALLER, "k-1")] = ("first", winner["metadata"]["uid"])
    task = h.start(h.submit(invocation("second", idempotencyKey="k-1")))
    await h.cluster.wait_for_status("second", lambda s: s.get("duplicateOf") == "first")
    assert not task.done()

    await h.cluster.patch_status(
        Resource.INVOCATIONS,
        NAMESPACE,
        "first",
        {"state": "Observed", "receiptRef": "sha256:" + "b" * 64},
    )
    h.invocation_changed("first")
    await asyncio.wait_for(task, 5)

    status = h.cluster.invocation("second")["status"]
    assert status["state"] == "Observed"
    assert status["receiptRef"] == "sha256:" + "b" * 64
    assert native(h).executed == []


async def test_the_same_key_with_other_arguments_is_denied_key_reused(h: Harness) -> None:
    read_tool(h)
    await h.run(h.submit(invocation("first", idempotencyKey="k-1", arguments={"a": 1})))

    stored = await h.run(h.submit(invocation("second", idempotencyKey="k-1", arguments={"a": 2})))

    status = stored["status"]
    assert (status["state"], status["failureClass"]) == ("Denied", "key-reused")
    assert status["deniedStage"] == "idempotency"
    assert "first" in status["message"]
    assert len(native(h).executed) == 1


async def test_a_call_while_an_identical_one_is_uncertain_is_denied_unconfirmed_effect(
    h: Harness,
) -> None:
    read_tool(h)
    native(h).outcome = Outcome(
        InvocationState.UNCERTAIN,
        failure_class=FailureClass.EFFECT_UNCONFIRMED,
        message="lost",
    )
    first = await h.run(h.submit(invocation("first", idempotencyKey="k-1")))
    assert first["status"]["state"] == "Uncertain"
    native(h).outcome = Outcome.observed(b"{}")

    # Another key, no key, another caller: none runs while the effect is unconfirmed.
    others: list[tuple[str, dict[str, Any]]] = [
        ("new-key", {"idempotencyKey": "k-2"}),
        ("no-key", {}),
    ]
    for name, extra in others:
        stored = await h.run(h.submit(invocation(name, **extra)))
        status = stored["status"]
        assert (status["state"], status["failureClass"]) == ("Denied", "unconfirmed-effect")
        assert status["deniedStage"] == "idempotency"
        assert "confirm" in status["message"]
    other = "system:serviceaccount:team-a:agent-2"
    h.cluster.grant(tools=["lister"], classes=["read"], user=other)
    stored = await h.run(h.submit(invocation("other-caller", caller=other)))
    assert stored["status"]["failureClass"] == "unconfirmed-effect"
    assert len(native(h).executed) == 1

    # "Did not happen", recorded: a new call runs once.
    confirmed = h.cluster.invocation("first")
    confirmed["status"]["effectConfirmation"] = {
        "effectHappened": False,
        "confirmedBy": "ops",
        "evidence": "checked",
        "recorded": True,
    }
    h.rt.census.update("MODIFIED", confirmed)
    stored = await h.run(h.submit(invocation("after")))
    assert stored["status"]["state"] == "Observed"
    assert len(native(h).executed) == 2


async def test_a_tool_error_is_observed_with_is_error_not_failed(h: Harness) -> None:
    read_tool(h)
    native(h).outcome = Outcome.tool_error("the tool exited with code 2", output=b"no", exit_code=2)

    stored = await h.run(h.submit(invocation()))

    status = stored["status"]
    assert status["state"] == "Observed"
    assert status["failureClass"] == "tool-error"
    assert status["result"]["isError"] is True
    assert status["result"]["exitCode"] == 2
    succeeded = {c["type"]: c for c in status["conditions"]}["Succeeded"]
    assert (succeeded["status"], succeeded["reason"]) == ("False", "ToolError")
    assert (
        sample(
            "tooladapter_invocations_total",
            tenant=NAMESPACE,
            state="Observed",
            failure_class="tool-error",
        )
        >= 1
    )


async def test_the_idempotency_winner_runs(h: Harness) -> None:
    read_tool(h)

    stored = await h.run(h.submit(invocation(idempotencyKey="k-1")))

    assert stored["status"]["state"] == "Observed"
    assert h.cluster.claims[(NAMESPACE, CALLER, "k-1")][0] == "call-1"


async def test_a_stale_fencing_token_is_denied_at_fencing(h: Harness) -> None:
    read_tool(h)
    h.cluster.fencing[(NAMESPACE, CALLER, "attempt-7")] = 5

    stored = await h.run(h.submit(invocation(attemptId="attempt-7", fencingToken=4)))

    status = stored["status"]
    assert status["state"] == "Denied"
    assert status["deniedStage"] == "fencing"
    assert "already saw 5" in status["message"]
    assert native(h).executed == []


async def test_a_current_fencing_token_passes_and_becomes_the_highest(h: Harness) -> None:
    read_tool(h)
    h.cluster.fencing[(NAMESPACE, CALLER, "attempt-7")] = 5

    stored = await h.run(h.submit(invocation(attemptId="attempt-7", fencingToken=6)))

    assert stored["status"]["state"] == "Observed"
    assert ("fencing", "passed") in stages(stored["status"])
    assert h.cluster.fencing[(NAMESPACE, CALLER, "attempt-7")] == 6


async def test_an_interrupt_requested_before_validation_cancels_the_call(h: Harness) -> None:
    read_tool(h)

    stored = await h.run(h.submit(invocation(interrupt=True)))

    status = stored["status"]
    assert status["state"] == "Cancelled"
    assert status["failureClass"] == "cancelled"
    assert native(h).executed == []
    assert h.cluster.calls_of("can") == []


# --------------------------------------------------------------------------- the re-check


def freeze(h: Harness) -> None:
    h.label_namespace({"tooladapter.dev/frozen": "true"})


def revoke(h: Harness) -> None:
    h.cluster.grants.clear()


def deny_by_policy(h: Harness) -> None:
    h.add_policy(policy(tools={"deny": [{"id": "writer"}]}))


def change_descriptor(h: Harness) -> None:
    h.publish(
        descriptor(
            "writer",
            side_effect_class="shared-write",
            inputSchema=SHARED_WRITE_SCHEMA,
            timeoutSeconds=5,
        )
    )


@pytest.mark.parametrize(
    ("change", "stage"),
    [
        (freeze, "classification"),
        (revoke, "permission"),
        (deny_by_policy, "policy"),
        (change_descriptor, "validation"),
    ],
    ids=["frozen", "grant-revoked", "policy-deny", "descriptor-changed"],
)
async def test_what_changed_while_a_call_waited_is_rechecked_before_it_executes(
    h: Harness, change: Callable[[Harness], None], stage: str
) -> None:
    writer_tool(h)
    task = h.start(h.submit(writer_call()))
    await h.cluster.wait_for_state("write-1", InvocationState.AWAITING_APPROVAL)
    reviews = len(h.cluster.calls_of("can"))

    change(h)
    h.approve_waiting("write-1")
    await asyncio.wait_for(task, 5)

    status = h.cluster.invocation("write-1")["status"]
    assert status["state"] == "Denied"
    assert status["deniedStage"] == stage
    assert native(h).executed == []
    if stage == "permission":
        # The grants are asked again, never answered from a remembered allowance.
        assert all(c["fresh"] for c in h.cluster.calls_of("can")[reviews:])


def freeze_unseen(h: Harness) -> None:
    h.cluster.namespaces[NAMESPACE] = {"tooladapter.dev/frozen": "true"}


def deny_by_policy_unseen(h: Harness) -> None:
    h.cluster.put(Resource.POLICIES, policy(tools={"deny": [{"id": "writer"}]}))


def change_descriptor_unseen(h: Harness) -> None:
    body = h.cluster.stored(Resource.DESCRIPTORS, NAMESPACE, "writer-1-0-0")
    body["spec"]["timeoutSeconds"] = 7
    h.cluster.put(Resource.DESCRIPTORS, body)


@pytest.mark.parametrize(
    ("change", "stage"),
    [
        (freeze_unseen, "classification"),
        (deny_by_policy_unseen, "policy"),
        (change_descriptor_unseen, "validation"),
    ],
    ids=["frozen", "policy-deny", "descriptor-changed"],
)
async def test_a_change_the_watch_has_not_delivered_yet_still_denies_after_the_wait(
    h: Harness, change: Callable[[Harness], None], stage: str
) -> None:
    """Stored on the API server, not yet in the catalog (a freeze a moment before the
    approval, the watch behind on a busy API server): the re-check reads it afresh."""
    writer_tool(h)
    task = h.start(h.submit(writer_call()))
    await h.cluster.wait_for_state("write-1", InvocationState.AWAITING_APPROVAL)

    change(h)
    h.approve_waiting("write-1")
    await asyncio.wait_for(task, 5)

    status = h.cluster.invocation("write-1")["status"]
    assert status["state"] == "Denied", status
    assert status["deniedStage"] == stage
    assert native(h).executed == []


async def test_an_unchanged_call_passes_the_recheck_after_its_wait(h: Harness) -> None:
    writer_tool(h)
    task = h.start(h.submit(writer_call()))
    await h.cluster.wait_for_state("write-1", InvocationState.AWAITING_APPROVAL)

    h.approve_waiting("write-1")
    await asyncio.wait_for(task, 5)

    status = h.cluster.invocation("write-1")["status"]
    assert status["state"] == "Observed"
    assert ("recheck", "passed") in stages(status)


async def test_a_gated_call_leaves_no_approval_signal_behind(h: Harness) -> None:
    """One change signal per gated call would pile up in a long-running operator."""
    writer_tool(h)
    task = h.start(h.submit(writer_call()))
    await h.cluster.wait_for_state("write-1", InvocationState.AWAITING_APPROVAL)
    assert (NAMESPACE, approval_key("write-1")) in h.rt.catalog._changed
    h.approve_waiting("write-1", name="yes")
    await asyncio.wait_for(task, 5)

    assert h.cluster.invocation("write-1")["status"]["state"] == "Observed"
    assert (NAMESPACE, approval_key("write-1")) not in h.rt.catalog._changed


async def test_a_confirmation_is_recorded_with_how_and_copied_onto_the_duplicates(
    h: Harness,
) -> None:
    read_tool(h)
    native(h).outcome = Outcome(
        InvocationState.UNCERTAIN, failure_class=FailureClass.EFFECT_UNCONFIRMED, message="lost"
    )
    await h.run(h.submit(invocation("first", idempotencyKey="k-1")))
    duplicate = await h.run(h.submit(invocation("second", idempotencyKey="k-1")))
    assert duplicate["status"]["state"] == "Uncertain"
    assert duplicate["status"]["duplicateOf"] == "first"
    # The duplicate is never an unconfirmed effect of its own.
    h.rt.census.update("MODIFIED", duplicate)
    effect = h.cluster.invocation("first")["status"]["effectHash"]
    assert h.rt.census.unconfirmed_with(NAMESPACE, effect) == ["first"]
    await h.cluster.patch_status(
        Resource.INVOCATIONS,
        NAMESPACE,
        "first",
        {"effectConfirmation": {"effectHappened": True, "confirmedBy": "ops", "evidence": "log"}},
    )

    await record_confirmation(h.rt, h.cluster.invocation("first"))

    first = h.cluster.invocation("first")["status"]
    assert first["failureClass"] == "effect-confirmed"
    assert "confirmed by ops" in first["message"]
    succeeded = {c["type"]: c for c in first["conditions"]}["Succeeded"]
    assert succeeded["reason"] == "EffectConfirmed"
    copied = h.cluster.invocation("second")["status"]
    assert copied["effectConfirmation"]["recorded"] is True
    assert copied["receiptRef"] == first["receiptRef"]
    assert copied["failureClass"] == "effect-confirmed"
    assert len(native(h).executed) == 1


async def test_a_call_naming_a_tool_nobody_published_is_counted_under_unknown(h: Harness) -> None:
    # The tool label never comes from what a caller typed (issue 28: random ids grew the
    # metrics page without bound); a published tool keeps its own label.
    read_tool(h)
    invented = "made-up-7f3a9c"

    denied = await h.run(h.submit(invocation("call-unknown", tool=invented)))
    known = await h.run(h.submit(invocation("call-known")))

    assert denied["status"]["state"] == "Denied"
    assert known["status"]["state"] == "Observed"
    names = {s.labels.get("tool") for m in REGISTRY.collect() for s in m.samples}
    assert invented not in names
    assert sample("tooladapter_invocations_total", tenant=NAMESPACE, tool="unknown") >= 1
    assert sample("tooladapter_invocations_total", tenant=NAMESPACE, tool="lister") >= 1


def stored_receipt(h: Harness, status: dict) -> dict:
    found = receipt_of(h.store.get(status["auditRef"]))
    assert found is not None
    return found


async def test_a_call_ending_before_the_watch_saw_its_namespace_is_in_the_chain(
    h: Harness,
) -> None:
    # The namespaces' watch lags (a namespace created a moment ago): the uid is asked of
    # the API server, so the receipt is a link of the chain, not `chain: null`.
    read_tool(h)
    h.catalog.namespace_uids.pop(NAMESPACE)

    stored = await h.run(h.submit(invocation()))

    receipt = stored_receipt(h, stored["status"])
    assert receipt["tenantUid"] == namespace_uid(NAMESPACE)
    assert receipt["chain"]["sequence"] == 1
    assert stored["status"]["receipt"]["sequence"] == 1


async def test_a_namespace_created_after_the_call_is_not_its_incarnation(h: Harness) -> None:
    read_tool(h)
    h.catalog.namespace_uids.pop(NAMESPACE)
    h.cluster.namespace_created[NAMESPACE] = "2999-01-01T00:00:00Z"

    stored = await h.run(h.submit(invocation()))

    receipt = stored_receipt(h, stored["status"])
    assert receipt["chain"] is None and receipt.get("tenantUid") is None
