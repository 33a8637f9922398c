"""`/ui/events`: server-sent events when a call in the person's namespaces changes.

One watch per chosen namespace (or one cluster-wide), each with the person's own token,
so RBAC decides what they hear about; each event names the call and its state and the
page reads its list again. A watch that ends (at most `WATCH_SECONDS`) goes on from the
last version it saw; a refused one ends the stream. The stream ends when the session does.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from typing import Any, Final

from aiohttp import web

from tooladapter.enums import Resource
from tooladapter.gateway.auth import too_many
from tooladapter.gateway.context import deps_of
from tooladapter.gateway.doors import Busy
from tooladapter.gateway.ui.web import PREFIX, Person, page, secure_headers
from tooladapter.kube.callers import CallerApiError

#: A comment line this often keeps proxies from closing an idle stream.
HEARTBEAT_SECONDS: Final = 15.0
#: After a failed watch, wait this long before the next (the API server may be restarting).
RETRY_SECONDS: Final = 2.0


async def _follow(
    person: Person, namespace: str | None, queue: asyncio.Queue[dict[str, Any]]
) -> None:
    """Put every change of the scope into `queue`. Each (re)start first fixes the version
    the watch starts from, then says SYNCED: the page reads its list again after that, so
    nothing that happened between its first read and the watch is missed."""
    api = person.caller.api
    version: str | None = None
    while True:
        try:
            if version is None:
                version = await api.collection_version(Resource.INVOCATIONS, namespace)
                await queue.put({"type": "SYNCED", "namespace": namespace})
            async for kind, obj in api.watch_changes(Resource.INVOCATIONS, namespace, version):
                meta = obj.get("metadata") or {}
                version = str(meta.get("resourceVersion") or version)
                await queue.put(
                    {
                        "type": kind,
                        "namespace": meta.get("namespace"),
                        "name": meta.get("name"),
                        "state": (obj.get("status") or {}).get("state"),
                    }
                )
        except CallerApiError as exc:
            if exc.status in (401, 403):
                await queue.put({"type": "REFUSED", "namespace": namespace})
                return
            version = None  # 410 (too old) or a failure: read the version again
            await asyncio.sleep(RETRY_SECONDS if exc.status != 410 else 0)


@page
async def events(request: web.Request, person: Person) -> web.StreamResponse:
    scopes: tuple[str | None, ...] = person.session.namespaces or (None,)
    doors = deps_of(request).doors
    try:
        # One slot of the person's streams and of each namespace's (fair doors): beyond
        # them 429 with Retry-After (the browser's EventSource tries again by itself).
        held = doors.take_stream(person.username, scopes)
    except Busy as exc:
        refused = too_many(exc)  # counted; the page's own error view has no Retry-After
        return web.Response(
            status=429, text=refused.detail, headers={"Retry-After": str(exc.retry_after)}
        )
    try:
        return await _stream(request, person, scopes)
    finally:
        doors.give(held)


async def _stream(
    request: web.Request, person: Person, scopes: tuple[str | None, ...]
) -> web.StreamResponse:
    response = web.StreamResponse(
        headers={"Content-Type": "text/event-stream", "X-Accel-Buffering": "no"}
    )
    secure_headers(response)
    await response.prepare(request)
    queue: asyncio.Queue[dict[str, Any]] = asyncio.Queue(maxsize=1000)
    followers = [asyncio.create_task(_follow(person, ns, queue)) for ns in scopes]
    try:
        await response.write(b"retry: 3000\n\n")
        while time.time() < person.session.expires:
            try:
                change = await asyncio.wait_for(queue.get(), HEARTBEAT_SECONDS)
            except TimeoutError:
                await response.write(b": alive\n\n")
                continue
            data = json.dumps(change, separators=(",", ":"))
            await response.write(f"event: change\ndata: {data}\n\n".encode())
    finally:
        for task in followers:
            task.cancel()
        for task in followers:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
    return response


def add_routes(app: web.Application) -> None:
    app.router.add_get(f"{PREFIX}/events", events, allow_head=False)
