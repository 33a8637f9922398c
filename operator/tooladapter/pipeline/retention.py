"""Bounded storage: which finished invocations and idempotency claims may be deleted.

Like a Job's `ttlSecondsAfterFinished`: a finished invocation goes a configured time after
it ended, and its receipt stays in the artifact store, reachable by `receiptRef`. Never a
call that is not finished (one waiting for an approval, or running), never an `Uncertain`
one nobody has confirmed (a person must look at it first), never one whose own receipt was
not written (the object would be the only record).

An idempotency claim (a Lease per key) keeps the winner's `receiptRef`, so a duplicate finds
the receipt after the winner is gone; it goes a configured time after the winner ended. Never
while the winner runs, never while it is an unconfirmed `Uncertain` call. The key does not
run again once its claim is gone: the winner's receipt wrote the key's entry in the receipt
index before its end was stored, and a call that wins the key's claim again reads it
(`flow.admission.check_key_index`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from tooladapter.enums import InvocationState
from tooladapter.timeutil import parse_time


def _age(since: object, now: datetime) -> float | None:
    if not isinstance(since, str) or not since:
        return None
    try:
        return (now - parse_time(since)).total_seconds()
    except ValueError:
        return None


def unconfirmed(status: Mapping[str, Any]) -> bool:
    """An `Uncertain` call nobody has confirmed yet."""
    return status.get("state") == InvocationState.UNCERTAIN and not (
        (status.get("effectConfirmation") or {}).get("recorded")
    )


def retainable_since(status: Mapping[str, Any]) -> str | None:
    """When a stored invocation's retention clock started (its `endedAt`), or None while it
    must be kept whatever its age: not finished, an unconfirmed `Uncertain` call, or a call
    whose own receipt was never written (the object would be the only record)."""
    try:
        state = InvocationState(status.get("state") or InvocationState.RECEIVED)
    except ValueError:
        return None
    if not state.terminal or unconfirmed(status):
        return None
    # A dry run writes no receipt; every other end does, before its status says so.
    if state != InvocationState.PREVIEWED and not status.get("auditRef"):
        return None
    ended = status.get("endedAt")
    return ended if isinstance(ended, str) and ended else None


def invocation_expired(status: Mapping[str, Any], *, now: datetime, retention_seconds: int) -> bool:
    """Whether a stored invocation (its status) may be deleted now (0 keeps every one)."""
    if retention_seconds <= 0:
        return False
    age = _age(retainable_since(status), now)
    return age is not None and age >= retention_seconds


@dataclass(frozen=True)
class ClaimRecord:
    """An idempotency claim as stored (its Lease)."""

    namespace: str
    name: str
    resource_version: str
    created: str | None
    winner_name: str
    winner_uid: str
    #: Written when the winner ended (None: still running, or a claim from before).
    ended_at: str | None = None
    state: str | None = None
    receipt_ref: str | None = None


def claim_expired(
    claim: ClaimRecord,
    winner: Mapping[str, Any] | None,
    *,
    now: datetime,
    retention_seconds: int,
) -> bool:
    """Whether a claim may be deleted now; `winner` is the winning invocation as stored now
    (None: it is gone, or another object took its name)."""
    if retention_seconds <= 0:
        return False
    status = (winner or {}).get("status") or {}
    if winner is not None:
        state = status.get("state") or InvocationState.RECEIVED
        if not InvocationState(state).terminal or unconfirmed(status):
            return False
    # A winner that is gone was finished and, if Uncertain, confirmed: retention deletes
    # nothing else (a person deleting it by hand has decided too).
    ended = claim.ended_at or status.get("endedAt")
    age = _age(ended, now)
    if age is None and winner is None:
        # A winner that vanished without its end on the claim (deleted by hand, or a claim
        # older than this rule): counted from the claim's creation.
        age = _age(claim.created, now)
    return age is not None and age >= retention_seconds


#: Claims are listed from the API server, so at most this often unless their retention is
#: shorter.
CLAIM_SWEEP_SECONDS = 60


def claim_sweep_seconds(*, retention_seconds: int, reconcile_seconds: int) -> int:
    """How often idempotency claims are listed: once a minute, or once a retention when it
    is shorter (a claim then outlives it by at most one sweep; 0, kept forever: the
    minute), never more often than the reconcilers run."""
    retention = retention_seconds or CLAIM_SWEEP_SECONDS
    return max(reconcile_seconds, min(CLAIM_SWEEP_SECONDS, retention))
