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
from tooladapter.enums import PreviewVerdict, SideEffectClass, Stage, ToolKind
from tooladapter.model import (
    ToolDescriptorSpec,
    ToolInvocationSpec,
    ToolPolicySpec,
    describe_errors,
)
from tooladapter.model import preview as dry_run
from tooladapter.pipeline import refusals
from tooladapter.pipeline.approval import needs_approval
from tooladapter.pipeline.authorization import authorize, classify_call, shell_check
from tooladapter.pipeline.availability import unavailable
from tooladapter.pipeline.classification import Classification, mcp_hint_class
from tooladapter.pipeline.hashing import descriptor_digest
from tooladapter.pipeline.permission import Permission, Question, questions
from tooladapter.pipeline.policy import (
    DEFAULT_APPROVAL_TIMEOUT_SECONDS,
    PolicyDecision,
    evaluate_policies,
)
from tooladapter.pipeline.refusals import MAX_ERRORS, Refusal
from tooladapter.pipeline.sanitize.redaction import bounded_message
from tooladapter.pipeline.shell.allow import DEFAULT_ALLOW_LIST
from tooladapter.pipeline.shell.block import DEFAULT_BLOCK_LIST
from tooladapter.pipeline.shell.verdict import ShellVerdict
from tooladapter.pipeline.validation.arguments import check_arguments
from tooladapter.sandbox.job import runtime_class_for

#: The typed result of a dry run (also `status.preview` of a Previewed invocation).
Preview = dry_run.InvocationPreview

#: Stages a dry run never evaluates: each would act on the world or count the call.
NOT_EVALUATED = (Stage.IDEMPOTENCY, Stage.FENCING, Stage.RATE_LIMIT, Stage.CREDENTIALS)


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
    #: Seconds a caller's data-flow labels count (TOOLADAPTER_DATAFLOW_WINDOW_SECONDS).
    dataflow_window_seconds: int = 3600
    #: The operator's default shell lists (TOOLADAPTER_SHELL_ALLOW_LIST, _BLOCK_LIST).
    default_shell_allow: tuple[str, ...] = DEFAULT_ALLOW_LIST
    default_shell_block: tuple[str, ...] = DEFAULT_BLOCK_LIST


@dataclass
class Evaluation:
    """Every stage of a preview but permission, which needs the caller's answers."""

    namespace: str
    settings: PreviewSettings
    validation: dry_run.PreviewValidation = field(
        default_factory=lambda: dry_run.PreviewValidation(passed=True)
    )
    #: Refusals met before permission is asked (validation, an unreadable policy).
    refusals: list[Refusal] = field(default_factory=list)
    call: ToolInvocationSpec | None = None
    descriptor: ToolDescriptorSpec | None = None
    decision: PolicyDecision | None = None
    shell: ShellVerdict | None = None
    classification: Classification | None = None

    def refuse(self, refusal: Refusal) -> None:
        self.refusals.append(refusal)

    @property
    def questions(self) -> tuple[Question, ...]:
        """What to ask the API server for this caller (none when nothing got that far)."""
        if self.call is None or self.classification is None:
            return ()
        return questions(self.call.tool.id, self.classification.effective)


def preview(*, permission: bool | Permission | None, **inputs: Any) -> Preview:
    """The preview of one call; `inputs` are `evaluate`'s, passed on. `permission`: the
    caller's answers (a bool answers both questions; None: not checked, the verdict
    ignores it)."""
    return conclude(evaluate(**inputs), permission)


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
        ev.refuse(refusals.invalid_invocation(describe_errors(exc)))
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
        ev.refuse(Refusal(Stage.VALIDATION, *refused))
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
        ev.refuse(refusals.arguments_too_large(problems))
        return ev
    ev.validation.request_hash = hashed
    ev.validation.descriptor_digest = descriptor_digest(tool.wire())
    if errors:
        ev.validation.passed = False
        ev.validation.errors = [
            dry_run.ArgumentError(path=e.path, message=bounded_message(e.message))
            for e in errors[:MAX_ERRORS]
        ]
        ev.refuse(refusals.arguments_mismatch(errors))
    valid: list[tuple[str, ToolPolicySpec]] = []
    for name, policy in sorted(policies, key=lambda item: item[0]):
        if isinstance(policy, str):
            # Fail closed, as a call does: a policy nobody can read could deny this call.
            ev.refuse(refusals.invalid_policy(name, policy))
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
        default_shell_allow=ev.settings.default_shell_allow,
        default_shell_block=ev.settings.default_shell_block,
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


def conclude(ev: Evaluation, permission: bool | Permission | None) -> Preview:
    """The preview, given the caller's permission answers (None: not checked)."""
    if isinstance(permission, bool):
        permission = Permission(invoke=permission, use=permission)
    found = list(ev.refusals)
    call, tool, decision, classification = ev.call, ev.descriptor, ev.decision, ev.classification
    # Filled in as a real call would meet the stages; the verdict and message come last.
    preview = Preview(
        verdict=PreviewVerdict.WOULD_RUN,
        tool_kind=tool.kind if tool else None,
        validation=ev.validation,
        not_evaluated=list(NOT_EVALUATED),
    )
    if call is not None and tool is not None and decision is not None and classification:
        preview.permission = dry_run.PreviewPermission(
            checked=permission is not None, asked=[str(q) for q in ev.questions]
        )
        authorized = authorize(
            namespace=ev.namespace,
            call=call,
            decision=decision,
            classification=classification,
            verdict=ev.shell,
            permission=permission,
        )
        if permission is not None:
            denied = next((r for r in authorized if r.stage is Stage.PERMISSION), None)
            preview.permission.allowed = denied is None
            preview.permission.reason = denied.reason if denied else "RBAC allows both"
        else:
            preview.permission.reason = "not checked: the verdict assumes RBAC allows the call"
        found.extend(authorized)
        preview.policy = _policy(decision)
        preview.classification = _classification(classification, ev.shell)
        preview.approval = _approval(call, decision, classification)
        preview.sandbox, preview.egress = _reach(tool, ev.settings)
    first = found[0] if found else None
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


def _policy(decision: PolicyDecision) -> dry_run.PreviewPolicy:
    return dry_run.PreviewPolicy(
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
) -> dry_run.PreviewClassification:
    return dry_run.PreviewClassification(
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
) -> dry_run.PreviewApproval:
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
    return dry_run.PreviewApproval(
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
) -> tuple[dry_run.PreviewSandbox | None, list[str]]:
    """The sandbox a call would run in and where it may connect."""
    sandbox = tool.sandbox_spec
    if sandbox is not None:
        allow = effective_allow(sandbox.egress.allow, settings.default_egress_allow)
        return (
            dry_run.PreviewSandbox(
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
