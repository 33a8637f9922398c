"""Data flow, the flow's side of `pipeline.dataflow`: read a call's scopes, judge it, record
what it saw, and write the labels a call brought when it ends.

Judged at the approval stage (a gated sink waits, or is Denied at policy), again in the
re-check right before brokering (a label that arrived while the call waited: its approval
did not see it), and in a dry run. Written at the end, before the end's status: a call that
ended Observed or Uncertain may have returned data, so its labels enter its scopes (a
duplicate's are its first call's). The write is a merge of fixed keys, so a resumed end
repeats it harmlessly.
"""

from __future__ import annotations

from datetime import UTC, datetime

from tooladapter.enums import DataLabel, InvocationState, SideEffectClass
from tooladapter.flow.context import FlowContext
from tooladapter.model import DataFlowRecord, ToolDescriptorSpec
from tooladapter.pipeline import dataflow as rule
from tooladapter.timeutil import now_iso

#: The ends after which a call's result may have reached the caller.
LABELLING_STATES = frozenset({InvocationState.OBSERVED, InvocationState.UNCERTAIN})


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
    labels = rule.labels_of(descriptor)
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


async def bring_labels(ctx: FlowContext) -> None:
    """Write the labels of a call that ended Observed or Uncertain into its scopes."""
    if ctx.status.state not in LABELLING_STATES:
        return
    labels = labels_brought(ctx)
    if not labels:
        return
    spec = ctx.spec if ctx.spec is not None else ctx.unvalidated_spec()
    at = ctx.status.ended_at or now_iso()
    value = rule.entry_value(tool=spec.tool.id, at=at)
    window = ctx.rt.settings.dataflow_window_seconds
    for scope in rule.recorded_scopes(
        namespace=ctx.namespace,
        caller=spec.caller.name,
        run_id=spec.run_id or "",
        attempt_id=spec.attempt_id or "",
    ):
        data: dict[str, str | None] = {rule.entry_key(label, ctx.name): value for label in labels}
        if scope.windowed:
            # A caller's store keeps only the window: what left it goes with this write.
            current = await ctx.rt.cluster.read_config_map(ctx.namespace, scope.store_name)
            for key in rule.expired_keys(current, now=datetime.now(UTC), window_seconds=window):
                data.setdefault(key, None)
        await ctx.rt.cluster.merge_config_map(
            ctx.namespace,
            scope.store_name,
            data,
            {rule.STORE_LABEL: scope.kind.value},
        )
