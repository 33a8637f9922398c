"""The re-check right before acting: what may have changed while the call waited.

An approval wait can last an hour (and a restarted operator resumes calls that were
evaluated by its predecessor). Before anything is brokered for such a call (its credentials
and its sandbox's egress allow-list are then made from what this read), everything that can
change meanwhile is evaluated again, from what the API server holds now (the namespace, its
descriptors and policies read afresh: the watch may not have delivered a freeze made a
moment before the approval) and a fresh SubjectAccessReview (never the remembered answer):
the descriptor (gone, inactive, or a different digest), the tenant policies, the
namespace's freeze and environment class, the bound approval's reviewer against the
reviewer groups the policies ask for now, the shell and egress lists the approval was
asked with (`pipeline.pinning`: reloadable settings may have widened them), the caller's
grants, and the fencing token. A change ends the call `Denied` at the stage that now
denies, naming it. The reads are made only for calls that waited or were resumed, never on
the common path.
"""

from __future__ import annotations

from functools import partial

from tooladapter.catalog import Catalog
from tooladapter.enums import FailureClass, Resource, SideEffectClass, Stage, StageOutcome
from tooladapter.flow import dataflow
from tooladapter.flow.admission import check_fencing, check_identity_verified
from tooladapter.flow.authorization import (
    ask_permission,
    classify_call,
    deny_first,
    shell_verdict,
)
from tooladapter.flow.context import Denial, FlowContext
from tooladapter.model import ApprovalBinding, ApprovedLists, ToolDescriptorSpec
from tooladapter.pipeline import dataflow as flowrule
from tooladapter.pipeline.authorization import authorize, effective_class
from tooladapter.pipeline.pinning import lists_of, widenings


def needs_recheck(ctx: FlowContext) -> bool:
    """Only a call that waited, or was evaluated by an earlier process, can be stale; and it
    is re-checked once per flow (before brokering: its credentials and its sandbox's egress
    allow-list are made from what the re-check read)."""
    return (ctx.resumed or ctx.status.approval_requested_at is not None) and not ctx.rechecked


def reviewer_groups(ctx: FlowContext) -> list[str]:
    """The groups a reviewer of this call must be in (empty: anyone but the caller)."""
    decision = ctx.load_decision()
    if (
        ctx.status.effective_class == SideEffectClass.PRODUCTION
        and decision.production_reviewer_groups
    ):
        return list(decision.production_reviewer_groups)
    return list(decision.reviewer_groups)


def check_bound_reviewer(ctx: FlowContext, binding: ApprovalBinding) -> None:
    """The bound approval still qualifies under the policies as they are now: a policy that
    narrowed who may approve while the call waited holds for an approval bound before it
    was seen. (Its spec cannot change; gone since it bound, it names no group.)"""
    groups = reviewer_groups(ctx)
    if not groups:
        return
    entry = ctx.rt.catalog.approvals.get(ctx.namespace, binding.name)
    named = set(entry.spec.reviewer_groups) if entry is not None and entry.spec else set()
    if not set(groups) & named:
        raise Denial(
            Stage.APPROVAL,
            f"the approval {binding.name} by {binding.reviewer!r} no longer qualifies: the "
            f"policy now asks for a reviewer in {', '.join(sorted(groups))} (it names "
            f"{', '.join(sorted(named)) or 'no groups'}): call again to be approved anew",
            FailureClass.POLICY_DENIED,
        )


def check_not_retired(ctx: FlowContext) -> None:
    """Denied `retired` when the call's version was retired since it was validated (as the
    watch sees it now): a call not yet Executing never runs a retired version."""
    spec = ctx.load_spec()
    entry = ctx.rt.catalog.find_descriptor(ctx.namespace, spec.tool.id, spec.tool.version)
    if entry is not None and (entry.body.get("spec") or {}).get("retired"):
        raise Denial(
            Stage.VALIDATION,
            f"tool {spec.tool.id}@{spec.tool.version} was retired while the call waited; "
            "it did not run: call another version",
            FailureClass.RETIRED,
        )


def check_data_flow(ctx: FlowContext, verdict: flowrule.Verdict) -> None:
    """The data-flow rule again, from the scopes as they are now: a label that arrived while
    the call waited was not seen by its approval (or the call waited for no approval at
    all). An approval binds its invocation once and a call never goes back to waiting, so
    such a call is Denied, naming the calls that brought the new labels: calling again
    asks for an approval that sees them."""
    if verdict.denies:
        raise Denial(Stage.POLICY, verdict.reason, FailureClass.POLICY_DENIED)
    if not verdict.needs_approval:
        return
    seen = ctx.status.data_flow
    gated_before = seen is not None and seen.gated is not None
    new = flowrule.arrived_since(seen.sources if seen is not None else [], verdict.sources)
    if ctx.status.approval is not None and gated_before and not new:
        return  # the approval was asked for with these very labels
    arrived = ", ".join(f"{s.label.value} from {s.invocation}" for s in new) or "labels"
    when = (
        "after its approval was asked for"
        if ctx.status.approval_requested_at is not None
        else "after it was judged without them"
    )
    raise Denial(
        Stage.APPROVAL,
        f"{verdict.reason}. These arrived {when} ({arrived}), so no approval saw them: "
        "call again to be approved anew",
        FailureClass.POLICY_DENIED,
    )


async def recheck_data_flow(ctx: FlowContext, descriptor: ToolDescriptorSpec) -> None:
    """The data-flow rule once more, right before Executing, for every call (waited or not):
    a label may arrive between the gate and the act (another call of the run ending while
    this one was brokered, waited for capacity or for its workspace). Only a sink reads its
    scopes (`dataflow.judge`): other calls cost nothing."""
    effective = ctx.status.effective_class
    if effective is None:
        return
    check_data_flow(ctx, await dataflow.judge(ctx, descriptor, effective))


def lists_now(ctx: FlowContext, descriptor: ToolDescriptorSpec) -> ApprovedLists:
    """The call's shell and egress lists as they would be used now: the settings in force,
    the policies of `ctx.catalog` (the re-check's fresh view)."""
    narrowing = [
        entry.spec.egress.allow
        for entry in ctx.catalog.policies.in_namespace(ctx.namespace)
        if entry.spec is not None and entry.spec.egress.allow is not None
    ]
    return lists_of(
        descriptor,
        ctx.load_decision(),
        default_egress_allow=ctx.rt.settings.egress.default_allow,
        egress_narrowing=narrowing,
    )


def check_approved_lists(ctx: FlowContext, descriptor: ToolDescriptorSpec) -> None:
    """What the reviewer approved stays what runs: Denied when the call's shell or egress
    lists widened since its approval was asked for (a reloaded setting, a policy)."""
    approved = ctx.status.approved_lists
    if approved is None:
        return
    wider = widenings(approved, lists_now(ctx, descriptor))
    if wider:
        raise Denial(
            Stage.APPROVAL,
            f"the lists this call was approved with widened since its approval was asked "
            f"for ({'; '.join(wider)}): it did not run; call again to be approved anew",
            FailureClass.POLICY_DENIED,
        )


async def fresh_view(ctx: FlowContext) -> Catalog:
    """The catalog with the call's namespace as the API server holds it now."""
    cluster = ctx.rt.cluster
    return ctx.rt.catalog.fresh_view(
        ctx.namespace,
        labels=await cluster.namespace_labels(ctx.namespace),
        descriptors=await cluster.list_all(Resource.DESCRIPTORS, ctx.namespace),
        policies=await cluster.list_all(Resource.POLICIES, ctx.namespace),
    )


async def recheck(ctx: FlowContext) -> None:
    # A gap seen only after the call passed validation (the watch's delay) still holds it.
    check_identity_verified(ctx)
    spec = ctx.load_spec()
    before = ctx.status.descriptor_digest
    ctx.view = await fresh_view(ctx)
    ctx.descriptor, ctx.descriptor_entry, ctx.decision = None, None, None  # read anew
    descriptor = await ctx.load_descriptor()
    now = ctx.descriptor_digest(descriptor)
    if before is not None and now != before:
        raise Denial(
            Stage.VALIDATION,
            f"the descriptor of {spec.tool.id}@{spec.tool.version} changed while the call "
            f"waited ({before} -> {now}): call again to be evaluated (and approved) anew",
            FailureClass.VALIDATION,
        )
    decision = ctx.load_decision()
    verdict = await shell_verdict(ctx, descriptor, decision)
    classification = classify_call(ctx, descriptor, decision, verdict)
    recorded = ctx.status.effective_class
    effective = effective_class(classification, recorded)

    refusals = partial(
        authorize,
        namespace=ctx.namespace,
        call=spec,
        decision=decision,
        classification=classification,
        verdict=verdict,
        recorded=recorded,
    )
    # The grants are asked last, afresh, and only when nothing else refuses the call now.
    deny_first(refusals(permission=None))
    if ctx.status.approval is not None:
        check_bound_reviewer(ctx, ctx.status.approval)
    check_approved_lists(ctx, descriptor)
    deny_first(refusals(permission=await ask_permission(ctx, effective, fresh=True)))
    if spec.attempt_id and spec.fencing_token is not None:
        await check_fencing(ctx)
    check_data_flow(ctx, await dataflow.judge(ctx, descriptor, effective))
    ctx.rechecked = True
    ctx.record(
        Stage.RECHECK,
        StageOutcome.PASSED,
        f"descriptor, policy {decision.decision_id}, class {effective}, grants unchanged",
    )
