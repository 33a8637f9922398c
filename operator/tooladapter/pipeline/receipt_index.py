"""Readers' merge of stored invocations with the receipt index (artifacts/index): answers
stay complete after retention deletes the invocations. Pure functions over plain data."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any


def stored_refs(items: Iterable[Mapping[str, Any]]) -> set[str]:
    """The receipt references the stored invocations already show."""
    refs: set[str] = set()
    for item in items:
        status = item.get("status") or {}
        refs.update(r for r in (status.get("receiptRef"), status.get("auditRef")) if r)
    return refs


def uids_of(items: Iterable[Mapping[str, Any]]) -> set[str]:
    return {str((i.get("metadata") or {}).get("uid")) for i in items}


def belongs(receipt: Mapping[str, Any], namespace: str, run_id: str) -> bool:
    return receipt.get("tenantId") == namespace and receipt.get("runId") == run_id


def _written(receipt: Mapping[str, Any]) -> str:
    return str(receipt.get("writtenAt") or "")


def latest_per_invocation(
    found: Iterable[tuple[str, Mapping[str, Any]]],
) -> list[tuple[str, Mapping[str, Any]]]:
    """One (reference, receipt) per invocation (an effect confirmation writes a second
    receipt: the later wins), in the order the calls started."""
    chosen: dict[str, tuple[str, Mapping[str, Any]]] = {}
    for ref, receipt in found:
        uid = str(receipt.get("invocationId"))
        held = chosen.get(uid)
        if held is None or _written(receipt) > _written(held[1]):
            chosen[uid] = (ref, receipt)
    return sorted(
        chosen.values(),
        key=lambda pair: str(pair[1].get("startedAt") or pair[1].get("endedAt") or ""),
    )


def merged_rows(
    stored_rows: list[dict[str, Any]],
    items: Iterable[Mapping[str, Any]],
    indexed: Iterable[tuple[str, Mapping[str, Any]]],
    namespace: str,
    run_id: str,
) -> list[dict[str, Any]]:
    """The rows of a run: those of invocations gone from the cluster (from the index, their
    tenant and run checked), oldest first, then those of the stored invocations."""
    items = list(items)
    known_refs, known_uids = stored_refs(items), uids_of(items)
    gone = [
        (ref, receipt)
        for ref, receipt in indexed
        if ref not in known_refs
        and belongs(receipt, namespace, run_id)
        and str(receipt.get("invocationId")) not in known_uids
    ]
    return [receipt_only_row(r, ref) for ref, r in latest_per_invocation(gone)] + stored_rows


def receipt_only_row(receipt: Mapping[str, Any], ref: str) -> dict[str, Any]:
    """The row of a call whose invocation is gone (retention): all from its receipt, in
    the shape of `toolview.receipt_row`."""
    return {
        "invocation": receipt.get("invocationName"),
        "toolId": receipt.get("toolId"),
        "toolVersion": receipt.get("toolVersion"),
        "state": receipt.get("state"),
        "declaredClass": receipt.get("declaredClass"),
        "effectiveClass": receipt.get("effectiveClass"),
        "policyDecisionId": receipt.get("policyDecisionId"),
        "approval": receipt.get("approvalId"),
        "requestHash": receipt.get("requestHash"),
        "resultHash": receipt.get("resultHash"),
        "receiptRef": ref,
        "startedAt": receipt.get("startedAt"),
        "endedAt": receipt.get("endedAt"),
        "receipt": dict(receipt),
    }


def previous_call(
    entry: Mapping[str, Any],
    arguments: Mapping[str, Any],
    *,
    namespace: str,
    caller: str,
    tool: str,
) -> dict[str, Any] | None:
    """An approved call from its calls-index entry and arguments artifact, in the shape of
    an invocation (what `review.last_approved` reads); None when the artifact is another
    tenant's or another call's."""
    if arguments.get("tenantId") != namespace or arguments.get("invocationId") != entry.get(
        "invocationId"
    ):
        return None
    return {
        "metadata": {
            "name": entry.get("invocation"),
            "namespace": namespace,
            "uid": entry.get("invocationId"),
        },
        "spec": {
            "caller": {"name": caller},
            "tool": {"id": tool},
            "arguments": dict(arguments.get("arguments") or {}),
        },
        "status": {
            "approval": {
                "name": entry.get("approval"),
                "reviewer": entry.get("approvedBy"),
                "boundAt": entry.get("approvedAt"),
            },
            "receiptRef": entry.get("receiptRef"),
        },
    }
