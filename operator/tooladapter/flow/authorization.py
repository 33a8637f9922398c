"""Authorization, the stages of a Validated call: permission, policy and classification.

The sequence is `pipeline.authorization`'s, pure; here its inputs are gathered (the shell
check off the event loop, the MCP tool's hints from the catalog, the caller's grants from
SubjectAccessReviews) and its refusals raised. It refuses in the reference's stage order,
permission, policy, classification, and each stage that passes is recorded before the next
is refused. Every denial names the rule that refused.
"""

from __future__ import annotations

import asyncio

from tooladapter import offload
from tooladapter.enums import InvocationState, SideEffectClass, Stage, StageOutcome, ToolKind
from tooladapter.flow.context import Denial, FlowContext
from tooladapter.model import ToolDescriptorSpec
from tooladapter.pipeline import authorization
from tooladapter.pipeline.classification import Classification, mcp_hint_class
from tooladapter.pipeline.permission import Permission, questions
from tooladapter.pipeline.policy import PolicyDecision
from tooladapter.pipeline.refusals import Refusal
from tooladapter.pipeline.shell.verdict import ShellVerdict


async def on_validated(ctx: FlowContext) -> None:
    spec = ctx.load_spec()  # a spec that does not parse is denied here, before anything else
    descriptor = await ctx.load_descriptor()
    decision = ctx.load_decision()
    verdict = await shell_verdict(ctx, descriptor, decision)
    classification = classify_call(ctx, descriptor, decision, verdict)
    effective = classification.effective
    refused = authorization.authorize(
        namespace=ctx.namespace,
        call=spec,
        decision=decision,
        classification=classification,
        verdict=verdict,
        permission=await ask_permission(ctx, effective),
    )
    deny_at(Stage.PERMISSION, refused)
    # Details only where no other field says it (issue 17: a smaller status per call): the
    # grants checked follow from spec.tool.id and status.effectiveClass.
    ctx.record(Stage.PERMISSION, StageOutcome.PASSED)
    ctx.status.policy_decision_id = decision.decision_id
    ctx.status.policy_reasons = list(decision.reasons)
    deny_at(Stage.POLICY, refused)
    ctx.record(Stage.POLICY, StageOutcome.PASSED)  # the decision: status.policyDecisionId
    ctx.status.effective_class = effective
    ctx.status.approval_forced = classification.approval_forced or None
    deny_at(Stage.CLASSIFICATION, refused)
    # The classes are status.declaredClass and effectiveClass; the detail says why they differ.
    detail = ""
    if classification.raised_by:
        detail = "raised by " + ", ".join(classification.raised_by)
    ctx.record(Stage.CLASSIFICATION, StageOutcome.PASSED, detail)
    await ctx.advance(InvocationState.AUTHORIZED)


def deny_at(stage: Stage, refused: list[Refusal]) -> None:
    """Raise the first refusal if `stage` is where the call meets it (`refused` is in stage
    order, so the stages before it have passed)."""
    if refused and refused[0].stage is stage:
        deny_first(refused)


def deny_first(refused: list[Refusal]) -> None:
    """Raise the first refusal the call meets, if any."""
    if refused:
        raise Denial.of(refused[0])


async def shell_verdict(
    ctx: FlowContext, descriptor: ToolDescriptorSpec, decision: PolicyDecision
) -> ShellVerdict | None:
    """The shell check of the command (`authorization.shell_check`). A long command costs
    the check up to seconds of CPU (64 KiB of `a=b `: ~2 s): it runs off the event loop."""
    if descriptor.kind != ToolKind.SHELL:
        return None
    spec = ctx.load_spec()
    command = str(spec.arguments.get("command", ""))
    return await offload.run(
        ctx.namespace,
        len(command) * 16,  # ~8 KiB of command is already a few milliseconds of checks
        authorization.shell_check,
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
    return authorization.classify_call(
        descriptor,
        decision,
        verdict,
        namespace_labels=ctx.catalog.namespace_labels(ctx.namespace),
        hinted=hinted,
    )


async def ask_permission(
    ctx: FlowContext, effective: SideEffectClass, *, fresh: bool = False
) -> Permission:
    """The caller's grants, asked of the API server concurrently for the tool and the class
    (`fresh`: never from remembered answers)."""
    spec = ctx.load_spec()
    tool_verdict, class_verdict = await asyncio.gather(
        *(
            ctx.rt.cluster.can(
                user=spec.caller.name,
                namespace=ctx.namespace,
                verb=question.verb,
                resource=question.resource,
                name=question.name,
                fresh=fresh,
                groups=spec.caller.groups,
            )
            for question in questions(spec.tool.id, effective)
        )
    )
    return Permission(invoke=tool_verdict.allowed, use=class_verdict.allowed)
