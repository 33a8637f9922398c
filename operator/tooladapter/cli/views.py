"""What each command shows, built from the objects as the API returns them (plain dicts).

Pure: the commands fetch, these decide what is worth showing, and `render` prints it.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from typing import Any

from packaging.version import InvalidVersion, Version
from pydantic import ValidationError

from tooladapter.enums import GATED_CLASSES, SideEffectClass, ToolKind
from tooladapter.model import EgressRefusal
from tooladapter.pipeline.parts import name_of as _name
from tooladapter.pipeline.parts import spec_of as _spec
from tooladapter.pipeline.parts import status_of as _status
from tooladapter.pipeline.sanitize.egress import refusal_line
from tooladapter.review import readout
from tooladapter.review.argdiff import canonical


def canonical_pretty(value: Any) -> str:
    """A schema for people: indented, keys sorted."""
    return json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False)


def version_key(text: str) -> tuple[int, Version | str]:
    try:
        return (1, Version(text))
    except InvalidVersion:
        return (0, text)


# --------------------------------------------------------------------------- tools


def callable_descriptors(descriptors: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """Active, not retired descriptors, by tool id and version."""
    active = [
        d for d in descriptors if _status(d).get("active") and not _spec(d).get("retired", False)
    ]
    return sorted(
        active,
        key=lambda d: (str(_spec(d).get("toolId")), version_key(str(_spec(d).get("version")))),
    )


def latest_version(descriptors: Iterable[dict[str, Any]], tool_id: str) -> str | None:
    """The highest active version of `tool_id`, what `invoke` calls when given none."""
    versions = [
        str(_spec(d).get("version"))
        for d in callable_descriptors(descriptors)
        if _spec(d).get("toolId") == tool_id
    ]
    return max(versions, key=version_key) if versions else None


def tool_row(
    descriptor: dict[str, Any], *, may_invoke: bool, class_granted: bool
) -> dict[str, Any]:
    spec, status = _spec(descriptor), _status(descriptor)
    return {
        "toolId": spec.get("toolId"),
        "version": spec.get("version"),
        "kind": spec.get("kind"),
        "sideEffectClass": spec.get("sideEffectClass"),
        "healthy": bool(status.get("healthy")),
        "mayInvoke": may_invoke,
        "classGranted": class_granted,
        "description": spec.get("description") or "",
    }


def approval_rules(descriptor: dict[str, Any], policies: Sequence[dict[str, Any]]) -> list[str]:
    """When a call of this tool waits for an approval, and who may give it, in words."""
    spec = _spec(descriptor)
    tool_id = str(spec.get("toolId"))
    rules: list[str] = []
    try:
        declared: SideEffectClass | None = SideEffectClass(str(spec.get("sideEffectClass")))
    except ValueError:
        declared = None
    if declared in GATED_CLASSES:
        rules.append(f"every call waits for an approval (class {declared})")
    elif declared is SideEffectClass.SPEND:
        rules.append("calls above the namespace's spend threshold wait for an approval")
    else:
        rules.append(
            f"class {declared} needs no approval, unless the namespace raises it "
            "(a production namespace raises writes to production)"
        )
    if spec.get("kind") == ToolKind.SHELL:
        allow = (spec.get("shell") or {}).get("allow")
        listed = ", ".join(allow) if allow is not None else "the default list"
        rules.append(
            f"a command on no allow list ({listed or 'none'}) is raised to shared-write and "
            "waits for an approval (or is denied by policy)"
        )
    for policy in policies:
        pname = _name(policy)
        pspec = _spec(policy)
        for cond in pspec.get("conditions") or []:
            if cond.get("effect") == "requireApproval" and cond.get("tool", "*") in ("*", tool_id):
                value = (
                    "" if cond.get("operator") == "exists" else f" {canonical(cond.get('value'))}"
                )
                reason = f" ({cond['reason']})" if cond.get("reason") else ""
                rules.append(
                    f"policy {pname}: arguments {cond.get('path')} {cond.get('operator')}{value} "
                    f"need an approval{reason}"
                )
        approval = pspec.get("approval") or {}
        if approval.get("reviewerGroups"):
            rules.append(f"policy {pname}: reviewers from {', '.join(approval['reviewerGroups'])}")
        if approval.get("productionReviewerGroups"):
            rules.append(
                f"policy {pname}: production calls reviewed by "
                f"{', '.join(approval['productionReviewerGroups'])}"
            )
        if approval.get("timeoutSeconds"):
            rules.append(
                f"policy {pname}: an approval must come within {approval['timeoutSeconds']}s"
            )
    rules.append("the reviewer must be someone other than the caller")
    return rules


def describe_version(
    descriptor: dict[str, Any], policies: Sequence[dict[str, Any]]
) -> dict[str, Any]:
    spec, status = _spec(descriptor), _status(descriptor)
    return {
        "version": spec.get("version"),
        "kind": spec.get("kind"),
        "sideEffectClass": spec.get("sideEffectClass"),
        "riskClass": spec.get("riskClass"),
        "active": bool(status.get("active")),
        "healthy": bool(status.get("healthy")),
        "retired": bool(spec.get("retired", False)),
        "message": status.get("message"),
        "description": spec.get("description") or "",
        # Unset in the spec: the operator's default, which the status shows.
        "timeoutSeconds": spec.get("timeoutSeconds") or status.get("effectiveTimeoutSeconds"),
        "inputSchema": spec.get("inputSchema") or {"type": "object"},
        "outputSchema": spec.get("outputSchema"),
        "approvalRules": approval_rules(descriptor, policies),
    }


# --------------------------------------------------------------------------- invocations


def outcome(obj: dict[str, Any]) -> dict[str, Any]:
    """What a script needs from a finished (or followed) call."""
    spec, status = _spec(obj), _status(obj)
    meta = obj.get("metadata") or {}
    tool = spec.get("tool") or {}
    out = {
        "name": meta.get("name"),
        "namespace": meta.get("namespace"),
        "tool": tool.get("id"),
        "version": tool.get("version"),
        "runId": spec.get("runId"),
        "attemptId": spec.get("attemptId"),
        "idempotencyKey": spec.get("idempotencyKey"),
        "state": status.get("state"),
        "effectiveClass": status.get("effectiveClass"),
        "failureClass": status.get("failureClass"),
        "deniedStage": status.get("deniedStage"),
        "message": status.get("message"),
        "requestHash": status.get("requestHash"),
        "receiptRef": status.get("receiptRef"),
        "resultRef": status.get("resultRef"),
        "resultHash": status.get("resultHash"),
        "result": status.get("result"),
        "resultInline": result_inline(status) if status.get("result") else None,
        "usage": usage(status),
        "duplicateOf": status.get("duplicateOf"),
        "duplicateOfUid": status.get("duplicateOfUid"),
        # Observed is a success only without it (a stored Failed tool-error counts too).
        "toolError": readout.tool_error(status),
        "retryAfterSeconds": status.get("retryAfterSeconds"),
        "preview": status.get("preview"),
    }
    return {k: v for k, v in out.items() if v is not None}


def egress_lines(obj: dict[str, Any]) -> list[str]:
    """The sandbox's connections the egress proxy refused or could not make, one line each
    (`status.result.egressRefused`; a row that does not parse is left out)."""
    rows = (_status(obj).get("result") or {}).get("egressRefused")
    lines = []
    for row in rows if isinstance(rows, list) else []:
        try:
            lines.append(refusal_line(EgressRefusal.model_validate(row)))
        except ValidationError:
            continue
    return lines


def result_inline(status: dict[str, Any]) -> bool:
    """Whether status.result holds the whole result (else only `resultRef` does)."""
    return bool((status.get("result") or {}).get("inline", True))


def usage(status: dict[str, Any]) -> dict[str, Any] | None:
    """What the call used, as its receipt's usage meter counts it (receipts.core.record):
    the sandbox's seconds on the operator's clock and the bytes it moved through the egress
    proxy (every connection is in exactly one `status.egress` row). None before it ran."""
    seconds = (status.get("execution") or {}).get("sandboxSeconds")
    rows = [row for row in status.get("egress") or [] if isinstance(row, dict)]
    if seconds is None and not rows:
        return None
    return {
        "sandboxSeconds": seconds,
        "egressBytesUp": sum(int(row.get("bytesUp") or 0) for row in rows),
        "egressBytesDown": sum(int(row.get("bytesDown") or 0) for row in rows),
        "egressConnections": sum(int(row.get("connections") or 0) for row in rows),
    }


def usage_text(meters: dict[str, Any]) -> str:
    """`sandbox 1.234s, egress 3 connection(s), 120 B up, 4500 B down` for a person."""
    parts = []
    if meters.get("sandboxSeconds") is not None:
        parts.append(f"sandbox {float(meters['sandboxSeconds']):.3f}s")
    if meters.get("egressConnections"):
        parts.append(
            f"egress {meters['egressConnections']} connection(s), "
            f"{meters['egressBytesUp']} B up, {meters['egressBytesDown']} B down"
        )
    return ", ".join(parts) or "nothing metered"


def result_text(obj: dict[str, Any]) -> str:
    result = _status(obj).get("result") or {}
    if result.get("structuredContent") is not None and not result.get("content"):
        return canonical(result["structuredContent"])
    return str(result.get("content") or "")


def receipt_row(obj: dict[str, Any]) -> dict[str, Any]:
    spec, status = _spec(obj), _status(obj)
    tool = spec.get("tool") or {}
    return {
        "name": _name(obj),
        "caller": (spec.get("caller") or {}).get("name"),
        "tool": tool.get("id"),
        "version": tool.get("version"),
        "state": status.get("state"),
        # The state as a person reads it: a tool error or a duplicate says so.
        "outcome": readout.outcome_label(status),
        "effectiveClass": status.get("effectiveClass"),
        "approval": (status.get("approval") or {}).get("name"),
        "receiptRef": status.get("receiptRef"),
        "auditRef": status.get("auditRef"),
        "receipt": status.get("receipt"),
    }


def run_receipts(invocations: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    ordered = sorted(
        invocations,
        key=lambda o: (str((o.get("metadata") or {}).get("creationTimestamp", "")), _name(o)),
    )
    return [receipt_row(o) for o in ordered]


def gateway_receipt_row(row: dict[str, Any]) -> dict[str, Any]:
    """A row of the gateway's run receipts (gateway/routes/runs.py) as `receipt_row` shows
    one; `receipt` is the stored receipt itself (or null when the store lacks it)."""
    receipt = row.get("receipt") or {}
    return {
        "name": row.get("invocation"),
        "caller": row.get("caller"),
        "tool": row.get("toolId"),
        "version": row.get("toolVersion"),
        "state": row.get("state"),
        # A row of a call retention deleted (from its receipt) has no outcome: its state.
        "outcome": row.get("outcome") or row.get("state"),
        "effectiveClass": row.get("effectiveClass"),
        "approval": row.get("approval"),
        "receiptRef": row.get("receiptRef"),
        "auditRef": receipt.get("auditRef"),
        "receipt": row.get("receipt"),
    }


def holding_ref(invocations: Sequence[dict[str, Any]], ref: str) -> dict[str, Any] | None:
    """The invocation whose status names `ref` as its receipt (or own audit record)."""
    for obj in invocations:
        status = _status(obj)
        if ref in (status.get("receiptRef"), status.get("auditRef")):
            return obj
    return None


# --------------------------------------------------------------------------- dry-run

#: The preview's sections in pipeline order; anything else follows in its own order.
PREVIEW_ORDER = (
    "validation",
    "policy",
    "classification",
    "effectiveClass",
    "permission",
    "approval",
    "sandbox",
    "egress",
)


def preview_denied(preview: dict[str, Any]) -> bool:
    """Whether the preview says the real call would be denied."""
    if preview.get("allowed") is False or preview.get("denied") is True:
        return True
    return str(preview.get("outcome") or preview.get("verdict") or "").lower() in (
        "denied",
        "deny",
        "would-be-denied",  # the operator's PreviewVerdict.WOULD_BE_DENIED
    )


def preview_lines(preview: dict[str, Any]) -> list[str]:
    """The preview section by section: `section: value` or nested `  key: value` lines."""
    keys = [k for k in PREVIEW_ORDER if k in preview] + [
        k for k in preview if k not in PREVIEW_ORDER
    ]
    lines: list[str] = []
    for key in keys:
        lines.extend(_tree(key, preview[key], 0))
    return lines


def _tree(key: str, value: Any, depth: int) -> list[str]:
    pad = "  " * depth
    if isinstance(value, dict) and value:
        out = [f"{pad}{key}:"]
        for sub, item in value.items():
            out.extend(_tree(str(sub), item, depth + 1))
        return out
    if isinstance(value, list) and value and any(isinstance(v, dict | list) for v in value):
        out = [f"{pad}{key}:"]
        for index, item in enumerate(value):
            out.extend(_tree(f"[{index}]", item, depth + 1))
        return out
    if isinstance(value, list):
        text = ", ".join(str(v) for v in value) or "-"
    elif isinstance(value, bool):
        text = "yes" if value else "no"
    elif value is None or value == {}:
        text = "-"
    else:
        text = str(value)
    return [f"{pad}{key}: {text}"]
