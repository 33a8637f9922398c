"""Why a call is refused, worded once: the flow, its re-check and the dry run say the same.

A refusal is plain data: the stage that refuses, the reason a person reads, and the
failure class. The flow raises the first it meets as a `Denial`; a dry run lists them
all. Only refusals said in more than one place are worded here.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from tooladapter.enums import FailureClass, SideEffectClass, Stage
from tooladapter.pipeline.classification import Classification
from tooladapter.pipeline.policy import PolicyDecision
from tooladapter.pipeline.shell.verdict import ShellVerdict
from tooladapter.pipeline.validation.arguments import SchemaProblem

#: Schema errors a refusal lists (a dry run shows as many).
MAX_ERRORS = 20


@dataclass(frozen=True)
class Refusal:
    """One stage's refusal of a call."""

    stage: Stage
    reason: str
    failure: FailureClass


# ------------------------------------------------------------------ validation


def invalid_invocation(errors: str) -> Refusal:
    """The spec does not parse (`errors`: `model.describe_errors`)."""
    return Refusal(Stage.VALIDATION, f"invalid invocation: {errors}", FailureClass.VALIDATION)


def arguments_too_large(problems: Sequence[str]) -> Refusal:
    return Refusal(
        Stage.VALIDATION, "arguments too large: " + "; ".join(problems), FailureClass.VALIDATION
    )


def arguments_mismatch(errors: Sequence[SchemaProblem]) -> Refusal:
    """The arguments fail the input schema: the first `MAX_ERRORS` problems, by path."""
    detail = "; ".join(f"{e.path}: {e.message}" for e in errors[:MAX_ERRORS])
    return Refusal(
        Stage.VALIDATION,
        f"arguments do not match the input schema: {detail}",
        FailureClass.VALIDATION,
    )


def admission_missing(why: str) -> Refusal:
    """Identity fails closed: an admission policy that vouches for spec.caller is missing or
    changed, or was when the call was created (`validation.shipped.AdmissionGuard`)."""
    return Refusal(Stage.VALIDATION, why, FailureClass.ADMISSION_MISSING)


# ------------------------------------------------------------------ authorization


def invalid_policy(name: str, error: str | None) -> Refusal:
    """Fail closed: a policy nobody can read could have denied the call."""
    return Refusal(
        Stage.POLICY,
        f"ToolPolicy {name} is invalid ({error}): calls are denied until it is fixed",
        FailureClass.POLICY_DENIED,
    )


def policy_denied(decision: PolicyDecision) -> Refusal:
    return Refusal(
        Stage.POLICY,
        "; ".join(decision.denials) or "denied by policy",
        FailureClass.POLICY_DENIED,
    )


def ceiling_exceeded(ceiling: str, raised: str) -> Refusal:
    """`ceiling`: `policy.check_ceiling`; `raised`: why the class rose to meet it."""
    return Refusal(Stage.POLICY, ceiling + raised, FailureClass.POLICY_DENIED)


def class_refused(classification: Classification, verdict: ShellVerdict | None) -> Refusal:
    return Refusal(
        Stage.CLASSIFICATION,
        classification.reason or (verdict.reason if verdict else "refused"),
        FailureClass.POLICY_DENIED,
    )


def class_rose(recorded: SideEffectClass, effective: SideEffectClass) -> Refusal:
    """The re-check's: the class rose above the one the call was authorized (and approved) at."""
    return Refusal(
        Stage.CLASSIFICATION,
        f"the call's class rose from {recorded} to {effective} while it "
        "waited (the namespace's environment changed): call again",
        FailureClass.POLICY_DENIED,
    )


def permission_denied(
    *,
    caller: str,
    groups: list[str],
    namespace: str,
    tool_id: str,
    effective: SideEffectClass,
    may_invoke: bool,
    may_use: bool,
    raised: str = "",
) -> Refusal | None:
    """The refusal of the first RBAC question answered no, else None; `raised`
    (`classification.raised_note`) says why the class is higher than the declared one."""
    hint = groups_hint(caller, groups)
    if not may_invoke:
        reason = (
            f"{caller} may not invoke tooldescriptors/{tool_id} in "
            f"{namespace} (RBAC verb invoke){hint}"
        )
    elif not may_use:
        reason = (
            f"{caller} may not use sideeffectclasses/{effective} in "
            f"{namespace} (RBAC verb use){raised}{hint}"
        )
    else:
        return None
    return Refusal(Stage.PERMISSION, reason, FailureClass.PERMISSION_DENIED)


def groups_hint(user: str, groups: list[str]) -> str:
    """A person without groups in spec.caller.groups is reviewed by name only: say so."""
    if groups or user.startswith("system:serviceaccount:"):
        return ""
    return (
        "; no spec.caller.groups were given, so grants to groups were not considered "
        "(list your groups there to use them)"
    )
