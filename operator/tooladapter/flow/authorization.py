"""Authorization, the stages of a Validated call: permission, policy and classification.

They are evaluated in the order their inputs need (the tenant policy first, because its
shell lists and block action feed the classification, whose effective class the permission
check asks about) and recorded in the reference's stage order: permission, policy,
classification. Every denial names the rule that refused.
"""

from __future__ import annotations

import asyncio

from .. import offload
from ..enums import FailureClass, InvocationState, Resource, Stage, StageOutcome, ToolKind
from ..model import ToolDescriptorSpec
from ..pipeline.classification import Classification, classify, mcp_hint_class
from ..pipeline.policy import PolicyDecision, check_ceiling
from ..pipeline.shell import ShellVerdict, allow_list_for, check_command
from .context import Denial, FlowContext


async def on_validated(ctx: FlowContext) -> None:
    spec = ctx.load_spec()
    descriptor = await ctx.load_descriptor()
    decision = ctx.load_decision()
    verdict = await shell_verdict(ctx, descriptor, decision)
    classification = classify_call(ctx, descriptor, decision, verdict)
    effective = classification.effective
    await check_permission(ctx, effective=str(effective))
    ctx.record(
        Stage.PERMISSION,
        StageOutcome.PASSED,
        f"invoke tooldescriptors/{spec.tool.id}; use sideeffectclasses/{effective}",
    )
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
        raise Denial(Stage.POLICY, ceiling, FailureClass.POLICY_DENIED)
    ctx.record(Stage.POLICY, StageOutcome.PASSED, f"decision {decision.decision_id}")
    ctx.status.effective_class = effective
    ctx.status.approval_forced = classification.approval_forced or None
    if classification.refused:
        raise Denial(
            Stage.CLASSIFICATION,
            classification.reason or (verdict.reason if verdict else "refused"),
            FailureClass.POLICY_DENIED,
        )
    detail = f"{descriptor.side_effect_class} -> {effective}"
    if classification.raised_by:
        detail += " (raised by " + ", ".join(classification.raised_by) + ")"
    ctx.record(Stage.CLASSIFICATION, StageOutcome.PASSED, detail)
    await ctx.advance(InvocationState.AUTHORIZED)


async def shell_verdict(
    ctx: FlowContext, descriptor: ToolDescriptorSpec, decision: PolicyDecision
) -> ShellVerdict | None:
    """The shell check of the command: the descriptor's allow list (or the reference's
    default) narrowed by the policies', and every block list. A long command costs the
    check up to seconds of CPU (64 KiB of `a=b `: ~2 s): it runs off the event loop."""
    if descriptor.kind != ToolKind.SHELL:
        return None
    spec = ctx.load_spec()
    command = str(spec.arguments.get("command", ""))
    return await offload.run(
        ctx.namespace,
        len(command) * 16,  # ~8 KiB of command is already a few milliseconds of checks
        check_command,
        command,
        allow=allow_list_for(descriptor.shell.allow if descriptor.shell else None),
        block=[*(descriptor.shell.block if descriptor.shell else []), *decision.shell_block],
        narrow=decision.shell_allow,
    )


def classify_call(
    ctx: FlowContext,
    descriptor: ToolDescriptorSpec,
    decision: PolicyDecision,
    verdict: ShellVerdict | None,
) -> Classification:
    environment, frozen = ctx.environment()
    hinted = None
    if descriptor.kind == ToolKind.MCP and descriptor.mcp is not None:
        # MCP annotations are untrusted hints: `classify` lets them raise, never lower.
        info = ctx.rt.catalog.discovered_tool(
            ctx.namespace, descriptor.mcp.server, descriptor.mcp.tool
        )
        hinted = mcp_hint_class((info or {}).get("annotations"))
    blocked = verdict is not None and verdict.blocked
    return classify(
        declared=descriptor.side_effect_class,
        environment=environment,
        frozen=frozen,
        shell_blocked=blocked,
        block_action=decision.block_action,
        hinted=hinted,
        risk=descriptor.risk_class,
        shell_escalate_ok=verdict.escalate_ok if verdict is not None and blocked else True,
        shell_unlisted=verdict is not None and verdict.unlisted,
        unlisted_action=decision.unlisted_action,
        shell_reason=verdict.reason if verdict is not None and not verdict.ok else "",
    )


async def check_permission(ctx: FlowContext, *, effective: str, fresh: bool = False) -> None:
    """RBAC, asked for the caller, concurrently for the tool and the class (`fresh`: never
    from remembered answers)."""
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
    hint = groups_hint(spec.caller.name, spec.caller.groups)
    if not tool_verdict.allowed:
        raise Denial(
            Stage.PERMISSION,
            f"{spec.caller.name} may not invoke tooldescriptors/{spec.tool.id} in "
            f"{ctx.namespace} (RBAC verb invoke){hint}",
            FailureClass.PERMISSION_DENIED,
        )
    if not class_verdict.allowed:
        raise Denial(
            Stage.PERMISSION,
            f"{spec.caller.name} may not use sideeffectclasses/{effective} in "
            f"{ctx.namespace} (RBAC verb use){hint}",
            FailureClass.PERMISSION_DENIED,
        )


def groups_hint(user: str, groups: list[str]) -> str:
    """A person without groups in spec.caller.groups is reviewed by name only: say so."""
    if groups or user.startswith("system:serviceaccount:"):
        return ""
    return (
        "; no spec.caller.groups were given, so grants to groups were not considered "
        "(list your groups there to use them)"
    )
