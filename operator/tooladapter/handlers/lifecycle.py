"""Start-up and clean-up: kopf's settings, the shared clients, executors and caches.

Shared clients are built once in `@kopf.on.startup` into kopf's memo and closed in
`@kopf.on.cleanup` (gafaelfawr's pattern). Leadership of the served namespace set comes
first and is released last (`leadership`).
"""

from __future__ import annotations

import logging
from typing import Any

import kopf

from .. import GROUP
from ..artifacts import LocalArtifactStore
from ..catalog import Catalog
from ..enums import OperatorRole, ToolKind
from ..executors import Executor
from ..executors.canary import start_canary
from ..executors.http import HttpExecutor
from ..executors.mcp import McpExecutor
from ..executors.native import NativeExecutor
from ..executors.sandbox import SandboxExecutor
from ..kube.auth import AllowCache
from ..kube.client import Kube
from ..kube.cluster import KubeCluster
from ..metrics import LEADING, serve
from ..runtime import Runtime
from ..settings import Settings
from . import leadership
from .health import Health
from .kopf_events import KopfEvents
from .mcp import McpServers

logger = logging.getLogger("tooladapter")


def _not_a_handler_success(record: logging.LogRecord) -> bool:
    return not (record.levelno == logging.INFO and record.getMessage().endswith(" succeeded."))


class _NoDiffBase(kopf.AnnotationsDiffBaseStorage):
    """No essence: kopf deep-copies every event's body to diff it for change handlers.

    Only `on.event` handlers are registered here, which never look at the diff; building it
    was the largest single cost of kopf's per-event processing under load. Register an
    `on.create`/`on.update`/daemon and this storage must go.
    """

    def build(self, *, body: kopf.Body, extra_fields: Any = None) -> kopf.BodyEssence:
        return kopf.BodyEssence()

    def fetch(self, *, body: kopf.Body) -> kopf.BodyEssence | None:
        return None


def configure(settings: kopf.OperatorSettings) -> None:
    settings.persistence.finalizer = f"{GROUP}/finalizer"
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix=GROUP)
    settings.persistence.diffbase_storage = _NoDiffBase(
        prefix=GROUP, key="last-handled-configuration"
    )
    # Domain events are posted explicitly; kopf's own handler chatter stays in the log.
    settings.posting.level = logging.WARNING
    # Watches have frozen silently before: bound every watch request (kopf notes #8).
    settings.watching.server_timeout = 300
    settings.watching.client_timeout = 330
    settings.watching.connect_timeout = 30
    settings.networking.request_timeout = 60
    # Finished invocations stay stored (retention 0 keeps them). A restart lists them all:
    # in pages, not one response of every object at once; and kopf's per-object worker keeps
    # its object's last body while it idles, so idle workers exit after 0.5 s, not 5 s.
    # Together these took the restarted operator's RSS with 10,000 stored from 422 to
    # ~175 MB; invocation events come in bursts well inside the idle time.
    settings.watching.chunk_size = 200
    settings.queueing.idle_timeout = 0.5

    # The API client logs whole response bodies at DEBUG, Secrets included: never let it.
    for name in ("kubernetes_asyncio", "kubernetes", "urllib3", "aiohttp.client"):
        logging.getLogger(name).setLevel(logging.WARNING)
    # kopf logs "Handler 'invocation_event' succeeded." at INFO for every watch event, about
    # six per call: noise that cost measurable CPU under load. Failures and retries still log.
    logging.getLogger("kopf.objects").addFilter(_not_a_handler_success)


async def start(settings: kopf.OperatorSettings, memo: kopf.Memo) -> None:
    configure(settings)
    config = Settings.from_env()
    health: Health | None = memo.get("health")
    if health is None:
        # Probes and scrapes answer a standby too (a Deployment runs two replicas). Kept
        # once listening; a failed bind fails this attempt and kopf tries again.
        health = Health()
        await health.serve(config.health_port)
        serve(config.metrics_port)
        memo["health"] = health
    if config.leader_election and memo.get("leadership") is None:
        # Before anything else: a standby waits here, and kopf starts no watch until the
        # start-up handlers return. Kept across kopf's retries of this handler.
        health.role = OperatorRole.STANDBY
        memo["leadership"] = await leadership.lead(config)
    health.role = OperatorRole.STARTING
    kube = await Kube.connect()
    catalog = Catalog()
    try:
        # First, so a failed attempt leaves nothing open (no listener, no session) behind.
        await catalog.prime(kube)
    except BaseException:
        await kube.close()
        raise
    http = HttpExecutor(config.blocked_http_hosts)
    cluster = KubeCluster(kube, AllowCache(config.authz_cache_seconds))
    sandbox = SandboxExecutor(cluster, config)
    executors: dict[ToolKind, Executor] = {
        ToolKind.NATIVE: NativeExecutor(cluster, catalog.list_descriptors),
        ToolKind.HTTP: http,
        ToolKind.MCP: McpExecutor(cluster, catalog, config.blocked_http_hosts),
        ToolKind.SHELL: sandbox,
        ToolKind.CONTAINER: sandbox,
    }
    rt = Runtime(
        cluster=cluster,
        settings=config,
        store=LocalArtifactStore(config.artifact_dir),
        catalog=catalog,
        executors=executors,
        events=KopfEvents(),
        kube=kube,
    )
    rt.closers.append(http.close)
    if config.network_gate:
        started = await start_canary(config.canary_host, config.canary_port)
        if started is not None:
            canary_server, sandbox.canary = started
            rt.canary = sandbox.canary

            async def close_canary() -> None:
                canary_server.close()

            rt.closers.append(close_canary)
    rt.mcp = McpServers(rt)
    serve(config.metrics_port, rt.census)
    memo["runtime"] = rt
    LEADING.set(1)
    health.role = OperatorRole.LEADING
    logger.info("tooladapter started; artifacts in %s", config.artifact_dir)


async def stop(memo: kopf.Memo) -> None:
    rt: Runtime | None = memo.get("runtime")
    held: leadership.Leadership | None = memo.get("leadership")
    health: Health | None = memo.get("health")
    LEADING.set(0)
    try:
        if rt is not None:
            await rt.close()
    finally:
        # Only once no flow runs any more: then a standby may take over at once.
        if held is not None:
            await held.release()
        if health is not None:
            await health.close()
