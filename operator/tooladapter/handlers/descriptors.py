"""ToolDescriptor reconciliation: validate, set active/healthy with conditions, announce.

Status is computed by a pure function from the spec (and, for MCP tools, the server's
discovery) and written only when it changed, so watch echoes of our own writes cost nothing.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from pydantic import ValidationError

from tooladapter.egress.core.cidr_bounds import CidrBounds, descriptor_cidr_problems
from tooladapter.enums import Resource, ToolKind
from tooladapter.events import object_ref
from tooladapter.model import (
    DEFAULT_MAX_RESULT_BYTES,
    DEFAULT_TIMEOUT_SECONDS,
    Condition,
    ToolDescriptorSpec,
    ToolDescriptorStatus,
    describe_errors,
    effective_max_result_bytes,
    effective_timeout,
)
from tooladapter.pipeline.hashing import digest
from tooladapter.pipeline.validation.descriptor import check_descriptor
from tooladapter.pipeline.validation.schemas import unknown_keywords
from tooladapter.receipts.core.cloudevents import EventType, descriptor_event
from tooladapter.runtime import Runtime
from tooladapter.sandbox.job import runtime_class_for
from tooladapter.timeutil import now_iso

logger = logging.getLogger("tooladapter.descriptors")

#: The condition that says whether every schema keyword is one JSON Schema defines.
SCHEMA_KEYWORDS = "SchemaKeywords"


def desired_status(
    body: dict[str, Any],
    *,
    mcp_health: tuple[bool, str, str] | None = None,
    missing_runtime_class: str | None = None,
    default_timeout_seconds: int = DEFAULT_TIMEOUT_SECONDS,
    max_result_bytes: int = DEFAULT_MAX_RESULT_BYTES,
    cidr_bounds: CidrBounds | None = None,
) -> ToolDescriptorStatus:
    """active/healthy/conditions from the spec alone (plus MCP health when bound to a server,
    and whether the RuntimeClass its sandbox would run with exists), and the timeout and
    result bound calls get (the operator's settings when the spec sets none)."""
    generation = body["metadata"].get("generation")
    try:
        spec = ToolDescriptorSpec.model_validate(body.get("spec") or {})
    except ValidationError as exc:
        return _status(False, False, "Invalid", describe_errors(exc), generation, None)
    problems_list = check_descriptor(spec)
    # CIDRs become ipBlocks around the egress proxy: bounded by the cluster's setting.
    problems_list.extend(descriptor_cidr_problems(spec, cidr_bounds or CidrBounds()))
    schema_digest = digest({"input": spec.input_schema, "output": spec.output_schema})
    if problems_list:
        status = _status(
            False, False, "Invalid", "; ".join(problems_list), generation, schema_digest
        )
    else:
        status = _active_status(spec, generation, schema_digest, mcp_health, missing_runtime_class)
        status = _flag_unknown_keywords(status, spec, generation)
    status.effective_timeout_seconds = effective_timeout(spec, default_timeout_seconds)
    status.effective_max_result_bytes = effective_max_result_bytes(spec, max_result_bytes)
    return status


def _flag_unknown_keywords(
    status: ToolDescriptorStatus, spec: ToolDescriptorSpec, generation: int | None
) -> ToolDescriptorStatus:
    """Unknown schema keywords are ignored by validation: say so on the status (condition
    SchemaKeywords and the message), so nobody believes a rule is enforced that is not."""
    found = [
        f"{what} {finding}"
        for what, schema in (
            ("inputSchema", spec.input_schema),
            ("outputSchema", spec.output_schema),
        )
        for finding in unknown_keywords(schema)
    ]
    if found:
        text = "; ".join(found[:20]) + (f" and {len(found) - 20} more" if len(found) > 20 else "")
        message = f"unknown JSON Schema keywords, ignored by validation: {text}"
        status.message = f"{status.message}; {message}"
        condition = Condition(
            type=SCHEMA_KEYWORDS,
            status="False",
            reason="UnknownKeywords",
            message=message[:1024],
            observed_generation=generation,
        )
    else:
        condition = Condition(
            type=SCHEMA_KEYWORDS,
            status="True",
            reason="AllKnown",
            message="every schema keyword is one JSON Schema 2020-12 defines",
            observed_generation=generation,
        )
    status.conditions.append(condition)
    return status


def _active_status(
    spec: ToolDescriptorSpec,
    generation: int | None,
    schema_digest: str,
    mcp_health: tuple[bool, str, str] | None,
    missing_runtime_class: str | None,
) -> ToolDescriptorStatus:
    if spec.retired:
        return _status(
            False,
            True,
            "Retired",
            f"marked retired (calls in flight: {spec.retirement.in_flight})",
            generation,
            schema_digest,
        )
    if missing_runtime_class is not None:
        # Never claim an isolation that would not happen: no silent fallback to runc.
        return _status(
            False,
            False,
            "RuntimeClassMissing",
            f"sandbox kind {spec.sandbox_spec.kind if spec.sandbox_spec else '?'} needs "
            f"RuntimeClass {missing_runtime_class!r}, which this cluster does not have "
            "(install it, or map the kind to another class with TOOLADAPTER_RUNTIME_CLASSES)",
            generation,
            schema_digest,
        )
    if spec.kind == ToolKind.MCP:
        healthy, reason, message = mcp_health or (False, "ServerUnknown", "MCP server not known")
        return _status(True, healthy, reason, message, generation, schema_digest)
    return _status(True, True, "Active", "valid and active", generation, schema_digest)


def _status(
    active: bool,
    healthy: bool,
    reason: str,
    message: str,
    generation: int | None,
    schema_digest: str | None,
) -> ToolDescriptorStatus:
    return ToolDescriptorStatus(
        active=active,
        healthy=healthy,
        schema_digest=schema_digest,
        message=message,
        observed_generation=generation,
        conditions=[
            Condition(
                type="Ready",
                status="True" if active and healthy else "False",
                reason=reason,
                message=message[:1024],
                observed_generation=generation,
            ),
        ],
    )


def _same(a: dict[str, Any], b: dict[str, Any]) -> bool:
    def strip(s: dict[str, Any]) -> dict[str, Any]:
        out = dict(s)
        out["conditions"] = [
            {k: v for k, v in c.items() if k != "lastTransitionTime"}
            for c in out.get("conditions", [])
        ]
        return out

    return strip(a) == strip(b)


async def integration_event(
    rt: Runtime, body: dict[str, Any], kind: EventType, reason: str = ""
) -> None:
    """The transition into the events outbox (`outbox`), once per descriptor generation and
    type; a store that refuses is logged: the Kubernetes event above still says it."""
    if rt.outbox is None or not rt.outbox.enabled:
        return
    meta = body["metadata"]
    event = descriptor_event(
        kind,
        source=rt.settings.event_sink.source,
        namespace=meta["namespace"],
        name=meta["name"],
        uid=str(meta.get("uid")),
        generation=meta.get("generation") or 0,
        spec=body.get("spec") or {},
        time=now_iso(),
        reason=reason,
    )
    try:
        await asyncio.to_thread(rt.outbox.enqueue, event)
    except Exception as exc:
        logger.warning("descriptor %s: its %s event not kept (%s)", meta["name"], kind, exc)
        return
    rt.outbox.wake.set()


async def reconcile_descriptor(rt: Runtime, event_type: str | None, body: dict[str, Any]) -> None:
    meta = body["metadata"]
    current = body.get("status") or {}
    spec = body.get("spec") or {}
    ident = f"{spec.get('toolId')}@{spec.get('version')}"
    if event_type == "DELETED":
        if current.get("active"):
            rt.events.post(
                _ref(body),
                reason="ToolDescriptorRetired",
                message=f"{ident} retired: descriptor deleted",
            )
            await integration_event(
                rt, body, EventType.TOOL_DESCRIPTOR_RETIRED, "descriptor deleted"
            )
        return
    mcp_health = rt.mcp.descriptor_health(meta["namespace"], spec) if rt.mcp else None
    egress = rt.settings.egress
    desired = desired_status(
        body,
        mcp_health=mcp_health,
        missing_runtime_class=await missing_runtime_class(rt, body),
        default_timeout_seconds=rt.settings.limits.default_timeout_seconds,
        max_result_bytes=rt.settings.limits.max_result_bytes,
        cidr_bounds=CidrBounds(
            egress.descriptor_cidrs,
            egress.descriptor_cidr_min_prefix_v4,
            egress.descriptor_cidr_min_prefix_v6,
        ),
    ).wire()
    if _same(current, desired):
        return
    for cond in desired.get("conditions", []):
        old: dict[str, Any] = next(
            (c for c in current.get("conditions", []) if c.get("type") == cond["type"]), {}
        )
        same = old.get("status") == cond["status"]
        cond["lastTransitionTime"] = old.get("lastTransitionTime") if same else now_iso()
    written = await rt.cluster.patch_status(
        Resource.DESCRIPTORS, meta["namespace"], meta["name"], desired
    )
    # Calls are judged on the catalog: hold what was written now, not when the watch's echo
    # comes (kopf batches an object's events for 0.1 s), or a call made the moment the
    # status says active is denied as "not active".
    rt.catalog.wrote(Resource.DESCRIPTORS, body, written)
    if desired["active"] and not current.get("active"):
        rt.events.post(
            _ref(body),
            reason="ToolDescriptorActivated",
            message=f"{ident} is callable (kind {spec.get('kind')}, "
            f"class {spec.get('sideEffectClass')})",
        )
        await integration_event(rt, body, EventType.TOOL_DESCRIPTOR_ACTIVATED)
        start_pool(rt, meta["namespace"], spec)
    elif current.get("active") and not desired["active"]:
        rt.events.post(
            _ref(body),
            reason="ToolDescriptorRetired",
            message=f"{ident} retired: {desired.get('message')}",
        )
        await integration_event(
            rt, body, EventType.TOOL_DESCRIPTOR_RETIRED, str(desired.get("message") or "")
        )
    ready = desired["conditions"][0]
    was: dict[str, Any] = next(
        (c for c in current.get("conditions", []) if c.get("type") == "Ready"), {}
    )
    if held_back(ready["reason"]) and (was.get("reason"), was.get("message")) != (
        ready["reason"],
        ready["message"],
    ):
        # Held back by the cluster or its server, not by its own spec: say why once.
        rt.events.post(
            _ref(body),
            warning=True,
            reason=f"ToolDescriptor{ready['reason']}",
            message=str(ready["message"])[:1024],
        )
    if not desired["active"] and desired["conditions"][0]["reason"] == "Invalid":
        rt.events.post(
            _ref(body),
            warning=True,
            reason="ToolDescriptorInvalid",
            message=str(desired.get("message"))[:1024],
        )


def start_pool(rt: Runtime, namespace: str, spec: dict[str, Any]) -> None:
    """A sandboxed descriptor became active: its profile's warm pool starts (one pod), so
    the namespace's first call finds a ready sandbox."""
    if rt.warm is None or spec.get("kind") not in (ToolKind.SHELL, ToolKind.CONTAINER):
        return
    try:
        descriptor = ToolDescriptorSpec.model_validate(spec)
    except ValidationError:
        return
    rt.warm.activated(namespace, descriptor)


def held_back(reason: str) -> bool:
    """Whether a Ready reason holds a valid descriptor back for something outside its spec:
    a RuntimeClass the cluster lacks, its MCP server not being Active, or the server's tool
    admitting keys it does not declare (each posts a Warning event `ToolDescriptor<reason>`
    when it appears or its message changes)."""
    return reason in ("RuntimeClassMissing", "OpenSchema") or (
        reason.startswith("Server") and reason != "Server"
    )


async def missing_runtime_class(rt: Runtime, body: dict[str, Any]) -> str | None:
    """The RuntimeClass the descriptor's sandbox would run with, if the cluster lacks it."""
    try:
        sandbox = ToolDescriptorSpec.model_validate(body.get("spec") or {}).sandbox_spec
    except ValidationError:
        return None
    name = (
        runtime_class_for(sandbox, dict(rt.settings.sandbox.runtime_classes)) if sandbox else None
    )
    if name is None or await rt.cluster.runtime_class_exists(name):
        return None
    return name


def _ref(body: dict[str, Any]) -> dict[str, Any]:
    return object_ref("ToolDescriptor", body["metadata"])
