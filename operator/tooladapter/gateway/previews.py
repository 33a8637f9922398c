"""The REST dry run: what a call would meet now, answered without creating anything.

The same preview the operator writes to `status.preview` of a `spec.dryRun` invocation
(`previewing.dry_run`), fed from here: the descriptor is read with the caller's own token
(a caller who may not read descriptors previews nothing), the tenant policies, the
namespace's labels and the MCP server's discovery with the operator's client (a caller
may not be able to read them, yet they decide its call), and the permission questions are
reviewed for the authenticated caller. Nothing is created, claimed or counted.

A caller who may not create ToolInvocations in the namespace is refused (403): it could
not make the call at all, so there is nothing to preview.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from tooladapter.catalog import Entry
from tooladapter.census import blocks_retries
from tooladapter.enums import Resource
from tooladapter.gateway.context import Caller, Deps
from tooladapter.gateway.errors import ProblemError, from_api
from tooladapter.gateway.views.problems import ProblemKind
from tooladapter.gateway.views.tools import ToolCall, callable_versions, parse_descriptors
from tooladapter.kube import dataflow as kdataflow
from tooladapter.kube.callers import CallerApiError
from tooladapter.kube.client import NotFound
from tooladapter.model import Caller as SpecCaller
from tooladapter.model import ToolPolicySpec
from tooladapter.pipeline.availability import published_versions
from tooladapter.pipeline.permission import Question
from tooladapter.pipeline.preview import Preview
from tooladapter.previewing import Found, Policies, dry_run, preview_settings

Body = dict[str, Any]


class GatewayLookups:
    """A dry run's inputs for one authenticated caller; the descriptors it listed are
    kept, so the version chosen and the one previewed are read once."""

    def __init__(self, deps: Deps, caller: Caller, descriptors: list[Body]) -> None:
        self.deps = deps
        self.caller = caller
        self.descriptors = descriptors

    async def descriptor(self, namespace: str, tool_id: str, version: str) -> Found:
        for item in self.descriptors:
            spec = item.get("spec") or {}
            if spec.get("toolId") == tool_id and spec.get("version") == version:
                return Found(item)
        return Found(None, published_versions(self.descriptors, tool_id))

    async def policies(self, namespace: str) -> Policies:
        items = await self.deps.kube.list_custom(Resource.POLICIES, namespace)
        policies: list[tuple[str, ToolPolicySpec | str]] = []
        for item in items:
            entry = Entry.parse(ToolPolicySpec, item)
            policies.append(
                (
                    f"{namespace}/{entry.name}",
                    entry.spec if entry.spec is not None else (entry.error or "unreadable"),
                )
            )
        return policies

    async def namespace_labels(self, namespace: str) -> Mapping[str, str]:
        try:
            return await self.deps.kube.namespace_labels(namespace)
        except NotFound:
            return {}

    async def mcp_annotations(
        self, namespace: str, server: str, tool: str
    ) -> Mapping[str, Any] | None:
        try:
            body = await self.deps.kube.get_custom(Resource.MCP_SERVERS, namespace, server)
        except NotFound:
            return None
        for info in (body.get("status") or {}).get("tools") or []:
            if isinstance(info, Mapping) and info.get("name") == tool:
                annotations = info.get("annotations")
                return annotations if isinstance(annotations, Mapping) else None
        return None

    async def unconfirmed(self, namespace: str, tool_id: str, hashes: Sequence[str]) -> list[str]:
        # The operator's client (an Uncertain call of another caller blocks this one too);
        # only names reach the preview, and only when the caller may read them (below).
        items = await self.deps.kube.list_custom(
            Resource.INVOCATIONS,
            namespace,
            field_selector=f"status.state=Uncertain,spec.tool.id={tool_id}",
        )
        held = sorted(
            str(item["metadata"]["name"])
            for item in items
            if blocks_retries(item)
            and (
                (item.get("status") or {}).get("effectHash")
                or (item.get("status") or {}).get("requestHash")
            )
            in hashes
        )
        if held and not await self.deps.reviews.allowed(
            self.caller.identity,
            namespace=namespace,
            verb="get",
            resource=Resource.INVOCATIONS,
            name=held[0],
        ):
            return ["an earlier call"]
        return held

    async def scope_store(self, namespace: str, name: str) -> Mapping[str, str] | None:
        # The operator's client: the stores are the operator's (an agent reads none).
        stored = await kdataflow.read_config_map(self.deps.kube, namespace=namespace, name=name)
        # Labels whose write is pending count as the real call's gate counts them.
        return self.deps.pending_labels.over_store(namespace, name, stored)

    async def allowed(self, namespace: str, caller: SpecCaller, question: Question) -> bool:
        # The spec's caller is this request's caller (`invocation_body`); the review uses
        # the whole TokenReview identity (uid, extra), as the API server would.
        try:
            return await self.deps.reviews.allowed(
                self.caller.identity,
                namespace=namespace,
                verb=question.verb,
                resource=question.resource,
                name=question.name,
            )
        except CallerApiError as exc:
            raise from_api(exc, "reviewing the caller's grants") from exc


def _version(items: list[Body], tool_id: str, wanted: str | None) -> str:
    """The version to preview: the one asked for (callable or not: the preview says why
    not), else the highest callable one, as a tools/call without a version would take."""
    if wanted is not None:
        return wanted
    versions = callable_versions(parse_descriptors(items)).get(tool_id)
    if not versions:
        published = published_versions(items, tool_id)
        hint = f" (published: {', '.join(published)})" if published else ""
        raise ProblemError(ProblemKind.NOT_FOUND, f"no callable version of tool {tool_id!r}{hint}")
    return versions[0].spec.version


async def preview_call(deps: Deps, caller: Caller, call: ToolCall) -> Preview:
    """The preview of `caller` making `call` now."""
    namespace = call.namespace
    try:
        may_create = await deps.reviews.allowed(
            caller.identity, namespace=namespace, verb="create", resource=Resource.INVOCATIONS
        )
    except CallerApiError as exc:
        raise from_api(exc, "reviewing the caller's grants") from exc
    if not may_create:
        raise ProblemError(
            ProblemKind.FORBIDDEN,
            f"{caller.identity.username} may not create toolinvocations in {namespace}",
        )
    try:
        items = await caller.api.list(Resource.DESCRIPTORS, namespace)
    except CallerApiError as exc:
        raise from_api(exc, f"listing tool descriptors in {namespace}") from exc
    version = _version(items, call.tool_id, call.options.version)
    try:
        body = call.body(
            version=version, username=caller.identity.username, groups=caller.identity.groups
        )
    except ValueError as exc:
        raise ProblemError(
            ProblemKind.INVALID, f"the call cannot become an invocation: {exc}"
        ) from exc
    spec = {**body["spec"], "dryRun": True}
    return await dry_run(
        GatewayLookups(deps, caller, items),
        namespace=namespace,
        spec=spec,
        settings=preview_settings(deps.in_force()),
    )
