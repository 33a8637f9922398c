"""The reference's seven integration events as CloudEvents 1.0 (JSON, structured mode). Pure.

Which event goes when follows the reference, from what the receipt says (a receipt is
written for every end, and again for an operator's confirmation):

| receipt | events |
|---|---|
| Observed, Failed, Cancelled | ToolInvoked |
| Denied | ToolInvocationDenied |
| Uncertain (the call's own receipt) | ToolEffectUncertain |
| an effect confirmation's receipt | ToolInvoked (its own id: another receipt) |
| a call that held a sandbox lease | SandboxLeased, SandboxReleased (at its end) |
| a duplicate (`duplicateOf`) | none: it ran nothing |

plus ToolDescriptorActivated/Retired when a descriptor becomes callable or stops being so.

Attributes: `type` the reference's topic; `source` `<TOOLADAPTER_EVENT_SOURCE>/namespaces/
<namespace>`; `subject` `toolinvocations/<name>` (or `tooldescriptors/<name>`); `id` the
sha256 of the receipt reference and the type, so a redelivery carries the same id and a
confirmation's ToolInvoked another; `time` the receipt's end; `data` the reference's payload,
in its field names. Nothing else of the receipt leaves: no arguments, results, command
lines or messages (a denial's `reason` is its failure class, e.g. `policy-denied`).
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from enum import StrEnum
from typing import Any, Final

SPEC_VERSION: Final = "1.0"
CONTENT_TYPE: Final = "application/cloudevents+json"


class EventType(StrEnum):
    TOOL_DESCRIPTOR_ACTIVATED = "tool-execution.descriptors.v1.tool-descriptor-activated"
    TOOL_DESCRIPTOR_RETIRED = "tool-execution.descriptors.v1.tool-descriptor-retired"
    TOOL_INVOKED = "tool-execution.invocations.v1.tool-invoked"
    TOOL_INVOCATION_DENIED = "tool-execution.invocations.v1.tool-invocation-denied"
    TOOL_EFFECT_UNCERTAIN = "tool-execution.invocations.v1.tool-effect-uncertain"
    SANDBOX_LEASED = "tool-execution.sandboxes.v1.sandbox-leased"
    SANDBOX_RELEASED = "tool-execution.sandboxes.v1.sandbox-released"


def event_id(key: str, kind: EventType) -> str:
    """The id of `kind` for `key` (a receipt reference, or a descriptor's transition)."""
    return hashlib.sha256(f"{key}\n{kind.value}".encode()).hexdigest()


def envelope(
    kind: EventType,
    *,
    key: str,
    source: str,
    subject: str,
    time: str | None,
    data: Mapping[str, Any],
) -> dict[str, Any]:
    event: dict[str, Any] = {
        "specversion": SPEC_VERSION,
        "id": event_id(key, kind),
        "type": kind.value,
        "source": source,
        "subject": subject,
        "datacontenttype": "application/json",
        "data": dict(data),
    }
    if time:
        event["time"] = time
    return event


def source_of(base: str, namespace: str) -> str:
    return f"{base.rstrip('/')}/namespaces/{namespace}"


def receipt_events(receipt: Mapping[str, Any], ref: str, *, source: str) -> list[dict[str, Any]]:
    """The events a stored receipt stands for (in the order a consumer should see them)."""
    if receipt.get("duplicateOf"):
        return []
    namespace = str(receipt.get("tenantId") or "")
    base: dict[str, Any] = {
        "key": ref,
        "source": source_of(source, namespace),
        "subject": f"toolinvocations/{receipt.get('invocationName')}",
        "time": receipt.get("endedAt") or receipt.get("writtenAt"),
    }
    state = receipt.get("state")
    confirmation = receipt.get("effectConfirmation") or {}
    confirmed = bool(confirmation.get("recorded"))
    events: list[dict[str, Any]] = []
    sandbox = receipt.get("sandbox") or {}
    lease = sandbox.get("leaseId")
    if lease and not confirmed:
        events.append(
            envelope(
                EventType.SANDBOX_LEASED,
                **base,
                data={
                    "leaseId": lease,
                    "invocationId": receipt.get("invocationId"),
                    "tenantId": namespace,
                    "kind": sandbox.get("kind"),
                    "poolId": sandbox.get("poolId"),
                },
            )
        )
        events.append(
            envelope(
                EventType.SANDBOX_RELEASED,
                **base,
                data={
                    "leaseId": lease,
                    "tenantId": namespace,
                    "reason": f"invocation ended {state}",
                },
            )
        )
    if state == "Denied":
        events.append(
            envelope(
                EventType.TOOL_INVOCATION_DENIED,
                **base,
                data={
                    "invocationId": receipt.get("invocationId"),
                    "tenantId": namespace,
                    "toolId": receipt.get("toolId"),
                    # The failure class, never the message: a denial's message may quote
                    # what the agent sent (a block-listed command line, a schema error's
                    # value), which stays in the receipt and never leaves for the sink.
                    "reason": receipt.get("failureClass") or "denied",
                    "stage": receipt.get("deniedStage") or "",
                },
            )
        )
    elif state == "Uncertain" and not confirmed:
        events.append(
            envelope(
                EventType.TOOL_EFFECT_UNCERTAIN,
                **base,
                data={
                    "invocationId": receipt.get("invocationId"),
                    "tenantId": namespace,
                    "runId": receipt.get("runId"),
                    "attemptId": receipt.get("attemptId"),
                    "toolId": receipt.get("toolId"),
                    "effectiveClass": receipt.get("effectiveClass"),
                },
            )
        )
    elif state in ("Observed", "Failed", "Cancelled") or confirmed:
        events.append(
            envelope(
                EventType.TOOL_INVOKED,
                **base,
                data={
                    "invocationId": receipt.get("invocationId"),
                    "tenantId": namespace,
                    "projectId": receipt.get("projectId") or namespace,
                    "runId": receipt.get("runId"),
                    "attemptId": receipt.get("attemptId"),
                    "toolId": receipt.get("toolId"),
                    "toolVersion": receipt.get("toolVersion"),
                    "effectiveClass": receipt.get("effectiveClass"),
                    "state": state,
                    "policyDecisionId": receipt.get("policyDecisionId"),
                    "approvalId": receipt.get("approvalId"),
                    "requestHash": receipt.get("requestHash"),
                    "resultHash": receipt.get("resultHash"),
                },
            )
        )
    return events


def descriptor_event(
    kind: EventType,
    *,
    source: str,
    namespace: str,
    name: str,
    uid: str,
    generation: int | str,
    spec: Mapping[str, Any],
    time: str,
    reason: str = "",
) -> dict[str, Any]:
    """ToolDescriptorActivated or Retired; one id per descriptor generation and type."""
    data: dict[str, Any] = {
        "toolId": spec.get("toolId"),
        "version": spec.get("version"),
        "tenantId": namespace,
    }
    if kind is EventType.TOOL_DESCRIPTOR_ACTIVATED:
        data.update(sideEffectClass=spec.get("sideEffectClass"), kind=spec.get("kind"))
    else:
        data["reason"] = reason
    return envelope(
        kind,
        key=f"tooldescriptors/{uid}/{generation}",
        source=source_of(source, namespace),
        subject=f"tooldescriptors/{name}",
        time=time,
        data=data,
    )
