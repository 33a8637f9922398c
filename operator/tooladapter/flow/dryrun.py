"""Dry run: a call with `spec.dryRun: true` is previewed, never executed.

The preview (`previewing.dry_run`, shared with the gateway's REST dry run) is fed what
the flow would use: the descriptor and policies from the catalog, the namespace's labels,
the MCP tool's annotations, and the caller's RBAC answers to the very questions the
permission stage would ask (`CatalogLookups`). It is written
once, with the terminal state Previewed; no idempotency key is claimed, no fencing token
recorded, no rate limit or invocation metric counted and no credential brokered.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from tooladapter.enums import InvocationState, PreviewVerdict, Resource
from tooladapter.flow.context import FlowContext
from tooladapter.model import Caller
from tooladapter.pipeline.availability import published_versions
from tooladapter.pipeline.permission import Question
from tooladapter.previewing import Found, Policies, dry_run, preview_settings
from tooladapter.timeutil import now_iso

Body = dict[str, Any]


def is_dry_run(body: Body) -> bool:
    return (body.get("spec") or {}).get("dryRun") is True


class CatalogLookups:
    """A dry run's inputs as a real call reads them: the watched catalog (the API server
    for a descriptor not watched yet) and SubjectAccessReviews for the spec's caller."""

    def __init__(self, ctx: FlowContext) -> None:
        self.ctx = ctx

    async def descriptor(self, namespace: str, tool_id: str, version: str) -> Found:
        entry = self.ctx.rt.catalog.find_descriptor(namespace, tool_id, version)
        if entry is not None:
            return Found(entry.body)
        # As a call does: a tool published a moment ago may not have reached the watch.
        known = await self.ctx.rt.cluster.list_all(Resource.DESCRIPTORS, namespace)
        descriptor = None
        for item in known:
            ispec = item.get("spec") or {}
            if ispec.get("toolId") == tool_id and ispec.get("version") == version:
                descriptor = item
        return Found(descriptor, published_versions(known, tool_id))

    async def policies(self, namespace: str) -> Policies:
        return [
            (f"{namespace}/{p.name}", p.spec if p.spec is not None else (p.error or "unreadable"))
            for p in self.ctx.rt.catalog.policies.in_namespace(namespace)
        ]

    async def namespace_labels(self, namespace: str) -> Mapping[str, str]:
        return self.ctx.rt.catalog.namespace_labels(namespace)

    async def mcp_annotations(
        self, namespace: str, server: str, tool: str
    ) -> Mapping[str, Any] | None:
        info = self.ctx.rt.catalog.discovered_tool(namespace, server, tool)
        annotations = (info or {}).get("annotations")
        return annotations if isinstance(annotations, Mapping) else None

    async def unconfirmed(self, namespace: str, tool_id: str, hashes: Sequence[str]) -> list[str]:
        held = self.ctx.rt.census.unconfirmed_with(namespace, *hashes)
        if not held:
            return held
        caller = self.ctx.load_spec().caller
        verdict = await self.ctx.rt.cluster.can(
            user=caller.name,
            namespace=namespace,
            verb="get",
            resource=Resource.INVOCATIONS,
            name=held[0],
            groups=caller.groups,
        )
        return held if verdict.allowed else ["an earlier call"]

    async def scope_store(self, namespace: str, name: str) -> Mapping[str, str] | None:
        stored = await self.ctx.rt.cluster.read_config_map(namespace, name)
        # Labels whose write is pending count as the real call's gate counts them.
        return self.ctx.rt.pending_labels.over_store(namespace, name, stored)

    async def allowed(self, namespace: str, caller: Caller, question: Question) -> bool:
        verdict = await self.ctx.rt.cluster.can(
            user=caller.name,
            namespace=namespace,
            verb=question.verb,
            resource=question.resource,
            name=question.name,
            groups=caller.groups,
        )
        return verdict.allowed


async def on_dry_run(ctx: FlowContext) -> None:
    preview = await dry_run(
        CatalogLookups(ctx),
        namespace=ctx.namespace,
        spec=ctx.body.get("spec") or {},
        settings=preview_settings(ctx.rt.settings),
    )
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
