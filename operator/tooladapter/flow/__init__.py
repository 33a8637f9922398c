"""One invocation's walk through the pipeline, written to status.

The flow is a table from the persisted state to the step that moves a call on:

| state            | module          | step                                              |
|------------------|-----------------|---------------------------------------------------|
| Received         | admission       | idempotency, fencing, validation -> Validated     |
|                  | dryrun          | (spec.dryRun) the preview -> Previewed            |
| Validated        | authorization   | policy, classification, permission -> Authorized  |
| Authorized       | approval        | gate -> AwaitingApproval, or brokering            |
| AwaitingApproval | approval        | wait and bind -> brokering                        |
| (brokering)      | brokering       | credentials, sandbox lease -> Brokered            |
| Brokered         | capacity        | (sandbox) wait for quota, then the re-check       |
|                  | execution       | Executing written before any effect               |
| Executing        | execution       | executor -> ending (Observed/Failed/Uncertain/..) |

Status is written whenever the call waits or is about to have an effect outside the
operator (AwaitingApproval, Executing) and at its end; the stages in between only do work
that is safe to repeat, so they ride along with the next write and a restarted operator
repeats them from the persisted state (`context.FlowContext`).

Faults: a stage's `Denial` ends the call Denied and a `Failure` ends it Failed. Any other
error before Executing is retried a few times if it was transient (the API server
unreachable or overloaded) and otherwise ends Failed: every call reaches a terminal state.
Once Executing, the call is never started again: after an error it is only followed
(`Executor.resume`) and, if that cannot settle it, it ends by its class: Failed when its
effects stay contained, Uncertain otherwise.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from tooladapter.catalog import approval_key
from tooladapter.enums import FailureClass, InvocationState, Resource, Stage
from tooladapter.flow.admission import check_request_unchanged, on_received
from tooladapter.flow.approval import on_authorized, on_awaiting_approval
from tooladapter.flow.authorization import on_validated
from tooladapter.flow.context import Denial, Failure, FlowContext, Restart, Superseded
from tooladapter.flow.ending import conclude, deny, fail
from tooladapter.flow.execution import on_brokered, on_executing, settle_unexpected
from tooladapter.kube.client import NotFound, is_transient
from tooladapter.runtime import Runtime

logger = logging.getLogger("tooladapter.invocations")

#: Delays between attempts of a step that failed transiently; then the call ends.
RETRY_DELAYS = (1, 2, 5, 10, 30)

Step = Callable[[FlowContext], Awaitable[None]]

STEPS: dict[InvocationState, Step] = {
    InvocationState.RECEIVED: on_received,
    InvocationState.VALIDATED: on_validated,
    InvocationState.AUTHORIZED: on_authorized,
    InvocationState.AWAITING_APPROVAL: on_awaiting_approval,
    InvocationState.BROKERED: on_brokered,
    InvocationState.EXECUTING: on_executing,
}

#: The stage a failed step is recorded under.
STAGE_OF: dict[InvocationState, Stage] = {
    InvocationState.RECEIVED: Stage.VALIDATION,
    InvocationState.VALIDATED: Stage.PERMISSION,
    InvocationState.AUTHORIZED: Stage.APPROVAL,
    InvocationState.AWAITING_APPROVAL: Stage.APPROVAL,
    InvocationState.BROKERED: Stage.SANDBOX,
    InvocationState.EXECUTING: Stage.EXECUTE,
}


async def run_invocation(rt: Runtime, body: dict[str, Any]) -> None:
    """Walk one invocation from its stored state to a persisted terminal state."""
    await rt.catalog.ready.wait()
    ctx = FlowContext.of(rt, body)
    if body.get("status"):
        # A body with status was seen by a listing or is an echo: act on the stored one.
        # A new object's first event has none, and nothing but this flow writes it.
        try:
            fresh = await rt.cluster.get(Resource.INVOCATIONS, ctx.namespace, ctx.name)
        except NotFound:
            return
        if fresh["metadata"]["uid"] != ctx.uid:
            return
        ctx = FlowContext.of(rt, fresh)
    try:
        await drive(ctx)
    finally:
        # Only this flow waited on its approvals' signal: it goes with the flow.
        rt.catalog.forget(ctx.namespace, approval_key(ctx.name))
        # The attempt's next call may use the workspace now (this one ended, or stopped).
        rt.attempts.leave(ctx.uid)
    rt.mark_finished(ctx.uid)


async def run_queued_invocation(rt: Runtime, namespace: str, name: str, uid: str) -> None:
    """`run_invocation` for a call that waited in the queue by name: read it now (gone, or
    another object of that name: nothing to do)."""
    try:
        body = await rt.cluster.get(Resource.INVOCATIONS, namespace, name)
    except NotFound:
        return
    if body["metadata"]["uid"] == uid:
        await run_invocation(rt, body)


async def release_finalizer(rt: Runtime, body: dict[str, Any]) -> None:
    """Let go of an invocation that ended while its finalizer stayed (a crash in between)."""
    ctx = FlowContext.of(rt, body)
    try:
        await ctx.reload()
    except NotFound:
        return
    if ctx.status.state.terminal:
        await ctx.let_go()


def settled(ctx: FlowContext) -> bool:
    return ctx.status.state.terminal and ctx.persisted_state == ctx.status.state


async def drive(ctx: FlowContext) -> None:
    attempt = 0
    checked = False
    while not settled(ctx):
        state = ctx.status.state
        try:
            if not checked:
                await check_request_unchanged(ctx)
                checked = True
            if state.terminal:
                # The end is decided; only its write failed (a denial posted its own event).
                await conclude(ctx, post_event=state != InvocationState.DENIED)
            else:
                await STEPS[state](ctx)
            attempt = 0
        except Restart:
            attempt = 0  # the stored state is the truth now: go on from it
        except Superseded as other:
            logger.info("invocation %s: executed by %s; not here", ctx.ref, other)
            return
        except Denial as denial:
            await guard(ctx, deny(ctx, denial))
        except Failure as failure:
            await guard(ctx, fail(ctx, failure))
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            attempt += 1
            if not await recover(ctx, state, exc, attempt):
                continue
            delay = RETRY_DELAYS[min(attempt, len(RETRY_DELAYS)) - 1]
            logger.warning(
                "invocation %s: step %s failed (%s); attempt %d, next in %ss",
                ctx.ref,
                state,
                type(exc).__name__,
                attempt,
                delay,
                exc_info=not is_transient(exc),
            )
            await asyncio.sleep(delay)


async def recover(ctx: FlowContext, state: InvocationState, exc: Exception, attempt: int) -> bool:
    """Decide what an unexpected error means; True: retry the step after a delay."""
    exhausted = attempt > len(RETRY_DELAYS)
    if state.terminal:
        return True  # keep trying to write the end
    if state == InvocationState.EXECUTING:
        # Never start it again: from now on the call is only followed, or settled.
        ctx.started_here = False
        if exhausted:
            await guard(ctx, settle_unexpected(ctx, exc))
            return False
        return True
    if is_transient(exc) and not exhausted:
        return True
    failure = FailureClass.TRANSIENT if is_transient(exc) else FailureClass.INTERNAL
    logger.error("invocation %s: step %s failed for good", ctx.ref, state, exc_info=exc)
    await guard(
        ctx,
        fail(
            ctx,
            Failure(
                STAGE_OF[state],
                f"the operator could not complete the {STAGE_OF[state]} stage "
                f"({type(exc).__name__}); no effect was started",
                failure,
            ),
        ),
    )
    return False


async def guard(ctx: FlowContext, ending: Awaitable[None]) -> None:
    """Run an ending; if its write fails, the loop retries the write (state is decided)."""
    try:
        await ending
    except asyncio.CancelledError:
        raise
    except Exception:
        logger.warning("invocation %s: writing its end failed; retrying", ctx.ref, exc_info=True)
        await asyncio.sleep(RETRY_DELAYS[0])


__all__ = [
    "STEPS",
    "FlowContext",
    "drive",
    "release_finalizer",
    "run_invocation",
    "run_queued_invocation",
]
