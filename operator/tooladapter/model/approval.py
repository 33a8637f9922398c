"""ToolApproval: a reviewer's decision on one gated invocation's exact request.

It binds to the request hash and the descriptor digest the reviewer saw, once, and its spec
is immutable: a changed mind is a new approval.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import ConfigDict, Field

from tooladapter.enums import (
    ApprovalDecision,
)
from tooladapter.model.base import Model, Resource
from tooladapter.model.common import (
    SHA256_REF_MAX,
    SHA256_REF_PATTERN,
    VERSION_MAX,
    VERSION_PATTERN,
)


class ToolApprovalSpec(Model):
    """A reviewer's decision on one invocation's exact request; immutable once created."""

    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                {
                    "rule": "self == oldSelf",
                    "message": "a ToolApproval's spec is immutable: create a new ToolApproval",
                }
            ]
        }
    )

    invocation: str = Field(min_length=1, max_length=253)
    """The ToolInvocation's name."""
    invocation_uid: str | None = Field(
        default=None,
        max_length=64,
        description="The invocation's metadata.uid; when set, the approval binds only to it "
        "(a deleted and recreated invocation of the same name has another uid).",
    )
    request_hash: str = Field(pattern=SHA256_REF_PATTERN, max_length=SHA256_REF_MAX)
    """The invocation's status.requestHash."""
    descriptor_digest: str = Field(
        pattern=SHA256_REF_PATTERN,
        max_length=SHA256_REF_MAX,
        description="The invocation's status.descriptorDigest: the approval binds only while "
        "the tool's descriptor is exactly the one the reviewer saw.",
    )
    tool_version: str = Field(pattern=VERSION_PATTERN, max_length=VERSION_MAX)
    """The invocation's tool version."""
    decision: ApprovalDecision
    """Approved or Rejected."""
    reviewer: str = Field(min_length=1, max_length=253)
    """The reviewer: must be the creating user and not the caller."""
    reviewer_groups: list[Annotated[str, Field(min_length=1, max_length=253)]] = Field(
        default_factory=list,
        max_length=64,
        description="Groups the reviewer claims; admission checks the creator is in each.",
    )
    comment: str = Field(default="", max_length=4096)
    """The reviewer's comment (quoted in a rejection)."""
    expires_at: str | None = Field(
        default=None,
        max_length=64,
        description="RFC 3339 time.",
        json_schema_extra={"format": "date-time"},
    )


class ToolApprovalStatus(Model):
    """Whether the approval bound to its invocation, and why not."""

    bound: bool = False
    """Whether it bound to its invocation."""
    bound_to: str | None = None
    """The invocation it bound to."""
    bound_uid: str | None = None
    """The uid of the invocation it bound to: approvals are single-use per invocation object."""
    bound_at: str | None = None
    """When it bound (RFC 3339)."""
    reason: str | None = None
    """Why it bound, or why not (e.g. descriptor-changed, already-used)."""


class ToolApproval(Resource):
    """A reviewer's decision on a gated invocation, bound to its exact request hash."""

    kind: Literal["ToolApproval"] = "ToolApproval"
    spec: ToolApprovalSpec
    status: ToolApprovalStatus | None = None
