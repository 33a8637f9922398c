"""ToolPolicy: a tenant's rules for its namespace.

Tool lists, a class ceiling, shell, egress and spend rules, approval timeouts and reviewers,
and conditions on argument values; several policies combine, the strictest winning.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from tooladapter.enums import (
    BlockAction,
    SideEffectClass,
    UnlistedAction,
)
from tooladapter.model.base import FREE_FORM, Model, Resource
from tooladapter.model.dataflow import PolicyDataFlow


class ToolVersionRule(Model):
    """A tool (and version range) on a policy's allow or deny list."""

    id: str = Field(description="Tool id, or * for every tool.")
    versions: str = Field(default="", description="A version range, e.g. '>=1.0,<2'.")
    reason: str = ""
    """Quoted in denials."""


class ToolLists(Model):
    """Which tools may run in the namespace."""

    allow: list[ToolVersionRule] | None = Field(
        default=None, description="When set, only these tools may run in the namespace."
    )
    deny: list[ToolVersionRule] = Field(default_factory=list)
    """Tools denied in the namespace (deny wins over every allow)."""


class RateLimitPolicy(Model):
    """How descriptors' rateLimits are counted in the namespace."""

    per_caller: bool = Field(
        default=False,
        description="Count descriptors' rateLimits per caller as well as per namespace.",
    )


class ShellPolicy(Model):
    """Shell rules added to every shell tool's in the namespace."""

    allow: list[str] | None = Field(
        default=None,
        description="Narrows the tools' allow lists: when any policy sets one, a command must "
        "also match an entry of some policy's list to run without approval.",
    )
    block: list[str] = Field(
        default_factory=list, description="Blocked command patterns, added to every tool's."
    )
    block_action: BlockAction = Field(
        default=BlockAction.DENY,
        description="A block-listed command: deny, or escalate to production (approval).",
    )
    unlisted: UnlistedAction = Field(
        default=UnlistedAction.ESCALATE,
        description="A command on no allow list: escalate (raised to shared-write, it waits "
        "for an approval) or deny. Deny wins when policies differ.",
    )


class EgressPolicy(Model):
    """How a tenant narrows its sandboxes' egress."""

    allow: list[str] | None = Field(
        default=None,
        description="Narrows every sandbox's egress allow-list: an entry survives only when "
        "one of these covers it (a host, `*.suffix` or CIDR entry; a port must match).",
    )


class SpendPolicy(Model):
    """How spend-class calls are gated."""

    argument: str = Field(default="amount", description="Argument holding the amount.")
    threshold: float = Field(default=0, ge=0)
    """Spend calls above this amount wait for an approval."""
    prohibited: bool = False
    """Deny every spend call."""


class ApprovalPolicy(Model):
    """How long gated calls wait for an approval, and who may approve them."""

    timeout_seconds: int = Field(default=3600, ge=1, le=7 * 86_400)
    """How long a gated call waits for an approval before it is Denied (the shortest of the
    policies applies)."""
    reviewer_groups: list[str] = Field(default_factory=list)
    """Groups whose members may approve (empty: any reviewer)."""
    production_reviewer_groups: list[str] = Field(default_factory=list)
    """Groups whose members may approve production-class calls."""


class ArgumentCondition(Model):
    """A rule on one argument value: deny the call or require an approval."""

    tool: str = "*"
    """Tool ids the condition applies to (a glob; * for all)."""
    path: str = Field(description="JSON pointer into the arguments, e.g. /target/env.")
    operator: Literal["equals", "notEquals", "in", "matches", "greaterThan", "lessThan", "exists"]
    """equals, notEquals, in, matches (RE2), greaterThan, lessThan or exists."""
    value: Any = Field(default=None, json_schema_extra=FREE_FORM)
    """The value to compare with."""
    effect: Literal["deny", "requireApproval"] = "deny"
    """deny the call, or requireApproval."""
    reason: str = ""
    """Quoted in the decision."""


class ToolPolicySpec(Model):
    """Tenant policy for the namespace: tool lists, class ceiling, shell, spend, approvals,
    argument conditions. Several policies combine: deny wins, allow lists add up, the
    strictest ceiling and timeout apply."""

    tools: ToolLists = Field(default_factory=ToolLists)
    """Allow and deny lists of tools (with version ranges)."""
    max_class: SideEffectClass | None = None
    """The highest effective class allowed in the namespace."""
    shell: ShellPolicy = Field(default_factory=ShellPolicy)
    """Shell allow and block lists, and what to do with blocked or unlisted commands."""
    spend: SpendPolicy | None = None
    """How spend-class calls are gated."""
    approval: ApprovalPolicy | None = None
    """Approval timeout and reviewer groups."""
    rate_limits: RateLimitPolicy = Field(default_factory=RateLimitPolicy)
    """How descriptors' rateLimits are counted."""
    egress: EgressPolicy = Field(default_factory=EgressPolicy)
    """Narrows every sandbox's egress allow-list."""
    conditions: list[ArgumentCondition] = Field(default_factory=list)
    """Rules on argument values."""
    data_flow: PolicyDataFlow = Field(default_factory=PolicyDataFlow)
    """The data-flow rule: which calls' labels count (scope) and what a sink call gets once
    they hold both private and untrusted (approve, deny or allow)."""


class ToolPolicyStatus(Model):
    """Whether the policy is valid, and the rules it contributes."""

    valid: bool = False
    """Whether the policy is valid (an invalid one denies every call until fixed)."""
    rules: list[str] = Field(default_factory=list)
    """The rules it contributes."""
    message: str | None = None
    """What is wrong with it, when invalid."""
    observed_generation: int | None = None
    """The metadata.generation this status was computed for."""


class ToolPolicy(Resource):
    """Tenant policy for the namespace: tool lists, class ceiling, shell, spend, approvals."""

    kind: Literal["ToolPolicy"] = "ToolPolicy"
    spec: ToolPolicySpec
    status: ToolPolicyStatus | None = None
