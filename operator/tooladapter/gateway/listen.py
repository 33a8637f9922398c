"""`subscriptions/listen` (2026-07-28): tell a listening client its tool list changed.

The era's channel for list changes is a listen request whose response is the stream (no
standing GET stream, no session). One listen is one follow of the namespace's
descriptors, watched with the caller's own token: each change that can alter what the
caller sees (a descriptor's tool id, version, callability or digest) re-reads the
caller's invocable tools, and when their MCP wire form changed (a new tool, one gone, a
changed descriptor digest) the stream carries `notifications/tools/list_changed`. Grants
are re-read at that moment too; a grant change alone is seen at the next re-list.

A listen holds one of the caller's and the namespace's stream doors (`doors.py`), like a
follow of a call, and ends gracefully after `LISTEN_SECONDS` (the client listens again and
refetches, as the protocol expects of any stream end), so a held listen cannot pin the
gateway. The 2025-11-25 era's channel (a GET stream of a session) does not exist on a
stateless endpoint: those clients see a changed digest in the tool's `_meta` when they
list again.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Mapping
from contextlib import aclosing
from typing import Any, Final

from mcp import types
from mcp.server.context import ServerRequestContext
from mcp.shared.exceptions import MCPError
from mcp.shared.subscriptions import SUBSCRIPTION_ID_META_KEY

from tooladapter.enums import Resource
from tooladapter.gateway.auth import too_many
from tooladapter.gateway.context import Caller, Deps
from tooladapter.gateway.doors import Busy
from tooladapter.gateway.errors import ProblemError
from tooladapter.gateway.tools import invocable
from tooladapter.gateway.views.tools import ToolEntry, mcp_tool, parse_descriptors
from tooladapter.kube.callers import CallerApiError
from tooladapter.pipeline.hashing import descriptor_digest

#: A listen stream ends (gracefully) after this long; the client listens again.
LISTEN_SECONDS: Final = 600


def listing_key(item: Mapping[str, Any]) -> tuple[Any, ...] | None:
    """What of one descriptor can change a caller's tool list (None: it does not parse)."""
    entries = parse_descriptors([item])
    if not entries:
        return None
    entry = entries[0]
    return (entry.spec.tool_id, entry.spec.version, entry.callable, _digest(entry))


def _digest(entry: ToolEntry) -> str:
    return descriptor_digest(entry.spec.wire())


def tools_signature(tools: Mapping[str, list[ToolEntry]]) -> str:
    """A digest of the tools/list answer (the MCP wire form of each tool)."""
    wire = [mcp_tool(versions[0]) for versions in tools.values()]
    return hashlib.sha256(json.dumps(wire, sort_keys=True).encode()).hexdigest()


async def _signature(deps: Deps, caller: Caller, namespace: str) -> str:
    try:
        return tools_signature(await invocable(deps, caller, namespace))
    except ProblemError as exc:
        raise MCPError(types.INVALID_REQUEST, f"{exc.kind.summary}: {exc.detail}") from exc


async def serve_listen(
    ctx: ServerRequestContext[Any],
    params: types.SubscriptionsListenRequestParams,
    *,
    deps: Deps,
    caller: Caller,
    namespace: str,
) -> types.SubscriptionsListenResult:
    subscription = ctx.request_id
    if subscription is None:
        raise MCPError(types.INVALID_REQUEST, "subscriptions/listen requires a request id")
    meta: dict[str, Any] = {SUBSCRIPTION_ID_META_KEY: subscription}
    wanted = bool(params.notifications.tools_list_changed)
    honored = types.SubscriptionFilter(tools_list_changed=True if wanted else None)
    try:
        held = deps.doors.take_stream(caller.identity.username, [namespace])
    except Busy as exc:
        problem = too_many(exc)
        raise MCPError(types.INVALID_REQUEST, f"{problem.kind.summary}: {problem.detail}") from None
    try:
        seen = await _signature(deps, caller, namespace) if wanted else ""
        await ctx.session.send_notification(
            types.SubscriptionsAcknowledgedNotification(
                params=types.SubscriptionsAcknowledgedNotificationParams(
                    notifications=honored, _meta=meta
                )
            ),
            related_request_id=subscription,
        )
        if wanted:
            await _follow(ctx, deps, caller, namespace, seen, meta, subscription)
    finally:
        deps.doors.give(held)
    return types.SubscriptionsListenResult(_meta=meta)


async def _follow(
    ctx: ServerRequestContext[Any],
    deps: Deps,
    caller: Caller,
    namespace: str,
    seen: str,
    meta: dict[str, Any],
    subscription: Any,
) -> None:
    ends = time.monotonic() + LISTEN_SECONDS
    keys: dict[str, tuple[Any, ...] | None] = {}
    version = ""
    while time.monotonic() < ends:
        try:
            if not version:
                version = await caller.api.collection_version(Resource.DESCRIPTORS, namespace)
            changes = caller.api.watch_changes(Resource.DESCRIPTORS, namespace, version)
            async with aclosing(changes) as stream:
                async for kind, obj in stream:
                    version = str((obj.get("metadata") or {}).get("resourceVersion") or version)
                    name = str((obj.get("metadata") or {}).get("name") or "")
                    key = None if kind == "DELETED" else listing_key(obj)
                    if name in keys and keys[name] == key:
                        continue
                    keys[name] = key
                    now = await _signature(deps, caller, namespace)
                    if now != seen:
                        seen = now
                        await ctx.session.send_notification(
                            types.ToolListChangedNotification(
                                params=types.NotificationParams(_meta=meta)
                            ),
                            related_request_id=subscription,
                        )
                    if time.monotonic() >= ends:
                        return
        except CallerApiError as exc:
            if exc.status == 410:
                version = ""  # too old: start from now (the next change is compared anyway)
                continue
            return  # the caller may no longer watch: the stream ends, the client re-lists
