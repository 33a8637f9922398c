"""Authorization as one pure sequence: tenant policy, shell check, class, permission, ceiling.

The flow (`flow.authorization`), its re-check right before acting (`flow.recheck`) and the
dry run (`pipeline.preview`) judge a call with these functions, so they cannot drift apart.

The steps run in the order their inputs need: the policy decision feeds the shell check
(its allow and block lists) and the class (its block action); the class is what the
permission questions ask about. The caller asks those (SubjectAccessReviews are I/O) between
`classify_call` and `authorize`, or passes no answers. `authorize` returns the refusals in
the reference's stage order, the order a call meets them: permission, policy (its denials,
then the ceiling), classification.
"""

from __future__ import annotations

from collections.abc import Mapping

from tooladapter.enums import SideEffectClass, ToolKind
from tooladapter.model import ToolDescriptorSpec, ToolInvocationSpec
from tooladapter.pipeline import refusals
from tooladapter.pipeline.classification import (
    Classification,
    classify,
    namespace_environment,
    raised_note,
)
from tooladapter.pipeline.permission import Permission
from tooladapter.pipeline.policy import (
    PolicyDecision,
    block_pattern_source,
    check_ceiling,
    shell_action_source,
)
from tooladapter.pipeline.refusals import Refusal
from tooladapter.pipeline.shell.allow import allow_list_for
from tooladapter.pipeline.shell.check import check_command
from tooladapter.pipeline.shell.verdict import ShellVerdict


def shell_check(
    descriptor: ToolDescriptorSpec, call: ToolInvocationSpec, decision: PolicyDecision
) -> ShellVerdict | None:
    """The shell check of a shell tool's command: the descriptor's allow list (or the
    operator's default, as the decision was made with) narrowed by the policies', and every
    block list."""
    if descriptor.kind != ToolKind.SHELL:
        return None
    return check_command(
        str(call.arguments.get("command", "")),
        allow=allow_list_for(
            descriptor.shell.allow if descriptor.shell else None, decision.default_shell_allow
        ),
        block=[*(descriptor.shell.block if descriptor.shell else []), *decision.shell_block],
        narrow=decision.shell_allow,
    )


def classify_call(
    descriptor: ToolDescriptorSpec,
    decision: PolicyDecision,
    verdict: ShellVerdict | None,
    *,
    namespace_labels: Mapping[str, str],
    hinted: SideEffectClass | None,
) -> Classification:
    """The classification of one call from its descriptor, the policy decision, the shell
    verdict and the namespace; a shell refusal names the pattern and where it comes from."""
    environment, frozen = namespace_environment(namespace_labels)
    blocked = verdict is not None and verdict.blocked
    reason = verdict.reason if verdict is not None and not verdict.ok else ""
    if blocked and verdict is not None and verdict.escalate_ok and verdict.matched:
        source = block_pattern_source(
            verdict.matched,
            descriptor_block=descriptor.shell.block if descriptor.shell else [],
            decision=decision,
        )
        reason = f"{reason}, a pattern of {source}"
    unlisted = verdict is not None and verdict.unlisted
    return classify(
        declared=descriptor.side_effect_class,
        environment=environment,
        frozen=frozen,
        shell_blocked=blocked,
        block_action=decision.block_action,
        hinted=hinted,
        risk=descriptor.risk_class,
        shell_escalate_ok=verdict.escalate_ok if verdict is not None and blocked else True,
        shell_unlisted=unlisted,
        unlisted_action=decision.unlisted_action,
        shell_reason=reason,
        shell_policy_source=shell_action_source(decision, blocked=blocked)
        if blocked or unlisted
        else "",
    )


def effective_class(
    classification: Classification, recorded: SideEffectClass | None = None
) -> SideEffectClass:
    """The class a call is authorized at: the one recorded when it was authorized (the
    re-check's; a class that fell since does not lower it), else the classification's."""
    return recorded if recorded is not None else classification.effective


def authorize(
    *,
    namespace: str,
    call: ToolInvocationSpec,
    decision: PolicyDecision,
    classification: Classification,
    verdict: ShellVerdict | None,
    permission: Permission | None,
    recorded: SideEffectClass | None = None,
) -> list[Refusal]:
    """Every refusal of the call, in the order a call meets them (empty: authorized).

    `permission`: the caller's answers to `permission.questions` for the effective class
    (None: not asked, no refusal at that stage). `recorded`: the class the call was
    authorized at, passed by the re-check: the call keeps that class, and is refused when
    its class has risen above it since.
    """
    effective = effective_class(classification, recorded)
    raised = raised_note(classification.raised_by)
    found: list[Refusal | None] = []
    if permission is not None:
        found.append(
            refusals.permission_denied(
                caller=call.caller.name,
                groups=call.caller.groups,
                namespace=namespace,
                tool_id=call.tool.id,
                effective=effective,
                may_invoke=permission.invoke,
                may_use=permission.use,
                raised=raised,
            )
        )
    if not decision.allowed:
        found.append(refusals.policy_denied(decision))
    ceiling = check_ceiling(decision, effective)
    if ceiling:
        found.append(refusals.ceiling_exceeded(ceiling, raised))
    if classification.refused:
        found.append(refusals.class_refused(classification, verdict))
    if recorded is not None and classification.effective.rank > recorded.rank:
        found.append(refusals.class_rose(recorded, classification.effective))
    return [refusal for refusal in found if refusal is not None]
