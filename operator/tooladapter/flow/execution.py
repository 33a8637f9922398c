"""Execution: Brokered -> Executing -> the executor's Outcome.

Executing is on the API server before any call with an effect starts, so a restarted
operator follows (never repeats) it: `Executor.resume` follows a sandbox Job it finds, and
settles a call that ran inside the stopped process by its class (Failed when effects stay
contained, else Uncertain). A read in the operator may simply run again, so it is written
only if it runs longer than `PROGRESS_AFTER_SECONDS`.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import Any

from tooladapter import tracing
from tooladapter.catalog import retirement_key
from tooladapter.egress.core.lease import PROXY_URL_KEY, token_of
from tooladapter.egress.core.rules import split_entries
from tooladapter.enums import (
    FailureClass,
    InvocationState,
    Resource,
    SandboxStart,
    SideEffectClass,
    Stage,
    StageOutcome,
)
from tooladapter.executors import Call, Outcome, unconfirmed_for
from tooladapter.executors.sandbox import SandboxExecutor
from tooladapter.flow.admission import check_unconfirmed
from tooladapter.flow.brokering import ensure_carried
from tooladapter.flow.capacity import note_unschedulable, wait_for_capacity
from tooladapter.flow.context import (
    SANDBOX_KINDS,
    Denial,
    Failure,
    FlowContext,
    Restart,
    Superseded,
)
from tooladapter.flow.ending import cancel, finish
from tooladapter.flow.recheck import (
    check_not_retired,
    needs_recheck,
    recheck,
    recheck_data_flow,
)
from tooladapter.kube.client import Conflict, NotFound
from tooladapter.kube.sandbox import decode_b64
from tooladapter.model import ExecutionRecord, ToolDescriptorSpec
from tooladapter.naming import LeaseNames
from tooladapter.sandbox.warm import uses_attempt_workspace, workspace_key
from tooladapter.timeutil import now_iso

logger = logging.getLogger("tooladapter.invocations")

#: Claims retried when only an invocation's metadata moved under the flow.
CLAIM_ATTEMPTS = 10
#: A read call in the operator still running after this long shows Executing on its status.
PROGRESS_AFTER_SECONDS = 1.0


async def on_brokered(ctx: FlowContext) -> None:
    if needs_recheck(ctx):
        await recheck(ctx)
    descriptor = await ctx.load_descriptor()
    if ctx.interrupt_requested():
        return await cancel(ctx, "interrupted before execution started")
    attempt = uses_attempt_workspace(descriptor, ctx.load_spec().attempt_id)
    # An attempt's call runs in its workspace pod, never a Job: the quota check of a Job it
    # will not make would only cost time (a new workspace pod meets the quota itself).
    job = None if attempt else sandbox_job(ctx, descriptor)
    if job is not None and await wait_for_capacity(ctx, job):
        if ctx.interrupt_requested():
            return await cancel(ctx, "interrupted while waiting for capacity")
        # It waited: what may have changed meanwhile is checked again, right before acting.
        ctx.rechecked = False
        await recheck(ctx)
        descriptor = await ctx.load_descriptor()
    if attempt:
        if not await wait_for_workspace(ctx):
            return await cancel(ctx, "interrupted while waiting for the attempt's workspace")
        descriptor = await ctx.load_descriptor()
        await check_workspace(ctx, descriptor)
    # An identical call may have become Uncertain while this one waited.
    await check_unconfirmed(ctx)
    check_not_retired(ctx)  # a version retired a moment ago never starts
    # A label that arrived since the gate (or the re-check) was judged: a sink does not act
    # on a judgement made without it.
    await recheck_data_flow(ctx, descriptor)
    admit(ctx, descriptor)
    ctx.status.execution = ExecutionRecord(
        kind=descriptor.kind,
        started_at=now_iso(),
        job_name=LeaseNames.for_uid(ctx.uid).job if descriptor.kind in SANDBOX_KINDS else None,
        command_line=ctx.recorded_command_line(),
    )
    ctx.record(Stage.EXECUTE, StageOutcome.STARTED)  # the kind: status.execution.kind
    if write_before_execute(ctx, descriptor):
        await claim_execution(ctx)
    else:
        await ctx.advance(InvocationState.EXECUTING)
    ctx.started_here = True


async def wait_for_workspace(ctx: FlowContext) -> bool:
    """Take the call's turn in its attempt's workspace (`attempts`): calls of one attempt
    run one at a time, in the order they got here. Waiting holds no calls-in-flight slot.
    After a wait, what may have changed (the fencing token above all: a newer attempt may
    have superseded this one meanwhile) is checked again. False: interrupted first."""
    spec = ctx.load_spec()
    assert spec.attempt_id
    key = workspace_key(ctx.namespace, spec.caller.name, spec.attempt_id)
    if ctx.rt.attempts.holds(ctx.uid):
        return True
    if ctx.rt.attempts.busy(key):
        ctx.record(
            Stage.SANDBOX,
            StageOutcome.WAITING,
            "waiting for the attempt's workspace: another call of the attempt runs in it",
        )
        await ctx.commit()  # the wait is seen (kubectl get, the page) while it lasts
    join = asyncio.ensure_future(ctx.rt.attempts.join(key, ctx.uid))
    interrupt = asyncio.ensure_future(ctx.interrupted.wait())
    try:
        async with ctx.without_slot():
            done, _ = await asyncio.wait({join, interrupt}, return_when=asyncio.FIRST_COMPLETED)
    except BaseException:
        join.cancel()
        raise
    finally:
        interrupt.cancel()
    if join not in done:
        join.cancel()
        return False
    if ctx.interrupt_requested():
        return False
    if join.result():
        ctx.rechecked = False
        await recheck(ctx)
    return True


async def check_workspace(ctx: FlowContext, descriptor: ToolDescriptorSpec) -> None:
    """An earlier call of the attempt may have left git configuration in the workspace
    that runs a command or sends requests elsewhere (`sandbox.gitconfig`): refused here,
    before Executing is written and before the tool starts, so Denied is true (nothing
    ran). A check that cannot be made fails the call (nothing ran either)."""
    executor = ctx.rt.executors.get(descriptor.kind)
    warm = executor.warm if isinstance(executor, SandboxExecutor) else None
    spec = ctx.load_spec()
    if warm is None or not spec.attempt_id:
        return
    found = await warm.check_workspace(ctx.namespace, spec.caller.name, spec.attempt_id)
    if found.refused is not None:
        raise Denial(Stage.SANDBOX, found.refused, FailureClass.POLICY_DENIED)
    if found.unchecked is not None:
        raise Failure(Stage.SANDBOX, found.unchecked, FailureClass.TRANSIENT)
    if found.checked:
        ctx.record(
            Stage.SANDBOX,
            StageOutcome.PASSED,
            "the attempt's workspace holds no git configuration that runs commands",
        )


def sandbox_job(ctx: FlowContext, descriptor: ToolDescriptorSpec) -> dict[str, Any] | None:
    """The Job the sandbox executor will create for this call (None: no sandbox Job, or
    one that cannot be built: the executor then fails the call as before)."""
    executor = ctx.rt.executors.get(descriptor.kind)
    if descriptor.kind not in SANDBOX_KINDS or not isinstance(executor, SandboxExecutor):
        return None
    try:
        return executor.job_for(build_call(ctx))
    except ValueError:
        return None


async def claim_execution(ctx: FlowContext) -> None:
    """Write Executing only onto the version of the invocation this flow last saw.

    Two operators on one call (a rolling update, a partition, a second `make run`) both
    reach this write from the same version; the API server accepts exactly one, so exactly
    one executes. The loser re-reads: an execution claimed by another process is theirs to
    finish; anything else (an interrupt, a label) changed the version and the flow goes on
    from the state stored."""
    assert ctx.status.execution is not None
    ctx.status.execution.holder = ctx.rt.identity
    for _ in range(CLAIM_ATTEMPTS):
        try:
            # Held by a finalizer from here on: a deleted running call still settles and
            # leaves its receipt and event before the object goes.
            await ctx.hold()
            await ctx.commit(InvocationState.EXECUTING, exclusive=True)
            return
        except Conflict:
            fresh = await ctx.rt.cluster.get(Resource.INVOCATIONS, ctx.namespace, ctx.name)
        if untouched(ctx.body, fresh):
            ctx.body = fresh  # only metadata moved (an annotation, say): claim again
            continue
        break
    fresh = await ctx.reload()
    execution = (fresh.get("status") or {}).get("execution") or {}
    mine = execution.get("holder") == ctx.rt.identity
    if ctx.status.state == InvocationState.EXECUTING and mine:
        return  # our write landed though its answer was lost: the claim is ours
    if ctx.status.state == InvocationState.EXECUTING or ctx.status.state.terminal:
        if not mine:
            raise Superseded(execution.get("holder") or "another operator")
    raise Restart


def untouched(seen: dict[str, Any], fresh: dict[str, Any]) -> bool:
    """Nobody claimed, interrupted or deleted the call since `seen`: same status and spec,
    no deletion (other metadata may have moved)."""
    return (
        (fresh.get("status") or {}) == (seen.get("status") or {})
        and fresh.get("spec") == seen.get("spec")
        and not fresh["metadata"].get("deletionTimestamp")
    )


def admit(ctx: FlowContext, descriptor: ToolDescriptorSpec) -> None:
    """The descriptor's rateLimits, counted as the call starts executing."""
    limits = descriptor.rate_limits
    if limits.per_minute is None and limits.concurrency is None:
        return
    spec = ctx.load_spec()
    verdict = ctx.rt.rates.admit(
        uid=ctx.uid,
        namespace=ctx.namespace,
        tool=spec.tool.id,
        caller=spec.caller.name,
        per_caller=ctx.load_decision().rate_limit_per_caller,
        per_minute=limits.per_minute,
        concurrency=limits.concurrency,
        now=datetime.now(UTC),
    )
    if not verdict.allowed:
        ctx.status.retry_after_seconds = verdict.retry_after_seconds
        raise Denial(
            Stage.RATE_LIMIT,
            f"{verdict.reason}; retry after {verdict.retry_after_seconds}s",
            FailureClass.RATE_LIMITED,
        )
    ctx.record(Stage.RATE_LIMIT, StageOutcome.PASSED, "within rateLimits")


def write_before_execute(ctx: FlowContext, descriptor: ToolDescriptorSpec) -> bool:
    """Whether Executing must be on the API server before the call starts.

    A sandbox Job must be followed, never recreated, after a restart, and a call with an
    effect must end Uncertain rather than run again.
    """
    return (
        ctx.rt.settings.write_every_state
        or descriptor.kind in SANDBOX_KINDS
        or ctx.status.effective_class != SideEffectClass.READ
    )


def build_call(ctx: FlowContext) -> Call:
    spec = ctx.load_spec()
    descriptor = ctx.descriptor
    effective = ctx.status.effective_class
    assert effective is not None
    lease = ctx.status.sandbox_lease
    return Call(
        namespace=ctx.namespace,
        name=ctx.name,
        uid=ctx.uid,
        caller=spec.caller.name,
        descriptor=descriptor,
        arguments=spec.arguments,
        effective_class=effective,
        limits=ctx.call_limits(),
        idempotency_key=spec.idempotency_key,
        argv=tuple(ctx.command_line()),
        lease_id=ctx.uid,
        proxy_bypass=proxy_bypass(ctx),
        interrupted=ctx.interrupted,
        traceparent=tracing.traceparent(ctx.uid),
        attempt_id=spec.attempt_id,
        egress_allow=tuple(lease.limits.egress_allow) if lease is not None else (),
        credentials=tuple(ctx.carried or ()) if lease is None else (),
        outside=ctx.without_slot,
        remote=ctx.awaiting_remote,
        waiting=functools.partial(note_unschedulable, ctx),
    )


def proxy_bypass(ctx: FlowContext) -> tuple[str, ...] | None:
    """The CIDR entries a proxied lease reaches directly (NO_PROXY); None: no proxy."""
    lease = ctx.status.sandbox_lease
    if lease is None or lease.egress_proxy is None:
        return None
    return tuple(split_entries(lease.limits.egress_allow)[0])


async def on_executing(ctx: FlowContext) -> None:
    spec = ctx.load_spec()
    if ctx.descriptor is None:
        # After a restart the descriptor may have gone; a Job can still be followed.
        entry = ctx.catalog.find_descriptor(ctx.namespace, spec.tool.id, spec.tool.version)
        ctx.descriptor = entry.spec if entry else None
    await recover_secret_values(ctx)
    if ctx.started_here and ctx.descriptor is not None and ctx.descriptor.kind not in SANDBOX_KINDS:
        # An operator-run call's values are in memory only: brokered again after a restart.
        await ensure_carried(ctx, ctx.descriptor)
    call = build_call(ctx)
    record = ctx.status.execution
    kind = record.kind if record else (ctx.descriptor.kind if ctx.descriptor else None)
    executor = ctx.rt.executors.get(kind) if kind is not None else None
    watch = asyncio.ensure_future(interrupt_on_retirement(ctx))
    try:
        if executor is None:
            outcome = Outcome.failed(FailureClass.INTERNAL, f"no executor for kind {kind}")
        elif not ctx.started_here:
            if uses_attempt_workspace(ctx.descriptor, spec.attempt_id):
                # Its stop must not kill the processes of another call of the attempt.
                await wait_for_workspace(ctx)
            outcome = await executor.resume(call)
        else:
            persisted = ctx.persisted_state == InvocationState.EXECUTING
            outcome = await show_progress(ctx, executor.execute(call), persisted)
            while retry_allowed(ctx, outcome):
                outcome = await retry(ctx, lambda: executor.execute(call), outcome)
    finally:
        watch.cancel()
    if outcome.sandbox_seconds is not None and ctx.status.execution is not None:
        # Metered when the end is written (`ending.conclude`), and on the receipt's usage.
        # A new record, not a change in place: the status patch compares against the last
        # written one.
        ctx.status.execution = ctx.status.execution.model_copy(
            update={"sandbox_seconds": round(outcome.sandbox_seconds, 3)}
        )
    record_sandbox_run(ctx, outcome)
    await finish(ctx, outcome)


def record_sandbox_run(ctx: FlowContext, outcome: Outcome) -> None:
    """Which sandbox ran the call, warm or cold, and its attempt's workspace: on the lease
    (and so on the receipt). New records, not changes in place (see above)."""
    run, lease = outcome.sandbox_run, ctx.status.sandbox_lease
    if run is None or lease is None:
        return
    ctx.status.sandbox_lease = lease.model_copy(
        update={"start": run.start, "sandbox_name": run.name, "workspace": run.workspace}
    )
    if run.start == SandboxStart.WARM and run.workspace is not None:
        ctx.status.sandbox_lease.workspace_ref = f"pod:{run.name}/workspace"
    if run.start == SandboxStart.WARM and ctx.status.execution is not None:
        ctx.status.execution = ctx.status.execution.model_copy(update={"job_name": None})


async def interrupt_on_retirement(ctx: FlowContext) -> None:
    """While the call executes: its version retired with `retirement.inFlight: Cancel`
    interrupts it, settled by class exactly as `spec.interrupt` is. Looked at once at the
    start (a resumed call whose version was retired while no operator ran) and whenever a
    descriptor of the namespace is retired (`Catalog.update`)."""
    spec = ctx.load_spec()
    key = retirement_key(ctx.name)
    signal = ctx.rt.catalog.changed(ctx.namespace, key)
    try:
        while not ctx.interrupted.is_set():
            signal.clear()
            entry = ctx.rt.catalog.find_descriptor(ctx.namespace, spec.tool.id, spec.tool.version)
            if entry is not None and entry.spec is not None and entry.spec.interrupts_in_flight:
                ctx.post(
                    reason="ToolInvocationInterrupted",
                    message=f"{spec.tool.id}@{spec.tool.version} was retired with "
                    "retirement.inFlight Cancel: the running call is interrupted",
                    warning=True,
                )
                ctx.interrupted.set()
                return
            await signal.wait()
    finally:
        ctx.rt.catalog.forget(ctx.namespace, key)


def retry_allowed(ctx: FlowContext, outcome: Outcome) -> bool:
    """The descriptor's retryPolicy, only for an outcome the one rule (`executors.sending`)
    says was never sent: once a request's last byte was written, or a sandbox's tool may have
    started, it is never run again, whatever its class."""
    record = ctx.status.execution
    policy = ctx.descriptor.retry_policy if ctx.descriptor else None
    return (
        outcome.resendable
        and record is not None
        and policy is not None
        and record.attempts < policy.max_attempts
        and not ctx.interrupt_requested()
    )


async def retry(
    ctx: FlowContext, run: Callable[[], Awaitable[Outcome]], failed: Outcome
) -> Outcome:
    """Record the failed attempt as a stage, wait the policy's backoff, run again."""
    record, descriptor = ctx.status.execution, ctx.descriptor
    assert record is not None and descriptor is not None
    backoff = descriptor.retry_policy.backoff_seconds * record.attempts
    record.attempts += 1
    ctx.record(
        Stage.EXECUTE,
        StageOutcome.RETRY,
        f"attempt {record.attempts} of {descriptor.retry_policy.max_attempts} in {backoff}s "
        f"(not sent: {failed.message})",
    )
    try:
        if backoff:
            await asyncio.wait_for(ctx.interrupted.wait(), timeout=backoff)
    except TimeoutError:
        pass
    if ctx.interrupted.is_set():
        return failed
    return await run()


async def settle_unexpected(ctx: FlowContext, error: BaseException) -> None:
    """An unexpected error once the effect may have started: settle, never run again."""
    effective = ctx.status.effective_class or SideEffectClass.PRODUCTION
    await finish(
        ctx,
        unconfirmed_for(
            effective, f"the operator failed while the tool ran ({type(error).__name__})"
        ),
    )


async def recover_secret_values(ctx: FlowContext) -> None:
    """After a restart the brokered values are needed again, for redaction only: the
    lease's Secret, the egress credentials in its grant, and its proxy token."""
    lease = ctx.status.sandbox_lease
    if ctx.secret_values or lease is None:
        return
    values: list[str] = []
    names = LeaseNames.for_uid(ctx.uid)
    sources = [(ctx.namespace, lease.secret_name)] if lease.secret_name else []
    if lease.egress_proxy is not None:
        sources.append((ctx.rt.settings.egress.namespace, names.egress))
        sources.append((ctx.namespace, names.proxy_secret))
    for namespace, name in sources:
        try:
            data = await ctx.rt.cluster.read_secret(namespace, name)
        except NotFound:
            continue
        for key, value in data.items():
            text = decode_b64(value)
            if name == names.egress and not key.startswith("credential-"):
                continue
            if name == names.proxy_secret:
                # Its other keys (the CA bundle, a wgetrc) are public.
                text = (token_of(text) or "") if key == PROXY_URL_KEY else ""
            if text:
                values.append(text)
    ctx.secret_values = values


async def show_progress(ctx: FlowContext, run: Awaitable[Outcome], persisted: bool) -> Outcome:
    """Run the call; if Executing is not yet persisted and it runs long, write it."""
    task = asyncio.ensure_future(run)
    try:
        if not persisted:
            done, _ = await asyncio.wait({task}, timeout=PROGRESS_AFTER_SECONDS)
            if not done:
                try:
                    await ctx.commit()
                except Exception:
                    # Only a progress note: the terminal write will carry everything.
                    logger.warning("invocation %s: Executing not written", ctx.ref, exc_info=True)
        return await task
    except asyncio.CancelledError:
        # The flow is cancelled (its call deleted, the operator stopping): the execution
        # goes with it, or it would come back for a slot no flow will ever give back.
        task.cancel()
        raise
