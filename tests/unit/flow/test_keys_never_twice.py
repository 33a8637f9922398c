"""A key never runs twice: after its claim expired and retention deleted its first call, a
call with the same key (same caller, same namespace) ends as that first call did, found in
the receipt index, with its receipt. The one exception: an Uncertain call confirmed "did not
happen" frees its key. An index that cannot be read runs nothing."""

from __future__ import annotations

from typing import Any

import pytest

from tests.unit.fake_cluster import CALLER, NAMESPACE, Harness, ScriptedExecutor, descriptor
from tests.unit.fake_cluster import invocation as call
from tooladapter.artifacts import ArtifactStoreError
from tooladapter.enums import FailureClass, InvocationState, Resource, ToolKind
from tooladapter.executors import Outcome
from tooladapter.handlers.confirmations import record_confirmation

pytestmark = [pytest.mark.timeout(10), pytest.mark.usefixtures("fast_retries")]

UNCERTAIN = Outcome(
    InvocationState.UNCERTAIN, failure_class=FailureClass.EFFECT_UNCONFIRMED, message="lost"
)


def native(h: Harness) -> ScriptedExecutor:
    executor = h.executors[ToolKind.NATIVE]
    assert isinstance(executor, ScriptedExecutor)
    return executor


def read_tool(h: Harness) -> None:
    h.publish(descriptor("lister"))
    h.cluster.grant(tools=["lister"], classes=["read"])


def expire_claim(h: Harness, key: str = "k-1") -> None:
    """What claim retention does once the winner ended long enough ago."""
    h.cluster.claims.pop((NAMESPACE, CALLER, key), None)
    h.cluster.claim_notes.pop((NAMESPACE, CALLER, key), None)


def delete_call(h: Harness, name: str) -> None:
    """What retention does to a finished call (the watch sees it go)."""
    body = h.cluster.objects.pop((str(Resource.INVOCATIONS), NAMESPACE, name))
    h.rt.census.update("DELETED", body)


def status_of(body: dict[str, Any]) -> dict[str, Any]:
    status: dict[str, Any] = body["status"]
    return status


async def test_a_key_reused_after_its_claim_expired_and_its_call_was_deleted_gets_the_first_receipt(
    h: Harness,
) -> None:
    read_tool(h)
    first = await h.run(h.submit(call("first", idempotencyKey="k-1")))
    receipt = status_of(first)["receiptRef"]
    expire_claim(h)
    delete_call(h, "first")

    again = status_of(await h.run(h.submit(call("again", idempotencyKey="k-1"))))

    assert again["state"] == "Observed"
    assert again["duplicateOf"] == "first"
    assert again["duplicateOfUid"] == first["metadata"]["uid"]
    assert again["receiptRef"] == receipt
    assert again["resultRef"] == status_of(first)["resultRef"]
    assert again["auditRef"] != receipt
    assert ("idempotency", "duplicate") in [(s["stage"], s["outcome"]) for s in again["stages"]]
    assert len(native(h).executed) == 1
    # The index answers for the key: this call holds no claim, and the next one too ends
    # as the first.
    assert not h.cluster.claims
    later = status_of(await h.run(h.submit(call("later", idempotencyKey="k-1"))))
    assert (later["duplicateOf"], later["receiptRef"]) == ("first", receipt)
    assert len(native(h).executed) == 1


async def test_a_key_reused_after_its_claim_expired_while_its_call_is_stored_gets_its_result(
    h: Harness,
) -> None:
    read_tool(h)
    first = await h.run(h.submit(call("first", idempotencyKey="k-1")))
    expire_claim(h)

    again = status_of(await h.run(h.submit(call("again", idempotencyKey="k-1"))))

    assert again["duplicateOf"] == "first"
    assert again["receiptRef"] == status_of(first)["receiptRef"]
    assert again["result"] == status_of(first)["result"]
    assert len(native(h).executed) == 1


async def test_another_key_or_another_caller_is_not_a_duplicate(h: Harness) -> None:
    read_tool(h)
    other = "system:serviceaccount:team-a:agent-2"
    h.cluster.grant(tools=["lister"], classes=["read"], user=other)
    await h.run(h.submit(call("first", idempotencyKey="k-1")))
    expire_claim(h)
    delete_call(h, "first")

    by_key = status_of(await h.run(h.submit(call("by-key", idempotencyKey="k-2"))))
    by_caller = status_of(
        await h.run(h.submit(call("by-other", caller=other, idempotencyKey="k-1")))
    )

    assert "duplicateOf" not in by_key and "duplicateOf" not in by_caller
    assert len(native(h).executed) == 3


async def test_the_key_with_other_arguments_after_its_claim_expired_is_denied_key_reused(
    h: Harness,
) -> None:
    read_tool(h)
    first = await h.run(h.submit(call("first", idempotencyKey="k-1", arguments={"a": 1})))
    expire_claim(h)
    delete_call(h, "first")

    reused = status_of(
        await h.run(h.submit(call("reused", idempotencyKey="k-1", arguments={"a": 2})))
    )

    assert (reused["state"], reused["failureClass"]) == ("Denied", "key-reused")
    assert "first" in reused["message"]
    assert not h.cluster.claims  # the refusal holds no claim
    # ...nor the key: the same request still ends as the first call.
    again = status_of(
        await h.run(h.submit(call("again", idempotencyKey="k-1", arguments={"a": 1})))
    )
    assert (again["duplicateOf"], again["receiptRef"]) == (
        "first",
        status_of(first)["receiptRef"],
    )
    assert len(native(h).executed) == 1


async def test_an_unreadable_index_runs_nothing_and_gives_the_claim_back(h: Harness) -> None:
    read_tool(h)
    listed = h.store.list

    def unreachable(prefix: str) -> list[str]:
        if "/keys/" in prefix:  # the chains still answer: the receipt is written
            raise ArtifactStoreError("connection refused")
        return listed(prefix)

    h.store.list = unreachable  # type: ignore[method-assign]

    failed = status_of(await h.run(h.submit(call("first", idempotencyKey="k-1"))))

    assert (failed["state"], failed["failureClass"]) == ("Failed", "transient")
    assert "receipt index" in failed["message"] and "nothing was run" in failed["message"]
    assert ("idempotency", "failed") in [(s["stage"], s["outcome"]) for s in failed["stages"]]
    assert native(h).executed == []
    assert not h.cluster.claims

    # Once the store answers, the same call runs: the failed one never held the key.
    h.store.list = listed  # type: ignore[method-assign]
    ran = status_of(await h.run(h.submit(call("again", idempotencyKey="k-1"))))
    assert ran["state"] == "Observed"
    assert "duplicateOf" not in ran
    assert len(native(h).executed) == 1


async def test_an_entry_that_does_not_parse_runs_nothing(h: Harness) -> None:
    read_tool(h)
    await h.run(h.submit(call("first", idempotencyKey="k-1")))
    expire_claim(h)
    (key,) = [k for k in h.store.keys if "/keys/" in k]
    h.store.keys[key] = b"not json"

    failed = status_of(await h.run(h.submit(call("again", idempotencyKey="k-1"))))

    assert (failed["state"], failed["failureClass"]) == ("Failed", "transient")
    assert len(native(h).executed) == 1


async def confirm(h: Harness, name: str, *, happened: bool) -> dict[str, Any]:
    await h.cluster.patch_status(
        Resource.INVOCATIONS,
        NAMESPACE,
        name,
        {"effectConfirmation": {"effectHappened": happened, "confirmedBy": "ops", "evidence": "x"}},
    )
    await record_confirmation(h.rt, h.cluster.invocation(name))
    confirmed = h.cluster.invocation(name)
    h.rt.census.update("MODIFIED", confirmed)
    return status_of(confirmed)


async def test_did_not_happen_frees_the_key_after_its_claim_expired_too(h: Harness) -> None:
    read_tool(h)
    native(h).outcome = UNCERTAIN
    await h.run(h.submit(call("first", idempotencyKey="k-1")))
    native(h).outcome = Outcome.observed(b"{}")
    await confirm(h, "first", happened=False)
    expire_claim(h)
    delete_call(h, "first")

    ran = status_of(await h.run(h.submit(call("again", idempotencyKey="k-1"))))

    assert ran["state"] == "Observed"
    assert "duplicateOf" not in ran
    assert len(native(h).executed) == 2
    # The new call holds the key from now on, claim or no claim.
    expire_claim(h)
    delete_call(h, "again")
    later = status_of(await h.run(h.submit(call("later", idempotencyKey="k-1"))))
    assert (later["duplicateOf"], later["receiptRef"]) == ("again", ran["receiptRef"])
    assert len(native(h).executed) == 2


async def test_happened_keeps_the_key_with_the_confirmation_receipt(h: Harness) -> None:
    read_tool(h)
    native(h).outcome = UNCERTAIN
    await h.run(h.submit(call("first", idempotencyKey="k-1")))
    confirmed = await confirm(h, "first", happened=True)
    expire_claim(h)
    delete_call(h, "first")

    again = status_of(await h.run(h.submit(call("again", idempotencyKey="k-1"))))

    assert (again["state"], again["duplicateOf"]) == ("Uncertain", "first")
    assert again["receiptRef"] == confirmed["receiptRef"]
    assert again["effectConfirmation"]["effectHappened"] is True
    assert len(native(h).executed) == 1


async def test_a_call_refused_for_an_unconfirmed_twin_never_holds_its_key(h: Harness) -> None:
    read_tool(h)
    native(h).outcome = UNCERTAIN
    await h.run(h.submit(call("first")))
    native(h).outcome = Outcome.observed(b"{}")
    refused = status_of(await h.run(h.submit(call("refused", idempotencyKey="k-2"))))
    assert refused["failureClass"] == "unconfirmed-effect"
    await confirm(h, "first", happened=False)
    delete_call(h, "refused")

    ran = status_of(await h.run(h.submit(call("again", idempotencyKey="k-2"))))

    assert ran["state"] == "Observed"
    assert "duplicateOf" not in ran
    assert len(native(h).executed) == 2
