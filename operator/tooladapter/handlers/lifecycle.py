"""Start-up and clean-up: kopf's settings, the shared clients, executors and caches.

Shared clients are built once in `@kopf.on.startup` into kopf's memo and closed in
`@kopf.on.cleanup` (gafaelfawr's pattern). The gateway (HTTP API and MCP endpoint) starts
first, so a standby serves it too; leadership of the served namespace set comes next and
is released last (`leadership`).
"""

from __future__ import annotations

import asyncio
import logging
import socket
import time
from importlib.metadata import version
from typing import Any

import kopf

from tooladapter import GROUP, identity, reloading, tracing
from tooladapter.artifacts import open_store
from tooladapter.catalog import Catalog
from tooladapter.egress.core.rules import parse_hosts_override
from tooladapter.egress.core.trust import settings_context
from tooladapter.enums import OperatorRole, ToolKind
from tooladapter.executors import Executor
from tooladapter.executors.canary import default_route_address, start_canary
from tooladapter.executors.http import HttpExecutor
from tooladapter.executors.issuers import HttpIssuers
from tooladapter.executors.mcp import McpExecutor
from tooladapter.executors.native import NativeExecutor
from tooladapter.executors.sandbox import SandboxExecutor
from tooladapter.executors.warm import WarmSandboxes
from tooladapter.gateway import Gateway, GatewayPortTaken
from tooladapter.handlers import leadership
from tooladapter.handlers.health import Health
from tooladapter.handlers.kopf_events import KopfEvents
from tooladapter.handlers.mcp import McpServers
from tooladapter.kube.auth import AllowCache
from tooladapter.kube.client import Conflict, Kube, NotFound, is_transient
from tooladapter.kube.cluster import KubeCluster
from tooladapter.kube.receipt_keys import ReceiptKeeper
from tooladapter.kube.services import cluster_ip
from tooladapter.kube.warm import WarmKube
from tooladapter.memory import freeze_start_up
from tooladapter.metrics import LEADING, serve
from tooladapter.outbox import Outbox
from tooladapter.runtime import Runtime
from tooladapter.sandbox.job import ProxyPeer
from tooladapter.settings import EgressSettings, Settings
from tooladapter.settings.live import LiveSettings

logger = logging.getLogger("tooladapter")

#: How long start-up waits for just-created (or just-changed) CRDs to be served.
CRD_WAIT_SECONDS = 120
CRD_POLL_SECONDS = 1.0

#: The component Events are reported by (`source.component`, `reportingComponent`).
REPORTING_COMPONENT = "tooladapter"


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
    # `kubectl describe` and `kubectl get events` name who reported: us, not the framework.
    settings.posting.reporting_component = REPORTING_COMPONENT
    settings.posting.reporting_instance = socket.gethostname()
    settings.posting.event_name_prefix = f"{REPORTING_COMPONENT}-"
    # Watches have frozen silently before: bound every watch request (kopf notes #8).
    settings.watching.server_timeout = 300
    settings.watching.client_timeout = 330
    settings.watching.connect_timeout = 30
    settings.networking.request_timeout = 60
    # kopf lists the kinds it watches in pages, not one response of every object at once,
    # and its per-object worker keeps its object's last body while it idles, so idle
    # workers exit after 0.5 s, not 5 s. (The invocations, thousands stored, are listed and
    # watched by `kube.watching`, never by kopf; these took the restarted operator's RSS
    # with 10,000 stored from 422 to ~175 MB when kopf still watched them.)
    settings.watching.chunk_size = 200
    settings.queueing.idle_timeout = 0.5

    # The API client logs whole response bodies at DEBUG, Secrets included: never let it.
    # botocore logs request headers at DEBUG (a session token among them): never either.
    for name in ("kubernetes_asyncio", "kubernetes", "urllib3", "aiohttp.client", "botocore"):
        logging.getLogger(name).setLevel(logging.WARNING)
    # kopf logs "Handler 'invocation_event' succeeded." at INFO for every watch event, about
    # six per call: noise that cost measurable CPU under load. Failures and retries still log.
    logging.getLogger("kopf.objects").addFilter(_not_a_handler_success)


async def start(settings: kopf.OperatorSettings, memo: kopf.Memo) -> None:
    configure(settings)
    config = Settings.from_env()
    # The settings in force, shared by the gateway and the runtime: the settings
    # ConfigMap's reloadable keys are applied to it live (`reloading`). Kept across kopf's
    # retries of this handler, as the gateway that holds it is.
    if "live" not in memo:
        memo["live"] = LiveSettings(config)
    live: LiveSettings = memo["live"]
    health: Health | None = memo.get("health")
    if health is None:
        # Probes answer a standby too (a Deployment runs two replicas). Kept once
        # listening; a failed bind fails this attempt and kopf tries again.
        health = Health()
        await health.serve(config.health_port)
        memo["health"] = health
    if "reloader" not in memo:
        # Read now, then on every change of the ConfigMap, in every replica (standbys too).
        memo["reloader"] = await reloading.Reloader.start(live)
    if "gateway" not in memo:
        # Before leadership: every replica serves the gateway, standbys included. Kept
        # across kopf's retries of this handler.
        try:
            memo["gateway"] = await Gateway.start(config, live)
        except GatewayPortTaken as exc:
            logger.error("%s", exc)
            raise kopf.PermanentError(str(exc)) from None
    if config.leadership.enabled and memo.get("leadership") is None:
        # Before anything else: a standby waits here, and kopf starts no watch until the
        # start-up handlers return. Kept across kopf's retries of this handler.
        health.role = OperatorRole.STANDBY
        memo["leadership"] = await leadership.lead(config)
    health.role = OperatorRole.STARTING
    try:
        # Http tools reach credentialed APIs as the egress proxy does: the same trust
        # anchors and, in tests, the same mapped names; the operator's own bundle
        # (TOOLADAPTER_CA_BUNDLE) besides, for MCP servers too. Read before anything is
        # opened.
        mapped_hosts = parse_hosts_override(config.egress.hosts)
        trust = settings_context(
            {
                "TOOLADAPTER_EGRESS_CA_FILE": config.egress.ca_file,
                "TOOLADAPTER_CA_BUNDLE": config.ca_bundle,
            }
        )
    except ValueError as exc:
        raise kopf.PermanentError(f"egress settings: {exc}") from None
    # Before any watch: an artifact store that cannot take receipts stops the start (an
    # s3 bucket absent, forbidden or unreachable), rather than every call at its end.
    store = await asyncio.to_thread(open_store, config)
    kube = await Kube.connect()
    catalog = Catalog()
    keeper = ReceiptKeeper(
        kube,
        store,
        signing_secret=config.receipts.signing_secret,
        keys_config_map=config.receipts.keys_config_map,
        heads_config_map=config.receipts.heads_config_map,
        heads_publish_seconds=config.receipts.heads_publish_seconds,
    )
    try:
        # First, so a failed attempt leaves nothing open (no listener, no session) behind.
        await prime_when_served(catalog, kube)
        proxy_address = await egress_proxy_address(config.egress, kube)
        # Fail closed: no call ends without a signing key to sign its receipt.
        await keeper.open()
    except BaseException:
        await kube.close()
        raise
    http = HttpExecutor(config.blocked_http_hosts, hosts=mapped_hosts, tls=trust)
    issuers = HttpIssuers(
        trusted=config.egress.trusted_issuers,
        blocked=config.blocked_http_hosts,
        hosts=mapped_hosts,
        tls=trust,
    )
    cluster = KubeCluster(kube, AllowCache(config.authz_cache_seconds))
    sandbox = SandboxExecutor(cluster, config)
    executors: dict[ToolKind, Executor] = {
        ToolKind.NATIVE: NativeExecutor(cluster, catalog.list_descriptors),
        ToolKind.HTTP: http,
        ToolKind.MCP: McpExecutor(cluster, catalog, config.blocked_http_hosts, tls=trust),
        ToolKind.SHELL: sandbox,
        ToolKind.CONTAINER: sandbox,
    }
    rt = Runtime(
        cluster=cluster,
        live=live,
        store=store,
        catalog=catalog,
        executors=executors,
        events=KopfEvents(),
        kube=kube,
        # Shared with the gateway (when one serves: TOOLADAPTER_GATEWAY_PORT=0 turns it off):
        # the page says when identity is broken, its dry runs count the labels pending.
        **(
            {
                "admission": memo["gateway"].deps.admission,
                "pending_labels": memo["gateway"].deps.pending_labels,
            }
            if memo.get("gateway") is not None
            else {}
        ),
        chains=keeper.chains,
        keeper=keeper,
        outbox=Outbox(
            store,
            keeper.chains,
            config,
            lambda: [
                (name, uid)
                for name, uid in list(catalog.namespace_uids.items())
                if config.serves(name)
            ],
        ),
    )
    rt.issuers = issuers
    rt.tls = trust
    rt.closers.append(http.close)
    rt.closers.append(issuers.close)
    flush_traces = tracing.configure(version("tooladapter"))
    if flush_traces is not None:
        # First registered, so closed last: the spans of calls ending during shutdown go too.
        rt.closers.insert(0, flush_traces)
    if config.sandbox.network_gate:
        started = await start_canary(config.sandbox.canary_host, config.sandbox.canary_port)
        if started is not None:
            canary_server, sandbox.canary = started
            rt.canary = sandbox.canary

            async def close_canary() -> None:
                canary_server.close()

            rt.closers.append(close_canary)
    rt.egress_peer = egress_peer(config.egress, proxy_address)
    warm_kube = WarmKube(kube)
    sandbox.warm = WarmSandboxes(
        warm_kube,
        config,
        read_secret=cluster.read_secret,
        canary=sandbox.canary,
        proxy=rt.egress_peer,
    )
    sandbox.warm.busy = rt.attempts.busy
    rt.warm = sandbox.warm
    rt.closers.append(warm_kube.close)
    rt.mcp = McpServers(rt)
    # Before any call is taken up: until verified, no call passes validation anyway.
    await identity.verify(cluster, rt.admission, config.admission)
    serve(config.metrics_port, rt.census, rt.gate)
    memo["runtime"] = rt
    LEADING.set(1)
    health.role = OperatorRole.LEADING
    freeze_start_up()
    logger.info("tooladapter started; artifacts in %s", store)


async def prime_when_served(catalog: Catalog, kube: Kube) -> None:
    """Prime the catalog, waiting (one log line) while the API server does not serve our
    CRDs yet: right after they are created or changed it answers 404, or 429 "storage is
    (re)initializing", for a few seconds. Anything else, or a wait beyond
    `CRD_WAIT_SECONDS`, fails the start-up as before."""
    deadline = time.monotonic() + CRD_WAIT_SECONDS
    said = False
    while True:
        try:
            await catalog.prime(kube)
            return
        except Exception as exc:
            if not not_served_yet(exc) or time.monotonic() > deadline:
                raise
            if not said:
                logger.warning(
                    "waiting for the API server to serve the tooladapter CRDs (%s); "
                    "run `make install` if they are not installed",
                    short_reason(exc),
                )
                said = True
            await asyncio.sleep(CRD_POLL_SECONDS)


def not_served_yet(exc: BaseException) -> bool:
    """404 (not served yet) or 429/503 (storage initializing) on a list of our kinds."""
    return isinstance(exc, NotFound) or (is_transient(exc) and not isinstance(exc, Conflict))


def short_reason(exc: BaseException) -> str:
    status = getattr(exc, "status", None)
    reason = getattr(exc, "reason", None) or str(exc) or type(exc).__name__
    return f"{status} {reason}" if status else f"{type(exc).__name__}: {reason}"


def proxy_pods_namespace(settings: EgressSettings) -> str:
    """The namespace of the egress proxy's pods and Service: its own setting, else the
    egress namespace (where grants live)."""
    return settings.proxy_namespace or settings.namespace


async def egress_proxy_address(settings: EgressSettings, kube: Kube) -> str | None:
    """Where sandboxes reach the egress proxy (an address: they have no DNS).

    The configured address; else, in the cluster, the ClusterIP of the proxy's Service (the
    chart names it; a Service's ClusterIP never changes while it exists); else (host mode,
    `make run`) this host's default-route address, where the proxy listens. Never the
    default-route address in the cluster: that is this pod's own. None when disabled."""
    if not settings.proxy_enabled:
        return None
    if settings.proxy_address:
        return settings.proxy_address
    if settings.proxy_service:
        namespace = proxy_pods_namespace(settings)
        where = f"{namespace}/{settings.proxy_service}"
        try:
            address = await cluster_ip(kube, namespace, settings.proxy_service)
        except NotFound:
            # Installed together with the operator: wait for it rather than start without.
            raise kopf.TemporaryError(f"egress proxy Service {where} not found", delay=5) from None
        if address is None:
            logger.error("egress proxy Service %s has no ClusterIP: no egress by host name", where)
        return address
    return default_route_address()


def egress_peer(settings: EgressSettings, address: str | None) -> ProxyPeer | None:
    """The egress proxy as sandboxes reach it; None (host names unreachable) without an
    address."""
    if address is None:
        logger.warning("no egress proxy address: sandboxes cannot reach host names")
        return None
    return ProxyPeer(
        address=address,
        port=settings.proxy_port,
        namespace=proxy_pods_namespace(settings) if settings.proxy_pod_labels else None,
        pod_labels=settings.proxy_pod_labels,
    )


async def stop(memo: kopf.Memo) -> None:
    rt: Runtime | None = memo.get("runtime")
    held: leadership.Leadership | None = memo.get("leadership")
    health: Health | None = memo.get("health")
    gateway: Gateway | None = memo.get("gateway")
    reloader: reloading.Reloader | None = memo.get("reloader")
    LEADING.set(0)
    try:
        if gateway is not None:
            await gateway.stop()
        if rt is not None:
            await rt.close()
        if reloader is not None:
            await reloader.close()
    finally:
        # Only once no flow runs any more: then a standby may take over at once.
        if held is not None:
            await held.release()
        if health is not None:
            await health.close()
