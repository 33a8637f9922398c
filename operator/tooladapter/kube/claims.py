"""Atomic claims on the API server: idempotency keys and fencing tokens.

Both use coordination.k8s.io Leases because a create is atomic: when many invocations with
one key are created at the same instant, the API server accepts exactly one create of the
key's Lease and rejects the others with AlreadyExists. Names are hashes, so nothing an agent
writes reaches an object name unvalidated.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any

from tooladapter.kube.client import Kube
from tooladapter.kube.errors import AlreadyExists, Conflict, NotFound, api_errors
from tooladapter.naming import LABEL_MANAGED_BY, MANAGED_BY
from tooladapter.pipeline.retention import ClaimRecord
from tooladapter.timeutil import to_iso

ANNOTATION_INVOCATION = "tooladapter.dev/invocation"
ANNOTATION_HIGHEST = "tooladapter.dev/highest-fencing-token"
#: Written onto an idempotency claim when its winner ends: duplicates find the receipt there
#: after the winner is deleted, and retention counts the claim's age from `ended-at`.
ANNOTATION_RECEIPT = "tooladapter.dev/receipt-ref"
ANNOTATION_ENDED_AT = "tooladapter.dev/ended-at"
ANNOTATION_STATE = "tooladapter.dev/state"
#: The request the key was claimed for: the same key with another request is refused.
ANNOTATION_REQUEST_HASH = "tooladapter.dev/request-hash"
IDEMPOTENCY_PREFIX = "ta-idem-"


def idempotency_claim_name(namespace: str, caller: str, key: str) -> str:
    digest = hashlib.sha256(f"{namespace}\x00{caller}\x00{key}".encode()).hexdigest()
    return f"{IDEMPOTENCY_PREFIX}{digest[:48]}"


def fencing_claim_name(namespace: str, caller: str, attempt_id: str) -> str:
    # Per caller: another agent naming the same attempt id cannot fence this one out.
    digest = hashlib.sha256(f"{namespace}\x00{caller}\x00{attempt_id}".encode()).hexdigest()
    return f"ta-fence-{digest[:48]}"


@dataclass(frozen=True)
class Claim:
    won: bool
    winner_name: str
    winner_uid: str
    #: The winner's receipt, once it ended (the claim keeps it past the winner's deletion).
    receipt_ref: str | None = None
    #: The request the winner claimed the key for (None on claims made before it was kept).
    request_hash: str | None = None
    #: The winner's terminal state, once it ended.
    state: str | None = None


def _lease(
    name: str, namespace: str, holder_uid: str, annotations: dict[str, str]
) -> dict[str, Any]:
    return {
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": {LABEL_MANAGED_BY: MANAGED_BY},
            "annotations": annotations,
        },
        "spec": {"holderIdentity": holder_uid},
    }


async def claim_idempotency_key(
    kube: Kube,
    *,
    namespace: str,
    caller: str,
    key: str,
    invocation_name: str,
    invocation_uid: str,
    request_hash: str | None = None,
) -> Claim:
    name = idempotency_claim_name(namespace, caller, key)
    annotations = {ANNOTATION_INVOCATION: invocation_name}
    if request_hash:
        annotations[ANNOTATION_REQUEST_HASH] = request_hash
    body = _lease(name, namespace, invocation_uid, annotations)
    try:
        with api_errors():
            await kube.coordination.create_namespaced_lease(namespace, body)
        return Claim(
            won=True,
            winner_name=invocation_name,
            winner_uid=invocation_uid,
            request_hash=request_hash,
        )
    except AlreadyExists:
        pass
    with api_errors():
        lease = await kube.coordination.read_namespaced_lease(name, namespace)
    winner_uid = lease.spec.holder_identity or ""
    annotations = lease.metadata.annotations or {}
    # The same invocation resuming after a restart finds its own claim: it still wins.
    return Claim(
        won=winner_uid == invocation_uid,
        winner_name=annotations.get(ANNOTATION_INVOCATION, ""),
        winner_uid=winner_uid,
        receipt_ref=annotations.get(ANNOTATION_RECEIPT),
        request_hash=annotations.get(ANNOTATION_REQUEST_HASH),
        state=annotations.get(ANNOTATION_STATE),
    )


@dataclass(frozen=True)
class ClaimEnd:
    """A winner's end, as its idempotency claim keeps it."""

    #: The winner's uid: only the claim's holder writes its end.
    holder_uid: str
    receipt_ref: str
    ended_at: str
    state: str


async def record_idempotency_end(
    kube: Kube, *, namespace: str, caller: str, key: str, end: ClaimEnd
) -> bool:
    """Write the winner's end onto its claim (only if its holder holds it); True if done."""
    name = idempotency_claim_name(namespace, caller, key)
    for _ in range(5):
        lease = await _held(kube, namespace, name, end.holder_uid)
        if lease is None:
            return False
        annotations = dict(lease.metadata.annotations or {})
        annotations.update(
            {
                ANNOTATION_RECEIPT: end.receipt_ref,
                ANNOTATION_ENDED_AT: end.ended_at,
                ANNOTATION_STATE: end.state,
            }
        )
        lease.metadata.annotations = annotations
        try:
            with api_errors():
                await kube.coordination.replace_namespaced_lease(name, namespace, lease)
            return True
        except Conflict:
            pass
    return False


async def list_idempotency_claims(kube: Kube) -> list[ClaimRecord]:
    """Every idempotency claim of the cluster (our managed Leases named ta-idem-*)."""
    with api_errors():
        leases = await kube.coordination.list_lease_for_all_namespaces(
            label_selector=f"{LABEL_MANAGED_BY}={MANAGED_BY}"
        )
    found = []
    for lease in leases.items:
        meta = lease.metadata
        if not meta.name.startswith(IDEMPOTENCY_PREFIX):
            continue
        annotations = meta.annotations or {}
        created = meta.creation_timestamp
        found.append(
            ClaimRecord(
                namespace=meta.namespace,
                name=meta.name,
                resource_version=meta.resource_version,
                created=to_iso(created) if created is not None else None,
                winner_name=annotations.get(ANNOTATION_INVOCATION, ""),
                winner_uid=lease.spec.holder_identity or "",
                ended_at=annotations.get(ANNOTATION_ENDED_AT),
                state=annotations.get(ANNOTATION_STATE),
                receipt_ref=annotations.get(ANNOTATION_RECEIPT),
            )
        )
    return found


async def delete_claim(kube: Kube, namespace: str, name: str, resource_version: str) -> bool:
    """Delete a claim only as it was read (a claim changed meanwhile stays); True if gone."""
    try:
        with api_errors():
            await kube.coordination.delete_namespaced_lease(
                name, namespace, body={"preconditions": {"resourceVersion": resource_version}}
            )
    except (NotFound, Conflict, AlreadyExists):
        return False
    return True


async def _held(kube: Kube, namespace: str, name: str, holder_uid: str) -> Any | None:
    """The claim `name` if `holder_uid` holds it; None when it is gone or another's."""
    try:
        with api_errors():
            lease = await kube.coordination.read_namespaced_lease(name, namespace)
    except NotFound:
        return None
    return lease if lease.spec.holder_identity == holder_uid else None


@dataclass(frozen=True)
class FencingVerdict:
    accepted: bool
    highest: int


async def check_fencing_token(
    kube: Kube, *, namespace: str, caller: str, attempt_id: str, token: int, holder_uid: str
) -> FencingVerdict:
    """Accept `token` unless a higher one was already seen for this attempt; record it."""
    name = fencing_claim_name(namespace, caller, attempt_id)
    for _ in range(10):
        try:
            with api_errors():
                lease = await kube.coordination.read_namespaced_lease(name, namespace)
        except NotFound:
            body = _lease(name, namespace, holder_uid, {ANNOTATION_HIGHEST: str(token)})
            try:
                with api_errors():
                    await kube.coordination.create_namespaced_lease(namespace, body)
                return FencingVerdict(accepted=True, highest=token)
            except AlreadyExists:
                continue
        annotations = dict(lease.metadata.annotations or {})
        highest = int(annotations.get(ANNOTATION_HIGHEST, "-1"))
        if token < highest:
            return FencingVerdict(accepted=False, highest=highest)
        if token == highest:
            return FencingVerdict(accepted=True, highest=highest)
        annotations[ANNOTATION_HIGHEST] = str(token)
        lease.metadata.annotations = annotations
        try:
            # Replace carries the resourceVersion: a concurrent raise makes this a conflict.
            with api_errors():
                await kube.coordination.replace_namespaced_lease(name, namespace, lease)
            return FencingVerdict(accepted=True, highest=token)
        except Conflict:
            pass
    raise RuntimeError(f"fencing lease {namespace}/{name} kept changing; try again")


async def release_idempotency_key(
    kube: Kube, *, namespace: str, caller: str, key: str, holder_uid: str
) -> bool:
    """Free the key if `holder_uid` holds it (a confirmed "did not happen"); True if freed.

    The delete is conditional on the version read, so a claim taken meanwhile by another
    invocation is never released by this one."""
    name = idempotency_claim_name(namespace, caller, key)
    lease = await _held(kube, namespace, name, holder_uid)
    if lease is None:
        return False
    return await delete_claim(kube, namespace, name, lease.metadata.resource_version)
