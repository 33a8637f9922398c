"""The receipt index: named, write-once entries in the artifact store that outlive the
invocations retention deletes, so a run's receipts and a caller's last approved call can
still be found: the key layout (the merge of readers is `pipeline/receipt_index`).

Keys are listed by prefix (a folder), and each ends in the receipt's 64 hex digits, so the
key alone names the receipt (the entry's bytes are its reference, for a reader's check).
Everything kept per namespace lives under the namespace's incarnation, its uid
(`tenantUid` in the receipt): a namespace deleted and created again under the same name is
another folder, and never reads the previous one's entries (issue 28):

- `index/ns/<namespace>/<uid>/runs/<sha256(runId)[:32]>/<receipt hex>`: every receipt of
  a run;
- `index/ns/<namespace>/<uid>/calls/<sha256(caller)[:32]>/<toolId>/<ended-at>-<receipt hex>`:
  the approved calls of a caller's tool, oldest first (`<ended-at>` is
  `YYYYmmddTHHMMSS.ffffffZ`). Its bytes are a small JSON document (`call_entry`): who
  approved when, and the reference of the call's arguments (an artifact of their own,
  `arguments_document`), which a reviewer's "changes since the last approved call" compares;
- `index/ns/<namespace>/<uid>/keys/<sha256(caller, key)[:32]>/<written-at>-<receipt hex>`:
  the receipts of the call that held an idempotency key (`key_entry`), so the key never
  runs again after its claim (a Lease) expired and retention deleted the call: a later call
  with the key finds its first call here (`receipts.core.index.key_holder`). A confirmed
  "did not happen" writes the entry that releases the key (`released`).

Receipts written before namespaces' uids were recorded (no `tenantUid`) were indexed by
name alone, under the legacy folders `index/runs/<namespace>/...` and
`index/calls/<namespace>/...` (the same tails); readers still list them, and keep only the
receipts `receipt_index.of_incarnation` attributes to the namespace they serve.

Run ids and caller names are hashed: they may hold `/` or `:`, and their length is the
CRD's business, not the key's. A receipt names its tenant, run, caller and tool, which
readers check: a hash collision can add nothing that does not belong.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from datetime import UTC
from typing import Any, Final

from tooladapter.artifacts.protocol import digest_of
from tooladapter.enums import Stage, StageOutcome
from tooladapter.pipeline.hashing import canonical_json
from tooladapter.timeutil import parse_time

#: Per namespace incarnation: `index/ns/<namespace>/<uid>/`.
NAMESPACES: Final = "index/ns/"
#: The folders of receipts written before uids were recorded (read, never written again).
RUNS: Final = "index/runs/"
CALLS: Final = "index/calls/"
#: The keys of receipts written while the namespace's uid could not be read (rare: the
#: namespace unreadable at the call's end): by name, read with the incarnation's folder.
KEYS: Final = "index/keys/"
ARGUMENTS_SCHEMA: Final = "tool-arguments-v1"
KEY_ENTRY_SCHEMA: Final = "tool-idempotency-key-v1"
_HEX_LEN: Final = 64


def _hashed(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:32]


def incarnation_prefix(namespace: str, uid: str) -> str:
    """The folder of everything kept for one incarnation of a namespace (a platform admin
    lists `index/ns/<namespace>/` to see every incarnation's)."""
    return f"{NAMESPACES}{namespace}/{uid}/"


def run_prefix(namespace: str, run_id: str, uid: str | None = None) -> str:
    """The run's folder in the namespace incarnation `uid`; the legacy (name-keyed) folder
    when `uid` is None."""
    if uid is None:
        return f"{RUNS}{namespace}/{_hashed(run_id)}/"
    return f"{incarnation_prefix(namespace, uid)}runs/{_hashed(run_id)}/"


def run_key(namespace: str, run_id: str, ref: str, uid: str | None = None) -> str:
    return run_prefix(namespace, run_id, uid) + digest_of(ref)


def calls_prefix(namespace: str, caller: str, tool: str, uid: str | None = None) -> str:
    """A caller's tool's approved calls in the namespace incarnation `uid` (legacy folder
    when None)."""
    if uid is None:
        return f"{CALLS}{namespace}/{_hashed(caller)}/{tool}/"
    return f"{incarnation_prefix(namespace, uid)}calls/{_hashed(caller)}/{tool}/"


def stamp(moment: str) -> str:
    """`moment` (RFC 3339) as a key segment that sorts as time does; ValueError if invalid."""
    return parse_time(moment).astimezone(UTC).strftime("%Y%m%dT%H%M%S.%fZ")


def call_key(
    namespace: str, caller: str, tool: str, ended_at: str, ref: str, uid: str | None = None
) -> str:
    return f"{calls_prefix(namespace, caller, tool, uid)}{stamp(ended_at)}-{digest_of(ref)}"


def tenant_uid(receipt: Mapping[str, Any]) -> str | None:
    """The uid of the namespace incarnation a receipt was written in (None: written before
    uids were recorded, or while the operator did not know it)."""
    uid = receipt.get("tenantUid")
    return uid if isinstance(uid, str) and uid else None


def ref_of_key(key: str) -> str:
    """The receipt reference a key ends in; KeyError for a key that ends in none."""
    tail = key.rsplit("/", 1)[-1][-_HEX_LEN:]
    ref = "sha256:" + tail
    digest_of(ref)
    return ref


def approved_call_key(receipt: Mapping[str, Any], ref: str) -> str | None:
    """The calls-index key of an approved call's receipt; None for any other receipt."""
    namespace = receipt.get("tenantId")
    caller = (receipt.get("caller") or {}).get("name")
    tool = receipt.get("toolId")
    ended = receipt.get("endedAt") or receipt.get("writtenAt")
    if not (receipt.get("approvalId") and namespace and caller and tool and ended):
        return None
    try:
        return call_key(
            str(namespace), str(caller), str(tool), str(ended), ref, tenant_uid(receipt)
        )
    except (ValueError, KeyError):
        return None  # an unparseable end time: the run index still has it


def key_prefix(namespace: str, caller: str, key: str, uid: str | None) -> str:
    """The folder of an idempotency key's entries in the namespace incarnation `uid` (the
    by-name folder when None). The caller and key are hashed together: either may hold any
    character, and the entry names both, which readers check."""
    hashed = _hashed(f"{caller}\x00{key}")
    if uid is None:
        return f"{KEYS}{namespace}/{hashed}/"
    return f"{incarnation_prefix(namespace, uid)}keys/{hashed}/"


def held_key(receipt: Mapping[str, Any]) -> bool:
    """Whether the call of `receipt` held its idempotency key, so the key answers with it:
    a call with a key that is no duplicate and did not end at the idempotency stage (a
    reused key, a key released for an unconfirmed twin, the index unreadable: none of these
    held it, or still holds it)."""
    if not receipt.get("idempotencyKey") or receipt.get("duplicateOf"):
        return False
    for stage in receipt.get("stages") or []:
        if (
            isinstance(stage, Mapping)
            and stage.get("stage") == Stage.IDEMPOTENCY
            and stage.get("outcome") in (StageOutcome.DENIED, StageOutcome.FAILED)
        ):
            return False
    return True


def released(receipt: Mapping[str, Any]) -> bool:
    """Whether `receipt` records the key's release: an Uncertain call an operator confirmed
    did not happen (the one way a key is used again)."""
    confirmation = receipt.get("effectConfirmation")
    return (
        isinstance(confirmation, Mapping)
        and bool(confirmation.get("recorded"))
        and confirmation.get("effectHappened") is False
    )


def key_entry(receipt: Mapping[str, Any], ref: str) -> tuple[str, bytes] | None:
    """The idempotency entry of a stored receipt (key, bytes), or None when its call did
    not hold a key. The bytes carry what a later call with the key ends with (`key_holder`),
    so it needs neither the deleted invocation nor the receipt itself."""
    namespace = receipt.get("tenantId")
    caller = (receipt.get("caller") or {}).get("name")
    key = receipt.get("idempotencyKey")
    written = receipt.get("writtenAt") or receipt.get("endedAt")
    if not (namespace and caller and key and written) or not held_key(receipt):
        return None
    try:
        name = f"{stamp(str(written))}-{digest_of(ref)}"
    except (ValueError, KeyError):
        return None
    flow = receipt.get("dataFlow") or {}
    document = {
        "schema": KEY_ENTRY_SCHEMA,
        "receiptRef": ref,
        "tenantId": namespace,
        "tenantUid": tenant_uid(receipt),
        "caller": caller,
        "idempotencyKey": key,
        "invocation": receipt.get("invocationName"),
        "invocationId": receipt.get("invocationId"),
        "requestHash": receipt.get("requestHash"),
        "released": released(receipt),
        "status": {
            field: receipt.get(field)
            for field in (
                "state",
                "failureClass",
                "deniedStage",
                "message",
                "declaredClass",
                "effectiveClass",
                "resultRef",
                "resultHash",
                "effectConfirmation",
                "endedAt",
            )
        }
        | {"dataFlow": {"labels": list(flow.get("labels") or [])}},
        "writtenAt": written,
    }
    folder = key_prefix(str(namespace), str(caller), str(key), tenant_uid(receipt))
    return folder + name, canonical_json(document)


def entries_of(receipt: Mapping[str, Any], ref: str) -> list[str]:
    """The index keys of a stored receipt: its run's, and its caller's tool's when approved."""
    namespace = receipt.get("tenantId")
    if not isinstance(namespace, str) or not namespace:
        return []
    keys: list[str] = []
    run_id = receipt.get("runId")
    if isinstance(run_id, str) and run_id:
        keys.append(run_key(namespace, run_id, ref, tenant_uid(receipt)))
    approved = approved_call_key(receipt, ref)
    if approved is not None:
        keys.append(approved)
    return keys


def entry_bytes(ref: str) -> bytes:
    """A run entry's bytes: the receipt's reference."""
    return ref.encode()


def arguments_document(receipt: Mapping[str, Any], arguments: Mapping[str, Any]) -> bytes:
    """The arguments of an approved call, as an artifact naming its tenant and call."""
    return canonical_json(
        {
            "schema": ARGUMENTS_SCHEMA,
            "tenantId": receipt.get("tenantId"),
            "invocationId": receipt.get("invocationId"),
            "arguments": dict(arguments),
        }
    )


def call_entry(
    receipt: Mapping[str, Any], ref: str, *, approved_at: str | None, arguments_ref: str
) -> bytes:
    """A calls entry's bytes: what a reviewer's page shows of the last approved call."""
    return canonical_json(
        {
            "receiptRef": ref,
            "invocation": receipt.get("invocationName"),
            "invocationId": receipt.get("invocationId"),
            "approval": receipt.get("approvalId"),
            "approvedBy": receipt.get("approvedBy"),
            "approvedAt": approved_at,
            "argumentsRef": arguments_ref,
        }
    )
