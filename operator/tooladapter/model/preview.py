"""A dry run's result (`status.preview` of a ToolInvocation with `spec.dryRun`).

What a real call with the same spec would meet now, stage by stage: validation, policy,
classification, permission, approval and sandbox, each as the stage itself would see it.
"""

from __future__ import annotations

from pydantic import Field

from tooladapter.enums import (
    FailureClass,
    PreviewVerdict,
    SandboxKind,
    SideEffectClass,
    Stage,
    ToolKind,
)
from tooladapter.model.base import Model


class ArgumentError(Model):
    """One way the arguments fail the tool's input schema."""

    path: str
    """The JSON path of the failing value, e.g. $.files[1].name."""
    message: str
    """What is wrong with it."""


class PreviewValidation(Model):
    """Validation as a real call would meet it: the descriptor lookup, the bounds and the input
    schema."""

    passed: bool
    """Whether a real call would pass validation."""
    errors: list[ArgumentError] = Field(default_factory=list)
    """Every failing JSON path (the first 20)."""
    request_hash: str | None = None
    """The request hash a real call (and its approval) would carry."""
    descriptor_digest: str | None = None
    """The digest of the descriptor the call would be validated against."""
    published_versions: list[str] = Field(default_factory=list)
    """When the named version is not published: the versions of the tool that are."""


class PreviewPolicy(Model):
    """The tenant policies' decision for this call."""

    decision_id: str
    """The decision's id (the same id a real call with these arguments would record)."""
    allowed: bool
    """Whether the policies allow the call."""
    policies: list[str] = Field(default_factory=list)
    """The ToolPolicies evaluated (namespace/name)."""
    reasons: list[str] = Field(default_factory=list)
    """Every rule that applied, naming its policy."""
    denials: list[str] = Field(default_factory=list)
    """The rules that deny the call, naming their policies."""
    max_class: SideEffectClass | None = None
    """The class ceiling (the lowest maxClass of the policies)."""
    max_class_set_by: str | None = None
    """The policy that sets the ceiling."""


class PreviewClassification(Model):
    """The effective side-effect class and why."""

    declared: SideEffectClass
    """The descriptor's sideEffectClass."""
    effective: SideEffectClass
    """The class the call would run as."""
    reason: str
    """Why: what raised the class, or why it is refused."""
    raised_by: list[str] = Field(default_factory=list)
    """Every rule that raised the class, in order."""
    refused: bool = False
    """Whether classification refuses the call (frozen namespace, blocked shell command)."""
    approval_forced: bool = False
    """An escalated shell command needs an approval whatever its class."""
    shell: str | None = None
    """The shell check of a shell tool's command."""


class PreviewPermission(Model):
    """RBAC for the caller: verb invoke on the tool, verb use on the effective class."""

    checked: bool
    """Whether RBAC was asked (false: the verdict assumes it allows the call)."""
    allowed: bool | None = None
    """Whether RBAC allows both."""
    asked: list[str] = Field(default_factory=list)
    """The questions, e.g. invoke tooldescriptors/shell, use sideeffectclasses/sandbox."""
    reason: str = ""
    """The answer, naming the missing verb."""


class PreviewApproval(Model):
    """Whether the call would wait for a ToolApproval, and who may give it."""

    required: bool
    """Whether the call would wait in AwaitingApproval."""
    reasons: list[str] = Field(default_factory=list)
    """Why it needs one."""
    reviewer_groups: list[str] = Field(default_factory=list)
    """Groups whose members may approve (empty: any reviewer with RBAC to create ToolApprovals)."""
    reviewers: str = ""
    """Who may approve, in words (never the caller)."""
    timeout_seconds: int | None = None
    """How long the call would wait before it is Denied."""


class PreviewSandbox(Model):
    """The sandbox a shell or container tool would run in."""

    kind: SandboxKind
    """Container, GVisor or Kata."""
    runtime_class: str | None = None
    """The RuntimeClass the pod would run with (none: the node's default)."""
    image: str | None = None
    """The image the tool would run in."""
    egress: list[str] = Field(default_factory=list)
    """Where the sandbox could connect (default-deny otherwise)."""


class InvocationPreview(Model):
    """A dry run's result: what a real call with this spec would meet now, stage by stage,
    evaluated without executing anything."""

    verdict: PreviewVerdict
    """would-run, would-await-approval or would-be-denied."""
    denied_stage: Stage | None = None
    """The stage a real call would be denied at."""
    failure_class: FailureClass | None = None
    """The failure class a real call would end with."""
    message: str = ""
    """The message a real call would carry."""
    tool_kind: ToolKind | None = None
    """The tool's kind."""
    validation: PreviewValidation
    """Validation: descriptor lookup, bounds, input schema."""
    policy: PreviewPolicy | None = None
    """The tenant policy decision."""
    classification: PreviewClassification | None = None
    """The effective class and why."""
    permission: PreviewPermission | None = None
    """RBAC for the caller."""
    approval: PreviewApproval | None = None
    """Whether an approval is needed, from whom, for how long."""
    sandbox: PreviewSandbox | None = None
    """The sandbox a shell or container tool would run in."""
    egress: list[str] = Field(default_factory=list)
    """Where the call could connect: sandbox egress, an http tool's allowed hosts, an MCP server."""
    not_evaluated: list[Stage] = Field(default_factory=list)
    """Stages a dry run does not evaluate (they act on the world or count the call)."""
