"""An Operator's confirmation of an Uncertain effect, recorded on a new receipt.

Only people whose Role grants `toolinvocations/status` can write `status.effectConfirmation`
(agents cannot); the operator stamps it, writes the receipt again with the confirmation,
and never retries the call itself.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any

from ..enums import InvocationState
from ..metrics import UNCERTAIN
from ..model import ReceiptSummary, ToolInvocationSpec, ToolInvocationStatus
from ..pipeline.hashing import canonical_json
from ..pipeline.receipt import build_receipt
from ..timeutil import now_iso
from .events import object_ref, post
from .invocations import PLURAL
from .runtime import Runtime


def needs_recording(body: Mapping[str, Any]) -> bool:
    status = body.get("status") or {}
    confirmation = status.get("effectConfirmation") or {}
    return (
        status.get("state") == InvocationState.UNCERTAIN
        and bool(confirmation)
        and not confirmation.get("recorded")
    )


async def record_confirmation(rt: Runtime, body: dict[str, Any]) -> None:
    meta = body["metadata"]
    fresh = await rt.kube.get_custom(PLURAL, meta["namespace"], meta["name"])
    if not needs_recording(fresh):
        return
    status = ToolInvocationStatus.model_validate(fresh["status"])
    spec = ToolInvocationSpec.model_validate(fresh["spec"])
    confirmation = status.effect_confirmation
    assert confirmation is not None
    stamp = now_iso()
    confirmation.confirmed_at = confirmation.confirmed_at or stamp
    confirmation.recorded = True
    receipt = build_receipt(
        namespace=meta["namespace"],
        name=meta["name"],
        uid=meta["uid"],
        spec=spec,
        status=status,
        tool_kind=status.execution.kind if status.execution else "unknown",
        sandbox_kind=status.sandbox_lease.kind if status.sandbox_lease else None,
        sandbox_pool=status.sandbox_lease.pool_id if status.sandbox_lease else None,
        command_line=None,
        written_at=stamp,
    )
    status.receipt_ref = await asyncio.to_thread(rt.store.put, canonical_json(receipt))
    status.receipt = ReceiptSummary(
        state=status.state,
        effective_class=status.effective_class,
        request_hash=status.request_hash,
        result_hash=status.result_hash,
        approval_id=status.approval.name if status.approval else None,
        policy_decision_id=status.policy_decision_id,
        effect_confirmed=confirmation.effect_happened,
        written_at=stamp,
    )
    await rt.kube.patch_status(
        PLURAL,
        meta["namespace"],
        meta["name"],
        {
            "effectConfirmation": confirmation.wire(),
            "receiptRef": status.receipt_ref,
            "auditRef": status.receipt_ref,
            "receipt": status.receipt.wire(),
        },
    )
    UNCERTAIN.labels(meta["namespace"]).dec()
    happened = "happened" if confirmation.effect_happened else "did not happen"
    post(
        object_ref("ToolInvocation", meta),
        reason="ToolInvoked",
        message=f"effect {happened}, confirmed by {confirmation.confirmed_by}; "
        f"receipt {status.receipt_ref}",
    )
