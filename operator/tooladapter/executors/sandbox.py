"""Shell and container tools in a Job per invocation (see `sandbox.job` for its spec).

`execute` creates the Job (idempotently: a resumed operator finds the one it made) and
follows it to its end; `resume` only follows, for an operator that restarted mid-execution
and must never create a second Job.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

from tooladapter import API_VERSION
from tooladapter.egress.core.lease import proxy_env
from tooladapter.enums import FailureClass, InvocationState, SandboxStart, Transmission
from tooladapter.executors import (
    Call,
    Outcome,
    SandboxRun,
    lost,
    read_limit,
    unconfirmed,
    unconfirmed_for,
)
from tooladapter.executors.answers import exited, json_object
from tooladapter.executors.meter import Clock, JobRunClock, metered
from tooladapter.executors.warm import WarmSandboxes
from tooladapter.kube import sandbox as ksandbox
from tooladapter.kube.client import Refused
from tooladapter.kube.cluster import Cluster
from tooladapter.model import ToolDescriptorSpec
from tooladapter.naming import LeaseNames
from tooladapter.sandbox.job import build_job, network_gate_for, owner_reference, runtime_class_for
from tooladapter.settings import Settings
from tooladapter.timeutil import parse_time

logger = logging.getLogger("tooladapter.sandbox")

#: Time the Job may take to report its end, beyond its own deadline (`job_deadline`).
SCHEDULING_MARGIN_SECONDS = 120
#: Time a scheduled pod may take to start (image pull, the network gate) beyond the tool's
#: timeout and the capacity wait, before the Job's own deadline ends it: a backstop for an
#: operator that is gone (the tool's timeout is the pod's own deadline, `sandbox.job`).
START_MARGIN_SECONDS = 60


#: First delay before asking whether a Job's pod was scheduled, and the bound of the
#: doubling delays (as a quota wait's, `flow.capacity`): a quick cold call asks once.
POD_FIRST_DELAY_SECONDS = 1.0
POD_MAX_DELAY_SECONDS = 10.0


def capacity_backoff(attempt: int) -> float:
    """The delay before the `attempt`-th look at the pod (0-based): 1, 2, 4, 8, 10, ..."""
    return min(POD_MAX_DELAY_SECONDS, POD_FIRST_DELAY_SECONDS * 2.0 ** min(attempt, 16))


def _pod_uid(pod: dict[str, Any] | None) -> object:
    meta = (pod or {}).get("metadata") or {}
    return meta.get("uid") or meta.get("name")


def job_deadline(timeout_seconds: int, capacity_wait_seconds: int) -> int:
    """The Job's activeDeadlineSeconds: the pod may wait for the scheduler up to the
    capacity wait, then start, then run the tool's timeout (counted on its node)."""
    return timeout_seconds + capacity_wait_seconds + START_MARGIN_SECONDS


def has_http_credentials(descriptor: ToolDescriptorSpec) -> bool:
    """The call's lease has a CA (`flow.brokering.lease_ca`): an HTTP-injected credential."""
    return any(c.inject.hosts is not None for c in descriptor.credentials)


class SandboxExecutor:
    def __init__(self, cluster: Cluster, settings: Settings) -> None:
        self.cluster = cluster
        self.settings = settings
        #: (host, port) of the operator's canary listener; None: no network gate.
        self.canary: tuple[str, int] | None = None
        #: Warm pods (attempt workspaces, pools), asked first; None: every call is cold.
        self.warm: WarmSandboxes | None = None
        #: The run meter's clock (monotonic seconds; tests step it).
        self.clock: Clock = time.monotonic

    def job_for(self, call: Call) -> dict[str, Any]:
        descriptor = call.descriptor
        sandbox = descriptor.sandbox_spec if descriptor is not None else None
        if descriptor is None or sandbox is None:
            raise ValueError("a sandboxed call needs a descriptor with a sandbox block")
        return build_job(
            namespace=call.namespace,
            uid=call.uid,
            invocation_name=call.name,
            owner=owner_reference(
                api_version=API_VERSION, kind="ToolInvocation", name=call.name, uid=call.uid
            ),
            sandbox=sandbox,
            image=sandbox.image or self.settings.sandbox.image,
            argv=list(call.argv),
            arguments=call.arguments,
            timeout_seconds=call.limits.timeout_seconds,
            job_deadline_seconds=job_deadline(
                call.limits.timeout_seconds, self.settings.capacity.wait_seconds
            ),
            lease_id=call.lease_id or call.uid,
            image_pull_policy=self.settings.sandbox.image_pull_policy,
            image_pull_secrets=list(self.settings.sandbox.image_pull_secrets),
            credential_files=[c for c in descriptor.credentials if c.inject.file is not None],
            network_gate=network_gate_for(self.canary, list(sandbox.egress.allow or [])),
            gate_image=self.settings.sandbox.image,
            runtime_class=runtime_class_for(sandbox, dict(self.settings.sandbox.runtime_classes)),
            extra_env=(
                proxy_env(call.uid, list(call.proxy_bypass))
                if call.proxy_bypass is not None
                else None
            ),
            egress_ca=call.proxy_bypass is not None and has_http_credentials(descriptor),
        )

    async def execute(self, call: Call) -> Outcome:
        warm = await self.warm.run(call) if self.warm is not None else None
        return warm if warm is not None else cold(call, await self.execute_cold(call))

    async def execute_cold(self, call: Call) -> Outcome:
        try:
            job = self.job_for(call)
        except ValueError as exc:
            # Nothing to create: Failed, and the same call would fail the same way again.
            return Outcome.failed(
                FailureClass.INTERNAL, f"the sandbox Job could not be created: {exc}"
            )
        try:
            await self.cluster.create(job)
        except Refused as exc:
            # No Job exists: nothing of the call reached the cluster (`sending`), so the
            # one rule makes it Failed and retryPolicy may create it again.
            return lost(
                call.effective_class,
                Transmission.NOT_WRITTEN,
                f"the sandbox Job could not be created: {exc}",
            )
        # From here the Job exists: once its pod is scheduled the tool may have started, and
        # every unconfirmed end below settles as sent (`unconfirmed`). Ends that prove the
        # tool never started are Failed but not resent: the Job that never ran keeps the
        # call's name, so a retry would only find it again.
        return await self.follow(call)

    async def resume(self, call: Call) -> Outcome:
        warm = await self.warm.resume(call) if self.warm is not None else None
        return warm if warm is not None else cold(call, await self.follow(call))

    async def follow(self, call: Call) -> Outcome:
        names = LeaseNames.for_uid(call.uid)
        # The operator's own clock around the run, from the Job's states as they arrive.
        run = JobRunClock(self.clock)
        deadline = job_deadline(call.limits.timeout_seconds, self.settings.capacity.wait_seconds)
        waiter = asyncio.ensure_future(
            self.cluster.wait_for_job(
                call.namespace,
                names.job,
                timeout=deadline + SCHEDULING_MARGIN_SECONDS,
                seen=run.saw,
                # Its pod too: the tool's end is known a second before the Job says so.
                uid=call.uid,
            )
        )
        interrupt = asyncio.ensure_future(call.interrupted.wait())
        scheduling = asyncio.ensure_future(self.until_unschedulable(call))
        try:
            async with call.outside():
                done, _ = await asyncio.wait(
                    {waiter, interrupt, scheduling}, return_when=asyncio.FIRST_COMPLETED
                )
        finally:
            interrupt.cancel()
            scheduling.cancel()
        if scheduling in done and not scheduling.cancelled():
            waiter.cancel()
            return scheduling.result()
        if waiter not in done:
            waiter.cancel()
            return await self.interrupt(call, run)
        try:
            job = waiter.result()
        except TimeoutError as exc:
            await self.cluster.delete("Job", call.namespace, names.job)
            seconds = run.seconds() if run.running is not None else None
            return replace(unconfirmed(call, str(exc)), sandbox_seconds=seconds)
        if job is None:
            # Gone without a trace: either never created (the operator stopped between
            # writing Executing and creating it) or deleted with its pod. The two cannot be
            # told apart afterwards, so the call settles as if the tool might have run.
            return unconfirmed(
                call,
                f"sandbox job {names.job} does not exist: it was never created (the operator "
                "stopped first) or was deleted before it finished",
            )
        return await self.outcome_of(call, job, run)

    async def until_unschedulable(self, call: Call) -> Outcome:
        """Return only when the call's pod stayed unschedulable past the capacity wait:
        its pod deleted as read (so never bound, the tool never started), its Job deleted
        (nothing can start later), the outcome Failed `transient`. Once the pod is bound
        to a node, never: the Job's end decides, under the old rules.

        Like a quota wait (`flow.capacity`): the scheduler's message goes into status, the
        budget is `TOOLADAPTER_CAPACITY_WAIT_SECONDS` from when the scheduler first refused
        (the pod's condition, so a restarted operator goes on with what is left), and the
        pod is asked again after the same bounded doubling delays."""
        names = LeaseNames.for_uid(call.uid)
        budget = self.settings.capacity.wait_seconds
        noted = False
        attempt = 0
        while True:
            await asyncio.sleep(capacity_backoff(attempt))
            attempt += 1
            pod = await self.cluster.job_pod(call.namespace, call.uid)
            if ksandbox.pod_scheduled(pod) or ksandbox.pod_started(pod):
                await asyncio.Future()  # bound: the tool may start, the Job's end decides
            refused = ksandbox.pod_unschedulable(pod)
            if refused is None:
                continue  # not created yet, or not yet looked at by the scheduler
            if self.warm is not None:
                # Idle warm pods of the namespace give way: pool pods first, then the
                # oldest idle workspace (made again on its attempt's next call).
                try:
                    await self.warm.give_way(call.namespace, "unschedulable")
                except Exception:
                    logger.warning("idle warm pods of %s could not give way", call.namespace)
            if not noted and call.waiting is not None:
                await call.waiting(
                    f"pod {refused.name} not scheduled, waiting up to {budget}s for "
                    f"capacity: {refused.message}"
                )
            noted = True
            since = parse_time(refused.since) if refused.since else datetime.now(UTC)
            if (datetime.now(UTC) - since).total_seconds() < budget:
                continue
            if not await self.cluster.delete_unscheduled_pod(
                call.namespace, refused.name, refused.resource_version
            ):
                continue  # it changed meanwhile (bound, say): read it again
            await self.cluster.delete("Job", call.namespace, names.job)
            return Outcome.failed(
                FailureClass.TRANSIENT,
                f"the sandbox's pod was never scheduled within {budget}s (Unschedulable: "
                f"{refused.message}); job {names.job} deleted, the tool never started, the "
                "call may be made again",
            )

    async def interrupt(self, call: Call, run: JobRunClock | None = None) -> Outcome:
        names = LeaseNames.for_uid(call.uid)
        pod = await self.cluster.job_pod(call.namespace, call.uid)
        started = await self._may_have_started(call, pod)
        existed = await self.cluster.delete("Job", call.namespace, names.job)
        # A pod the Job made meanwhile (a replacement), or a Job already gone with its pod.
        again = await self.cluster.job_pod(call.namespace, call.uid)
        if again is not None and _pod_uid(again) != _pod_uid(pod):
            started = await self._may_have_started(call, again) or started
        elif pod is None and again is None and not existed:
            started = True
        # Metered up to the interrupt when its tool's container had started.
        seconds = run.seconds() if run is not None and ksandbox.pod_started(pod) else None
        contained = call.effective_class.effects_contained
        if not started or contained:
            why = (
                "before its pod was scheduled (the tool never started)"
                if not started
                else "inside its own sandbox only"
            )
            return Outcome(
                InvocationState.CANCELLED,
                failure_class=FailureClass.CANCELLED,
                message=f"interrupted {why}; job {names.job} deleted",
                sandbox_seconds=seconds,
            )
        return Outcome(
            InvocationState.UNCERTAIN,
            failure_class=FailureClass.EFFECT_UNCONFIRMED,
            message=f"interrupted after its pod was scheduled (the tool may have run); "
            f"job {names.job} deleted",
            sandbox_seconds=seconds,
        )

    async def _may_have_started(self, call: Call, pod: dict[str, Any] | None) -> bool:
        """Whether the tool of the interrupted call's `pod` may have started (False for no
        pod); an unscheduled pod is deleted on the way, as read.

        The pod's status lags the kubelet by up to a second or more: a pod bound to a node
        may already have run its tool though its status still says Pending. Only a pod
        deleted while still unscheduled (the delete's precondition is the version read:
        binding changes it) proves the tool never started; one that changed meanwhile (bound)
        or went (it may have run first) may have started. Deleting its Job first would not
        do: the Job's pods go later, through the garbage collector, which a binding beats."""
        if pod is None:
            return False
        if ksandbox.pod_started(pod) or ksandbox.pod_scheduled(pod):
            return True
        meta = pod.get("metadata") or {}
        version = str(meta.get("resourceVersion") or "")
        return not (
            version
            and await self.cluster.delete_unscheduled_pod(
                call.namespace, str(meta.get("name") or ""), version
            )
        )

    async def outcome_of(
        self, call: Call, job: dict[str, Any], run: JobRunClock | None = None
    ) -> Outcome:
        result = await self.cluster.pod_outcome(
            call.namespace, call.uid, max_bytes=read_limit(call.limits.max_result_bytes)
        )
        # The tool's run time rides on the outcome, whatever it is: the per-tenant meter and
        # the receipt's usage (`flow.ending`), one value.
        return replace(
            self.settle(call, job, result), sandbox_seconds=_run_seconds(job, result, run)
        )

    def settle(self, call: Call, job: dict[str, Any], result: ksandbox.PodOutcome) -> Outcome:
        """The outcome of a finished Job (or of one whose pod ended), from its pod's end.

        A Job the controller has not yet marked whose pod Succeeded is Complete in all but
        name: the pod's phase says every container exited 0, and with completions 1 and
        backoffLimit 0 the Job makes no other pod."""
        finished = ksandbox.job_finished(job)
        if finished == "Complete" or (finished is None and result.succeeded):
            # No `structured_bytes`: what the tool prints is the agent's, and its structured
            # form is sanitized off the event loop, in the tenant's turn.
            return Outcome.observed(
                result.log, exit_code=result.exit_code, structured=json_object(result.log)
            )
        reason = ksandbox.job_failure_reason(job)
        if reason == "DeadlineExceeded" and result.name is None and ksandbox.job_never_had_pod(job):
            # Past its deadline without ever having a pod (a quota refused every create
            # after the capacity check passed): the tool never started.
            return Outcome.failed(
                FailureClass.TRANSIENT,
                f"job {job['metadata']['name']} never got a pod before its deadline (its "
                "creates were refused, e.g. by a ResourceQuota); the tool never started",
            )
        if result.deadline_exceeded:
            # The kubelet ended the pod at its own deadline (the tool's timeout, counted
            # from the pod's start on its node): started or not, its pod says.
            message = (
                f"the tool ran past its timeout of {call.limits.timeout_seconds}s"
                if result.started
                else f"the sandbox did not start the tool within its timeout of "
                f"{call.limits.timeout_seconds}s (image pull or network gate); the tool "
                "never started"
            )
            return _contained_failure(call, FailureClass.TIMEOUT, message, result)
        if reason == "DeadlineExceeded":
            # The Job controller removes the pod of a Job past its deadline; whether the
            # tool had started is then unknown, so it counts as started.
            return _contained_failure(
                call,
                FailureClass.TIMEOUT,
                f"the tool ran past its timeout of {call.limits.timeout_seconds}s",
                result if result.name else replace(result, started=True),
            )
        if result.name is None:
            return unconfirmed(call, f"sandbox pod is gone (job failed: {reason or 'unknown'})")
        if result.gate_failed:
            return Outcome.failed(
                FailureClass.TRANSIENT,
                "the sandbox's egress NetworkPolicy was not enforced in time; the tool never ran",
            )
        if result.reason == "OOMKilled":
            return _contained_failure(
                call,
                FailureClass.OOM_KILLED,
                "the tool exceeded its memory limit (OOMKilled)",
                result,
            )
        if result.exit_code is not None and result.exit_code != 0:
            # The tool ran to its end and said so: its answer, not a failure to start.
            return exited(result.log, result.exit_code)
        return unconfirmed(
            call, f"sandbox failed ({reason or 'unknown reason'}) without an exit code"
        )


def _run_seconds(
    job: dict[str, Any], result: ksandbox.PodOutcome, run: JobRunClock | None
) -> float | None:
    """The metered run of a finished Job (`executors.meter`); None when its tool never
    started: the gate failed, or the Job never had a pod. A Job killed at its deadline
    lost its pod with the container's times: it counts as started, and the operator's clock
    holds its whole run."""
    if result.gate_failed and not result.started:
        return None
    killed = ksandbox.job_failure_reason(job) == "DeadlineExceeded"
    if killed and ksandbox.job_never_had_pod(job):
        return None
    if not (result.started or killed):
        return None
    if run is None:
        return metered(result.run_seconds or 0.0)
    return run.seconds(fallback=result.run_seconds)


def cold(call: Call, outcome: Outcome) -> Outcome:
    """The outcome of a call that ran (or was to run) in a Job of its own."""
    return replace(
        outcome, sandbox_run=SandboxRun(SandboxStart.COLD, LeaseNames.for_uid(call.uid).job)
    )


def _contained_failure(
    call: Call, failure: FailureClass, message: str, result: ksandbox.PodOutcome
) -> Outcome:
    """A killed tool: Failed when it never started, else by the class's containment rule."""
    if not result.started:
        return Outcome.failed(failure, message, output=result.log, exit_code=result.exit_code)
    return unconfirmed_for(
        call.effective_class,
        message,
        output=result.log,
        failure=failure,
        exit_code=result.exit_code,
    )
