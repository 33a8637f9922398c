"""kopf registrations: the only place handlers are declared; each delegates to a module.

Every resource is watched with `on.event` handlers, which carry no kopf progress state
(no annotations, no finalizers, no per-handler PATCH round trips): the invocation flow
persists its own state in status, and deletion never blocks on a stopped operator.
"""

from __future__ import annotations

import logging
from typing import Any

import aiohttp
import kopf

from . import GROUP, VERSION
from .artifacts import LocalArtifactStore
from .enums import InvocationState
from .executors.canary import start_canary
from .executors.http import HttpExecutor
from .executors.native import NativeExecutor
from .executors.sandbox import SandboxExecutor
from .handlers import confirmations, descriptors, mcp, policies, workers
from .handlers.catalog import Catalog, thaw
from .handlers.invocations import InvocationFlow
from .handlers.runtime import Runtime
from .kube.auth import AllowCache
from .kube.client import Kube
from .metrics import serve
from .settings import Settings

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


# CRDs applied a moment ago answer 429 "storage is (re)initializing" for a few seconds: retry
# the start-up soon rather than after kopf's default minute.
@kopf.on.startup(backoff=2)
async def startup(settings: kopf.OperatorSettings, memo: kopf.Memo, **_: Any) -> None:
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

    config = Settings.from_env()
    kube = await Kube.connect()
    catalog = Catalog()
    try:
        # First, so a failed attempt leaves nothing open (no listener, no session) behind.
        await catalog.prime(kube)
    except BaseException:
        await kube.close()
        raise
    session = aiohttp.ClientSession()
    access = AllowCache(config.authz_cache_seconds)
    rt = Runtime(
        kube=kube,
        settings=config,
        store=LocalArtifactStore(config.artifact_dir),
        catalog=catalog,
        http=session,
        native=NativeExecutor(kube, catalog.list_descriptors, access),
        http_executor=HttpExecutor(session),
        sandbox=SandboxExecutor(kube, config),
        access=access,
    )
    if config.network_gate:
        started = await start_canary(config.canary_host, config.canary_port)
        if started is not None:
            rt.canary_server, rt.sandbox.canary = started
    mcp.attach(rt)
    serve(config.metrics_port)
    memo["runtime"] = rt
    logger.info("tooladapter started; artifacts in %s", config.artifact_dir)


@kopf.on.cleanup()
async def cleanup(memo: kopf.Memo, **_: Any) -> None:
    rt: Runtime | None = memo.get("runtime")
    if rt is not None:
        await rt.close()


@kopf.on.event(GROUP, VERSION, "toolinvocations")
async def invocation_event(event: kopf.RawEvent, memo: kopf.Memo, **_: Any) -> None:
    rt: Runtime = memo["runtime"]
    workers.ensure_started(rt)
    # Most events are echoes of the flow's own status writes, or finished invocations seen
    # by a (re)listing: decide on the raw event, and copy the body only for a flow to own.
    raw = event["object"]
    meta = raw["metadata"]
    uid = meta["uid"]
    rt.catalog.notify(meta["namespace"], f"invocation:{meta['name']}")
    if event["type"] == "DELETED":
        rt.unfinished.pop(uid, None)
        task = rt.tasks.get(uid)
        if task is not None:
            task.cancel()
        return
    if (raw.get("spec") or {}).get("interrupt"):
        rt.interrupt_event(uid).set()
    state = (raw.get("status") or {}).get("state") or InvocationState.RECEIVED
    if InvocationState(state).terminal:
        rt.unfinished.pop(uid, None)
        if confirmations.needs_recording(raw) and uid not in rt.tasks:
            rt.spawn(uid, confirmations.record_confirmation(rt, thaw(raw)))
        return
    if uid in rt.finished:
        return  # a late echo of a state this operator already moved past
    rt.unfinished[uid] = (meta["namespace"], meta["name"])
    if uid not in rt.tasks:
        rt.spawn(uid, InvocationFlow(rt, thaw(raw)).run())


@kopf.on.event(GROUP, VERSION, "tooldescriptors")
async def descriptor_event(event: kopf.RawEvent, memo: kopf.Memo, **_: Any) -> None:
    rt: Runtime = memo["runtime"]
    body = thaw(event["object"])
    rt.catalog.update(rt.catalog.descriptors, event["type"], body)
    await descriptors.reconcile_descriptor(rt, event["type"], body)
    server = ((body.get("spec") or {}).get("mcp") or {}).get("server")
    if server and rt.mcp is not None:
        rt.mcp.poke(body["metadata"]["namespace"], server)


@kopf.on.event(GROUP, VERSION, "toolpolicies")
async def policy_event(event: kopf.RawEvent, memo: kopf.Memo, **_: Any) -> None:
    rt: Runtime = memo["runtime"]
    body = thaw(event["object"])
    rt.catalog.update(rt.catalog.policies, event["type"], body)
    await policies.reconcile_policy(rt, event["type"], body)


@kopf.on.event(GROUP, VERSION, "toolapprovals")
async def approval_event(event: kopf.RawEvent, memo: kopf.Memo, **_: Any) -> None:
    rt: Runtime = memo["runtime"]
    body = thaw(event["object"])
    rt.catalog.update(rt.catalog.approvals, event["type"], body)
    invocation = (body.get("spec") or {}).get("invocation")
    if invocation:
        rt.catalog.notify(body["metadata"]["namespace"], f"approval:{invocation}")


@kopf.on.event("", "v1", "namespaces")
async def namespace_event(event: kopf.RawEvent, memo: kopf.Memo, **_: Any) -> None:
    rt: Runtime = memo["runtime"]
    workers.ensure_started(rt)
    rt.catalog.update_namespace(event["type"], thaw(event["object"]))


@kopf.on.event(GROUP, VERSION, "mcpservers")
async def mcp_server_event(event: kopf.RawEvent, memo: kopf.Memo, **_: Any) -> None:
    rt: Runtime = memo["runtime"]
    body = thaw(event["object"])
    rt.catalog.update(rt.catalog.servers, event["type"], body)
    if rt.mcp is not None:
        rt.mcp.on_event(event["type"], body)
