"""Authorization, the stages of a Validated call: permission, policy and classification.

They are evaluated in the order their inputs need (the tenant policy first, because its
shell lists and block action feed the classification, whose effective class the permission
check asks about) and recorded in the reference's stage order: permission, policy,
classification. Every denial names the rule that refused.
"""

from __future__ import annotations

import asyncio

from tooladapter import offload
from tooladapter.enums import (
    FailureClass,
    InvocationState,
    Resource,
    SideEffectClass,
    Stage,
    StageOutcome,
    ToolKind,
)
from tooladapter.flow.context import Denial, FlowContext
from tooladapter.model import ToolDescriptorSpec
from tooladapter.pipeline.classification import Classification, mcp_hint_class, raised_note
from tooladapter.pipeline.permission import refusal
from tooladapter.pipeline.policy import PolicyDecision, check_ceiling
from tooladapter.pipeline.preview import classify_call as preview_classify
from tooladapter.pipeline.preview import shell_check
from tooladapter.pipeline.shell.verdict import ShellVerdict


async def on_validated(ctx: FlowContext) -> None:
    ctx.load_spec()  # a spec that does not parse is denied here, before anything else
    descriptor = await ctx.load_descriptor()
    decision = ctx.load_decision()
    verdict = await shell_verdict(ctx, descriptor, decision)
    classification = classify_call(ctx, descriptor, decision, verdict)
    effective = classification.effective
    # A denial of the class names what raised it (an unlisted shell command, say) too.
    raised = raised_note(classification.raised_by)
    await check_permission(ctx, effective=str(effective), raised=raised)
    # Details only where no other field says it (issue 17: a smaller status per call): the
    # grants checked follow from spec.tool.id and status.effectiveClass.
    ctx.record(Stage.PERMISSION, StageOutcome.PASSED)
    ctx.status.policy_decision_id = decision.decision_id
    ctx.status.policy_reasons = list(decision.reasons)
    if not decision.allowed:
        raise Denial(
            Stage.POLICY,
            "; ".join(decision.denials) or "denied by policy",
            FailureClass.POLICY_DENIED,
        )
    ceiling = check_ceiling(decision, effective)
    if ceiling:
        raise Denial(Stage.POLICY, ceiling + raised, FailureClass.POLICY_DENIED)
    ctx.record(Stage.POLICY, StageOutcome.PASSED)  # the decision: status.policyDecisionId
    ctx.status.effective_class = effective
    ctx.status.approval_forced = classification.approval_forced or None
    if classification.refused:
        raise Denial(
            Stage.CLASSIFICATION,
            classification.reason or (verdict.reason if verdict else "refused"),
            FailureClass.POLICY_DENIED,
        )
    # The classes are status.declaredClass and effectiveClass; the detail says why they differ.
    detail = ""
    if classification.raised_by:
        detail = "raised by " + ", ".join(classification.raised_by)
    ctx.record(Stage.CLASSIFICATION, StageOutcome.PASSED, detail)
    await ctx.advance(InvocationState.AUTHORIZED)


async def shell_verdict(
    ctx: FlowContext, descriptor: ToolDescriptorSpec, decision: PolicyDecision
) -> ShellVerdict | None:
    """The shell check of the command (`preview.shell_check`). A long command costs the
    check up to seconds of CPU (64 KiB of `a=b `: ~2 s): it runs off the event loop."""
    if descriptor.kind != ToolKind.SHELL:
        return None
    spec = ctx.load_spec()
    command = str(spec.arguments.get("command", ""))
    return await offload.run(
        ctx.namespace,
        len(command) * 16,  # ~8 KiB of command is already a few milliseconds of checks
        shell_check,
        descriptor,
        spec,
        decision,
    )


def classify_call(
    ctx: FlowContext,
    descriptor: ToolDescriptorSpec,
    decision: PolicyDecision,
    verdict: ShellVerdict | None,
) -> Classification:
    hinted = None
    if descriptor.kind == ToolKind.MCP and descriptor.mcp is not None:
        # MCP annotations are untrusted hints: `classify` lets them raise, never lower.
        info = ctx.catalog.discovered_tool(
            ctx.namespace, descriptor.mcp.server, descriptor.mcp.tool
        )
        hinted = mcp_hint_class((info or {}).get("annotations"))
    return preview_classify(
        descriptor,
        decision,
        verdict,
        namespace_labels=ctx.catalog.namespace_labels(ctx.namespace),
        hinted=hinted,
    )


async def check_permission(
    ctx: FlowContext, *, effective: str, fresh: bool = False, raised: str = ""
) -> None:
    """RBAC, asked for the caller, concurrently for the tool and the class (`fresh`: never
    from remembered answers); `raised` says why the class rose, for the denial message."""
    spec = ctx.load_spec()
    tool_verdict, class_verdict = await asyncio.gather(
        ctx.rt.cluster.can(
            user=spec.caller.name,
            namespace=ctx.namespace,
            verb="invoke",
            resource=Resource.DESCRIPTORS,
            name=spec.tool.id,
            fresh=fresh,
            groups=spec.caller.groups,
        ),
        ctx.rt.cluster.can(
            user=spec.caller.name,
            namespace=ctx.namespace,
            verb="use",
            resource=Resource.SIDE_EFFECT_CLASSES,
            name=effective,
            fresh=fresh,
            groups=spec.caller.groups,
        ),
    )
    refused = refusal(
        caller=spec.caller.name,
        groups=spec.caller.groups,
        namespace=ctx.namespace,
        tool_id=spec.tool.id,
        effective=SideEffectClass(effective),
        may_invoke=tool_verdict.allowed,
        may_use=class_verdict.allowed,
        raised=raised,
    )
    if refused is not None:
        raise Denial(Stage.PERMISSION, refused, FailureClass.PERMISSION_DENIED)
