"""Endings: finish (an executor's Outcome), deny, fail, cancel, and the one receipt.

Every call ends here, in exactly one terminal state, with its sandbox lease released, a
receipt in the artifact store, the receipt summary in status, its metrics and its event.
The receipt and its summary are stored by the receipts service (`receipts.service.writer`),
which an operator's confirmation of an Uncertain effect uses too.

The artifact store may be down (an s3 bucket across the network): a result or receipt that
it does not take is retried in place until it does (`receipts.service.storing`), with a
warning event and a metric. Until then the end is decided but not persisted, so a persisted
end always has its receipt, and the call never runs again (it is past Executing; a
restarted operator follows it as after any crash).
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Callable
from typing import Any

from tooladapter import offload
from tooladapter.artifacts import content_ref
from tooladapter.credentials.carried import Issued
from tooladapter.credentials.issuers import TokenIssuer
from tooladapter.egress.core.lease import records_from
from tooladapter.egress.core.tally import uses
from tooladapter.enums import (
    ArtifactKind,
    EventLevel,
    FailureClass,
    InvocationState,
    SideEffectClass,
    Stage,
    StageOutcome,
    ToolKind,
)
from tooladapter.executors import Outcome, read_limit
from tooladapter.flow import dataflow
from tooladapter.flow.context import Denial, Failure, FlowContext
from tooladapter.kube.claims import Claim, ClaimEnd
from tooladapter.metrics import (
    DENIALS,
    DUPLICATES,
    INVOCATIONS,
    LATENCY,
    SANDBOX_SECONDS,
    UNKNOWN_TOOL,
)
from tooladapter.model import (
    DataFlowRecord,
    EffectConfirmation,
    EgressRecord,
    HttpSpec,
    InvocationResult,
    ToolDescriptorSpec,
    ToolInvocationSpec,
)
from tooladapter.naming import LeaseNames
from tooladapter.pipeline.sanitize.egress import redacted_records, refusals
from tooladapter.pipeline.sanitize.redaction import BROKERED_SECRET
from tooladapter.pipeline.sanitize.results import sanitize, sanitize_structured
from tooladapter.pipeline.sanitize.secret_forms import secret_forms
from tooladapter.receipts.service.writer import ReceiptInput, ReceiptWriter
from tooladapter.timeutil import now_iso, parse_time

logger = logging.getLogger("tooladapter.invocations")

_OUTCOME_STAGE = {
    InvocationState.OBSERVED: StageOutcome.OBSERVED,
    InvocationState.FAILED: StageOutcome.FAILED,
    InvocationState.UNCERTAIN: StageOutcome.UNCERTAIN,
    InvocationState.CANCELLED: StageOutcome.CANCELLED,
}


async def finish(ctx: FlowContext, outcome: Outcome) -> None:
    """End an execution: sanitize its output, store it, and settle as the Outcome says."""
    returned = now_iso()  # the tool's answer: its span ends here, sanitizing's begins
    max_bytes = ctx.call_limits().max_result_bytes
    output = whole_secrets_only(outcome.output, max_bytes, ctx.secret_values)
    # Linear (RE2) but CPU-heavy for large outputs: off the event loop, in this tenant's
    # turn, so another tenant's call never waits for this one's sanitization.
    clean = await offload.run(
        ctx.namespace,
        len(output),
        sanitize,
        output,
        secrets=ctx.secret_values,
        max_bytes=max_bytes,
    )
    structured = None
    if outcome.structured is not None:
        # Redacted value by value (never a regex over serialised JSON); dropped when too big.
        # Inline when the executor knows it came from a small JSON text (a thread hop waits
        # for the GIL behind the busy loop: up to `sys.getswitchinterval()` each way).
        size = outcome.structured_bytes
        cleaned = await offload.run(
            ctx.namespace,
            offload.INLINE_BYTES + 1 if size is None else size,
            sanitize_structured,
            outcome.structured,
            secrets=ctx.secret_values,
            max_bytes=max_bytes,
        )
        structured = cleaned.value
    if BROKERED_SECRET in clean.redactions:
        # A brokered value was in the output: it may sit in the structured form in pieces no
        # value-by-value redaction recognises (a secret that is itself JSON). Text only.
        structured = None
    # Sizes and hashes are in status.result; the detail says only what was changed.
    changed = [f"{len(clean.redactions)} redaction(s)"] if clean.redactions else []
    if clean.truncated:
        changed.append("truncated")
    ctx.record(Stage.SANITIZE, StageOutcome.DONE, ", ".join(changed), since=returned)
    content = clean.content.encode()
    # The output exists only here now: it is stored with the receipt, before status names
    # either (`conclude`); a store error delays the end, never loses it.
    ctx.status.result_ref = content_ref(content)
    ctx.unstored.append(content)
    ctx.status.result_hash = ctx.status.result_ref
    inline = len(content) <= ctx.rt.settings.limits.inline_result_bytes
    result = ctx.status.result = InvocationResult(
        content=clean.content if inline else "",
        structured_content=structured if inline else None,
        truncated=clean.truncated,
        inline=inline,
        original_bytes=clean.original_bytes,
        # The hash of output that held a secret would let an agent confirm guesses of it
        # offline (its own arguments are known): only outputs without redactions show it.
        original_sha256=None if clean.redactions else clean.original_sha256,
        redactions=list(clean.redactions),
        exit_code=outcome.exit_code,
        is_error=outcome.is_error,
        http_status=outcome.http_status,
    )
    ctx.status.failure_class = outcome.failure_class
    ctx.status.message = ctx.bounded(outcome.message) or None
    await release(ctx, f"invocation ended {outcome.state}")
    # The proxy's refusals beside the tool's output (read by `release`): a tool that says
    # only "response 502" did not reach its host, and the agent reads here why.
    result.egress_refused = refusals(ctx.status.egress, ctx.secret_values)
    ctx.record(Stage.EXECUTE, _OUTCOME_STAGE[outcome.state], outcome.message, until=returned)
    await end(ctx, outcome.state)


def whole_secrets_only(output: bytes, max_bytes: int, secrets: list[str]) -> bytes:
    """A read cut at `read_limit` may end inside a secret: drop that tail before redacting.

    Only what lies beyond `max_bytes` is dropped (the shown part is cut there anyway), and
    only when the executor's read was cut, so a whole output keeps every byte."""
    if len(output) < read_limit(max_bytes):
        return output
    longest = max((len(form) for s in secrets for form in secret_forms(s)), default=0)
    tail = min(len(output) - max_bytes, max(longest, 4096))
    return output[: len(output) - tail]


async def release(ctx: FlowContext, reason: str) -> None:
    """Credentials die with the call: the ephemeral Secret goes now, the rest is reaped.

    A proxied lease ends for the egress proxy in the same step (its grant and the pod's
    proxy URL are deleted), and the connections the proxy recorded join the status: counted
    per host there, the whole list in the artifact store (`egressRecordsRef`). Tokens an
    issuer minted are revoked where it offers revocation (`revoke_issued`)."""
    await revoke_issued(ctx)
    lease = ctx.status.sandbox_lease
    if lease is None or lease.released_at is not None:
        return
    if lease.secret_name:
        await ctx.rt.cluster.delete("Secret", ctx.namespace, lease.secret_name)
    if lease.egress_proxy is not None:
        names = LeaseNames.for_uid(ctx.uid)
        egress_namespace = ctx.rt.settings.egress.namespace
        await ctx.rt.cluster.delete("Secret", egress_namespace, names.egress)
        await ctx.rt.cluster.delete("Secret", ctx.namespace, names.proxy_secret)
        data = await ctx.rt.cluster.read_config_map(egress_namespace, names.egress)
        # Hosts and reasons the sandbox chose: redacted before status, receipt or store.
        records = redacted_records(valid_records(data), ctx.secret_values)
        # The whole list goes to the artifact store with the receipt (which names it);
        # status and receipt carry it counted per host, every connection and byte in it.
        whole = json.dumps([r.wire() for r in records], separators=(",", ":")).encode()
        ctx.status.egress_records_ref = content_ref(whole)
        ctx.unstored.append(whole)
        ctx.status.egress = uses(records)
    lease.released_at = now_iso()
    ctx.post(reason="SandboxReleased", message=f"lease {lease.lease_id}: {reason}")


#: A revocation that does not answer in this long is recorded `revoked: false`.
REVOKE_SECONDS = 2.0
#: Then it is tried again in the background, after these pauses (unrecorded: the call has
#: ended; the token lives at most until the issuer's expiry anyway).
REVOKE_RETRY_PAUSES = (5.0, 30.0, 120.0)


async def revoke_issued(ctx: FlowContext) -> None:
    """Revoke each token an issuer minted for this call (RFC 7009), at most
    `REVOKE_SECONDS` for all of them, and record the outcome in status.credentials: true
    when the issuer confirmed, false when it refused or did not answer in time (then it is
    retried in the background). A token minted by an earlier run of this process (a
    restart) is not in memory: unrecorded."""
    issuers = ctx.rt.issuers
    pending = [
        (item, item.issued)
        for item in ctx.minted
        if item.issued is not None and item.issued.revocation_url is not None
    ]
    # Once per call: `release` runs again when an end is retried.
    ctx.minted = []
    if issuers is None or not pending:
        return
    results = await asyncio.gather(
        *(
            issuers.revoke(
                issued.revocation_url or "",
                issued.client_id,
                issued.client_secret,
                item.value,
                REVOKE_SECONDS,
            )
            for item, issued in pending
        ),
        return_exceptions=True,
    )
    uses = {use.name: use for use in ctx.status.credentials or []}
    for (item, issued), result in zip(pending, results, strict=True):
        done = result is True
        if item.name in uses:
            uses[item.name].revoked = done
        if not done:
            ctx.rt.spawn_background(
                retry_revocation(issuers, issued, item.value),
                name=f"revoke-{ctx.uid}-{item.name}",
            )


async def retry_revocation(issuers: TokenIssuer, issued: Issued, token: str) -> None:
    """Try a revocation again a few times, each bounded like the first."""
    for pause in REVOKE_RETRY_PAUSES:
        await asyncio.sleep(pause)
        try:
            if await issuers.revoke(
                issued.revocation_url or "",
                issued.client_id,
                issued.client_secret,
                token,
                REVOKE_SECONDS,
            ):
                return
        except Exception:  # best effort: the token expires anyway
            logger.debug("revocation retry failed", exc_info=True)


def valid_records(data: dict[str, str] | None) -> list[EgressRecord]:
    """The proxy's records that parse as EgressRecord (one that does not is skipped)."""
    out: list[EgressRecord] = []
    for record in records_from(data):
        try:
            out.append(EgressRecord.model_validate(record))
        except ValueError:
            continue
    return out


async def cancel(ctx: FlowContext, reason: str) -> None:
    ctx.status.failure_class = FailureClass.CANCELLED
    ctx.status.message = ctx.bounded(reason)
    await release(ctx, reason)
    ctx.record(Stage.EXECUTE, StageOutcome.CANCELLED, reason)
    await end(ctx, InvocationState.CANCELLED)


async def deny(ctx: FlowContext, denial: Denial) -> None:
    if denial.failure == FailureClass.CANCELLED and ctx.status.state != InvocationState.EXECUTING:
        return await cancel(ctx, denial.reason)
    ctx.status.failure_class = denial.failure
    ctx.status.denied_stage = denial.stage
    ctx.status.message = ctx.bounded(denial.reason)
    ctx.record(denial.stage, StageOutcome.DENIED, denial.reason)
    DENIALS.labels(ctx.namespace, str(denial.stage), str(denial.failure)).inc()
    await release(ctx, f"denied at {denial.stage}")
    ctx.post(
        warning=True,
        reason="ToolInvocationDenied",
        message=f"stage {denial.stage}: {denial.reason}",
    )
    await end(ctx, InvocationState.DENIED, post_event=False)


async def fail(ctx: FlowContext, failure: Failure) -> None:
    """End Failed before any effect started (nothing to confirm, safe to call again)."""
    ctx.status.failure_class = failure.failure
    ctx.status.message = ctx.bounded(failure.reason)
    ctx.record(failure.stage, StageOutcome.FAILED, failure.reason)
    await release(ctx, f"failed at {failure.stage}")
    await end(ctx, InvocationState.FAILED)


async def end_as_duplicate(ctx: FlowContext, first: dict[str, Any], claim: Claim) -> None:
    """End as the first call of this idempotency key ended: its state, receiptRef, result,
    failure class and (when recorded) effect confirmation, with `duplicateOf` naming it.

    Nothing ran: the reference's "returns the existing receipt", not a denial. A first call
    deleted before it ended left no outcome to return: then Denied `duplicate`, the only
    case that still writes it (its key stays held, so nothing runs twice either way)."""
    status = ctx.status
    state = first.get("state") or claim.state
    if not state or not InvocationState(state).terminal:
        await deny(
            ctx,
            Denial(
                Stage.IDEMPOTENCY,
                f"duplicate of {claim.winner_name}, which was deleted before it ended: its "
                "outcome is unknown; its idempotency key stays held",
                FailureClass.DUPLICATE,
            ),
        )
        return
    status.receipt_ref = first.get("receiptRef") or claim.receipt_ref
    status.result_ref = first.get("resultRef")
    status.result_hash = first.get("resultHash")
    result = first.get("result")
    status.result = InvocationResult.model_validate(result) if result else None
    if first.get("effectiveClass"):
        status.effective_class = SideEffectClass(first["effectiveClass"])
    if first.get("declaredClass"):
        status.declared_class = SideEffectClass(first["declaredClass"])
    failure = first.get("failureClass")
    status.failure_class = FailureClass(failure) if failure else None
    stage = first.get("deniedStage")
    status.denied_stage = Stage(stage) if stage else None
    flow = first.get("dataFlow")
    if flow and flow.get("labels"):
        # The first call's result is this call's too: its labels enter this call's scopes.
        status.data_flow = DataFlowRecord(labels=flow["labels"])
    confirmation = first.get("effectConfirmation")
    if confirmation and confirmation.get("recorded"):
        status.effect_confirmation = EffectConfirmation.model_validate(confirmation)
    message = f"duplicate of {claim.winner_name}, which ended {state}"
    if first.get("message"):
        message += f": {first['message']}"
    status.message = ctx.bounded(message)
    await end(ctx, InvocationState(state), post_event=False)


def tool_label(ctx: FlowContext, tool_id: str) -> str:
    """The `tool` label of a call's metrics: its id when the catalog holds a descriptor of
    that id in the namespace, else `unknown`, so a label value never comes from what a
    caller typed (the bound: the catalog's tool ids + 1)."""
    if ctx.descriptor is not None:
        return tool_id
    for body in ctx.catalog.list_descriptors(ctx.namespace):
        if (body.get("spec") or {}).get("toolId") == tool_id:
            return tool_id
    return UNKNOWN_TOOL


def validated_http(ctx: FlowContext, descriptor: ToolDescriptorSpec | None) -> HttpSpec | None:
    """The http block of an http tool for its receipt's `target`: only from the
    descriptor the call was validated against (its digest is `status.descriptorDigest`;
    a call denied because its descriptor changed while it waited holds the new one)."""
    if descriptor is None or descriptor.kind != ToolKind.HTTP or descriptor.http is None:
        return None
    validated = ctx.status.descriptor_digest
    if validated is None or ctx.descriptor_digest(descriptor) != validated:
        return None
    return descriptor.http


async def end(ctx: FlowContext, state: InvocationState, *, post_event: bool = True) -> None:
    ctx.status.ended_at = now_iso()
    ctx.enter(state)
    ctx.record(Stage.AUDIT, StageOutcome.RECEIPT)  # the receipt: status.receiptRef
    await conclude(ctx, post_event=post_event)


async def conclude(ctx: FlowContext, *, post_event: bool = True) -> None:
    """Write the decided end: the receipt (once), status, then its metrics and event.

    `drive` calls it again when a write of the end failed, so a persisted end always has
    its receipt, and its event is posted once the end is persisted."""
    spec = ctx.spec if ctx.spec is not None else ctx.unvalidated_spec()
    state = ctx.status.state
    ended_at = ctx.status.ended_at or now_iso()
    descriptor = ctx.descriptor
    # Before the end is persisted: a resumed end writes them again (the same keys), and a
    # scope never misses a label of a call whose end it can read. A failed write never holds
    # the end: the labels stay pending (counted by the gate) and a worker writes them.
    await dataflow.bring_labels(ctx)
    if ctx.status.audit_ref is None:
        sandbox = descriptor.sandbox_spec if descriptor else None
        writer = ReceiptWriter(ctx.rt.store, ctx.rt.chains, ctx.rt.cluster)
        known = ctx.rt.catalog.namespace_uid(ctx.namespace)
        entry = ReceiptInput(
            namespace=ctx.namespace,
            name=ctx.name,
            uid=ctx.uid,
            spec=spec,
            status=ctx.status,
            tool_kind=str(descriptor.kind) if descriptor else None,
            sandbox_pool=sandbox.pool_id if sandbox else None,
            sandbox_kind=str(sandbox.kind) if sandbox else None,
            command_line=ctx.recorded_command_line(),
            written_at=ended_at,
            audit=descriptor.audit_requirements if descriptor else None,
            namespace_uid=await writer.incarnation(ctx.namespace, ctx.body, known=known),
            http=validated_http(ctx, descriptor),
        )
        await writer.write(entry, results=ctx.unstored, on_failure=store_warning(ctx))
        ctx.unstored = []
    await ctx.commit()
    ctx.trace_end()
    await keep_receipt_on_claim(ctx, spec)
    ctx.rt.rates.release(ctx.uid)
    tool = tool_label(ctx, spec.tool.id)
    effective = str(ctx.status.effective_class or "")
    # An Uncertain end must block new calls of its request at once, not when the watch
    # echoes it (`admission.check_unconfirmed` reads the census).
    ctx.rt.census.update("MODIFIED", ctx.body)
    if ctx.status.duplicate_of:
        # Ran nothing: counted here only, never as an invocation, latency or uncertain.
        DUPLICATES.labels(ctx.namespace, str(state)).inc()
        logger.info("invocation %s ended %s as a duplicate", ctx.ref, state)
        await ctx.let_go()
        return
    failure = str(ctx.status.failure_class or "")
    INVOCATIONS.labels(ctx.namespace, tool, effective, str(state), failure).inc()
    execution = ctx.status.execution
    if execution is not None and execution.sandbox_seconds is not None:
        SANDBOX_SECONDS.labels(ctx.namespace).inc(execution.sandbox_seconds)
    try:
        elapsed = (parse_time(ended_at) - parse_time(ctx.created)).total_seconds()
        LATENCY.labels(tool, str(descriptor.kind) if descriptor else "").observe(elapsed)
    except ValueError:
        pass
    if state == InvocationState.UNCERTAIN:
        ctx.post(
            warning=True,
            reason="ToolEffectUncertain",
            message=f"{tool} ({effective}): {ctx.status.message}; "
            "an operator must confirm the effect before any retry",
        )
    elif post_event and (
        state != InvocationState.OBSERVED or ctx.rt.settings.events == EventLevel.ALL
    ):
        # A call that did what was asked needs nobody: its record is the receipt
        # (status.receiptRef); an event per call is one more write per call (issue 17).
        ctx.post(
            reason="ToolInvoked",
            message=f"{tool} ended {state}; receipt {ctx.status.receipt_ref}",
        )
    logger.info("invocation %s ended %s (%s)", ctx.ref, state, ctx.status.failure_class or "ok")
    # Last: the end is persisted and announced; a finalizer left behind by a failure here
    # is removed by `release_finalizer`.
    await ctx.let_go()


async def keep_receipt_on_claim(ctx: FlowContext, spec: ToolInvocationSpec) -> None:
    """A winner's end and receipt onto its idempotency claim, which outlives the invocation
    (retention): duplicates still find the receipt, and the claim's own retention counts from
    here. Best effort: a claim without it is kept until its winner is gone."""
    status = ctx.status
    if not spec.idempotency_key or status.duplicate_of or not status.receipt_ref:
        return
    try:
        await ctx.rt.cluster.record_idempotency_end(
            namespace=ctx.namespace,
            caller=spec.caller.name,
            key=spec.idempotency_key,
            end=ClaimEnd(
                holder_uid=ctx.uid,
                receipt_ref=status.receipt_ref,
                ended_at=status.ended_at or now_iso(),
                state=str(status.state),
            ),
        )
    except Exception:
        logger.warning("invocation %s: its end not kept on its claim", ctx.ref, exc_info=True)


def store_warning(ctx: FlowContext) -> Callable[[ArtifactKind, Exception], None]:
    """A warning event on the call whose artifact the store refused (once per artifact)."""

    def post(kind: ArtifactKind, exc: Exception) -> None:
        ctx.post(
            warning=True,
            reason="ArtifactStoreUnavailable",
            message=f"the artifact store did not take the {kind} ({type(exc).__name__}: "
            f"{exc}); retrying: the call ends once it is stored",
        )

    return post
