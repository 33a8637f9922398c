"""Admission, the stages of a Received call: idempotency, fencing and validation.

The idempotency claim comes first so that a duplicate never costs a schema validation or a
review; fencing refuses a stale attempt before anything is evaluated for it; validation
finds the descriptor, bounds and checks the arguments, and fixes the request hash every
later stage (and every approval) binds to.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from functools import partial
from typing import Any

from tooladapter import offload
from tooladapter.catalog import invocation_key
from tooladapter.enums import FailureClass, InvocationState, Resource, Stage, StageOutcome
from tooladapter.flow.context import Denial, Failure, FlowContext
from tooladapter.flow.dryrun import is_dry_run, on_dry_run
from tooladapter.flow.ending import cancel, end_as_duplicate
from tooladapter.kube.claims import Claim
from tooladapter.kube.client import NotFound
from tooladapter.pipeline import refusals
from tooladapter.pipeline.effect import effect_hash
from tooladapter.pipeline.hashing import request_hash
from tooladapter.pipeline.states import BEFORE_EXECUTING
from tooladapter.pipeline.validation.arguments import check_arguments
from tooladapter.receipts.service.key_index import first_with_key
from tooladapter.timeutil import now_iso, parse_time

logger = logging.getLogger("tooladapter.invocations")

#: Longest wait between re-reads of an idempotency winner (the watch usually wakes us).
WINNER_POLL_SECONDS = 30


def check_identity_verified(ctx: FlowContext) -> None:
    """Fail closed: `spec.caller` is believed only while the admission policies that made
    the API server check it are as shipped, and only for a call created while they were
    (`identity`). First of all, before the idempotency claim: a claim is keyed by the
    caller, and an unverified caller must not take a real one's key."""
    why = ctx.rt.admission.refusal(parse_time(ctx.created))
    if why is not None:
        raise Denial.of(refusals.admission_missing(why))


async def on_received(ctx: FlowContext) -> None:
    check_identity_verified(ctx)
    if is_dry_run(ctx.body):
        return await on_dry_run(ctx)
    spec = ctx.load_spec()
    if ctx.status.started_at is None:
        ctx.status.started_at = now_iso()
    if spec.idempotency_key and not await claim_idempotency_key(ctx):
        return  # a duplicate: ended as its first call did
    if spec.attempt_id and spec.fencing_token is not None:
        await check_fencing(ctx)
    if ctx.interrupt_requested() or spec.interrupt:
        return await cancel(ctx, "interrupted before validation")
    descriptor = await ctx.load_descriptor()
    # Bounds, schema and hash walk what the agent sent: off the event loop unless small.
    problems, errors, hashed = await offload.run(
        ctx.namespace,
        offload.rough_size(spec.arguments),
        check_arguments,
        descriptor.input_schema,
        spec.arguments,
        namespace=ctx.namespace,
        tool_id=spec.tool.id,
        tool_version=spec.tool.version,
    )
    if problems:
        raise Denial.of(refusals.arguments_too_large(problems))
    ctx.status.request_hash = hashed
    ctx.status.effect_hash = await offload.run(
        ctx.namespace,
        offload.rough_size(spec.arguments),
        partial(effect_hash, namespace=ctx.namespace, descriptor=descriptor),
        arguments=spec.arguments,
    )
    ctx.status.descriptor_digest = ctx.descriptor_digest(descriptor)
    ctx.status.declared_class = descriptor.side_effect_class
    if errors:
        raise Denial.of(refusals.arguments_mismatch(errors))
    await check_unconfirmed(ctx)
    ctx.record(Stage.VALIDATION, StageOutcome.PASSED)  # the tool: spec.tool
    await ctx.advance(InvocationState.VALIDATED)


async def check_request_unchanged(ctx: FlowContext) -> None:
    """A call taken up after its validation (a restart, a takeover) runs its spec as stored
    now: that must still be the request that was hashed, and that any approval binds to.

    Admission keeps the spec from changing (the CRD rule, and a policy for the arguments,
    which that rule cannot compare in full); this holds if either is missing."""
    hashed = ctx.status.request_hash
    if not hashed or ctx.status.state not in BEFORE_EXECUTING:
        return
    now = await stored_request_hash(ctx)
    if now != hashed:
        raise Denial(
            Stage.VALIDATION,
            f"the request changed after it was validated (requestHash {hashed}, the stored "
            f"spec now hashes to {now}); nothing was run: make a new call",
            FailureClass.VALIDATION,
        )


async def claim_idempotency_key(ctx: FlowContext) -> bool:
    """Win the key (True: this call runs), or end as a duplicate in the first call's state.

    The claim keeps the request it was made for: the same key with another request is
    refused (`key-reused`), as payment APIs do, never answered with another call's
    receipt. A duplicate waits for its first call to end without holding a slot, then ends
    in that call's state with its receipt and result (`end_as_duplicate`): not a denial, and
    nothing runs a second time."""
    spec = ctx.load_spec()
    assert spec.idempotency_key is not None
    hashed = await hash_of_request(ctx)
    claim = await ctx.rt.cluster.claim_idempotency_key(
        namespace=ctx.namespace,
        caller=spec.caller.name,
        key=spec.idempotency_key,
        invocation_name=ctx.name,
        invocation_uid=ctx.uid,
        request_hash=hashed,
    )
    if claim.won:
        return await check_key_index(ctx, hashed)
    refuse_reused_key(ctx, claim.winner_name, claim.request_hash, hashed)
    noted = ctx.status.duplicate_of == claim.winner_name
    if not noted:
        ctx.status.duplicate_of = claim.winner_name
        ctx.status.duplicate_of_uid = claim.winner_uid
        ctx.record(
            Stage.IDEMPOTENCY,
            StageOutcome.DUPLICATE,
            f"key already claimed by {claim.winner_name}: this call ends as it does",
        )
    # The wait is written (seen while it lasts) only if there is one: a retry of a call
    # that already ended is written once, at its end.
    waiting = None if noted else ctx.commit
    async with ctx.without_slot():
        winner = await wait_for_terminal(
            ctx, claim.winner_name, claim.winner_uid, before_waiting=waiting
        )
    wstatus = (winner or {}).get("status") or {}
    # A claim made before claims kept their request: compare with the first call's own.
    refuse_reused_key(ctx, claim.winner_name, wstatus.get("requestHash"), hashed)
    ctx.status.request_hash = hashed
    await end_as_duplicate(ctx, wstatus, claim)
    return False


async def check_key_index(ctx: FlowContext, hashed: str | None) -> bool:
    """A won claim, checked against the receipt index (True: this call runs).

    A claim (a Lease) is deleted some time after its call ended, and retention deletes the
    call: the key's index entry outlives both, so the key never runs again. Found there,
    this call gives the claim back (the index answers for the key) and ends as that first
    call did, with its receipt; `key-reused` for another request. The one way a key is used
    again: an Uncertain call confirmed "did not happen" (its entry says `released`).

    Fail closed: an index that cannot be read, or an incarnation that cannot be told, ends
    the call Failed `transient` before anything ran, its claim given back, so the same call
    made again runs once the store answers."""
    spec = ctx.load_spec()
    assert spec.idempotency_key is not None
    try:
        uid = ctx.rt.catalog.namespace_uid(ctx.namespace)
        if uid is None:
            uid, _, _ = await ctx.rt.cluster.namespace_incarnation(ctx.namespace)
        holder = await first_with_key(
            ctx.rt.store,
            namespace=ctx.namespace,
            namespace_uid=uid,
            caller=spec.caller.name,
            key=spec.idempotency_key,
            own_uid=ctx.uid,
        )
    except asyncio.CancelledError:
        raise
    except Exception as exc:
        logger.warning("invocation %s: the receipt index could not be read", ctx.ref, exc_info=True)
        await release_key(ctx)
        raise Failure(
            Stage.IDEMPOTENCY,
            f"the receipt index, which says whether idempotency key {spec.idempotency_key!r} "
            f"was used before, could not be read ({type(exc).__name__}); nothing was run: "
            "make the call again",
            FailureClass.TRANSIENT,
        ) from exc
    if holder is None:
        return True
    await release_key(ctx)
    refuse_reused_key(ctx, holder.invocation, holder.request_hash, hashed)
    ctx.status.duplicate_of = holder.invocation
    ctx.status.duplicate_of_uid = holder.invocation_id
    ctx.record(
        Stage.IDEMPOTENCY,
        StageOutcome.DUPLICATE,
        f"key used by {holder.invocation} (from the receipt index: its claim expired): "
        "this call ends as it did",
    )
    # Still stored (its claim went first): its status as it is now, with its result.
    async with ctx.without_slot():
        stored = await wait_for_terminal(ctx, holder.invocation, holder.invocation_id)
    first = (stored or {}).get("status") or holder.status
    ctx.status.request_hash = hashed
    claim = Claim(
        won=False,
        winner_name=holder.invocation,
        winner_uid=holder.invocation_id,
        receipt_ref=holder.receipt_ref,
        request_hash=holder.request_hash,
        state=holder.status.get("state"),
    )
    await end_as_duplicate(ctx, first, claim)
    return False


async def stored_request_hash(ctx: FlowContext) -> str:
    """The request hash of the spec as stored (off the event loop unless small)."""
    spec = ctx.load_spec()
    return await offload.run(
        ctx.namespace,
        offload.rough_size(spec.arguments),
        request_hash,
        namespace=ctx.namespace,
        tool_id=spec.tool.id,
        tool_version=spec.tool.version,
        arguments=spec.arguments,
    )


async def hash_of_request(ctx: FlowContext) -> str | None:
    """The request hash, before validation (None when the arguments cannot be hashed:
    validation refuses them next)."""
    try:
        return await stored_request_hash(ctx)
    except (ValueError, TypeError, RecursionError):
        return None


def refuse_reused_key(
    ctx: FlowContext, winner: str, claimed: str | None, hashed: str | None
) -> None:
    """Denied `key-reused` when the key was claimed for another request."""
    if not claimed or claimed == hashed:
        return
    key = ctx.load_spec().idempotency_key
    raise Denial(
        Stage.IDEMPOTENCY,
        f"idempotency key {key!r} already names another request ({winner}, requestHash "
        f"{claimed}); a key names one request: use a new key for other arguments",
        FailureClass.KEY_REUSED,
    )


async def check_unconfirmed(ctx: FlowContext) -> None:
    """No blind retries: while a call of the same request (namespace, tool, version,
    canonical arguments; any key, any caller) is Uncertain and unconfirmed, this one does
    not run (the reference: "an operator must confirm before any retry"). Made when the call
    is received and again right before it acts; once an operator confirms either way, new
    calls run as usual."""
    hashed = ctx.status.request_hash
    if not hashed:
        return
    census = ctx.rt.census
    if not census.synced.is_set():
        # Before the first listing is in, an Uncertain twin may not be known yet.
        async with ctx.without_slot():
            await census.synced.wait()
    if ctx.status.effect_hash is None and ctx.descriptor is not None:
        # A call validated before effect hashes were kept.
        ctx.status.effect_hash = effect_hash(
            namespace=ctx.namespace, descriptor=ctx.descriptor, arguments=ctx.load_spec().arguments
        )
    held = census.unconfirmed_with(ctx.namespace, ctx.status.effect_hash, hashed)
    if not held:
        return
    await release_key(ctx)
    raise Denial(
        Stage.IDEMPOTENCY,
        await unconfirmed_message(ctx, held[0]),
        FailureClass.UNCONFIRMED_EFFECT,
    )


async def release_key(ctx: FlowContext) -> None:
    """A call refused for an unconfirmed twin ran nothing, and its message invites the
    same call again once the twin is confirmed: its idempotency key must not make that
    call a duplicate of this refusal."""
    spec = ctx.load_spec()
    if spec.idempotency_key and not ctx.status.duplicate_of:
        await ctx.rt.cluster.release_idempotency_key(
            namespace=ctx.namespace,
            caller=spec.caller.name,
            key=spec.idempotency_key,
            holder_uid=ctx.uid,
        )


async def unconfirmed_message(ctx: FlowContext, held: str) -> str:
    """Says how to confirm; names the Uncertain call only to a caller who may read it."""
    spec = ctx.load_spec()
    verdict = await ctx.rt.cluster.can(
        user=spec.caller.name,
        namespace=ctx.namespace,
        verb="get",
        resource=Resource.INVOCATIONS,
        name=held,
        groups=spec.caller.groups,
    )
    which = f"call {held}" if verdict.allowed else "an earlier call"
    return (
        f"{which} of this same request is Uncertain: its effect may have happened and is "
        "unconfirmed, so nothing runs again until an operator confirms it (`tooladapter "
        "confirm NAME --happened|--did-not-happen --evidence TEXT`, REST POST "
        "/namespaces/NS/tool-invocations/NAME/confirm-effect, or the reviewers' page); then "
        "make the call again"
    )


async def wait_for_terminal(
    ctx: FlowContext,
    name: str,
    uid: str,
    *,
    before_waiting: Callable[[], Awaitable[None]] | None = None,
) -> dict[str, Any] | None:
    """Wait (on watch notifications, re-reading the object) until `name` has ended;
    `before_waiting` runs once, only when `name` is found not ended yet."""
    signal = ctx.rt.catalog.changed(ctx.namespace, invocation_key(name))
    while True:
        signal.clear()
        try:
            obj = await ctx.rt.cluster.get(Resource.INVOCATIONS, ctx.namespace, name)
        except NotFound:
            return None
        if obj["metadata"]["uid"] != uid:
            return None
        state = (obj.get("status") or {}).get("state")
        if state and InvocationState(state).terminal:
            return obj
        if before_waiting is not None:
            await before_waiting()
            before_waiting = None
        try:
            await asyncio.wait_for(signal.wait(), timeout=WINNER_POLL_SECONDS)
        except TimeoutError:
            pass


async def check_fencing(ctx: FlowContext) -> None:
    """Refuse an attempt whose fencing token a newer attempt has already superseded."""
    spec = ctx.load_spec()
    assert spec.attempt_id is not None and spec.fencing_token is not None
    verdict = await ctx.rt.cluster.check_fencing_token(
        namespace=ctx.namespace,
        caller=spec.caller.name,
        attempt_id=spec.attempt_id,
        token=spec.fencing_token,
        holder_uid=ctx.uid,
    )
    if not verdict.accepted:
        raise Denial(
            Stage.FENCING,
            f"stale fencing token {spec.fencing_token}: attempt "
            f"{spec.attempt_id} already saw {verdict.highest}",
            FailureClass.POLICY_DENIED,
        )
    ctx.record(Stage.FENCING, StageOutcome.PASSED, f"token {spec.fencing_token}")
