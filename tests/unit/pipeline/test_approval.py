"""Approval: which classes are gated, and when a ToolApproval binds to an invocation."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from tooladapter.enums import BindCode, SideEffectClass
from tooladapter.model import ToolApprovalSpec, ToolPolicySpec
from tooladapter.pipeline.approval import (
    approval_timed_out,
    bind_approval,
    needs_approval,
)
from tooladapter.pipeline.policy import PolicyDecision, evaluate_policies
from tooladapter.timeutil import parse_time

HASH = "sha256:" + "1" * 64
DIGEST = "sha256:" + "3" * 64
UID = "7b1f0c3e-0000-4000-8000-000000000001"
OTHER_HASH = "sha256:" + "2" * 64
NOW = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)
CALLER = "system:serviceaccount:team-a:agent-1"


def decision(*policies: dict[str, Any], arguments: dict[str, Any] | None = None) -> PolicyDecision:
    return evaluate_policies(
        [(f"ns/p{i}", ToolPolicySpec.model_validate(p)) for i, p in enumerate(policies)],
        namespace="ns",
        tool_id="tool",
        tool_version="1.0.0",
        arguments=arguments or {},
        request_hash=HASH,
    )


@pytest.mark.parametrize(
    ("effective", "gated"),
    [
        (SideEffectClass.READ, False),
        (SideEffectClass.SANDBOX, False),
        (SideEffectClass.SHARED_WRITE, True),
        (SideEffectClass.EXTERNAL, True),
        (SideEffectClass.PRODUCTION, True),
    ],
)
def test_shared_write_external_and_production_always_need_approval(
    effective: SideEffectClass, gated: bool
) -> None:
    assert needs_approval(effective=effective, decision=decision()) is gated


def test_spend_needs_approval_when_no_threshold_is_configured() -> None:
    assert needs_approval(effective=SideEffectClass.SPEND, decision=decision())


def test_spend_needs_approval_only_above_the_threshold() -> None:
    spend = {"spend": {"argument": "amount", "threshold": 100}}
    below = decision(spend, arguments={"amount": 20})
    above = decision(spend, arguments={"amount": 200})
    assert not needs_approval(effective=SideEffectClass.SPEND, decision=below)
    assert needs_approval(effective=SideEffectClass.SPEND, decision=above)
    # the amount of a non-spend call is irrelevant
    assert not needs_approval(effective=SideEffectClass.READ, decision=above)


def test_require_approval_conditions_gate_any_class() -> None:
    cond = {
        "conditions": [
            {"path": "/env", "operator": "equals", "value": "prod", "effect": "requireApproval"}
        ]
    }
    assert needs_approval(
        effective=SideEffectClass.READ, decision=decision(cond, arguments={"env": "prod"})
    )


def test_forced_approval_gates_any_class() -> None:
    assert needs_approval(
        effective=SideEffectClass.SPEND,
        decision=decision({"spend": {"threshold": 1e9}}),
        forced=True,
    )


def approval(**overrides: Any) -> ToolApprovalSpec:
    fields: dict[str, Any] = {
        "invocation": "inv-1",
        "request_hash": HASH,
        "descriptor_digest": DIGEST,
        "tool_version": "1.0.0",
        "decision": "Approved",
        "reviewer": "alice",
        "reviewer_groups": ["sre"],
        "expires_at": "2026-01-01T13:00:00Z",
    }
    fields.update(overrides)
    return ToolApprovalSpec.model_validate(fields)


def bind(spec: ToolApprovalSpec, **overrides: Any) -> Any:
    args: dict[str, Any] = {
        "approval": spec,
        "approval_name": "apr-1",
        "creator": "alice",
        "invocation_name": "inv-1",
        "invocation_uid": UID,
        "request_hash": HASH,
        "descriptor_digest": DIGEST,
        "tool_version": "1.0.0",
        "caller": CALLER,
        "now": NOW,
        "allowed_groups": ["sre", "dba"],
        "already_used_by": None,
    }
    args.update(overrides)
    return bind_approval(**args)


def test_a_matching_approval_binds() -> None:
    result = bind(approval())
    assert result.bound and result.code == BindCode.BOUND and not result.denies
    assert result.reason == f"ToolApproval apr-1: approved by alice for request hash {HASH}"


@pytest.mark.parametrize(
    ("spec_overrides", "bind_overrides", "code", "needle"),
    [
        ({"invocation": "inv-2"}, {}, BindCode.WRONG_INVOCATION, "approves invocation 'inv-2'"),
        ({"request_hash": OTHER_HASH}, {}, BindCode.REQUEST_HASH_MISMATCH, "new approval"),
        ({"tool_version": "1.0.1"}, {}, BindCode.TOOL_VERSION_MISMATCH, "tool version 1.0.1"),
        ({}, {"creator": "mallory"}, BindCode.CREATOR_MISMATCH, "not the user who created it"),
        ({"reviewer": CALLER}, {"creator": CALLER}, BindCode.SELF_APPROVAL, "own caller"),
        ({"reviewer_groups": ["devs"]}, {}, BindCode.REVIEWER_NOT_ALLOWED, "not in an allowed"),
        ({}, {"already_used_by": "uid-0"}, BindCode.ALREADY_USED, "single-use"),
        ({"invocation_uid": "uid-0"}, {}, BindCode.WRONG_INVOCATION, "deleted and created"),
        ({"descriptor_digest": OTHER_HASH}, {}, BindCode.DESCRIPTOR_CHANGED, "review again"),
        ({"expires_at": "2026-01-01T11:59:59Z"}, {}, BindCode.EXPIRED, "expired at"),
        ({"expires_at": "2026-01-01T12:00:00+00:00"}, {}, BindCode.EXPIRED, "expired at"),
        ({"expires_at": "tomorrow"}, {}, BindCode.INVALID_EXPIRY, "not an RFC 3339 time"),
        ({"expires_at": "2026-01-01T13:00:00"}, {}, BindCode.INVALID_EXPIRY, "no UTC offset"),
    ],
)
def test_an_approval_that_does_not_qualify_does_not_bind(
    spec_overrides: dict[str, Any], bind_overrides: dict[str, Any], code: BindCode, needle: str
) -> None:
    result = bind(approval(**spec_overrides), **bind_overrides)
    assert not result.bound and not result.denies
    assert result.code == code
    assert result.reason.startswith("ToolApproval apr-1: ")
    assert needle in result.reason


def test_a_qualifying_rejection_denies() -> None:
    result = bind(approval(decision="Rejected", comment="not during the freeze"))
    assert not result.bound and result.denies and result.code == "rejected"
    assert "not during the freeze" in result.reason


def test_a_rejection_that_does_not_qualify_cannot_deny() -> None:
    for result in (
        bind(approval(decision="Rejected", reviewer=CALLER), creator=CALLER),
        bind(approval(decision="Rejected", request_hash=OTHER_HASH)),
        bind(approval(decision="Rejected", reviewer_groups=[])),
    ):
        assert not result.denies


def test_any_reviewer_binds_when_no_groups_are_configured() -> None:
    assert bind(approval(reviewer_groups=[]), allowed_groups=[]).bound


def test_rebinding_to_the_same_invocation_is_idempotent() -> None:
    assert bind(approval(), already_used_by=UID).bound
    assert bind(approval(invocation_uid=UID), already_used_by=UID).bound


def test_an_approval_used_by_a_deleted_invocation_does_not_bind_its_namesake() -> None:
    # Same name, same arguments, new object: the old approval was bound to the old uid.
    result = bind(approval(), already_used_by="uid-of-the-deleted-one")
    assert not result.bound and result.code == BindCode.ALREADY_USED


def test_creator_check_is_skipped_when_admission_guarantees_it() -> None:
    assert bind(approval(), creator=None).bound


def test_an_approval_without_expiry_binds() -> None:
    assert bind(approval(expires_at=None)).bound


def test_approval_times_out_after_the_timeout() -> None:
    since = NOW - timedelta(seconds=3600)
    assert approval_timed_out(waiting_since=since, timeout_seconds=3600, now=NOW)
    assert not approval_timed_out(waiting_since=since, timeout_seconds=3601, now=NOW)
    naive = datetime(2026, 1, 1, 11, 0)  # naive times are taken as UTC
    assert approval_timed_out(waiting_since=naive, timeout_seconds=60, now=NOW)


def test_parse_rfc3339_needs_an_offset() -> None:
    assert parse_time("2026-01-01T12:00:00Z") == NOW
    with pytest.raises(ValueError, match="no UTC offset"):
        parse_time("2026-01-01T12:00:00")
