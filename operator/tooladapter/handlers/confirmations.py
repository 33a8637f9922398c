"""An Operator's confirmation of an Uncertain effect, recorded on a new receipt.

Only people whose Role grants `toolinvocations/status` can write `status.effectConfirmation`
(agents cannot); the operator stamps it, writes the receipt again with the confirmation,
and never retries the call itself.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tooladapter.enums import FailureClass, InvocationState, Resource, ToolKind
from tooladapter.events import object_ref
from tooladapter.kube.client import NotFound
from tooladapter.model import (
    EffectConfirmation,
    HttpSpec,
    ToolDescriptorSpec,
    ToolInvocationSpec,
    ToolInvocationStatus,
)
from tooladapter.pipeline.conditions import invocation_conditions
from tooladapter.pipeline.hashing import descriptor_digest
from tooladapter.pipeline.sanitize.redaction import bounded_message
from tooladapter.receipts.service.writer import ReceiptInput, ReceiptWriter
from tooladapter.runtime import Runtime
from tooladapter.timeutil import now_iso


def needs_recording(body: Mapping[str, Any]) -> bool:
    status = body.get("status") or {}
    confirmation = status.get("effectConfirmation") or {}
    return (
        status.get("state") == InvocationState.UNCERTAIN
        and bool(confirmation)
        and not confirmation.get("recorded")
        # A duplicate's confirmation is its first call's, copied (`copy_to_duplicates`).
        and not status.get("duplicateOf")
    )


def validated_http(
    descriptor: ToolDescriptorSpec | None, status: ToolInvocationStatus
) -> HttpSpec | None:
    """An http tool's http block for the receipt's `target`, as the first receipt had it:
    only while the catalog's descriptor is still the one the call was validated against
    (a changed descriptor's template is not what the call sent)."""
    if descriptor is None or descriptor.kind != ToolKind.HTTP or descriptor.http is None:
        return None
    if status.descriptor_digest != descriptor_digest(descriptor.wire()):
        return None
    return descriptor.http


async def record_confirmation(rt: Runtime, body: dict[str, Any]) -> None:
    meta = body["metadata"]
    fresh = await rt.cluster.get(Resource.INVOCATIONS, meta["namespace"], meta["name"])
    if not needs_recording(fresh):
        return
    status = ToolInvocationStatus.model_validate(fresh["status"])
    spec = ToolInvocationSpec.model_validate(fresh["spec"])
    confirmation = status.effect_confirmation
    assert confirmation is not None
    stamp = now_iso()
    confirmation.confirmed_at = confirmation.confirmed_at or stamp
    confirmation.recorded = True
    lease = status.sandbox_lease
    # The first receipt followed the descriptor's auditRequirements; so does this one.
    entry = rt.catalog.find_descriptor(meta["namespace"], spec.tool.id, spec.tool.version)
    namespace = meta["namespace"]
    writer = ReceiptWriter(rt.store, rt.chains, rt.cluster)
    known = rt.catalog.namespace_uid(namespace)
    await writer.write(
        ReceiptInput(
            namespace=namespace,
            name=meta["name"],
            uid=meta["uid"],
            spec=spec,
            status=status,
            tool_kind=status.execution.kind if status.execution else None,
            sandbox_kind=lease.kind if lease else None,
            sandbox_pool=lease.pool_id if lease else None,
            command_line=list(status.execution.command_line) if status.execution else [],
            written_at=stamp,
            audit=entry.spec.audit_requirements if entry and entry.spec else None,
            namespace_uid=await writer.incarnation(namespace, fresh, known=known),
            http=validated_http(entry.spec if entry else None, status),
        )
    )
    assert status.receipt is not None
    await rt.cluster.patch_status(
        Resource.INVOCATIONS,
        meta["namespace"],
        meta["name"],
        {
            "effectConfirmation": confirmation.wire(),
            "receiptRef": status.receipt_ref,
            "auditRef": status.audit_ref,
            "receipt": status.receipt.wire(),
            **confirmed_view(status, confirmation),
        },
    )
    await copy_to_duplicates(rt, meta, status)
    released = False
    if not confirmation.effect_happened and spec.idempotency_key:
        # Nothing happened: the key may be used again, by a new invocation that runs once.
        # (Confirmed as happened, the key stays and later duplicates carry this receipt.)
        released = await rt.cluster.release_idempotency_key(
            namespace=meta["namespace"],
            caller=spec.caller.name,
            key=spec.idempotency_key,
            holder_uid=meta["uid"],
        )
    happened = "happened" if confirmation.effect_happened else "did not happen"
    rt.events.post(
        object_ref("ToolInvocation", meta),
        reason="ToolInvoked",
        message=f"effect {happened}, confirmed by {confirmation.confirmed_by} "
        f"({bounded_message(confirmation.evidence, max_chars=200)}); "
        f"receipt {status.receipt_ref}"
        + ("; its idempotency key is free again" if released else ""),
    )


async def copy_to_duplicates(
    rt: Runtime, meta: Mapping[str, Any], status: ToolInvocationStatus
) -> None:
    """The first call's confirmation and new receipt onto the duplicates that carry its
    outcome, so none of them still reads as an unconfirmed effect."""
    confirmation = status.effect_confirmation
    assert confirmation is not None and status.receipt is not None
    for name in rt.census.duplicates_of(meta["namespace"], meta["name"]):
        try:
            duplicate = await rt.cluster.get(Resource.INVOCATIONS, meta["namespace"], name)
        except NotFound:
            continue
        dstatus = duplicate.get("status") or {}
        if dstatus.get("duplicateOfUid") not in (None, meta["uid"]):
            continue
        if (dstatus.get("effectConfirmation") or {}).get("recorded"):
            continue
        if dstatus.get("state") != InvocationState.UNCERTAIN:
            # Still waiting for its first call: it copies the recorded confirmation as it
            # ends (`end_as_duplicate`).
            continue
        await rt.cluster.patch_status(
            Resource.INVOCATIONS,
            meta["namespace"],
            name,
            {
                "effectConfirmation": confirmation.wire(),
                "receiptRef": status.receipt_ref,
                "receipt": {
                    **status.receipt.wire(),
                    "effectConfirmed": confirmation.effect_happened,
                },
                **confirmed_view(ToolInvocationStatus.model_validate(dstatus), confirmation),
            },
        )


def confirmed_view(
    status: ToolInvocationStatus, confirmation: EffectConfirmation
) -> dict[str, Any]:
    """What `kubectl get` and `kubectl wait` read, saying the effect was confirmed and how
    (no longer `effect-unconfirmed`); the state stays Uncertain: what the call itself knew."""
    failure = (
        FailureClass.EFFECT_CONFIRMED
        if confirmation.effect_happened
        else FailureClass.EFFECT_DID_NOT_HAPPEN
    )
    happened = "happened" if confirmation.effect_happened else "did not happen"
    message = bounded_message(
        f"effect {happened}, confirmed by {confirmation.confirmed_by}: "
        f"{confirmation.evidence} (was: {status.message or 'unconfirmed'})",
        max_chars=1024,
    )
    conditions = invocation_conditions(
        InvocationState.UNCERTAIN,
        failure_class=failure,
        message=message,
        previous=status.conditions,
        now=now_iso(),
    )
    return {
        "failureClass": str(failure),
        "message": message,
        "conditions": [c.wire() for c in conditions],
    }
