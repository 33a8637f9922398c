"""The operator's shared state: clients, caches, executors and the running flows.

kopf gives every watched object its own worker, and a long handler would hold it; so the
kopf handlers only route watch events here, and each invocation runs as one asyncio task
that walks the whole pipeline and writes status itself (kopf notes #1).
"""

from __future__ import annotations

import asyncio
import logging
from collections import OrderedDict
from collections.abc import Coroutine
from dataclasses import dataclass, field
from typing import Any

import aiohttp

from ..artifacts import ArtifactStore
from ..executors.http import HttpExecutor
from ..executors.native import NativeExecutor
from ..executors.sandbox import SandboxExecutor
from ..kube.auth import AllowCache
from ..kube.client import Kube
from ..settings import Settings
from .catalog import Catalog

logger = logging.getLogger("tooladapter")

#: How many finished invocation uids to remember, to ignore their late watch events.
FINISHED_MEMORY = 50_000


@dataclass
class Runtime:
    kube: Kube
    settings: Settings
    store: ArtifactStore
    catalog: Catalog
    http: aiohttp.ClientSession
    native: NativeExecutor
    http_executor: HttpExecutor
    sandbox: SandboxExecutor
    access: AllowCache | None = None
    mcp: Any = None
    tasks: dict[str, asyncio.Task[None]] = field(default_factory=dict)
    interrupts: dict[str, asyncio.Event] = field(default_factory=dict)
    finished: OrderedDict[str, None] = field(default_factory=OrderedDict)
    #: Invocations seen unfinished on the watch: uid -> (namespace, name).
    unfinished: dict[str, tuple[str, str]] = field(default_factory=dict)
    workers: list[asyncio.Task[None]] = field(default_factory=list)
    canary_server: asyncio.Server | None = None

    def spawn(self, uid: str, coro: Coroutine[Any, Any, None]) -> None:
        """Run one flow per uid; a second spawn for a running uid is dropped."""
        if uid in self.tasks:
            coro.close()
            return
        task = asyncio.create_task(coro, name=f"invocation-{uid}")
        self.tasks[uid] = task
        task.add_done_callback(lambda t: self._done(uid, t))

    def _done(self, uid: str, task: asyncio.Task[None]) -> None:
        self.tasks.pop(uid, None)
        if not task.cancelled() and task.exception() is not None:
            logger.error("flow of invocation %s crashed", uid, exc_info=task.exception())

    def mark_finished(self, uid: str) -> None:
        self.finished[uid] = None
        self.interrupts.pop(uid, None)
        self.unfinished.pop(uid, None)
        while len(self.finished) > FINISHED_MEMORY:
            self.finished.popitem(last=False)

    def interrupt_event(self, uid: str) -> asyncio.Event:
        return self.interrupts.setdefault(uid, asyncio.Event())

    async def close(self) -> None:
        for task in [*self.tasks.values(), *self.workers]:
            task.cancel()
        await asyncio.gather(*self.tasks.values(), *self.workers, return_exceptions=True)
        if self.mcp is not None:
            await self.mcp.close()
        if self.canary_server is not None:
            self.canary_server.close()
        await self.http.close()
        await self.kube.close()
