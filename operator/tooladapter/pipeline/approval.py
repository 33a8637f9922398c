"""Approval: which calls need one, and whether a given ToolApproval binds to a call.

An approval is a reviewer's decision about one exact request, so it binds only when all of
these hold (design, "Approval"): it names this invocation (and, when it gives one, its
uid); its request hash, descriptor digest and tool version equal the call's (a changed
argument is a new request, a changed descriptor a new tool: both need a new approval); its
reviewer created it, is not the caller, and is in an allowed group; it has not expired;
and it has not been used by another invocation. The checks run in that order so that an
approval which does not qualify can never affect the call: only a qualifying *rejection*
denies it (code `rejected`). An approval that does not bind leaves the call waiting until
the approval timeout, which then denies it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from tooladapter.enums import GATED_CLASSES, ApprovalDecision, BindCode, SideEffectClass
from tooladapter.model import ToolApprovalSpec
from tooladapter.pipeline.policy import PolicyDecision
from tooladapter.timeutil import parse_time


def needs_approval(
    *, effective: SideEffectClass, decision: PolicyDecision, forced: bool = False
) -> bool:
    """Whether the call may run only with a bound approval.

    shared-write, external and production always; spend when the policies gate it (above
    a threshold, amount unreadable, or no threshold configured); any class when an
    argument condition requires approval or `forced` (an escalated block-listed shell
    command, `Classification.approval_forced`).
    """
    if effective in GATED_CLASSES or forced or decision.requires_approval:
        return True
    return effective is SideEffectClass.SPEND and decision.spend_requires_approval


def approval_grounds(
    *, effective: SideEffectClass, decision: PolicyDecision, forced: bool = False
) -> list[str]:
    """Why this call needs an approval, in words, each ground `needs_approval` acts on (the
    reasons a reviewer reads: the call's own, never what merely applied to the namespace)."""
    grounds = []
    if effective in GATED_CLASSES:
        grounds.append(f"class {effective.value} needs an approval")
    if forced:
        # Which shell rule (not on the allow list, or block-listed and escalated) is in the
        # classification's record; this ground holds whatever the class.
        grounds.append("its shell command runs only when approved, whatever its class")
    grounds.extend(decision.approval_reasons)
    if effective is SideEffectClass.SPEND and decision.spend_requires_approval:
        if decision.spend_threshold is None:
            grounds.append("no ToolPolicy sets a spend threshold: every spend call is approved")
        elif decision.spend_amount is None:
            grounds.append("the spend amount is missing or not a number")
        else:
            grounds.append(
                f"spend amount {decision.spend_amount:g} is above the threshold "
                f"{decision.spend_threshold:g}"
            )
    return grounds


@dataclass(frozen=True)
class BindResult:
    bound: bool
    reason: str
    code: BindCode

    @property
    def denies(self) -> bool:
        """A qualifying rejection: the invocation is Denied."""
        return self.code == BindCode.REJECTED


def _aware(moment: datetime) -> datetime:
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)


def bind_approval(
    *,
    approval: ToolApprovalSpec,
    approval_name: str,
    creator: str | None,
    invocation_name: str,
    invocation_uid: str,
    request_hash: str,
    descriptor_digest: str,
    tool_version: str,
    caller: str,
    now: datetime,
    allowed_groups: Sequence[str],
    already_used_by: str | None,
) -> BindResult:
    """Whether `approval` binds to this invocation; see the module docstring.

    `creator` is the authenticated user who created the approval (None when the
    admission policy already guarantees reviewer == creator); `allowed_groups` are the
    reviewer groups of the decision for the call's class (empty: any reviewer);
    `already_used_by` is the uid of the invocation the approval is already bound to, if
    any (single use is per invocation object: a deleted and recreated invocation of the
    same name has another uid and cannot reuse it).
    """
    label = f"ToolApproval {approval_name}"

    def fail(code: BindCode, reason: str) -> BindResult:
        return BindResult(bound=False, reason=f"{label}: {reason}", code=code)

    if approval.invocation != invocation_name:
        return fail(
            BindCode.WRONG_INVOCATION,
            f"it approves invocation {approval.invocation!r}, not {invocation_name!r}",
        )
    if approval.invocation_uid is not None and approval.invocation_uid != invocation_uid:
        return fail(
            BindCode.WRONG_INVOCATION,
            f"it approves the invocation with uid {approval.invocation_uid}, not {invocation_uid} "
            "(the invocation was deleted and created again)",
        )
    if approval.request_hash != request_hash:
        return fail(
            BindCode.REQUEST_HASH_MISMATCH,
            f"it approves request hash {approval.request_hash}, but the call's request hash is "
            f"{request_hash} (the arguments changed: a new request needs a new approval)",
        )
    if approval.descriptor_digest != descriptor_digest:
        return fail(
            BindCode.DESCRIPTOR_CHANGED,
            f"it approves the tool as it was ({approval.descriptor_digest}), but the call's "
            f"descriptor is now {descriptor_digest} (the descriptor changed: review again)",
        )
    if approval.tool_version != tool_version:
        return fail(
            BindCode.TOOL_VERSION_MISMATCH,
            f"it approves tool version {approval.tool_version}, but the call uses {tool_version}",
        )
    if creator is not None and creator != approval.reviewer:
        return fail(
            BindCode.CREATOR_MISMATCH,
            f"its reviewer {approval.reviewer!r} is not the user who created it ({creator!r})",
        )
    if approval.reviewer == caller:
        return fail(
            BindCode.SELF_APPROVAL,
            f"the reviewer {approval.reviewer!r} is the invocation's own caller; "
            "someone else must review it",
        )
    if allowed_groups and not set(allowed_groups) & set(approval.reviewer_groups):
        return fail(
            BindCode.REVIEWER_NOT_ALLOWED,
            f"reviewer {approval.reviewer!r} is not in an allowed reviewer group "
            f"({', '.join(sorted(allowed_groups))}); the approval names "
            f"{', '.join(sorted(approval.reviewer_groups)) or 'no groups'}",
        )
    if already_used_by is not None and already_used_by != invocation_uid:
        return fail(
            BindCode.ALREADY_USED,
            f"it was already used by the invocation with uid {already_used_by}; "
            "approvals are single-use",
        )
    if approval.expires_at is not None:
        try:
            expires = parse_time(approval.expires_at)
        except ValueError as err:
            return fail(BindCode.INVALID_EXPIRY, f"expiresAt is not an RFC 3339 time: {err}")
        if _aware(now) >= expires:
            return fail(BindCode.EXPIRED, f"it expired at {approval.expires_at}")
    if approval.decision is ApprovalDecision.REJECTED:
        comment = f" ({approval.comment})" if approval.comment else ""
        return fail(BindCode.REJECTED, f"rejected by {approval.reviewer}{comment}")
    return BindResult(
        bound=True,
        reason=f"{label}: approved by {approval.reviewer} for request hash {request_hash}",
        code=BindCode.BOUND,
    )


def approval_timed_out(*, waiting_since: datetime, timeout_seconds: int, now: datetime) -> bool:
    """Whether a call waiting for approval since `waiting_since` has waited too long."""
    return _aware(now) - _aware(waiting_since) >= timedelta(seconds=timeout_seconds)
