"""What a person in the loop decides on, as plain data: pending approvals with the
difference since the caller's last approved call, and the objects a decision writes.

Shared by the command line (`tooladapter approvals/approve/reject/confirm`) and the
gateway's reviewers' page, so both show the same reasons and hashes and write the same
ToolApproval and effect confirmation, which the admission policies and the flow expect:

- A ToolApproval's `spec.reviewer` must be the creating user, each `reviewerGroups` entry
  one of its groups (manifests/admission/approval-reviewer); it binds only with the
  invocation's name, uid, `status.requestHash`, `status.descriptorDigest` and tool version
  (pipeline/approval.bind_approval), and never for the call's own caller.
- An effect confirmation is a status patch of `effectConfirmation` alone, with
  `confirmedBy` the patching user, on an Uncertain call (manifests/admission/
  invocation-status; handlers/confirmations records it on a new receipt).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from enum import StrEnum
from typing import Any, Final

from tooladapter import API_VERSION
from tooladapter.dicts import put_given
from tooladapter.enums import (
    ApprovalDecision,
    InvocationState,
    Stage,
    StageOutcome,
    WorkspaceMode,
)
from tooladapter.pipeline.hashing import request_hash
from tooladapter.pipeline.parts import name_of as _name
from tooladapter.pipeline.parts import spec_of as _spec
from tooladapter.pipeline.parts import status_of as _status
from tooladapter.review.argdiff import canonical, diff
from tooladapter.review.carried import carried_view, validated_descriptor
from tooladapter.review.shown import shown, visible
from tooladapter.review.workspace import workspace_notes

#: The CRD's bound on groups in spec.reviewerGroups (and spec.caller.groups).
MAX_GROUPS: Final = 64
MAX_GROUP_LENGTH: Final = 253
#: The CRD's bound on an effect confirmation's evidence.
MAX_EVIDENCE: Final = 4096


class Refusal(StrEnum):
    """Why a decision cannot be written (before asking the API server)."""

    NOT_WAITING = "not-waiting"
    NOT_HASHED = "not-hashed"
    CHANGED = "changed"
    OWN_CALL = "own-call"
    NOT_UNCERTAIN = "not-uncertain"
    #: A duplicate carries its first call's outcome: that call is the one confirmed.
    DUPLICATE = "duplicate"
    ALREADY_CONFIRMED = "already-confirmed"
    NO_EVIDENCE = "no-evidence"
    EVIDENCE_TOO_LONG = "evidence-too-long"


class Undecidable(ValueError):
    """The decision cannot bind or apply; `refusal` says why, the message in words."""

    def __init__(self, refusal: Refusal, message: str) -> None:
        super().__init__(message)
        self.refusal = refusal
        self.message = message


def pending_approvals(
    invocations: Sequence[dict[str, Any]],
    earlier: Sequence[dict[str, Any]] = (),
    descriptors: Mapping[str, Sequence[dict[str, Any]]] | None = None,
) -> list[dict[str, Any]]:
    """Invocations waiting in AwaitingApproval, oldest first, each with what a reviewer
    needs: canonical arguments, classes, reasons, the hashes an approval binds to, the
    credentials it will carry (`review.carried`), and the difference from the same
    caller's last approved call of the same tool.

    `earlier`: approved calls from the receipt index (`receipt_index.previous_call`), in
    the same shape, which count where retention deleted their invocations.
    `descriptors`: the ToolDescriptor bodies by namespace; a namespace left out (or
    None) could not be read, and its calls say so."""
    waiting = [
        i for i in invocations if _status(i).get("state") == InvocationState.AWAITING_APPROVAL
    ]
    waiting.sort(key=lambda i: str(_status(i).get("approvalRequestedAt") or ""))
    known = {(i.get("metadata") or {}).get("uid") for i in invocations}
    candidates = [
        *invocations,
        *(e for e in earlier if (e.get("metadata") or {}).get("uid") not in known),
    ]
    return [
        pending_view(
            i,
            last_approved(i, candidates),
            (descriptors or {}).get(str((i.get("metadata") or {}).get("namespace") or "")),
        )
        for i in waiting
    ]


def last_approved(
    invocation: dict[str, Any], invocations: Sequence[dict[str, Any]]
) -> dict[str, Any] | None:
    """The same caller's most recently approved call of the same tool (not this one)."""
    spec = _spec(invocation)
    caller = (spec.get("caller") or {}).get("name")
    tool = (spec.get("tool") or {}).get("id")
    uid = (invocation.get("metadata") or {}).get("uid")
    candidates = [
        other
        for other in invocations
        if (other.get("metadata") or {}).get("uid") != uid
        and (_spec(other).get("caller") or {}).get("name") == caller
        and (_spec(other).get("tool") or {}).get("id") == tool
        and _status(other).get("approval")
    ]
    if not candidates:
        return None
    return max(candidates, key=lambda o: str(_status(o)["approval"].get("boundAt") or ""))


def waiting_reasons(status: dict[str, Any]) -> list[str]:
    """Why this call waits, from its own record: what raised its class (the classification
    names the exact shell rule: not on the allow list, or block-listed and escalated) and
    the approval stage's grounds (`approval.approval_grounds`). The policy's other notes
    (an allow entry matched, no ToolPolicy in the namespace) are no reason to wait; they
    stay in `status.policyReasons`. Shown with markers: a reason may quote the command."""
    reasons = []
    for entry in status.get("stages") or []:
        stage, outcome = entry.get("stage"), entry.get("outcome")
        detail = str(entry.get("detail") or "")
        if stage == Stage.CLASSIFICATION and outcome == StageOutcome.PASSED and detail:
            # The detail is "raised by <rule> raised <class> to <class>, ...".
            reasons.append("its class was raised: " + detail.removeprefix("raised by "))
        elif stage == Stage.APPROVAL and outcome == StageOutcome.WAITING and detail:
            reasons.append(detail)
    return [visible(r) for r in reasons]


def _workspace_notes(
    invocation: dict[str, Any], descriptors: Sequence[dict[str, Any]] | None
) -> list[str]:
    """`review.workspace` notes, unless the call's descriptor is known and keeps no
    attempt workspace (a descriptor that is not known may: the note then stays)."""
    spec = _spec(invocation)
    if descriptors is not None:
        _found, descriptor = validated_descriptor(invocation, descriptors)
        if descriptor is not None:
            sandbox = descriptor.sandbox_spec
            if sandbox is None or sandbox.workspace != WorkspaceMode.ATTEMPT:
                return []
    return workspace_notes(spec.get("arguments") or {}, spec.get("attemptId"))


def pending_view(
    invocation: dict[str, Any],
    previous: dict[str, Any] | None,
    descriptors: Sequence[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """What a reviewer reads of one waiting call; `descriptors`: its namespace's
    ToolDescriptor bodies (None: not read), for the credentials it will carry."""
    spec, status = _spec(invocation), _status(invocation)
    tool = spec.get("tool") or {}
    arguments = spec.get("arguments") or {}
    # Every review view shows all the arguments (pipeline/shown): markers for what does
    # not print, warnings for them, flags (never masks) for credential-like tokens.
    display = shown(arguments)
    view: dict[str, Any] = {
        "name": _name(invocation),
        "tool": tool.get("id"),
        "version": tool.get("version"),
        "caller": (spec.get("caller") or {}).get("name"),
        "runId": spec.get("runId"),
        "declaredClass": status.get("declaredClass"),
        "effectiveClass": status.get("effectiveClass"),
        "reasons": waiting_reasons(status),
        "requestHash": status.get("requestHash"),
        "descriptorDigest": status.get("descriptorDigest"),
        "waitingSince": status.get("approvalRequestedAt"),
        "arguments": arguments,
        "canonicalArguments": canonical(arguments),
        "shownArguments": display.canonical,
        "warnings": [*display.warnings, *_workspace_notes(invocation, descriptors)],
        "flags": [f.wire() for f in display.flags],
        # The descriptor's, never the agent's: labelled so (`declaredBy`), apart from the
        # arguments.
        "carries": carried_view(invocation, descriptors),
        "lastApproved": None,
        "changes": None,
        "dataFlow": data_flow_view(status),
    }
    if previous is not None:
        before = _spec(previous).get("arguments") or {}
        approval = _status(previous).get("approval") or {}
        view["lastApproved"] = {
            "name": _name(previous),
            "uid": (previous.get("metadata") or {}).get("uid"),
            "approvedBy": approval.get("reviewer"),
            "approvedAt": approval.get("boundAt"),
            "canonicalArguments": canonical(before),
        }
        view["changes"] = [c.wire() for c in diff(before, arguments)]
    return view


def data_flow_view(status: dict[str, Any]) -> dict[str, Any] | None:
    """For a call the data-flow rule gated: the calls that brought each label into its
    scopes (`status.dataFlow.sources`), label by label, oldest first; None otherwise."""
    record = status.get("dataFlow") or {}
    if not record.get("gated"):
        return None
    by_label: dict[str, list[dict[str, str]]] = {}
    for source in record.get("sources") or []:
        by_label.setdefault(str(source.get("label") or ""), []).append(
            {
                "invocation": str(source.get("invocation") or ""),
                "tool": str(source.get("tool") or ""),
                "at": str(source.get("at") or ""),
            }
        )
    for calls in by_label.values():
        calls.sort(key=lambda c: (c["at"], c["invocation"]))
    return {"gated": visible(str(record["gated"])), "sources": dict(sorted(by_label.items()))}


def _require_state(
    name: object, status: dict[str, Any], wanted: InvocationState, refusal: Refusal, why: str
) -> None:
    """`Undecidable` (`refusal`, saying `why`) unless the call is in the state `wanted`."""
    state = status.get("state")
    if state != wanted:
        raise Undecidable(refusal, f"toolinvocation {name} is {state or 'not evaluated yet'}{why}")


def approval_body(
    invocation: dict[str, Any],
    *,
    decision: ApprovalDecision,
    reviewer: str,
    reviewer_groups: Sequence[str],
    comment: str,
    expires_at: str | None,
) -> dict[str, Any]:
    """A ToolApproval of `invocation` as it waits; `Undecidable` when it cannot bind."""
    meta = invocation.get("metadata") or {}
    spec = _spec(invocation)
    status = _status(invocation)
    name = str(meta.get("name"))
    _require_state(
        name,
        status,
        InvocationState.AWAITING_APPROVAL,
        Refusal.NOT_WAITING,
        ", not AwaitingApproval: there is nothing to decide",
    )
    if not status.get("requestHash") or not status.get("descriptorDigest"):
        raise Undecidable(
            Refusal.NOT_HASHED,
            f"toolinvocation {name} shows no request hash or descriptor digest yet",
        )
    tool = spec.get("tool") or {}
    try:
        shown = request_hash(
            namespace=str(meta.get("namespace")),
            tool_id=str(tool.get("id")),
            tool_version=str(tool.get("version")),
            arguments=spec.get("arguments") or {},
        )
    except ValueError:  # not canonicalisable (an integer beyond 2**53): not what was hashed
        shown = "(arguments that cannot be hashed)"
    if shown != status["requestHash"]:
        # What a reviewer reads is the stored spec; the approval binds the hash the operator
        # validated. Admission keeps the two the same; if it did not, approving would
        # approve a request nobody was shown.
        raise Undecidable(
            Refusal.CHANGED,
            f"toolinvocation {name}'s arguments as stored hash to {shown}, not to the request "
            f"that was validated ({status['requestHash']}): it cannot be approved",
        )
    if (spec.get("caller") or {}).get("name") == reviewer:
        raise Undecidable(
            Refusal.OWN_CALL,
            f"you ({reviewer}) are the caller of {name}: someone else must review it",
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
    put_given(approval_spec, reviewerGroups=groups, comment=comment, expiresAt=expires_at)
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
    """The status patch recording an Uncertain effect; `Undecidable` when it cannot apply."""
    name = (invocation.get("metadata") or {}).get("name")
    status = _status(invocation)
    _require_state(
        name,
        status,
        InvocationState.UNCERTAIN,
        Refusal.NOT_UNCERTAIN,
        ": only an Uncertain effect is confirmed",
    )
    first = status.get("duplicateOf")
    if first:
        raise Undecidable(
            Refusal.DUPLICATE,
            f"toolinvocation {name} ran nothing: it is a duplicate of {first}; confirm "
            f"{first} (its confirmation is copied onto its duplicates)",
        )
    if (status.get("effectConfirmation") or {}).get("recorded"):
        raise Undecidable(
            Refusal.ALREADY_CONFIRMED,
            f"toolinvocation {name}'s effect was already confirmed and recorded",
        )
    text = evidence.strip()
    if not text:
        raise Undecidable(Refusal.NO_EVIDENCE, "the evidence must say what you checked")
    if len(text) > MAX_EVIDENCE:
        raise Undecidable(
            Refusal.EVIDENCE_TOO_LONG, f"the evidence is longer than {MAX_EVIDENCE} characters"
        )
    return {
        "effectConfirmation": {
            "effectHappened": happened,
            "confirmedBy": confirmed_by,
            "evidence": text,
        }
    }
