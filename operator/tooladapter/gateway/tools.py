"""The tools a caller may invoke in a namespace: the tool list of REST and MCP alike.

Descriptors are read with the caller's token (so a caller who may not read them sees
none), reduced to the callable versions (`pipeline.toolview`), and kept only where a
SubjectAccessReview says the caller may `invoke` the tool: exactly the grant the
pipeline's permission stage checks (it also checks `use` on the call's effective class,
which can be known only at call time).
"""

from __future__ import annotations

import asyncio

from ..enums import Resource
from ..kube.callers import CallerApiError
from ..pipeline.toolview import ToolEntry, callable_versions, parse_descriptors
from .context import Caller, Deps
from .errors import from_api


async def invocable(deps: Deps, caller: Caller, namespace: str) -> dict[str, list[ToolEntry]]:
    """tool id -> its callable versions (highest first), for the tools `caller` may invoke."""
    try:
        items = await caller.api.list(Resource.DESCRIPTORS, namespace)
    except CallerApiError as exc:
        raise from_api(exc, f"listing tool descriptors in {namespace}") from exc
    versions = callable_versions(parse_descriptors(items))
    try:
        verdicts = await asyncio.gather(
            *(
                deps.reviews.allowed(
                    caller.identity,
                    namespace=namespace,
                    verb="invoke",
                    resource=Resource.DESCRIPTORS,
                    name=tool_id,
                )
                for tool_id in versions
            )
        )
    except CallerApiError as exc:
        raise from_api(exc, "reviewing the caller's grants") from exc
    return {
        tool_id: entries
        for (tool_id, entries), allowed in zip(versions.items(), verdicts, strict=True)
        if allowed
    }
