"""Approval, the stages of an Authorized call: the gate, the wait, and binding.

An approval binds only to the exact request (hash and tool version) of this invocation;
the wait is persisted (`status.approvalRequestedAt`) so its timeout survives restarts, and
it ends the moment an approval binds, a qualifying rejection arrives, the call is
interrupted or the timeout passes.
"""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta

from tooladapter.catalog import Entry, approval_key
from tooladapter.enums import BindCode, FailureClass, InvocationState, Resource, Stage, StageOutcome
from tooladapter.flow import dataflow
from tooladapter.flow.brokering import broker
from tooladapter.flow.context import Denial, FlowContext
from tooladapter.flow.recheck import check_not_retired, lists_now, reviewer_groups
from tooladapter.metrics import DATAFLOW_GATED
from tooladapter.model import ApprovalBinding, ToolApprovalSpec
from tooladapter.pipeline import approval as rules
from tooladapter.pipeline.preview import reviewers_text
from tooladapter.timeutil import now_iso, parse_time

#: Longest sleep of the wait between checks (approvals and interrupts wake it sooner).
WAIT_SLICE_SECONDS = 60


async def on_authorized(ctx: FlowContext) -> None:
    spec = ctx.load_spec()
    effective = ctx.status.effective_class
    assert effective is not None
    decision = ctx.load_decision()
    forced = bool(ctx.status.approval_forced)
    # The data-flow rule (`pipeline.dataflow`): a sink whose scopes hold private and
    # untrusted waits (or is denied) whatever its class.
    descriptor = await ctx.load_descriptor()
    flow = await dataflow.judge(ctx, descriptor, effective)
    dataflow.record(ctx, descriptor, flow)
    if flow.action is not None:
        DATAFLOW_GATED.labels(ctx.namespace, flow.action.value).inc()
    if flow.denies:
        raise Denial(Stage.POLICY, flow.reason, FailureClass.POLICY_DENIED)
    if flow.needs_approval or rules.needs_approval(
        effective=effective, decision=decision, forced=forced
    ):
        ctx.status.approval_requested_at = now_iso()
        # What the reviewer approves: the lists in force now, pinned (`pipeline.pinning`).
        ctx.status.approved_lists = lists_now(ctx, descriptor)
        # The grounds are what a reviewer reads as the call's reasons (pipeline/review).
        grounds = rules.approval_grounds(effective=effective, decision=decision, forced=forced)
        if flow.needs_approval:
            grounds.append(flow.reason)
        ctx.record(
            Stage.APPROVAL,
            StageOutcome.WAITING,
            f"{'; '.join(grounds) or 'approval required'}: an approval binds to "
            f"{ctx.status.request_hash} and version {spec.tool.version}",
        )
        await ctx.commit(InvocationState.AWAITING_APPROVAL)
        announce_wait(ctx)
        return
    ctx.record(Stage.APPROVAL, StageOutcome.NOT_REQUIRED)  # by status.effectiveClass
    await broker(ctx)


def announce_wait(ctx: FlowContext) -> None:
    """Tell reviewers (and the caller) that the call waits: who may approve, until when,
    and what an approval must carry."""
    spec = ctx.load_spec()
    since = parse_time(ctx.status.approval_requested_at or now_iso())
    until = since + timedelta(seconds=ctx.load_decision().approval_timeout_seconds)
    deadline = until.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    ctx.post(
        reason="ToolApprovalRequested",
        message=f"{spec.tool.id}@{spec.tool.version} ({ctx.status.effective_class}) waits for "
        f"an approval by {reviewers_text(reviewer_groups(ctx), spec.caller.name)} until "
        f"{deadline}: a ToolApproval naming invocation {ctx.name} "
        f"with requestHash {ctx.status.request_hash}, descriptorDigest "
        f"{ctx.status.descriptor_digest} and toolVersion {spec.tool.version}",
    )


async def on_awaiting_approval(ctx: FlowContext) -> None:
    effective = ctx.status.effective_class
    assert effective is not None
    decision = ctx.load_decision()
    since = (
        parse_time(ctx.status.approval_requested_at)
        if ctx.status.approval_requested_at
        else datetime.now(UTC)
    )
    timeout = decision.approval_timeout_seconds
    groups = reviewer_groups(ctx)
    signal = ctx.rt.catalog.changed(ctx.namespace, approval_key(ctx.name))
    while True:
        signal.clear()
        if ctx.interrupt_requested():
            raise Denial(
                Stage.APPROVAL, "interrupted while waiting for approval", FailureClass.CANCELLED
            )
        # Retiring the version wakes this wait (`Catalog.update`): no approval can save it.
        check_not_retired(ctx)
        now = datetime.now(UTC)
        for entry in ctx.rt.catalog.approvals_for(ctx.namespace, ctx.name):
            if await try_bind(ctx, entry, groups, now):
                await broker(ctx)
                return
        if rules.approval_timed_out(waiting_since=since, timeout_seconds=timeout, now=now):
            raise Denial(
                Stage.APPROVAL,
                f"no approval bound within {timeout}s; the wait expired",
                FailureClass.POLICY_DENIED,
            )
        remaining = (since + timedelta(seconds=timeout) - now).total_seconds()
        interrupt = asyncio.ensure_future(ctx.interrupted.wait())
        changed = asyncio.ensure_future(signal.wait())
        try:
            async with ctx.without_slot():
                await asyncio.wait(
                    {interrupt, changed},
                    timeout=max(0.05, min(remaining, WAIT_SLICE_SECONDS)),
                    return_when=asyncio.FIRST_COMPLETED,
                )
        finally:
            interrupt.cancel()
            changed.cancel()


async def try_bind(
    ctx: FlowContext, entry: Entry[ToolApprovalSpec], groups: list[str], now: datetime
) -> bool:
    """Bind `entry` if it qualifies; record why not on its status; Denial on a rejection."""
    spec = ctx.load_spec()
    approval = entry.spec
    if approval is None:
        return False  # admission keeps invalid approvals out; one that slips by never binds
    astatus = entry.status
    # Bound before uids were recorded: only a binding to this very name counts as ours.
    used_by = (
        (astatus.get("boundUid") or astatus.get("boundTo") or "?") if astatus.get("bound") else None
    )
    result = rules.bind_approval(
        approval=approval,
        approval_name=entry.name,
        creator=None,
        invocation_name=ctx.name,
        invocation_uid=ctx.uid,
        request_hash=ctx.status.request_hash or "",
        descriptor_digest=ctx.status.descriptor_digest or "",
        tool_version=spec.tool.version,
        caller=spec.caller.name,
        now=now,
        allowed_groups=groups,
        already_used_by=used_by,
    )
    if result.bound:
        stamp = now_iso()
        await ctx.rt.cluster.patch_status(
            Resource.APPROVALS,
            ctx.namespace,
            entry.name,
            {
                "bound": True,
                "boundTo": ctx.name,
                "boundUid": ctx.uid,
                "boundAt": stamp,
                "reason": f"bound to {ctx.name} ({ctx.status.request_hash})",
            },
        )
        ctx.status.approval = ApprovalBinding(
            name=entry.name,
            reviewer=approval.reviewer,
            bound_at=stamp,
            request_hash=approval.request_hash,
            descriptor_digest=approval.descriptor_digest,
            tool_version=approval.tool_version,
            lists_digest=(
                ctx.status.approved_lists.digest if ctx.status.approved_lists is not None else None
            ),
        )
        ctx.record(Stage.APPROVAL, StageOutcome.BOUND, f"{entry.name} by {approval.reviewer}")
        return True
    if astatus.get("reason") != result.reason and not astatus.get("bound"):
        await ctx.rt.cluster.patch_status(
            Resource.APPROVALS, ctx.namespace, entry.name, {"bound": False, "reason": result.reason}
        )
    if result.code == BindCode.REJECTED:
        ctx.record(Stage.APPROVAL, StageOutcome.REJECTED, f"{entry.name} by {approval.reviewer}")
        raise Denial(
            Stage.APPROVAL,
            f"rejected by {approval.reviewer}: {approval.comment}",
            FailureClass.POLICY_DENIED,
        )
    return False
