"""Data flow, the flow's side of `pipeline.dataflow`: read a call's scopes, judge it, record
what it saw, and write the labels a call brought when it ends.

Judged at the approval stage (a gated sink waits, or is Denied at policy), again in the
re-check right before brokering (a label that arrived while the call waited: its approval
did not see it), again right before Executing for every sink (a label may arrive between
the gate and the act), and in a dry run. Written at the end, before the end's status: a
call that ended Observed or Uncertain may have returned data, so its labels enter its
scopes (a duplicate's are its first call's). The write is a merge of fixed keys, so a
resumed end repeats it harmlessly.

The end never waits for that write: a store that cannot be written (the API server
refusing a ConfigMap, a quota, a hang) leaves the labels pending (`PendingLabels`), the
call ends as decided, every judgement counts the pending labels as stored, and a worker
(`retry_pending`) writes them.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from tooladapter.enums import DataLabel, Resource, SideEffectClass
from tooladapter.flow.context import FlowContext
from tooladapter.kube.client import NotFound
from tooladapter.kube.cluster import Cluster
from tooladapter.metrics import DATAFLOW_LABELS_DEFERRED, DATAFLOW_LABELS_PENDING
from tooladapter.model import DataFlowRecord, ToolDescriptorSpec
from tooladapter.pipeline import dataflow as rule
from tooladapter.runtime import Runtime
from tooladapter.sandbox.warm import uses_attempt_workspace
from tooladapter.timeutil import now_iso

logger = logging.getLogger("tooladapter.invocations")

#: The longest a call's end waits for its labels' write before leaving them pending.
WRITE_SECONDS = 10.0


def reach(ctx: FlowContext, descriptor: ToolDescriptorSpec) -> list[str]:
    """Where the call can send data: the egress its lease would get (`lease_allow_list`'s
    narrowing), an http tool's hosts, an mcp tool's server."""
    narrowing = [
        entry.spec.egress.allow
        for entry in ctx.catalog.policies.in_namespace(ctx.namespace)
        if entry.spec is not None and entry.spec.egress.allow is not None
    ]
    url = None
    if descriptor.mcp is not None:
        server = ctx.catalog.servers.get(ctx.namespace, descriptor.mcp.server)
        if server is not None and server.spec is not None:
            url = server.spec.url
    return rule.reach_of(
        descriptor,
        default_allow=ctx.rt.settings.egress.default_allow,
        narrowing=narrowing,
        mcp_url=url,
    )


def server_added(ctx: FlowContext, descriptor: ToolDescriptorSpec) -> list[DataLabel]:
    """Labels an mcp tool's server adds: its McpServer's annotation
    (`tooladapter.dev/dataflow-labels`) and the tool's own `openWorldHint`."""
    if descriptor.mcp is None:
        return []
    server = ctx.catalog.servers.get(ctx.namespace, descriptor.mcp.server)
    annotations = (server.body.get("metadata") or {}).get("annotations") if server else None
    added, _ = rule.server_labels(annotations)
    info = ctx.catalog.discovered_tool(ctx.namespace, descriptor.mcp.server, descriptor.mcp.tool)
    hints = (info or {}).get("annotations")
    added += rule.hinted_labels(hints if isinstance(hints, Mapping) else None)
    return added


async def judge(
    ctx: FlowContext, descriptor: ToolDescriptorSpec, effective: SideEffectClass
) -> rule.Verdict:
    """The rule's verdict for this call from its scopes' stores as they are now."""
    spec = ctx.load_spec()
    decision = ctx.load_decision()
    where = reach(ctx, descriptor)
    sink = rule.is_sink(descriptor, effective, where)
    if not sink:
        # Not a sink: nothing to read (the common path costs no request).
        return rule.Verdict(sink=False, sources=(), action=None, reason="")
    scopes = rule.judged_scopes(
        namespace=ctx.namespace,
        caller=spec.caller.name,
        run_id=spec.run_id or "",
        attempt_id=spec.attempt_id or "",
        scope=decision.dataflow_scope,
    )
    stores = [
        (scope, await ctx.rt.cluster.read_config_map(ctx.namespace, scope.store_name))
        for scope in scopes
    ]
    # Labels whose write failed at their call's end count as if stored (fail closed).
    stores += [(scope, ctx.rt.pending_labels.data_for(scope)) for scope in scopes]
    sources = rule.held(
        stores,
        now=datetime.now(UTC),
        window_seconds=ctx.rt.settings.dataflow_window_seconds,
        exclude=ctx.name,
    )
    return rule.judge(
        sink=True,
        reach=where,
        sources=sources,
        action=decision.dataflow_action,
        scopes=scopes,
    )


def record(ctx: FlowContext, descriptor: ToolDescriptorSpec, verdict: rule.Verdict) -> None:
    """status.dataFlow: the labels this call brings, what its scopes held, whether it is a
    sink and why it was gated; only when there is something to say (a plain call's status
    stays as small as it was)."""
    labels = rule.labels_of(descriptor, added=server_added(ctx, descriptor))
    if not labels and not verdict.sources:
        return
    ctx.status.data_flow = DataFlowRecord(
        labels=labels,
        sources=list(verdict.sources),
        sink=verdict.sink,
        gated=verdict.reason if verdict.action is not None else None,
    )


def labels_brought(ctx: FlowContext) -> list[DataLabel]:
    record = ctx.status.data_flow
    return list(record.labels) if record is not None else []


def write_of(ctx: FlowContext) -> rule.LabelWrite | None:
    """The labels this ended call brings into its scopes (None: none to bring)."""
    spec = ctx.spec if ctx.spec is not None else ctx.unvalidated_spec()
    if not rule.brings_labels(
        ctx.status.state,
        executed=ctx.status.execution is not None,
        attempt_workspace=uses_attempt_workspace(ctx.descriptor, spec.attempt_id),
    ):
        return None
    labels = labels_brought(ctx)
    if not labels:
        return None
    return rule.LabelWrite(
        namespace=ctx.namespace,
        invocation=ctx.name,
        uid=ctx.uid,
        caller=spec.caller.name,
        run_id=spec.run_id or "",
        attempt_id=spec.attempt_id or "",
        tool=spec.tool.id,
        at=ctx.status.ended_at or now_iso(),
        labels=tuple(labels),
    )


async def store_labels(cluster: Cluster, write: rule.LabelWrite, *, window_seconds: int) -> None:
    """Merge one call's labels into each of its scopes' stores (fixed keys: repeating it is
    harmless)."""
    for scope in write.scopes:
        data: dict[str, str | None] = dict(write.entries())
        if scope.windowed:
            # A caller's store keeps only the window: what left it goes with this write.
            current = await cluster.read_config_map(write.namespace, scope.store_name)
            now = datetime.now(UTC)
            for key in rule.expired_keys(current, now=now, window_seconds=window_seconds):
                data.setdefault(key, None)
        await cluster.merge_config_map(
            write.namespace, scope.store_name, data, {rule.STORE_LABEL: scope.kind.value}
        )


async def bring_labels(ctx: FlowContext) -> None:
    """Write the labels of a call that ended Observed or Uncertain into its scopes.

    Never holds the end: a write that fails (or hangs past `WRITE_SECONDS`) leaves the
    labels pending (`status.dataFlow.pending`, `rt.pending_labels`), counted by every gate
    of this process until `retry_pending` stores them; logged and counted
    (`tooladapter_dataflow_labels_deferred_total`)."""
    write = write_of(ctx)
    record = ctx.status.data_flow
    if write is None or record is None:
        return
    pending = ctx.rt.pending_labels
    window = ctx.rt.settings.dataflow_window_seconds
    try:
        await asyncio.wait_for(
            store_labels(ctx.rt.cluster, write, window_seconds=window), WRITE_SECONDS
        )
    except Exception as exc:
        if not record.pending:
            DATAFLOW_LABELS_DEFERRED.labels(ctx.namespace).inc()
            logger.warning(
                "invocation %s: its data-flow labels (%s) could not be written to its "
                "scopes (%s); it ends anyway, the labels pending: counted by the gate and "
                "written by a retry",
                ctx.ref,
                ", ".join(label.value for label in write.labels),
                type(exc).__name__,
            )
        record.pending = True
        pending.add(write)
    else:
        record.pending = None
        pending.discard(write.namespace, write.invocation)
    DATAFLOW_LABELS_PENDING.set(len(pending))


async def retry_pending(rt: Runtime) -> int:
    """Write the pending labels of ended calls (a worker's round); a stored write is taken
    off the list and its call's `status.dataFlow.pending` cleared. Returns how many were
    stored. A call whose flow still runs is left to it (its end retries the write)."""
    stored = 0
    for write in rt.pending_labels.writes():
        if write.uid in rt.tasks:
            continue
        try:
            await store_labels(
                rt.cluster, write, window_seconds=rt.settings.dataflow_window_seconds
            )
        except Exception as exc:
            logger.warning(
                "invocation %s/%s: its pending data-flow labels could not be written yet (%s)",
                write.namespace,
                write.invocation,
                type(exc).__name__,
            )
            continue
        rt.pending_labels.discard(write.namespace, write.invocation)
        stored += 1
        try:
            await rt.cluster.patch_status(
                Resource.INVOCATIONS,
                write.namespace,
                write.invocation,
                {"dataFlow": {"pending": None}},
            )
        except NotFound:
            pass  # gone (deleted, or retention): its labels are stored all the same
        except Exception:
            # The labels are stored; a status still saying pending only costs one repeated,
            # harmless write after a restart.
            logger.info(
                "invocation %s/%s: pending flag not cleared", write.namespace, write.invocation
            )
    DATAFLOW_LABELS_PENDING.set(len(rt.pending_labels))
    if stored:
        logger.info("data flow: stored the pending labels of %d ended call(s)", stored)
    return stored


def observe_pending(rt: Runtime, body: Mapping[str, Any]) -> None:
    """An ended invocation seen on the watch that still owes its labels (a restarted
    operator's listing, a namespace taken over): its write is taken up here."""
    write = rule.pending_write_of(body)
    if write is None or rt.pending_labels.holds(write.namespace, write.invocation):
        return
    if not rt.settings.serves(write.namespace):
        return
    rt.pending_labels.add(write)
    DATAFLOW_LABELS_PENDING.set(len(rt.pending_labels))
