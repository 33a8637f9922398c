"""Readers' merge of stored invocations with the receipt index (artifacts/index): answers
stay complete after retention deletes the invocations. Pure functions over plain data."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, Final

from tooladapter.artifacts.index import KEY_ENTRY_SCHEMA
from tooladapter.timeutil import parse_time

#: A receipt without `tenantUid` counts as its namespace's current incarnation's only when
#: written this long after the namespace was created: `creationTimestamp` has whole seconds.
LEGACY_MARGIN: Final = timedelta(seconds=1)


@dataclass(frozen=True)
class Incarnation:
    """One life of a namespace: its name, uid and `creationTimestamp` (RFC 3339)."""

    name: str
    uid: str
    created: str


def of_incarnation(receipt: Mapping[str, Any], incarnation: Incarnation) -> bool:
    """Whether a receipt belongs to this incarnation of its namespace.

    A receipt that names its namespace's uid (`tenantUid`) belongs to that incarnation
    alone. One written before uids were recorded names only the namespace: it belongs to
    the current incarnation when it was written (`writtenAt`, the operator's clock) at
    least `LEGACY_MARGIN` after the namespace was created (the API server's clock): an
    earlier incarnation was gone before this one could be created, so everything it wrote
    is older. Where that can be wrong: clocks more than the margin apart, in either
    direction, hide a receipt written just after creation or show one written just before
    deletion (the namespace's deletion takes longer than that, in practice)."""
    if receipt.get("tenantId") != incarnation.name:
        return False
    uid = receipt.get("tenantUid")
    if uid is not None:
        return bool(uid == incarnation.uid)
    written = receipt.get("writtenAt") or receipt.get("endedAt")
    try:
        return parse_time(str(written)) >= parse_time(incarnation.created) + LEGACY_MARGIN
    except (ValueError, TypeError):
        return False


def caller_name(receipt: Mapping[str, Any]) -> str | None:
    caller = receipt.get("caller")
    name = caller.get("name") if isinstance(caller, Mapping) else None
    return str(name) if name else None


def with_caller(rows: Iterable[dict[str, Any]], caller: str | None) -> list[dict[str, Any]]:
    """The rows of `caller` (every row when None or empty)."""
    return [r for r in rows if not caller or r.get("caller") == caller]


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
        "caller": caller_name(receipt),
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


@dataclass(frozen=True)
class KeyHolder:
    """The call that holds an idempotency key, from the key's index entries
    (`artifacts.index.key_entry`): what a later call with the key ends as."""

    invocation: str
    invocation_id: str
    receipt_ref: str
    request_hash: str | None
    #: Its end in the shape of an invocation's status (state, receiptRef, failure class,
    #: classes, result reference, confirmation, data-flow labels), for `end_as_duplicate`.
    status: dict[str, Any]


def key_holder(
    entries: Iterable[tuple[str, bytes]],
    *,
    namespace: str,
    caller: str,
    key: str,
    own_uid: str,
) -> KeyHolder | None:
    """The first call that holds the key, or None when it is free: no call held it, or
    every one that did was confirmed "did not happen" (its latest entry says `released`).

    `entries` are (index key, bytes); a key's name starts with its receipt's `writtenAt`,
    so sorted by name they are in the order written. An entry of another tenant, caller or
    key (a hash collision) counts for nothing, nor one of the asking call itself. Bytes
    that do not parse raise ValueError: the caller fails closed."""
    latest: dict[str, Mapping[str, Any]] = {}
    order: list[str] = []
    for _, data in sorted(entries, key=lambda pair: pair[0].rsplit("/", 1)[-1]):
        document = json.loads(data)
        if not isinstance(document, Mapping):
            raise ValueError("an idempotency key entry is not a JSON object")
        if (
            document.get("schema") != KEY_ENTRY_SCHEMA
            or document.get("tenantId") != namespace
            or document.get("caller") != caller
            or document.get("idempotencyKey") != key
        ):
            continue
        uid = document.get("invocationId")
        if not isinstance(uid, str) or not uid or uid == own_uid:
            continue
        if uid not in latest:
            order.append(uid)
        latest[uid] = document
    for uid in order:
        document = latest[uid]
        if document.get("released"):
            continue
        ref = str(document.get("receiptRef") or "")
        status = dict(document.get("status") or {})
        status["receiptRef"] = ref
        status["requestHash"] = document.get("requestHash")
        return KeyHolder(
            invocation=str(document.get("invocation") or ""),
            invocation_id=uid,
            receipt_ref=ref,
            request_hash=document.get("requestHash"),
            status=status,
        )
    return None
