"""Watch events routed to the catalog, the reconcilers and the invocation flows.

Most invocation events are echoes of the flow's own status writes, or finished invocations
seen by a (re)listing: they are decided on the raw event, and a body is copied only for a
flow to own.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Awaitable, Callable, Mapping
from datetime import UTC, datetime
from typing import Any

from tooladapter.catalog import invocation_key, thaw
from tooladapter.enums import InvocationState, Resource
from tooladapter.events import namespace_ref
from tooladapter.flow import dataflow, release_finalizer, run_invocation, run_queued_invocation
from tooladapter.flow.context import FINALIZER
from tooladapter.handlers import (
    confirmations,
    descriptors,
    policies,
    workers,
    workspace_release,
)
from tooladapter.kube.client import is_transient
from tooladapter.kube.watching import Watcher, watched_namespace
from tooladapter.pipeline.classification import LABEL_ENVIRONMENT, environment_class
from tooladapter.runtime import Runtime
from tooladapter.timeutil import parse_time

RawEvent = Mapping[str, Any]

logger = logging.getLogger("tooladapter.routing")

#: Queued calls that keep the body of their event (a few KB each) instead of a read later.
QUEUED_WITH_BODY = 1024

#: Waits between attempts of a descriptor's or policy's status write that failed for a
#: reason that may pass (429 while CRDs settle, 5xx, a dropped connection): kopf never
#: retries an `on.event` handler, and the next chance would be its re-listing minutes later,
#: with the descriptor not callable until then.
RECONCILE_RETRY_DELAYS: tuple[float, ...] = (0.5, 1, 2, 4, 8)


def ensure_started(rt: Runtime) -> None:
    """Start the workers and the invocations' watch from a kopf handler's context, where
    event posting is wired (the start-up activity runs before kopf's event poster exists);
    the flows the watch starts inherit it."""
    if not rt.workers:
        workers.start_workers(rt)
        rt.workers.append(asyncio.create_task(watch_invocations(rt)))


async def watch_invocations(rt: Runtime) -> None:
    """The invocations' own list-and-watch (`kube.watching`), routed here event by event."""
    assert rt.kube is not None
    watcher = Watcher(
        rt.kube,
        Resource.INVOCATIONS.value,
        namespace=watched_namespace(rt.settings.namespaces),
        serves=rt.settings.serves,
        handle=functools.partial(invocation_event, rt),
        listed=functools.partial(invocations_listed, rt),
    )
    await watcher.run()


def invocation_event(rt: Runtime, event: RawEvent) -> None:
    raw = event["object"]
    meta = raw["metadata"]
    uid = meta["uid"]
    rt.census.update(event["type"], raw)
    observe_rates(rt, event["type"], raw)
    rt.catalog.notify(meta["namespace"], invocation_key(meta["name"]))
    if event["type"] == "DELETED":
        rt.interrupts.pop(uid, None)
        rt.unfinished.pop(uid, None)
        rt.gate.discard(meta["namespace"], uid)
        task = rt.tasks.get(uid)
        if task is not None:
            task.cancel()
        return
    state = (raw.get("status") or {}).get("state") or InvocationState.RECEIVED
    ended = InvocationState(state).terminal
    if ((raw.get("spec") or {}).get("interrupt") or meta.get("deletionTimestamp")) and (
        not ended or uid in rt.tasks
    ):
        # Deleting a running call interrupts it; its finalizer keeps it until it settled.
        # An ended call's signal is never made again (an echo, a relisting): no flow
        # would take it back.
        rt.interrupt_event(uid).set()
    if ended:
        rt.unfinished.pop(uid, None)
        # Labels it still owes its scopes (a restart, a namespace taken over): taken up.
        dataflow.observe_pending(rt, raw)
        if workspace_release.wanted(raw):
            rt.spawn(workspace_release.task_key(uid), workspace_release.release(rt, thaw(raw)))
        if uid in rt.tasks:
            return
        if confirmations.needs_recording(raw):
            rt.spawn(uid, confirmations.record_confirmation(rt, thaw(raw)))
        elif FINALIZER in (meta.get("finalizers") or []):
            # Ended, but the operator stopped before letting it go.
            rt.spawn(uid, release_finalizer(rt, thaw(raw)))
        return
    if uid in rt.finished:
        return  # a late echo of a state this operator already moved past
    rt.unfinished[uid] = (meta["namespace"], meta["name"])
    if uid in rt.tasks:
        return
    namespace, name = meta["namespace"], meta["name"]
    if rt.gate.has_room() or rt.gate.queued() < QUEUED_WITH_BODY:
        body = thaw(raw)
        rt.admit(namespace, uid, lambda: run_invocation(rt, body))
    else:
        # Beyond a short queue, queued until a slot is free (`inflight`) with its name only,
        # read again when its turn comes: a backlog of thousands of calls costs bytes each,
        # not their bodies (a short one keeps them: a read per call is API server work
        # exactly when it has least to spare).
        rt.admit(namespace, uid, lambda: run_queued_invocation(rt, namespace, name, uid))


def invocations_listed(rt: Runtime, uids: set[str]) -> None:
    """After a (re)listing: the calls this operator knew that the listing no longer holds
    were deleted while no watch ran; they go as a DELETED event would take them. The
    census is whole from here on (`Census.synced`)."""
    rt.census.synced.set()
    for uid, row in list(rt.census.rows.items()):
        if uid not in uids:
            meta = {"uid": uid, "namespace": row.namespace, "name": row.name}
            invocation_event(rt, {"type": "DELETED", "object": {"metadata": meta}})


def observe_rates(rt: Runtime, event_type: str | None, raw: Mapping[str, Any]) -> None:
    """Feed the rate book: a takeover rebuilds it from the listing, no write per call."""
    status = raw.get("status") or {}
    started = (status.get("execution") or {}).get("startedAt")
    if not started:
        return
    spec = raw.get("spec") or {}
    try:
        at = parse_time(started)
    except ValueError:
        return
    rt.rates.observe(
        uid=raw["metadata"]["uid"],
        namespace=raw["metadata"]["namespace"],
        tool=str((spec.get("tool") or {}).get("id")),
        caller=str((spec.get("caller") or {}).get("name")),
        started=at,
        running=event_type != "DELETED" and status.get("state") == InvocationState.EXECUTING,
        now=datetime.now(UTC),
    )


async def retrying(what: str, attempt: Callable[[], Awaitable[None]]) -> None:
    """`attempt()`, again after each of RECONCILE_RETRY_DELAYS while it fails transiently."""
    for delay in (*RECONCILE_RETRY_DELAYS, None):
        try:
            await attempt()
            return
        except Exception as exc:
            if delay is None or not is_transient(exc):
                raise
            status = getattr(exc, "status", None)
            cause = f"{type(exc).__name__} {status}" if status else type(exc).__name__
            logger.warning("%s failed (%s); again in %ss", what, cause, delay)
            await asyncio.sleep(delay)


async def _catalogued(
    rt: Runtime,
    event: RawEvent,
    resource: Resource,
    kind: str,
    reconcile: Callable[[dict[str, Any]], Awaitable[None]],
) -> dict[str, Any]:
    """The event's object, in the catalog and reconciled (retried while transient)."""
    body = thaw(event["object"])
    rt.catalog.update(resource, event["type"], body)
    meta = body["metadata"]
    await retrying(
        f"reconciling {kind} {meta['namespace']}/{meta['name']}", lambda: reconcile(body)
    )
    return body


async def descriptor_event(rt: Runtime, event: RawEvent) -> None:
    body = await _catalogued(
        rt,
        event,
        Resource.DESCRIPTORS,
        "ToolDescriptor",
        lambda body: descriptors.reconcile_descriptor(rt, event["type"], body),
    )
    server = ((body.get("spec") or {}).get("mcp") or {}).get("server")
    if server and rt.mcp is not None:
        rt.mcp.poke(body["metadata"]["namespace"], server)


async def policy_event(rt: Runtime, event: RawEvent) -> None:
    await _catalogued(
        rt,
        event,
        Resource.POLICIES,
        "ToolPolicy",
        lambda body: policies.reconcile_policy(rt, event["type"], body),
    )


def approval_event(rt: Runtime, event: RawEvent) -> None:
    rt.catalog.update(Resource.APPROVALS, event["type"], thaw(event["object"]))


def namespace_event(rt: Runtime, event: RawEvent) -> None:
    ensure_started(rt)
    body = thaw(event["object"])
    rt.catalog.update_namespace(event["type"], body)
    if event["type"] != "DELETED":
        warn_unknown_environment(rt, body)


def warn_unknown_environment(rt: Runtime, body: dict[str, Any]) -> None:
    """An environment class the operator does not know counts as production; say so once
    per namespace and value, with a Warning event on the Namespace."""
    meta = body["metadata"]
    value = (meta.get("labels") or {}).get(LABEL_ENVIRONMENT)
    if value is None or not rt.settings.serves(meta["name"]):
        return
    _, known = environment_class(value)
    if known or (meta["name"], value) in rt.warned_environments:
        return
    rt.warned_environments.add((meta["name"], value))
    rt.events.post(
        namespace_ref(meta),
        reason="UnknownEnvironmentClass",
        warning=True,
        message=f"label {LABEL_ENVIRONMENT}={value!r} is not one of development, staging, "
        "production: calls in this namespace are treated as production",
    )


def mcp_server_event(rt: Runtime, event: RawEvent) -> None:
    body = thaw(event["object"])
    rt.catalog.update(Resource.MCP_SERVERS, event["type"], body)
    if rt.mcp is not None:
        rt.mcp.on_event(event["type"], body)
