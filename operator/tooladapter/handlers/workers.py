"""Global worker loops: one task each, not a kopf timer per object (kopf notes #9).

- uncertain-effect reconciler: an Executing invocation with no live flow in this operator
  is resumed, which follows its Job or settles it Uncertain (Failed when no effect was
  possible); it is never re-executed. It also hands freed heap back to the OS.
- sandbox reaper: Jobs, NetworkPolicies and Secrets of ended (or deleted) invocations are
  removed after a short retention; a Secret never outlives its call.
- data-flow labels: the labels a call's end could not write to its scopes, written; the
  scopes' stores nothing counts any more, deleted (`collect_scope_stores`).
- retention: finished invocations are deleted a configured time after they ended, and
  idempotency claims a configured time after their winner ended (`pipeline.retention`);
  receipts stay in the artifact store, a claim keeps its winner's receiptRef, and the
  receipt index keeps each key's first call once its claim is gone.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from datetime import UTC, datetime
from typing import Any

from tooladapter import identity
from tooladapter.census import Candidate
from tooladapter.enums import InvocationState, Resource, ToolKind
from tooladapter.executors.sandbox import SandboxExecutor
from tooladapter.executors.warm import WarmSandboxes
from tooladapter.flow import dataflow, run_invocation
from tooladapter.kube import sandbox as ksandbox
from tooladapter.kube.client import NotFound
from tooladapter.memory import release_free_heap
from tooladapter.naming import ANNOTATION_INVOCATION_REF, LABEL_INVOCATION_UID, LeaseNames
from tooladapter.pipeline import dataflow as flowrule
from tooladapter.pipeline.retention import claim_expired, claim_sweep_seconds
from tooladapter.runtime import Runtime
from tooladapter.timeutil import parse_time

logger = logging.getLogger("tooladapter.workers")


async def every(seconds: float, job: Any, rt: Runtime, name: str) -> None:
    while True:
        try:
            await job(rt)
        except asyncio.CancelledError:
            raise
        except Exception:
            logger.exception("worker %s failed; next run in %ss", name, seconds)
        await asyncio.sleep(seconds)


async def reconcile_uncertain(rt: Runtime) -> None:
    """Every unfinished invocation has a live flow: resume any that has none.

    An Executing call without a flow is normal after a restart (it is followed or settled,
    never started again); any other state without a flow is a stuck call, a bug: it is
    reported and resumed from its stored state, so every call still ends.
    """
    # The watch keeps the index of unfinished invocations (finished ones, possibly thousands,
    # are never listed again); each candidate is re-read before it is resumed.
    for uid, (namespace, name) in list(rt.unfinished.items()):
        if uid in rt.tasks or rt.gate.is_queued(uid):
            continue  # running, or waiting for its turn
        try:
            body = await rt.cluster.get(Resource.INVOCATIONS, namespace, name)
        except NotFound:
            rt.unfinished.pop(uid, None)
            continue
        state = (body.get("status") or {}).get("state") or InvocationState.RECEIVED
        if body["metadata"]["uid"] != uid or InvocationState(state).terminal:
            rt.unfinished.pop(uid, None)
        elif uid not in rt.tasks:
            if state == InvocationState.EXECUTING:
                logger.info(
                    "resuming executing invocation %s/%s with no live flow", namespace, name
                )
            else:
                logger.error(
                    "stuck invocation %s/%s (%s, no live flow): resuming", namespace, name, state
                )
            rt.admit(namespace, uid, functools.partial(run_invocation, rt, body))
    release_free_heap()


async def reap_sandboxes(rt: Runtime) -> None:
    kube = rt.kube
    assert kube is not None
    now = datetime.now(UTC)
    ended: dict[str, bool] = {}

    async def invocation_ended(namespace: str, owner: dict[str, Any] | None, uid: str) -> bool:
        if uid in ended:
            return ended[uid]
        result = True
        if owner is not None:
            try:
                body = await rt.cluster.get(Resource.INVOCATIONS, namespace, owner["name"])
                status = body.get("status") or {}
                if (
                    body["metadata"]["uid"] == uid
                    and not InvocationState(status.get("state", "Received")).terminal
                ):
                    result = False
                elif body["metadata"]["uid"] == uid and status.get("endedAt"):
                    age = (now - parse_time(status["endedAt"])).total_seconds()
                    result = age >= rt.settings.sandbox.retain_seconds
            except NotFound:
                result = True
        ended[uid] = result
        return result

    egress_namespace = rt.settings.egress.namespace
    listings = [(kind, await ksandbox.list_managed(kube, kind)) for kind in REAPED_KINDS]
    # The egress grants and records live in their own namespace (`egress_lease`): the only
    # namespace where the operator lists Secrets. A lease's Secrets in the tenant namespace
    # are deleted by name with its Job, NetworkPolicy or grant (never a cluster-wide list
    # of Secrets); the call's end deletes them first, and an invocation's deletion too
    # (they are owned by it).
    for kind in ("Secret", "ConfigMap"):
        listings.append((kind, await ksandbox.list_managed(kube, kind, egress_namespace)))
    swept: set[str] = set()
    for kind, objects in listings:
        for obj in objects:
            meta = obj["metadata"]
            uid = (meta.get("labels") or {}).get(LABEL_INVOCATION_UID)
            found = invocation_of(meta)
            if not uid or found is None or not rt.settings.serves(found[0]):
                continue
            if await invocation_ended(found[0], found[1], uid):
                if await rt.cluster.delete(kind, meta["namespace"], meta["name"]):
                    logger.info("reaped %s %s/%s", kind, meta["namespace"], meta["name"])
                if uid not in swept:
                    swept.add(uid)
                    names = LeaseNames.for_uid(uid)
                    for name in (names.secret, names.proxy_secret):
                        if await rt.cluster.delete("Secret", found[0], name):
                            logger.info("reaped Secret %s/%s", found[0], name)


#: Deletions of one retention run going on at once: the pace, not this, bounds the rate.
RETENTION_CONCURRENCY = 4


async def apply_retention(rt: Runtime) -> int:
    """Delete finished invocations `retention_seconds` after they ended.

    The candidates come from the watch's census (`pipeline.retention` says which may go),
    each deleted only as the watch last saw it (uid and resourceVersion preconditions: one
    changed since, by a confirmation say, stays until its next event is seen), with no read
    before. Every due call goes in one run, paced at `retention_deletes_per_second`: a call
    rate above one run's worth never leaves storage growing, and a first run over a long
    backlog drains at a steady pace instead of a burst of writes. Returns how many went."""
    seconds = rt.settings.retention.invocation_seconds
    if seconds <= 0:
        return 0
    due = [
        c
        for c in rt.census.ended_before(datetime.now(UTC).timestamp() - seconds)
        # A call whose data-flow labels are still pending keeps them on its status: it
        # stays until they are stored (a restart finds them there).
        if rt.settings.serves(c.namespace) and not rt.pending_labels.holds(c.namespace, c.name)
    ]
    if not due:
        return 0
    pace = Pace(rt.settings.retention.deletes_per_second)
    slots = asyncio.Semaphore(RETENTION_CONCURRENCY)
    deleted = 0
    failures: list[Exception] = []

    async def delete(candidate: Candidate) -> None:
        nonlocal deleted
        try:
            if await rt.cluster.delete_invocation(
                candidate.namespace,
                candidate.name,
                uid=candidate.uid,
                resource_version=candidate.resource_version,
            ):
                deleted += 1
        except Exception as exc:
            failures.append(exc)  # raised after the run, as gathering every task did
        finally:
            slots.release()

    tasks: set[asyncio.Future[None]] = set()
    for candidate in due:
        await pace.wait()
        # A slot before the task: deletes slower than the pace never pile up as tasks.
        await slots.acquire()
        task = asyncio.ensure_future(delete(candidate))
        tasks.add(task)
        task.add_done_callback(tasks.discard)
    await asyncio.gather(*tasks)
    if failures:
        raise failures[0]
    if deleted:
        logger.info("retention: deleted %d finished invocation(s) older than %ss", deleted, seconds)
    return deleted


class Pace:
    """At most `per_second` starts a second (0: no bound), evenly spaced."""

    def __init__(self, per_second: float) -> None:
        self.interval = 1.0 / per_second if per_second > 0 else 0.0
        self.next = time.monotonic()

    async def wait(self) -> None:
        if self.interval <= 0:
            return
        now = time.monotonic()
        if self.next > now:
            await asyncio.sleep(self.next - now)
        self.next = max(self.next, now) + self.interval


async def expire_idempotency_claims(rt: Runtime) -> int:
    """Delete idempotency claims `idempotency_retention_seconds` after their winner ended
    (`pipeline.retention.claim_expired`); the receipt index answers for the key from then
    on (it never runs again). Returns how many went."""
    seconds = rt.settings.retention.idempotency_seconds
    if seconds <= 0:
        return 0
    now = datetime.now(UTC)
    deleted = 0
    for claim in await rt.cluster.list_idempotency_claims():
        if not rt.settings.serves(claim.namespace):
            continue
        winner: dict[str, Any] | None = None
        if claim.winner_name:
            try:
                winner = await rt.cluster.get(
                    Resource.INVOCATIONS, claim.namespace, claim.winner_name
                )
            except NotFound:
                winner = None
            if winner is not None and winner["metadata"]["uid"] != claim.winner_uid:
                winner = None  # another object took the name: the winner is gone
        if claim_expired(claim, winner, now=now, retention_seconds=seconds) and (
            await rt.cluster.delete_idempotency_claim(
                claim.namespace, claim.name, resource_version=claim.resource_version
            )
        ):
            deleted += 1
    if deleted:
        logger.info("retention: deleted %d idempotency claim(s) older than %ss", deleted, seconds)
    return deleted


async def write_pending_labels(rt: Runtime) -> None:
    if len(rt.pending_labels):
        await dataflow.retry_pending(rt)


def stored_call(present: set[tuple[str, str]], namespace: str, name: str) -> bool:
    return (namespace, name) in present


async def collect_scope_stores(rt: Runtime) -> int:
    """Delete the data-flow scope stores nothing needs any more
    (`pipeline.dataflow.store_collectable`): a caller's once its labels left the window, a
    run's or attempt's once its calls are gone and its newest label is older than the
    window plus the invocations' retention. Each is deleted only as it was listed (a label
    written since keeps it), never one a pending write will add to, and only once the
    watch's first listing is in (a call it has not seen yet must count as present).
    Returns how many went."""
    if not rt.census.synced.is_set():
        return 0
    now = datetime.now(UTC)
    present = rt.census.names()
    pending = rt.pending_labels.stores()
    deleted = 0
    for store in await rt.cluster.list_scope_stores(flowrule.STORE_LABEL):
        if not rt.settings.serves(store.namespace) or (store.namespace, store.name) in pending:
            continue
        if not flowrule.store_collectable(
            store.kind,
            store.data,
            now=now,
            window_seconds=rt.settings.dataflow_window_seconds,
            retention_seconds=rt.settings.retention.invocation_seconds,
            present=functools.partial(stored_call, present, store.namespace),
        ):
            continue
        if await rt.cluster.delete_scope_store(
            store.namespace, store.name, resource_version=store.resource_version
        ):
            deleted += 1
    if deleted:
        logger.info("data flow: deleted %d scope store(s) nothing counts any more", deleted)
    return deleted


def warm_sandboxes(rt: Runtime) -> WarmSandboxes | None:
    executor = rt.executors.get(ToolKind.SHELL)
    return executor.warm if isinstance(executor, SandboxExecutor) else None


async def tend_warm_sandboxes(rt: Runtime) -> None:
    """Attempt workspaces idle past TOOLADAPTER_WORKSPACE_IDLE_SECONDS released (after a
    restart too: they are found by label), idle pools drained, pools refilled, pods of
    calls that ended deleted."""
    warm = warm_sandboxes(rt)
    if warm is None:
        return

    async def call_ended(namespace: str, name: str, uid: str) -> bool:
        if not name:
            return True
        try:
            body = await rt.cluster.get(Resource.INVOCATIONS, namespace, name)
        except NotFound:
            return True
        state = (body.get("status") or {}).get("state") or InvocationState.RECEIVED
        if body["metadata"]["uid"] != uid:
            return True
        return InvocationState(state).terminal and uid not in rt.tasks

    warm.busy = rt.attempts.busy
    await warm.maintain(rt.settings.serves, call_ended)


#: Listed cluster-wide by label; Secrets are not (see `reap_sandboxes`).
REAPED_KINDS = ("Job", "NetworkPolicy")


def invocation_of(meta: dict[str, Any]) -> tuple[str, dict[str, Any] | None] | None:
    """(namespace, owner reference or None) of the invocation an object belongs to: its
    owner in its own namespace, or for an object in the egress proxy's namespace the
    invocation its annotation names. None: not an object of an invocation."""
    ref = (meta.get("annotations") or {}).get(ANNOTATION_INVOCATION_REF)
    if ref:
        namespace, _, name = str(ref).partition("/")
        return (namespace, {"name": name}) if namespace and name else None
    owner = next(
        (o for o in meta.get("ownerReferences") or [] if o.get("kind") == "ToolInvocation"),
        None,
    )
    return meta["namespace"], owner


def start_workers(rt: Runtime) -> None:
    interval = rt.settings.reconcile_interval_seconds
    claim_sweep = claim_sweep_seconds(
        retention_seconds=rt.settings.retention.idempotency_seconds, reconcile_seconds=interval
    )
    rt.workers += [
        asyncio.create_task(every(interval, reconcile_uncertain, rt, "uncertain-reconciler")),
        asyncio.create_task(every(interval, reap_sandboxes, rt, "sandbox-reaper")),
        asyncio.create_task(every(min(interval, 5), tend_warm_sandboxes, rt, "warm-sandboxes")),
        # Data-flow labels a call's end could not write (`flow.dataflow.retry_pending`).
        asyncio.create_task(every(min(interval, 5), write_pending_labels, rt, "dataflow-labels")),
        # The scopes' stores are listed from the API server: at most once a minute.
        asyncio.create_task(every(max(interval, 60), collect_scope_stores, rt, "dataflow-stores")),
        # Candidates come from the census (memory): as often as the other reconcilers.
        asyncio.create_task(every(interval, apply_retention, rt, "retention")),
        # Claims are listed from the API server: `claim_sweep_seconds`.
        asyncio.create_task(every(claim_sweep, expire_idempotency_claims, rt, "claim-retention")),
    ]
    if rt.kube is not None:
        # The admission policies, on every change and every `relist_seconds` (`identity`).
        rt.workers.append(
            asyncio.create_task(
                identity.keep_verified(rt.cluster, rt.kube, rt.admission, rt.settings.admission)
            )
        )
    if rt.keeper is not None:
        # The chains' ends read once (`repair`), then the key's refresh and the heads' publication.
        rt.workers += [
            asyncio.create_task(rt.keeper.repair()),
            asyncio.create_task(rt.keeper.run()),
        ]
    if rt.outbox is not None and rt.outbox.enabled:
        # The leader delivers: a new one starts where the store's markers say.
        rt.workers.append(asyncio.create_task(rt.outbox.run()))
