"""Bounded storage: finished invocations go a set time after they ended (never an unconfirmed
Uncertain one, never one still waiting), their receipts stay; idempotency claims keep the
winner's receipt for duplicates and go a set time after the winner ended."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from tests.unit.fake_cluster import (
    NAMESPACE,
    Harness,
    ScriptedExecutor,
    descriptor,
    invocation,
    make_runtime,
)
from tooladapter.enums import FailureClass, InvocationState, Resource, ToolKind
from tooladapter.executors import Outcome
from tooladapter.handlers.workers import apply_retention, expire_idempotency_claims
from tooladapter.pipeline.retention import (
    ClaimRecord,
    claim_expired,
    claim_sweep_seconds,
    invocation_expired,
)
from tooladapter.settings import RetentionSettings, Settings
from tooladapter.timeutil import to_iso

pytestmark = [pytest.mark.timeout(10), pytest.mark.usefixtures("fast_retries")]

NOW = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
RETENTION = Settings(retention=RetentionSettings(invocation_seconds=3600, idempotency_seconds=3600))
WRITER_SCHEMA = {"type": "object", "properties": {"path": {"type": "string"}}}


def ago(seconds: float, now: datetime = NOW) -> str:
    return to_iso(now - timedelta(seconds=seconds))


def ended(state: str, seconds_ago: float, **status: Any) -> dict[str, Any]:
    return {"state": state, "endedAt": ago(seconds_ago), "auditRef": "sha256:" + "a" * 64, **status}


# --------------------------------------------------------------------------- the rule


@pytest.mark.parametrize(
    ("status", "expired"),
    [
        (ended("Observed", 7200), True),
        (ended("Denied", 7200), True),
        (ended("Observed", 60), False),
        ({"state": "AwaitingApproval", "endedAt": ago(7200)}, False),
        ({"state": "Executing"}, False),
        (ended("Uncertain", 7200), False),
        (ended("Uncertain", 7200, effectConfirmation={"recorded": False}), False),
        (ended("Uncertain", 7200, effectConfirmation={"recorded": True}), True),
        ({"state": "Observed", "endedAt": ago(7200)}, False),  # no receipt of its own
        ({"state": "Previewed", "endedAt": ago(7200)}, True),  # a dry run writes none
        ({"state": "Failed"}, False),  # no end time
    ],
    ids=[
        "observed-old",
        "denied-old",
        "observed-young",
        "awaiting-approval",
        "executing",
        "uncertain-unconfirmed",
        "uncertain-confirmation-not-recorded",
        "uncertain-confirmed",
        "no-receipt",
        "dry-run",
        "no-end-time",
    ],
)
def test_which_invocations_expire(status: dict[str, Any], expired: bool) -> None:
    assert invocation_expired(status, now=NOW, retention_seconds=3600) is expired


def test_zero_keeps_every_invocation_and_claim() -> None:
    assert not invocation_expired(ended("Observed", 10**8), now=NOW, retention_seconds=0)
    claim = ClaimRecord(NAMESPACE, "ta-idem-x", "1", ago(10**8), "w", "u", ago(10**8))
    assert not claim_expired(claim, None, now=NOW, retention_seconds=0)


def test_which_claims_expire() -> None:
    claim = ClaimRecord(NAMESPACE, "ta-idem-x", "1", ago(9000), "w", "u", ago(7200), "Observed")
    running = {"metadata": {"uid": "u"}, "status": {"state": "Executing"}}
    uncertain = {"metadata": {"uid": "u"}, "status": ended("Uncertain", 7200)}
    assert claim_expired(claim, None, now=NOW, retention_seconds=3600)
    assert not claim_expired(claim, None, now=NOW, retention_seconds=9000)
    assert not claim_expired(claim, running, now=NOW, retention_seconds=3600)
    assert not claim_expired(claim, uncertain, now=NOW, retention_seconds=3600)
    # A claim without its winner's end (written before, or the write failed): by creation
    # once the winner is gone, never while it is there.
    bare = ClaimRecord(NAMESPACE, "ta-idem-x", "1", ago(9000), "w", "u")
    assert claim_expired(bare, None, now=NOW, retention_seconds=3600)
    assert not claim_expired(
        bare,
        {"metadata": {"uid": "u"}, "status": {"state": "Observed"}},
        now=NOW,
        retention_seconds=3600,
    )


def test_the_defaults_are_bounded() -> None:
    settings = Settings()
    assert settings.retention.invocation_seconds == 7 * 86_400
    assert settings.retention.idempotency_seconds == 86_400


# --------------------------------------------------------------------------- the worker


def age_stored(h: Harness, name: str, seconds: float) -> dict[str, Any]:
    """Make the stored call look `seconds` older (ended then), and let the watch see it."""
    obj = h.cluster.objects[(str(Resource.INVOCATIONS), NAMESPACE, name)]
    obj["status"]["endedAt"] = ago(seconds, datetime.now(UTC))
    h.rt.census.update("MODIFIED", obj)
    return obj


def seen(h: Harness) -> None:
    for (resource, _, _), obj in h.cluster.objects.items():
        if resource == str(Resource.INVOCATIONS):
            h.rt.census.update("ADDED", obj)


def stored_names(h: Harness) -> set[str]:
    return {n for (r, _, n) in h.cluster.objects if r == str(Resource.INVOCATIONS)}


async def test_finished_calls_go_after_retention_and_their_receipts_stay() -> None:
    h = make_runtime(settings=RETENTION)
    h.publish(descriptor())
    h.cluster.grant(tools=["lister"], classes=["read"])
    old = await h.run(h.submit(invocation("old")))
    await h.run(h.submit(invocation("young")))
    seen(h)
    age_stored(h, "old", 7200)

    assert await apply_retention(h.rt) == 1

    assert stored_names(h) == {"young"}
    receipt = old["status"]["receiptRef"]
    assert h.store.get(receipt)  # still reachable by receiptRef
    assert await apply_retention(h.rt) == 0


async def test_waiting_and_unconfirmed_uncertain_calls_are_kept() -> None:
    uncertain = Outcome(
        InvocationState.UNCERTAIN,
        failure_class=FailureClass.EFFECT_UNCONFIRMED,
        message="no answer",
    )
    h = make_runtime(settings=RETENTION, executors={ToolKind.NATIVE: ScriptedExecutor(uncertain)})
    h.publish(descriptor("writer", side_effect_class="shared-write", inputSchema=WRITER_SCHEMA))
    h.cluster.grant(tools=["writer"], classes=["shared-write"])
    waiting = h.submit(invocation("waits", tool="writer", arguments={"path": "/x"}))
    task = h.start(waiting)
    await h.cluster.wait_for_state("waits", InvocationState.AWAITING_APPROVAL)
    done = h.submit(invocation("unsure", tool="writer", arguments={"path": "/y"}))
    h.pre_approve(done, name="ok")
    stored = await h.run(done)
    assert stored["status"]["state"] == "Uncertain"
    seen(h)
    age_stored(h, "unsure", 7200)
    h.cluster.objects[(str(Resource.INVOCATIONS), NAMESPACE, "waits")]["status"]["endedAt"] = ago(
        7200, datetime.now(UTC)
    )

    assert await apply_retention(h.rt) == 0
    assert stored_names(h) == {"waits", "unsure"}

    # Once a person has confirmed it, it goes like any other.
    obj = age_stored(h, "unsure", 7200)
    obj["status"]["effectConfirmation"] = {
        "effectHappened": True,
        "confirmedBy": "ops",
        "evidence": "seen",
        "recorded": True,
    }
    h.rt.census.update("MODIFIED", obj)
    assert await apply_retention(h.rt) == 1
    assert stored_names(h) == {"waits"}
    task.cancel()


async def test_a_call_changed_since_it_was_read_is_not_deleted() -> None:
    h = make_runtime(settings=RETENTION)
    h.publish(descriptor())
    h.cluster.grant(tools=["lister"], classes=["read"])
    await h.run(h.submit(invocation("old")))
    seen(h)
    age_stored(h, "old", 7200)

    def touch(*_: Any, **__: Any) -> None:
        obj = h.cluster.objects[(str(Resource.INVOCATIONS), NAMESPACE, "old")]
        obj["metadata"]["resourceVersion"] = "changed"

    h.cluster.hooks["delete_invocation"] = touch
    assert await apply_retention(h.rt) == 0
    assert stored_names(h) == {"old"}


async def test_a_duplicate_gets_the_receipt_after_the_winner_is_gone_and_the_claim_too() -> None:
    h = make_runtime(settings=RETENTION)
    h.publish(descriptor())
    h.cluster.grant(tools=["lister"], classes=["read"])
    winner = await h.run(h.submit(invocation("first", idempotencyKey="k-1")))
    receipt = winner["status"]["receiptRef"]
    (claim,) = await h.cluster.list_idempotency_claims()
    assert claim.receipt_ref == receipt
    assert claim.state == "Observed"
    seen(h)
    age_stored(h, "first", 7200)
    assert await apply_retention(h.rt) == 1
    # Its claim is younger than the idempotency retention (ended now): it stays.
    assert await expire_idempotency_claims(h.rt) == 0

    duplicate = await h.run(h.submit(invocation("second", idempotencyKey="k-1")))
    # The first call is gone, its end is on the claim: the duplicate ends as it did.
    assert duplicate["status"]["state"] == "Observed"
    assert duplicate["status"]["duplicateOf"] == claim.winner_name
    assert duplicate["status"]["receiptRef"] == receipt

    key = next(iter(h.cluster.claims))
    h.cluster.claim_note(key)["ended"] = ago(7200, datetime.now(UTC))
    assert await expire_idempotency_claims(h.rt) == 1
    # The claim is gone too: the receipt index still answers for the key.
    again = await h.run(h.submit(invocation("third", idempotencyKey="k-1")))
    assert again["status"]["state"] == "Observed"
    assert again["status"]["duplicateOf"] == "first"
    assert again["status"]["receiptRef"] == receipt
    executor = h.executors[ToolKind.NATIVE]
    assert isinstance(executor, ScriptedExecutor)
    assert len(executor.executed) == 1


async def test_the_claim_of_a_running_winner_is_kept() -> None:
    h = make_runtime(settings=RETENTION)
    h.publish(descriptor())
    h.cluster.grant(tools=["lister"], classes=["read"])
    h.cluster.claims[(NAMESPACE, "someone", "k")] = ("running", "uid-r")
    h.cluster.claim_note((NAMESPACE, "someone", "k"))["created"] = ago(10**6, datetime.now(UTC))
    h.submit(invocation("running", uid="uid-r", status={"state": "Executing"}))

    assert await expire_idempotency_claims(h.rt) == 0
    assert h.cluster.claims


async def test_every_due_call_goes_in_one_run_oldest_first() -> None:
    """A call rate above one run's worth must not leave storage growing: a run takes every
    due call (the old 500-per-run cap fell behind beyond ~17 calls/s)."""
    settings = Settings(retention=RetentionSettings(invocation_seconds=3600, deletes_per_second=0))
    h = make_runtime(settings=settings)
    order: list[str] = []
    h.cluster.hooks["delete_invocation"] = lambda name, **_: order.append(name)
    for i in range(700):
        obj = {
            "metadata": {
                "name": f"call-{i}",
                "namespace": NAMESPACE,
                "uid": f"uid-{i}",
                "resourceVersion": str(i),
            },
            "status": ended("Observed", 7200 + i),
        }
        h.cluster.objects[(str(Resource.INVOCATIONS), NAMESPACE, f"call-{i}")] = obj
        h.rt.census.update("ADDED", obj)

    assert await apply_retention(h.rt) == 700
    assert stored_names(h) == set()
    assert order[:2] == ["call-699", "call-698"]  # the longest-ended first


def test_the_census_keeps_calls_that_must_stay_out_of_retention() -> None:
    h = make_runtime(settings=RETENTION)
    for name, status in {
        "no-receipt": {"state": "Observed", "endedAt": ago(7200)},
        "unconfirmed": ended("Uncertain", 7200),
        "waiting": {"state": "AwaitingApproval"},
        "done": ended("Observed", 7200),
    }.items():
        h.rt.census.update(
            "ADDED",
            {
                "metadata": {
                    "name": name,
                    "namespace": NAMESPACE,
                    "uid": name,
                    "resourceVersion": "7",
                },
                "status": status,
            },
        )
    (candidate,) = h.rt.census.ended_before(datetime.now(UTC).timestamp())
    assert (candidate.name, candidate.resource_version) == ("done", "7")


@pytest.mark.parametrize(
    ("retention", "interval", "expected"),
    [
        (86_400, 30, 60),  # the defaults: once a minute
        (0, 30, 60),  # kept forever: still swept once a minute (nothing expires)
        (2, 2, 2),  # a short retention is swept as often as it lasts
        (10, 30, 30),  # but never more often than the reconcilers run
        (3600, 120, 120),  # a slow reconcile interval is kept
    ],
)
def test_the_claim_sweep_follows_a_shorter_retention(
    retention: int, interval: int, expected: int
) -> None:
    """Claims are listed once a minute in production, once a retention when that is
    shorter (a claim outlives its retention by at most one sweep), never faster than the
    reconcilers."""
    assert claim_sweep_seconds(retention_seconds=retention, reconcile_seconds=interval) == expected
