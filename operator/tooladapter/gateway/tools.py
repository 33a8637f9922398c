"""The tools a caller may invoke in a namespace: the tool list of REST and MCP alike.

Descriptors are read with the caller's token (so a caller who may not read them sees
none), reduced to the callable versions (`pipeline.toolview`), and kept only where the
caller may `invoke` the tool: exactly the grant the pipeline's permission stage checks (it
also checks `use` on the call's effective class, which can be known only at call time).

What it costs, whatever the number of descriptors: one list and one SelfSubjectRulesReview
asked with the caller's own token (`AsCaller.rules`): the rules every authorizer that can
enumerate them grants the caller in the namespace, matched here as RBAC matches them
(`rules_allow`). Where it can be wrong: the API server says `incomplete: true` when an
authorizer cannot enumerate its rules (a webhook authorizer such as an OPA/Cedar one, or one
that failed). Rules never grant more than the authorizers do, so a tool they allow is
listed; a tool they do not allow is then asked one SubjectAccessReview each, at most
`FALLBACK_CONCURRENCY` at a time, allowances remembered (`AllowCache`): bounded per list
by the number of descriptors the rules miss, and only on such clusters. A deny rule of a
webhook authorizer does not show in the rules either: the pipeline's own
SubjectAccessReview at call time still refuses such a call (Denied at `permission`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Mapping
from typing import Any, Final

from tooladapter import GROUP
from tooladapter.enums import Resource
from tooladapter.gateway.context import Caller, Deps
from tooladapter.gateway.errors import from_api
from tooladapter.gateway.views.tools import ToolEntry, callable_versions, parse_descriptors
from tooladapter.kube.callers import CallerApiError

#: SubjectAccessReviews asked at once when the rules review was incomplete.
FALLBACK_CONCURRENCY: Final = 8


def _covers(values: Iterable[Any] | None, wanted: str) -> bool:
    return any(v in ("*", wanted) for v in values or ())


def rules_allow(
    rules: Iterable[Mapping[str, Any]], verb: str, group: str, resource: str, name: str
) -> bool:
    """Whether one of `rules` (a SelfSubjectRulesReview's `resourceRules`) grants `verb` on
    the object `name` of `group`/`resource`, as RBAC matches a rule: verbs, API groups and
    resources by value or `*`; resource names by value, or any name when none are listed."""
    for rule in rules:
        names = rule.get("resourceNames") or []
        if (
            _covers(rule.get("verbs"), verb)
            and _covers(rule.get("apiGroups"), group)
            and _covers(rule.get("resources"), resource)
            and (not names or name in names)
        ):
            return True
    return False


async def invoke_grants(
    deps: Deps, caller: Caller, namespace: str, tool_ids: list[str]
) -> set[str]:
    """The tools of `tool_ids` the caller may `invoke` in `namespace` (see the module)."""
    if not tool_ids:
        return set()
    try:
        rules, incomplete = await caller.api.rules(namespace)
    except CallerApiError as exc:
        raise from_api(exc, "reviewing the caller's grants") from exc
    granted = {t for t in tool_ids if rules_allow(rules, "invoke", GROUP, Resource.DESCRIPTORS, t)}
    missing = [t for t in tool_ids if t not in granted]
    if not incomplete or not missing:
        return granted
    gate = asyncio.Semaphore(FALLBACK_CONCURRENCY)

    async def ask(tool_id: str) -> bool:
        async with gate:
            return await deps.reviews.allowed(
                caller.identity,
                namespace=namespace,
                verb="invoke",
                resource=Resource.DESCRIPTORS,
                name=tool_id,
            )

    try:
        verdicts = await asyncio.gather(*(ask(t) for t in missing))
    except CallerApiError as exc:
        raise from_api(exc, "reviewing the caller's grants") from exc
    return granted | {t for t, ok in zip(missing, verdicts, strict=True) if ok}


async def invocable(deps: Deps, caller: Caller, namespace: str) -> dict[str, list[ToolEntry]]:
    """tool id -> its callable versions (highest first), for the tools `caller` may invoke."""
    try:
        items = await caller.api.list(Resource.DESCRIPTORS, namespace)
    except CallerApiError as exc:
        raise from_api(exc, f"listing tool descriptors in {namespace}") from exc
    versions = callable_versions(parse_descriptors(items))
    granted = await invoke_grants(deps, caller, namespace, list(versions))
    return {tool_id: entries for tool_id, entries in versions.items() if tool_id in granted}
