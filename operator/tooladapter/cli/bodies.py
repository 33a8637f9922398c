"""The objects the command line writes, as the admission policies and the flow expect them.

A ToolInvocation's `spec.caller.name` must be the creating user and each of
`spec.caller.groups` one of the creator's groups (manifests/admission/invocation-caller).
The ToolApproval and the effect confirmation are built by `review.texts`, which the
reviewers' page shares (what admission requires of them is said there); here their
refusals become the command line's exit codes.
"""

from __future__ import annotations

from typing import Any

from tooladapter import API_VERSION
from tooladapter.cli.exitcodes import CliError, ExitCode
from tooladapter.dicts import put_given
from tooladapter.enums import ApprovalDecision
from tooladapter.review import texts as review
from tooladapter.review.texts import MAX_GROUP_LENGTH, MAX_GROUPS, Refusal, Undecidable

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
    attempt_id: str | None = None,
    idempotency_key: str | None = None,
    dry_run: bool = False,
    release_workspace: bool = False,
) -> dict[str, Any]:
    caller: dict[str, Any] = {"kind": caller_kind(username), "name": username}
    if groups:
        caller["groups"] = groups
    spec: dict[str, Any] = {
        "tool": {"id": tool_id, "version": version},
        "arguments": arguments,
        "caller": caller,
    }
    put_given(
        spec,
        runId=run_id,
        attemptId=attempt_id,
        idempotencyKey=idempotency_key,
        dryRun=dry_run,
        releaseWorkspace=release_workspace,
    )
    metadata = {"name": name} if name else {"generateName": generate_name}
    return {"apiVersion": API_VERSION, "kind": "ToolInvocation", "metadata": metadata, "spec": spec}


_EXIT_CODES = {
    Refusal.OWN_CALL: ExitCode.FORBIDDEN,
    Refusal.NO_EVIDENCE: ExitCode.USAGE,
    Refusal.EVIDENCE_TOO_LONG: ExitCode.USAGE,
}


def _cli_error(exc: Undecidable) -> CliError:
    return CliError(exc.message, _EXIT_CODES.get(exc.refusal, ExitCode.ERROR))


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
    try:
        return review.approval_body(
            invocation,
            decision=decision,
            reviewer=reviewer,
            reviewer_groups=reviewer_groups,
            comment=comment,
            expires_at=expires_at,
        )
    except Undecidable as exc:
        raise _cli_error(exc) from None


def confirmation_patch(
    invocation: dict[str, Any], *, happened: bool, confirmed_by: str, evidence: str
) -> dict[str, Any]:
    """The status patch recording an Uncertain effect; CliError when it cannot apply."""
    try:
        return review.confirmation_patch(
            invocation, happened=happened, confirmed_by=confirmed_by, evidence=evidence
        )
    except Undecidable as exc:
        raise _cli_error(exc) from None
