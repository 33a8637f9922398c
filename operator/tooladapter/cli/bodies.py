"""The objects the command line writes, as the admission policies and the flow expect them.

- A ToolInvocation's `spec.caller.name` must be the creating user and each of
  `spec.caller.groups` one of the creator's groups (manifests/admission/invocation-caller).
- A ToolApproval's `spec.reviewer` must be the creating user, each `reviewerGroups` entry
  one of its groups (manifests/admission/approval-reviewer); it binds only with the
  invocation's name, uid, `status.requestHash`, `status.descriptorDigest` and tool version
  (pipeline/approval.bind_approval), and never for the call's own caller.
- An effect confirmation is a status patch of `effectConfirmation` alone, with
  `confirmedBy` the patching user, on an Uncertain call (manifests/admission/
  invocation-status; handlers/confirmations records it on a new receipt).
"""

from __future__ import annotations

from typing import Any

from .. import API_VERSION
from ..enums import ApprovalDecision, InvocationState
from .exitcodes import CliError, ExitCode

#: The CRD's bound on groups in spec.caller.groups and spec.reviewerGroups.
MAX_GROUPS = 64
MAX_GROUP_LENGTH = 253
_SA_PREFIX = "system:serviceaccount:"


def caller_kind(username: str) -> str:
    """`agent` for a ServiceAccount, `user` for a person."""
    return "agent" if username.startswith(_SA_PREFIX) else "user"


def claimable_groups(groups: tuple[str, ...] | list[str]) -> list[str]:
    """The user's groups worth claiming on a call: those grants may name (an OIDC group,
    say). `system:` groups are left out: a ServiceAccount's own groups count anyway."""
    kept = [g for g in groups if g and not g.startswith("system:") and len(g) <= MAX_GROUP_LENGTH]
    return kept[:MAX_GROUPS]


def invocation_body(
    *,
    tool_id: str,
    version: str,
    arguments: dict[str, Any],
    username: str,
    groups: list[str],
    generate_name: str,
    name: str | None = None,
    run_id: str | None = None,
    idempotency_key: str | None = None,
    dry_run: bool = False,
) -> dict[str, Any]:
    caller: dict[str, Any] = {"kind": caller_kind(username), "name": username}
    if groups:
        caller["groups"] = groups
    spec: dict[str, Any] = {
        "tool": {"id": tool_id, "version": version},
        "arguments": arguments,
        "caller": caller,
    }
    if run_id:
        spec["runId"] = run_id
    if idempotency_key:
        spec["idempotencyKey"] = idempotency_key
    if dry_run:
        spec["dryRun"] = True
    metadata = {"name": name} if name else {"generateName": generate_name}
    return {"apiVersion": API_VERSION, "kind": "ToolInvocation", "metadata": metadata, "spec": spec}


def approval_body(
    invocation: dict[str, Any],
    *,
    decision: ApprovalDecision,
    reviewer: str,
    reviewer_groups: list[str],
    comment: str,
    expires_at: str | None,
) -> dict[str, Any]:
    """A ToolApproval of `invocation` as it waits; CliError when it cannot bind anyway."""
    meta = invocation.get("metadata") or {}
    spec = invocation.get("spec") or {}
    status = invocation.get("status") or {}
    name = str(meta.get("name"))
    state = status.get("state")
    if state != InvocationState.AWAITING_APPROVAL:
        raise CliError(
            f"toolinvocation {name} is {state or 'not evaluated yet'}, not AwaitingApproval: "
            "there is nothing to decide",
            ExitCode.ERROR,
        )
    if not status.get("requestHash") or not status.get("descriptorDigest"):
        raise CliError(f"toolinvocation {name} shows no request hash or descriptor digest yet")
    caller = (spec.get("caller") or {}).get("name")
    if caller == reviewer:
        raise CliError(
            f"you ({reviewer}) are the caller of {name}: someone else must review it",
            ExitCode.FORBIDDEN,
        )
    approval_spec: dict[str, Any] = {
        "invocation": name,
        "invocationUid": meta.get("uid"),
        "requestHash": status["requestHash"],
        "descriptorDigest": status["descriptorDigest"],
        "toolVersion": (spec.get("tool") or {}).get("version"),
        "decision": decision.value,
        "reviewer": reviewer,
    }
    groups = [g for g in reviewer_groups if g and len(g) <= MAX_GROUP_LENGTH][:MAX_GROUPS]
    if groups:
        approval_spec["reviewerGroups"] = groups
    if comment:
        approval_spec["comment"] = comment
    if expires_at:
        approval_spec["expiresAt"] = expires_at
    prefix = f"{name[:200]}-{'approve' if decision is ApprovalDecision.APPROVED else 'reject'}-"
    return {
        "apiVersion": API_VERSION,
        "kind": "ToolApproval",
        "metadata": {"generateName": prefix},
        "spec": approval_spec,
    }


def confirmation_patch(
    invocation: dict[str, Any], *, happened: bool, confirmed_by: str, evidence: str
) -> dict[str, Any]:
    """The status patch recording an Uncertain effect; CliError when it cannot apply."""
    name = (invocation.get("metadata") or {}).get("name")
    status = invocation.get("status") or {}
    state = status.get("state")
    if state != InvocationState.UNCERTAIN:
        raise CliError(
            f"toolinvocation {name} is {state or 'not evaluated yet'}: only an Uncertain "
            "effect is confirmed",
            ExitCode.ERROR,
        )
    if (status.get("effectConfirmation") or {}).get("recorded"):
        raise CliError(f"toolinvocation {name}'s effect was already confirmed and recorded")
    text = evidence.strip()
    if not text:
        raise CliError("--evidence must say what you checked", ExitCode.USAGE)
    if len(text) > 4096:
        raise CliError("--evidence is longer than 4096 characters", ExitCode.USAGE)
    return {
        "effectConfirmation": {
            "effectHappened": happened,
            "confirmedBy": confirmed_by,
            "evidence": text,
        }
    }
