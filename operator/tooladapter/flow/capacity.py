"""Capacity within budget: a sandboxed call waits in Brokered until its quota admits it.

The reference queues a call "within budget, then transient failure". Before the call is
Executing (so before any effect) the namespace's ResourceQuotas are asked whether they
would admit the call's Job and its pod now (a server-side dry run: `kube.capacity` says why
that and not a sum over the quotas). While a quota refuses, the call waits in Brokered,
its status message naming the quota, asking again after a bounded exponential delay,
holding no calls-in-flight slot (the wait is on the cluster, like an approval's); an
interrupt ends the wait at once. After `TOOLADAPTER_CAPACITY_WAIT_SECONDS` it ends Failed
`transient`: it never started, so calling again is safe. The wait's start is the time of
its first stage entry, so a restarted operator goes on with the budget that is left.

A call that waited is re-checked right before it acts (`execution.on_brokered`): the
descriptor, policies, freeze and grants may have changed meanwhile.
"""

from __future__ import annotations

import asyncio
import logging
import re
from datetime import UTC, datetime, timedelta
from typing import Any

from tooladapter.enums import FailureClass, Stage, StageOutcome
from tooladapter.flow.context import Failure, FlowContext
from tooladapter.kube.capacity import quota_named
from tooladapter.timeutil import parse_time

logger = logging.getLogger("tooladapter.capacity")

#: First delay before asking the quotas again, and the bound of the doubling delays: a
#: freed quota is noticed within the bound, and many waiting calls cost one dry run each
#: per bound at most.
FIRST_DELAY_SECONDS = 1.0
MAX_DELAY_SECONDS = 10.0


_REQUESTED = re.compile(r"requested: ([^\s]+)")


def pods_refused(refusal: str) -> bool:
    """Whether a quota refusal counts something a pod holds (pods, CPU, memory, storage):
    only then can idle warm pods free it; a refusal of `count/jobs.batch` alone cannot."""
    found = _REQUESTED.search(refusal)
    if found is None:
        return True
    names = {part.partition("=")[0] for part in found.group(1).rstrip(",").split(",")}
    return bool(names - {"count/jobs.batch", "count/jobs"})


def backoff(attempt: int) -> float:
    """The delay before the `attempt`-th question again (0-based): 1, 2, 4, 8, 10, 10, ..."""
    return min(MAX_DELAY_SECONDS, FIRST_DELAY_SECONDS * 2.0 ** min(attempt, 16))


def waiting_since(ctx: FlowContext) -> datetime | None:
    """When this lease's capacity wait began (its first `sandbox: waiting` entry after the
    lease was made); None when it has not waited."""
    since = None
    for entry in reversed(ctx.status.stages):
        if entry.stage != Stage.SANDBOX:
            continue
        if entry.outcome == StageOutcome.LEASED:
            break
        if entry.outcome == StageOutcome.WAITING:
            since = entry.time
    return parse_time(since) if since else None


async def wait_for_capacity(ctx: FlowContext, job: dict[str, Any]) -> bool:
    """Return once the quotas admit `job` and its pod (or on an interrupt: the caller
    cancels); `Failure` (transient) when they did not within the budget. True when the
    call waited, so what was checked before the wait must be checked again."""
    budget = ctx.rt.settings.capacity.wait_seconds
    since = waiting_since(ctx)
    attempt = 0
    while not ctx.interrupt_requested():
        refusal = await ctx.rt.cluster.quota_refusal(job)
        if refusal is None:
            if since is not None:
                waited = (datetime.now(UTC) - since).total_seconds()
                ctx.status.message = None
                ctx.record(Stage.SANDBOX, StageOutcome.PASSED, f"capacity after {waited:.0f}s")
            return since is not None
        quota = quota_named(refusal) or "a ResourceQuota"
        if ctx.rt.warm is not None and pods_refused(refusal):
            # Idle warm pods of the namespace go first: the call needs the quota they hold.
            try:
                await ctx.rt.warm.give_way(ctx.namespace, "quota")
            except Exception:
                logger.warning("idle warm pods of %s could not give way", ctx.namespace)
        now = datetime.now(UTC)
        if since is None:
            since = now
            ctx.status.message = ctx.bounded(
                f"waiting up to {budget}s for capacity: quota {quota} refuses the sandbox "
                f"now ({refusal})"
            )
            ctx.record(Stage.SANDBOX, StageOutcome.WAITING, f"quota {quota}: {refusal}")
            await ctx.commit()  # the wait is seen (kubectl get, the page) while it lasts
            ctx.post(
                warning=True,
                reason="ToolInvocationWaitingForCapacity",
                message=ctx.status.message or "",
            )
        remaining = (since + timedelta(seconds=budget) - now).total_seconds()
        if remaining <= 0:
            raise Failure(
                Stage.SANDBOX,
                f"no capacity within {budget}s: quota {quota} still refuses the sandbox "
                f"({refusal}); nothing was started, the call may be made again",
                FailureClass.TRANSIENT,
            )
        async with ctx.without_slot():
            try:
                await asyncio.wait_for(
                    ctx.interrupted.wait(), timeout=min(remaining, backoff(attempt))
                )
            except TimeoutError:
                pass
        attempt += 1
    return True


async def note_unschedulable(ctx: FlowContext, detail: str) -> None:
    """The call's Job pod waits for the scheduler (`executors.sandbox.until_unschedulable`):
    seen in status and as an event while it lasts, like a quota wait."""
    ctx.status.message = ctx.bounded(detail)
    ctx.record(Stage.SANDBOX, StageOutcome.WAITING, detail)
    await ctx.commit()
    ctx.post(
        warning=True,
        reason="ToolInvocationWaitingForCapacity",
        message=ctx.status.message or "",
    )
