"""A lean list-and-watch of one kind of tooladapter object, raw events to a callback.

The invocations are watched here rather than by kopf: every call costs two watch events,
and kopf's per-event machinery (a worker task per object, its causes, loggers and
per-object memories kept until the object is deleted) was a fifth of the operator's CPU per
call under load (`make bench` with py-spy). The handler is synchronous and only routes
(`handlers.routing`); the flows it starts run as their own tasks, so one event never waits
for another object's work.

Listing is paged (a restart with 100,000 stored calls holds one page at a time); after a
relisting (the start, or a watch whose version expired: 410 Gone) `listed` hears every uid
the listing held, so objects deleted while no watch ran are forgotten too. Transient faults
(the API server restarting, a dropped connection) resume from the last version seen.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Callable
from typing import Any

import aiohttp
from kubernetes_asyncio import client

from tooladapter import GROUP, VERSION
from tooladapter.kube.client import Kube, json_body, watch_options
from tooladapter.kube.errors import Conflict, KubeError, VersionExpired, api_errors

logger = logging.getLogger("tooladapter.watch")

Handle = Callable[[dict[str, Any]], None]
Listed = Callable[[set[str]], None]

#: Objects per page of a listing. Small: a page's parsed objects are freed while the census
#: rows made from them live on, and the freed heap between those rows stays resident (with
#: 10,000 stored calls 500 per page kept ~15 MB more after a restart than 100 per page).
PAGE_SIZE = 100
#: Seconds the API server keeps one watch request open (it then ends it; we go on).
WATCH_SECONDS = 300
#: The longest watch line accepted (an object is at most ~1.5 MiB as JSON).
MAX_LINE_BYTES = 16 * 2**20
#: Seconds between attempts after a transient fault.
RETRY_SECONDS = 1.0


class Watcher:
    """List-and-watch `plural` in `namespace` (None: every namespace, filtered by `serves`)."""

    def __init__(
        self,
        kube: Kube,
        plural: str,
        *,
        namespace: str | None,
        serves: Callable[[str], bool],
        handle: Handle,
        listed: Listed,
    ) -> None:
        self.custom = client.CustomObjectsApi(kube.api)
        self.plural = plural
        self.namespace = namespace
        self.serves = serves
        self.handle = handle
        self.listed = listed
        #: Set once the first listing was handled (start-up is complete).
        self.synced = asyncio.Event()
        #: The version of the last event handled: a broken watch resumes after it, so no
        #: event is handled twice (a replayed `Received` body would start its call again).
        self.version: str | None = None

    def _list_call(self) -> tuple[Any, tuple[str, ...]]:
        if self.namespace is None:
            return self.custom.list_cluster_custom_object, (GROUP, VERSION, self.plural)
        where = (GROUP, VERSION, self.namespace, self.plural)
        return self.custom.list_namespaced_custom_object, where

    async def run(self) -> None:
        """Forever: list, then watch from the listing's version; again after a 410."""
        while True:
            try:
                if self.version is None:
                    self.version = await self.relist()
                    self.synced.set()
                await self.watch(self.version)
            except asyncio.CancelledError:
                raise
            except VersionExpired:
                logger.info("watch of %s: version expired; listing again", self.plural)
                self.version = None
            except Exception as exc:
                if not _transient(exc):
                    logger.exception("watch of %s failed; listing again", self.plural)
                    self.version = None
                else:
                    logger.warning(
                        "watch of %s interrupted (%s); resuming", self.plural, type(exc).__name__
                    )
                await asyncio.sleep(RETRY_SECONDS)

    async def relist(self) -> str:
        """Every object, page by page, handled as ADDED; returns the listing's version."""
        method, where = self._list_call()
        uids: set[str] = set()
        token = ""
        version = ""
        while True:
            params: dict[str, Any] = {"limit": PAGE_SIZE}
            if token:
                params["_continue"] = token
            try:
                with api_errors():
                    page = await json_body(await method(*where, _preload_content=False, **params))
            except VersionExpired:
                # The continue token expired between pages: start the listing over.
                uids.clear()
                token = ""
                continue
            meta = page.get("metadata") or {}
            version = str(meta.get("resourceVersion") or version)
            for obj in page.get("items") or []:
                if self.serves(obj["metadata"]["namespace"]):
                    uids.add(obj["metadata"]["uid"])
                    self.deliver({"type": "ADDED", "object": obj})
            token = meta.get("continue") or ""
            if not token:
                break
        self.listed(uids)
        return version

    async def watch(self, version: str) -> None:
        """One watch request from `version`; `self.version` follows every event handled."""
        method, where = self._list_call()
        resp = await method(
            *where,
            resource_version=version,
            allow_watch_bookmarks=True,
            **watch_options(WATCH_SECONDS),
        )
        try:
            if resp.status != 200:
                with api_errors():
                    await json_body(resp)  # raises the API server's answer (410: expired)
            buffer = bytearray()
            async for chunk in resp.content.iter_any():
                # Only the new bytes can end a line: a large event is scanned once.
                scan_from = len(buffer)
                buffer += chunk
                start = 0
                while (end := buffer.find(b"\n", scan_from)) >= 0:
                    line = bytes(buffer[start:end])
                    start = scan_from = end + 1
                    if line.strip():
                        self.version = self.dispatch(line, self.version or version)
                del buffer[:start]
                if len(buffer) > MAX_LINE_BYTES:
                    raise ValueError(f"a watch event of more than {MAX_LINE_BYTES} bytes")
        finally:
            resp.release()

    def dispatch(self, line: bytes, version: str) -> str:
        event = json.loads(line)
        kind = event.get("type")
        obj = event.get("object") or {}
        if kind == "ERROR":
            if obj.get("code") == VersionExpired.STATUS:
                raise VersionExpired(str(obj.get("message") or "the watch's version is too old"))
            raise RuntimeError(f"watch error: {obj.get('message') or obj}")
        meta = obj.get("metadata") or {}
        version = str(meta.get("resourceVersion") or version)
        if kind != "BOOKMARK" and self.serves(meta.get("namespace") or ""):
            self.deliver(event)
        return version

    def deliver(self, event: dict[str, Any]) -> None:
        """Hand one event to the router; a failure there is that object's, never the
        watch's (it would replay the same event for every tenant, forever)."""
        try:
            self.handle(event)
        except Exception:
            name = ((event.get("object") or {}).get("metadata") or {}).get("name")
            logger.exception(
                "watch of %s: handling %s of %s failed", self.plural, event.get("type"), name
            )


def _transient(exc: BaseException) -> bool:
    if isinstance(exc, KubeError):
        # A conflict cannot happen to a read; were it to, the watch starts over.
        return exc.transient and not isinstance(exc, Conflict)
    return isinstance(exc, OSError | TimeoutError | aiohttp.ClientError | ValueError)


def watched_namespace(patterns: tuple[str, ...]) -> str | None:
    """The one namespace to watch when the served set is exactly one name (no glob): a
    namespaced watch needs no cluster-wide rights. None: watch every namespace, filtered."""
    if len(patterns) == 1 and not any(c in patterns[0] for c in "*?[]"):
        return patterns[0]
    return None
