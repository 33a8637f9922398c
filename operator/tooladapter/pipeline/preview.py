"""Dry run: what a call would meet at every stage, evaluated without executing anything.

A preview walks the stages a real call walks (validation, tenant policy, classification,
permission, the approval gate) with the same pure functions, in the same order, and says
what the call would do now: run, wait for an approval (from whom, for how long), or be
denied (at which stage, with the message the call would carry). It claims no idempotency
key, checks no fencing token, counts toward no rate limit and no invocation metric, and
brokers no credentials: those stages act on the world, so they are listed as not
evaluated.

Everything here is plain data in, plain data out, so the operator (`spec.dryRun`), the
gateway's REST dry run and the CLI call the same code in process. Permission is the one
answer that needs the API server: pass it (`True`/`False`, or a `Permission` per
question), or evaluate first, ask `Evaluation.questions`, and `conclude` with the answers.

Unlike a real call, a preview goes on after the first refusal where it can (schema errors
do not hide the policy decision or the class), so one dry run shows everything to fix;
the verdict is still the first refusal a real call would meet.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from pydantic import ValidationError

from tooladapter.egress.core.rules import effective_allow
from tooladapter.enums import FailureClass, PreviewVerdict, SideEffectClass, Stage, ToolKind
from tooladapter.model import (
    ArgumentError,
    InvocationPreview,
    PreviewApproval,
    PreviewClassification,
    PreviewPermission,
    PreviewPolicy,
    PreviewSandbox,
    PreviewValidation,
    ToolDescriptorSpec,
    ToolInvocationSpec,
    ToolPolicySpec,
    describe_errors,
)
from tooladapter.pipeline.approval import needs_approval
from tooladapter.pipeline.availability import unavailable
from tooladapter.pipeline.classification import (
    Classification,
    classify,
    mcp_hint_class,
    namespace_environment,
    raised_note,
)
from tooladapter.pipeline.hashing import descriptor_digest
from tooladapter.pipeline.permission import Question, questions, refusal
from tooladapter.pipeline.policy import (
    DEFAULT_APPROVAL_TIMEOUT_SECONDS,
    PolicyDecision,
    block_pattern_source,
    check_ceiling,
    evaluate_policies,
    shell_action_source,
)
from tooladapter.pipeline.sanitize import bounded_message
from tooladapter.pipeline.shell import ShellVerdict, allow_list_for, check_command
from tooladapter.pipeline.validation import check_arguments
from tooladapter.sandbox.job import runtime_class_for

#: The typed result of a dry run (also `status.preview` of a Previewed invocation).
Preview = InvocationPreview

#: Stages a dry run never evaluates: each would act on the world or count the call.
NOT_EVALUATED = (Stage.IDEMPOTENCY, Stage.FENCING, Stage.RATE_LIMIT, Stage.CREDENTIALS)
#: Schema errors listed in a preview (a real call's message lists the first 20 too).
MAX_ERRORS = 20


@dataclass(frozen=True)
class PreviewSettings:
    """The operator settings a preview needs (`Settings` lives above the pipeline)."""

    default_approval_timeout_seconds: int = DEFAULT_APPROVAL_TIMEOUT_SECONDS
    #: (sandbox kind, RuntimeClass) pairs, as TOOLADAPTER_RUNTIME_CLASSES.
    runtime_classes: tuple[tuple[str, str], ...] = ()
    #: The image of sandboxes whose descriptor names none.
    sandbox_image: str | None = None
    #: The egress allow-list of sandboxes whose descriptor sets none.
    default_egress_allow: tuple[str, ...] = ()


@dataclass(frozen=True)
class Permission:
    """The caller's RBAC answers: `invoke` on the tool, `use` on the effective class."""

    invoke: bool
    use: bool


@dataclass(frozen=True)
class Refusal:
    stage: Stage
    reason: str
    failure: FailureClass


@dataclass
class Evaluation:
    """Every stage of a preview but permission, which needs the caller's answers."""

    namespace: str
    settings: PreviewSettings
    validation: PreviewValidation = field(default_factory=lambda: PreviewValidation(passed=True))
    #: Refusals met before permission is asked (validation, an unreadable policy).
    refusals: list[Refusal] = field(default_factory=list)
    call: ToolInvocationSpec | None = None
    descriptor: ToolDescriptorSpec | None = None
    decision: PolicyDecision | None = None
    shell: ShellVerdict | None = None
    classification: Classification | None = None

    def refuse(self, stage: Stage, reason: str, failure: FailureClass) -> None:
        self.refusals.append(Refusal(stage, reason, failure))

    @property
    def questions(self) -> tuple[Question, ...]:
        """What to ask the API server for this caller (none when nothing got that far)."""
        if self.call is None or self.classification is None:
            return ()
        return questions(self.call.tool.id, self.classification.effective)


def preview(
    *,
    namespace: str,
    spec: Mapping[str, Any],
    descriptor: Mapping[str, Any] | None,
    policies: Sequence[tuple[str, ToolPolicySpec | str]],
    permission: bool | Permission | None,
    settings: PreviewSettings | None = None,
    namespace_labels: Mapping[str, str] | None = None,
    published: Sequence[str] = (),
    mcp_annotations: Mapping[str, Any] | None = None,
) -> Preview:
    """The preview of one call; see `evaluate` for the inputs. `permission`: the caller's
    answers (a bool answers both questions; None: not checked, the verdict ignores it)."""
    evaluation = evaluate(
        namespace=namespace,
        spec=spec,
        descriptor=descriptor,
        policies=policies,
        settings=settings,
        namespace_labels=namespace_labels,
        published=published,
        mcp_annotations=mcp_annotations,
    )
    return conclude(evaluation, permission)


def evaluate(
    *,
    namespace: str,
    spec: Mapping[str, Any],
    descriptor: Mapping[str, Any] | None,
    policies: Sequence[tuple[str, ToolPolicySpec | str]],
    settings: PreviewSettings | None = None,
    namespace_labels: Mapping[str, str] | None = None,
    published: Sequence[str] = (),
    mcp_annotations: Mapping[str, Any] | None = None,
) -> Evaluation:
    """Evaluate every stage but permission.

    `spec`: the ToolInvocation spec as written; `descriptor`: the ToolDescriptor object
    (spec and status) of the named tool version, None when it is not published, in which
    case `published` lists the versions that are; `policies`: the namespace's ToolPolicies
    as (`namespace/name`, spec), or (name, why it does not parse); `namespace_labels`: the
    namespace's labels (environment class, freeze); `mcp_annotations`: the discovered MCP
    tool's annotations (untrusted hints that may raise the class).
    """
    ev = Evaluation(namespace=namespace, settings=settings or PreviewSettings())
    try:
        call = ToolInvocationSpec.model_validate(spec)
    except ValidationError as exc:
        ev.validation.passed = False
        ev.refuse(
            Stage.VALIDATION,
            f"invalid invocation: {describe_errors(exc)}",
            FailureClass.VALIDATION,
        )
        return ev
    ev.call = call
    tool_id, version = call.tool.id, call.tool.version
    refused = unavailable(
        namespace=namespace, tool_id=tool_id, version=version, body=descriptor, published=published
    )
    if descriptor is None:
        ev.validation.published_versions = list(published)
    if refused is not None:
        ev.validation.passed = False
        ev.refuse(Stage.VALIDATION, *refused)
        return ev
    assert descriptor is not None
    tool = ToolDescriptorSpec.model_validate(descriptor.get("spec") or {})
    ev.descriptor = tool
    problems, errors, hashed = check_arguments(
        tool.input_schema,
        call.arguments,
        namespace=namespace,
        tool_id=tool_id,
        tool_version=version,
    )
    if problems:
        ev.validation.passed = False
        ev.refuse(
            Stage.VALIDATION, "arguments too large: " + "; ".join(problems), FailureClass.VALIDATION
        )
        return ev
    ev.validation.request_hash = hashed
    ev.validation.descriptor_digest = descriptor_digest(tool.wire())
    if errors:
        ev.validation.passed = False
        ev.validation.errors = [
            ArgumentError(path=e.path, message=bounded_message(e.message))
            for e in errors[:MAX_ERRORS]
        ]
        detail = "; ".join(f"{e.path}: {e.message}" for e in errors[:MAX_ERRORS])
        ev.refuse(
            Stage.VALIDATION,
            f"arguments do not match the input schema: {detail}",
            FailureClass.VALIDATION,
        )
    valid: list[tuple[str, ToolPolicySpec]] = []
    for name, policy in sorted(policies, key=lambda item: item[0]):
        if isinstance(policy, str):
            # Fail closed, as a call does: a policy nobody can read could deny this call.
            ev.refuse(
                Stage.POLICY,
                f"ToolPolicy {name} is invalid ({policy}): calls are denied until it is fixed",
                FailureClass.POLICY_DENIED,
            )
            return ev
        valid.append((name, policy))
    ev.decision = evaluate_policies(
        valid,
        namespace=namespace,
        tool_id=tool_id,
        tool_version=version,
        arguments=call.arguments,
        request_hash=hashed or "",
        default_approval_timeout_seconds=ev.settings.default_approval_timeout_seconds,
    )
    ev.shell = shell_check(tool, call, ev.decision)
    ev.classification = classify_call(
        tool,
        ev.decision,
        ev.shell,
        namespace_labels=namespace_labels or {},
        hinted=mcp_hint_class(mcp_annotations),
    )
    return ev


def shell_check(
    descriptor: ToolDescriptorSpec, call: ToolInvocationSpec, decision: PolicyDecision
) -> ShellVerdict | None:
    """The shell check of a shell tool's command: the descriptor's allow list (or the
    reference's default) narrowed by the policies', and every block list."""
    if descriptor.kind != ToolKind.SHELL:
        return None
    return check_command(
        str(call.arguments.get("command", "")),
        allow=allow_list_for(descriptor.shell.allow if descriptor.shell else None),
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


def conclude(ev: Evaluation, permission: bool | Permission | None) -> Preview:
    """The preview, given the caller's permission answers (None: not checked)."""
    if isinstance(permission, bool):
        permission = Permission(invoke=permission, use=permission)
    refusals = list(ev.refusals)
    call, tool, decision, classification = ev.call, ev.descriptor, ev.decision, ev.classification
    # Filled in as a real call would meet the stages; the verdict and message come last.
    preview = Preview(
        verdict=PreviewVerdict.WOULD_RUN,
        tool_kind=tool.kind if tool else None,
        validation=ev.validation,
        not_evaluated=list(NOT_EVALUATED),
    )
    if call is not None and tool is not None and decision is not None and classification:
        effective = classification.effective
        preview.permission = PreviewPermission(
            checked=permission is not None, asked=[str(q) for q in ev.questions]
        )
        if permission is not None:
            denied = refusal(
                caller=call.caller.name,
                groups=call.caller.groups,
                namespace=ev.namespace,
                tool_id=call.tool.id,
                effective=effective,
                may_invoke=permission.invoke,
                may_use=permission.use,
                raised=raised_note(classification.raised_by),
            )
            preview.permission.allowed = denied is None
            preview.permission.reason = denied or "RBAC allows both"
            if denied is not None:
                refusals.append(Refusal(Stage.PERMISSION, denied, FailureClass.PERMISSION_DENIED))
        else:
            preview.permission.reason = "not checked: the verdict assumes RBAC allows the call"
        # The order a call meets them in (`flow.authorization`).
        if not decision.allowed:
            refusals.append(
                Refusal(
                    Stage.POLICY,
                    "; ".join(decision.denials) or "denied by policy",
                    FailureClass.POLICY_DENIED,
                )
            )
        ceiling = check_ceiling(decision, effective)
        if ceiling:
            ceiling += raised_note(classification.raised_by)
            refusals.append(Refusal(Stage.POLICY, ceiling, FailureClass.POLICY_DENIED))
        if classification.refused:
            refusals.append(
                Refusal(
                    Stage.CLASSIFICATION,
                    classification.reason or (ev.shell.reason if ev.shell else "refused"),
                    FailureClass.POLICY_DENIED,
                )
            )
        preview.policy = _policy(decision)
        preview.classification = _classification(classification, ev.shell)
        preview.approval = _approval(call, decision, classification)
        preview.sandbox, preview.egress = _reach(tool, ev.settings)
    first = refusals[0] if refusals else None
    if first is not None:
        preview.verdict = PreviewVerdict.WOULD_BE_DENIED
        preview.denied_stage = first.stage
        preview.failure_class = first.failure
    elif preview.approval is not None and preview.approval.required:
        preview.verdict = PreviewVerdict.WOULD_AWAIT_APPROVAL
    preview.message = bounded_message(first.reason if first else _summary(preview))
    return preview


def _summary(preview: Preview) -> str:
    if preview.verdict is PreviewVerdict.WOULD_AWAIT_APPROVAL and preview.approval is not None:
        return f"would wait for an approval by {preview.approval.reviewers}"
    effective = preview.classification.effective if preview.classification else None
    return f"would run as {effective}" if effective else "would run"


def _policy(decision: PolicyDecision) -> PreviewPolicy:
    return PreviewPolicy(
        decision_id=decision.decision_id,
        allowed=decision.allowed,
        policies=list(decision.policies),
        reasons=[bounded_message(r) for r in decision.reasons],
        denials=[bounded_message(d) for d in decision.denials],
        max_class=decision.max_class,
        max_class_set_by=decision.max_class_set_by,
    )


def _classification(
    classification: Classification, shell: ShellVerdict | None
) -> PreviewClassification:
    return PreviewClassification(
        declared=classification.declared,
        effective=classification.effective,
        reason=bounded_message(classification.reason),
        raised_by=list(classification.raised_by),
        refused=classification.refused,
        approval_forced=classification.approval_forced,
        shell=bounded_message(shell.reason) if shell is not None else None,
    )


def _approval(
    call: ToolInvocationSpec, decision: PolicyDecision, classification: Classification
) -> PreviewApproval:
    effective = classification.effective
    required = needs_approval(
        effective=effective, decision=decision, forced=classification.approval_forced
    )
    reasons: list[str] = []
    if required:
        if classification.approval_forced:
            reasons.append(f"the shell command needs one ({classification.reason})")
        if effective in (
            SideEffectClass.SHARED_WRITE,
            SideEffectClass.EXTERNAL,
            SideEffectClass.PRODUCTION,
        ):
            reasons.append(f"class {effective} is gated")
        if effective is SideEffectClass.SPEND and decision.spend_requires_approval:
            reasons.append("spend above the policies' threshold (or no readable amount)")
        reasons.extend(decision.approval_reasons)
    groups = list(decision.reviewer_groups_for(effective))
    return PreviewApproval(
        required=required,
        reasons=[bounded_message(r) for r in reasons],
        reviewer_groups=groups,
        reviewers=reviewers_text(groups, call.caller.name),
        timeout_seconds=decision.approval_timeout_seconds if required else None,
    )


def reviewers_text(groups: Sequence[str], caller: str) -> str:
    """Who may approve, in words (also the AwaitingApproval event's)."""
    who = (
        "a member of " + ", ".join(groups)
        if groups
        else "anyone allowed to create ToolApprovals in the namespace"
    )
    return f"{who}, other than the caller {caller}"


def _reach(
    tool: ToolDescriptorSpec, settings: PreviewSettings
) -> tuple[PreviewSandbox | None, list[str]]:
    """The sandbox a call would run in and where it may connect."""
    sandbox = tool.sandbox_spec
    if sandbox is not None:
        allow = effective_allow(sandbox.egress.allow, settings.default_egress_allow)
        return (
            PreviewSandbox(
                kind=sandbox.kind,
                runtime_class=runtime_class_for(sandbox, dict(settings.runtime_classes)),
                image=sandbox.image or settings.sandbox_image,
                egress=list(allow),
            ),
            list(allow),
        )
    if tool.kind == ToolKind.HTTP and tool.http is not None:
        cidrs = list(tool.sandbox.egress.allow or []) if tool.sandbox else []
        return None, [*tool.http.allowed_hosts, *cidrs]
    if tool.kind == ToolKind.MCP and tool.mcp is not None:
        return None, [f"McpServer {tool.mcp.server}"]
    return None, []
