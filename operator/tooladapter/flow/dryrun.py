"""Dry run: a call with `spec.dryRun: true` is previewed, never executed.

The preview (`pipeline.preview`) is fed what the flow would use: the descriptor and
policies from the catalog, the namespace's labels, the MCP tool's annotations, and the
caller's RBAC answers to the very questions the permission stage would ask. It is written
once, with the terminal state Previewed; no idempotency key is claimed, no fencing token
recorded, no rate limit or invocation metric counted and no credential brokered.
"""

from __future__ import annotations

import asyncio
from typing import Any

from .. import offload
from ..enums import InvocationState, PreviewVerdict, Resource
from ..model import ToolPolicySpec
from ..pipeline.availability import published_versions
from ..pipeline.preview import Permission, PreviewSettings, conclude, evaluate
from ..timeutil import now_iso
from .context import FlowContext

Body = dict[str, Any]


def is_dry_run(body: Body) -> bool:
    return (body.get("spec") or {}).get("dryRun") is True


async def on_dry_run(ctx: FlowContext) -> None:
    raw = ctx.body.get("spec") or {}
    tool = raw.get("tool") or {}
    tool_id, version = str(tool.get("id")), str(tool.get("version"))
    catalog = ctx.rt.catalog
    entry = catalog.find_descriptor(ctx.namespace, tool_id, version)
    descriptor = entry.body if entry else None
    published: list[str] = []
    if descriptor is None:
        # As a call does: a tool published a moment ago may not have reached the watch.
        known = await ctx.rt.cluster.list_all(Resource.DESCRIPTORS, ctx.namespace)
        for item in known:
            ispec = item.get("spec") or {}
            if ispec.get("toolId") == tool_id and ispec.get("version") == version:
                descriptor = item
        published = published_versions(known, tool_id)
    policies: list[tuple[str, ToolPolicySpec | str]] = [
        (f"{ctx.namespace}/{p.name}", p.spec if p.spec is not None else (p.error or "unreadable"))
        for p in catalog.policies.in_namespace(ctx.namespace)
    ]
    mcp = ((descriptor or {}).get("spec") or {}).get("mcp") or {}
    annotations = None
    if mcp.get("server") and mcp.get("tool"):
        info = catalog.discovered_tool(ctx.namespace, str(mcp["server"]), str(mcp["tool"]))
        annotations = (info or {}).get("annotations")
    settings = ctx.rt.settings
    evaluation = await offload.run(
        ctx.namespace,
        offload.INLINE_BYTES + 1,  # a dry run is rare: never walk an agent's input inline
        lambda: evaluate(
            namespace=ctx.namespace,
            spec=raw,
            descriptor=descriptor,
            policies=policies,
            settings=PreviewSettings(
                default_approval_timeout_seconds=settings.default_approval_timeout_seconds,
                runtime_classes=tuple(settings.runtime_classes),
                sandbox_image=settings.sandbox_image,
            ),
            namespace_labels=catalog.namespace_labels(ctx.namespace),
            published=published,
            mcp_annotations=annotations,
        ),
    )
    permission = None
    if evaluation.questions and evaluation.call is not None:
        caller = evaluation.call.caller
        invoke, use = await asyncio.gather(
            *(
                ctx.rt.cluster.can(
                    user=caller.name,
                    namespace=ctx.namespace,
                    verb=q.verb,
                    resource=q.resource,
                    name=q.name,
                    groups=caller.groups,
                )
                for q in evaluation.questions
            )
        )
        permission = Permission(invoke=invoke.allowed, use=use.allowed)
    preview = conclude(evaluation, permission)
    status = ctx.status
    status.preview = preview
    status.started_at = status.started_at or now_iso()
    status.ended_at = now_iso()
    status.request_hash = preview.validation.request_hash
    status.descriptor_digest = preview.validation.descriptor_digest
    if preview.classification is not None:
        status.declared_class = preview.classification.declared
        status.effective_class = preview.classification.effective
    if preview.policy is not None:
        status.policy_decision_id = preview.policy.decision_id
    status.message = ctx.bounded(f"dry run, {describe(preview.verdict)}: {preview.message}")
    await ctx.commit(InvocationState.PREVIEWED)
    ctx.trace_end()
    ctx.post(reason="ToolInvocationPreviewed", message=status.message)


def describe(verdict: PreviewVerdict) -> str:
    return verdict.value.replace("-", " ")
