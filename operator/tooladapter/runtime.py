"""The operator's shared state: clients, caches, executors and the running flows.

kopf gives every watched object its own worker, and a long handler would hold it; so the
kopf handlers only route watch events here, and each invocation runs as one asyncio task
that walks the whole pipeline and writes status itself (kopf notes #1).
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import ssl
import uuid
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Coroutine, Mapping
from dataclasses import dataclass, field
from typing import Any

from tooladapter.artifacts import ArtifactStore
from tooladapter.artifacts.chain import ReceiptChains
from tooladapter.attempts import AttemptQueues
from tooladapter.catalog import Catalog
from tooladapter.census import Census
from tooladapter.credentials.issuers import TokenIssuer
from tooladapter.enums import ToolKind
from tooladapter.events import EventSink, NoEvents
from tooladapter.executors import Executor
from tooladapter.executors.warm import WarmSandboxes
from tooladapter.inflight import FairGate
from tooladapter.kube.client import Kube
from tooladapter.kube.cluster import Cluster
from tooladapter.kube.receipt_keys import ReceiptKeeper
from tooladapter.outbox import Outbox
from tooladapter.pipeline.dataflow import PendingLabels
from tooladapter.pipeline.ratelimit import RateBook
from tooladapter.pipeline.validation.shipped import AdmissionGuard
from tooladapter.sandbox.job import ProxyPeer
from tooladapter.settings import Settings
from tooladapter.settings.live import LiveSettings

logger = logging.getLogger("tooladapter")

#: How many finished invocation uids to remember, to ignore their late watch events.
FINISHED_MEMORY = 50_000


def process_identity() -> str:
    """Host, process and a random part: two processes never share it, even on one host."""
    return f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:8]}"


#: Calls that may await a remote answer at once, per calls-in-flight slot.
REMOTE_PER_SLOT = 4


@dataclass
class Runtime:
    #: The API operations of a call (the seam the unit suite fakes).
    cluster: Cluster
    #: The settings in force (`settings`), shared with the gateway; the settings
    #: ConfigMap's watch swaps them whole.
    live: LiveSettings
    store: ArtifactStore
    catalog: Catalog
    executors: Mapping[ToolKind, Executor]
    #: Receipt signing and the chains per namespace incarnation: every receipt is signed.
    chains: ReceiptChains
    events: EventSink = field(default_factory=NoEvents)
    #: The signing key's refresh and the chain heads' publication (None in unit tests).
    keeper: ReceiptKeeper | None = None
    #: Integration events to `TOOLADAPTER_EVENT_SINK` (None: unit tests; disabled inside
    #: when no sink is set).
    outbox: Outbox | None = None
    #: The raw client, for the background workers and reconcilers (None in unit tests).
    kube: Kube | None = None
    #: The McpServer probe loops (`handlers.mcp.McpServers`), once started.
    mcp: Any = None
    tasks: dict[str, asyncio.Task[None]] = field(default_factory=dict)
    interrupts: dict[str, asyncio.Event] = field(default_factory=dict)
    finished: OrderedDict[str, None] = field(default_factory=OrderedDict)
    #: Invocations seen unfinished on the watch: uid -> (namespace, name).
    unfinished: dict[str, tuple[str, str]] = field(default_factory=dict)
    workers: list[asyncio.Task[None]] = field(default_factory=list)
    #: Best-effort tasks outside any call (a revocation tried again), cancelled at close.
    background: set[asyncio.Task[None]] = field(default_factory=set)
    #: Closed last, in reverse order of registration (sessions, listeners).
    closers: list[Callable[[], Awaitable[None]]] = field(default_factory=list)
    #: One row per invocation from the watch: the gauges are counted from it.
    census: Census = field(default_factory=Census)
    #: Whether the admission policies that vouch for `spec.caller` are as shipped, and the
    #: gaps when they were not (`identity`): until verified, no call passes validation.
    admission: AdmissionGuard = field(default_factory=AdmissionGuard)
    #: Executions by tool and tenant in the last minute, and running now (rate limits).
    rates: RateBook = field(default_factory=RateBook)
    #: (namespace, label value) pairs of unknown environment classes already warned about.
    warned_environments: set[tuple[str, str]] = field(default_factory=set)
    #: (host, port) of the network gate's canary listener (None: no gate); the lease's
    #: NetworkPolicy never lets a sandbox reach it.
    canary: tuple[str, int] | None = None
    #: Where leases with host egress reach the egress proxy (None: host names fail closed).
    egress_peer: ProxyPeer | None = None
    #: This process, as it signs execution claims (and leases).
    identity: str = field(default_factory=lambda: process_identity())
    #: OAuth 2.0 token endpoints (`oauth2ClientCredentials`, `tokenExchange`); None: every
    #: such credential fails closed (unit tests that mint none).
    issuers: TokenIssuer | None = None
    #: The operator's outbound TLS trust (`egress.core.trust.settings_context`), for MCP
    #: servers as for http tools; None: the system's CAs (unit tests).
    tls: ssl.SSLContext | None = None
    #: The warm sandboxes (pools, attempt workspaces) of the sandbox executor (None: unit
    #: tests without them): descriptors start pools, capacity waits make them give way.
    warm: WarmSandboxes | None = None
    #: Each attempt workspace's queue of calls (`attempts`).
    attempts: AttemptQueues = field(default_factory=AttemptQueues)
    #: Data-flow labels of ended calls whose write failed: retried, and counted meanwhile.
    pending_labels: PendingLabels = field(default_factory=PendingLabels)
    #: Calls evaluated or executed at once, fair between namespaces (`inflight`).
    #: (Sized from `settings` after construction.)
    gate: FairGate = field(default_factory=lambda: FairGate(1))
    #: Calls awaiting an http or MCP server's answer without a slot of `gate`, at most
    #: `REMOTE_PER_SLOT` per slot, fair between namespaces: a burst of calls to a fast tool
    #: with large answers holds a bounded number of answers, not one per call.
    remote_gate: FairGate = field(default_factory=lambda: FairGate(1))

    @property
    def settings(self) -> Settings:
        """The settings in force now: read them at use time, never keep them."""
        return self.live.current

    @settings.setter
    def settings(self, value: Settings) -> None:
        # Tests set settings whole: as the environment's, so a reload starts from them.
        self.live.base = self.live.current = value

    def __post_init__(self) -> None:
        self.gate = FairGate(self.settings.capacity.calls_in_flight)
        self.remote_gate = FairGate(REMOTE_PER_SLOT * self.settings.capacity.calls_in_flight)

    def admit(
        self, namespace: str, uid: str, flow: Callable[[], Coroutine[Any, Any, None]]
    ) -> None:
        """Run `flow()` for `uid` once the gate gives it a slot; the slot goes with its task.
        Until then the call is only a queue entry: its coroutine is not even created."""
        if uid in self.tasks:
            return

        def start() -> None:
            if uid in self.tasks:
                self.gate.release(uid)  # started meanwhile by another path
                return
            self.spawn(uid, flow())
            self.tasks[uid].add_done_callback(lambda _: self.gate.release(uid))

        self.gate.submit(namespace, uid, start)

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

    def spawn_background(self, coro: Coroutine[Any, Any, None], *, name: str) -> None:
        """Run a best-effort task that belongs to no call; it is cancelled at close."""
        task = asyncio.create_task(coro, name=name)
        self.background.add(task)
        task.add_done_callback(self.background.discard)

    def interrupt_event(self, uid: str) -> asyncio.Event:
        return self.interrupts.setdefault(uid, asyncio.Event())

    async def close(self) -> None:
        for task in [*self.tasks.values(), *self.workers, *self.background]:
            task.cancel()
        await asyncio.gather(
            *self.tasks.values(), *self.workers, *self.background, return_exceptions=True
        )
        if self.mcp is not None:
            await self.mcp.close()
        if self.keeper is not None:
            try:
                await self.keeper.publish()  # the last heads this process appended
            except Exception as exc:
                logger.warning("publishing receipt chain heads failed: %s", type(exc).__name__)
        for close in reversed(self.closers):
            await close()
        if self.kube is not None:
            await self.kube.close()
