"""Shell and container tools in a Job per invocation (see `pipeline.sandbox` for its spec).

`start` creates the Job (idempotently: a resumed operator finds the one it made) and follows
it to its end; `follow` only follows, for an operator that restarted mid-execution and must
never create a second Job.
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import replace
from typing import Any

from ..enums import FailureClass, InvocationState, SideEffectClass
from ..kube import sandbox as ksandbox
from ..kube.client import Kube
from ..pipeline.sandbox import LeaseNames, build_job, network_gate_for
from ..settings import Settings
from . import Call, Outcome, unconfirmed

#: Time the Job may take to be scheduled and report, beyond the tool's own timeout.
SCHEDULING_MARGIN_SECONDS = 120


class SandboxExecutor:
    def __init__(self, kube: Kube, settings: Settings) -> None:
        self.kube = kube
        self.settings = settings
        #: (host, port) of the operator's canary listener; None: no network gate.
        self.canary: tuple[str, int] | None = None

    def job_for(
        self, call: Call, owner: dict[str, Any], *, has_secret: bool, has_token: bool
    ) -> dict[str, Any]:
        assert call.descriptor is not None
        sandbox = call.descriptor.sandbox
        assert sandbox is not None
        return build_job(
            namespace=call.namespace,
            uid=call.uid,
            invocation_name=call.name,
            owner=owner,
            sandbox=sandbox,
            image=sandbox.image or self.settings.sandbox_image,
            argv=list(call.argv),
            arguments=call.arguments,
            timeout_seconds=call.timeout_seconds,
            lease_id=call.lease_id or call.uid,
            image_pull_policy=self.settings.image_pull_policy,
            secret_dependencies=call.descriptor.secret_dependencies if has_secret else None,
            has_token=has_token,
            network_gate=network_gate_for(self.canary, list(sandbox.egress.allow)),
            gate_image=self.settings.sandbox_image,
        )

    async def start(self, call: Call, job: dict[str, Any]) -> Outcome:
        await ksandbox.create_idempotent(self.kube, job)
        return await self.follow(call)

    async def follow(self, call: Call) -> Outcome:
        names = LeaseNames.for_uid(call.uid)
        waiter = asyncio.ensure_future(
            ksandbox.wait_for_job(
                self.kube,
                call.namespace,
                names.job,
                timeout=call.timeout_seconds + SCHEDULING_MARGIN_SECONDS,
            )
        )
        interrupt = asyncio.ensure_future(call.interrupted.wait())
        try:
            done, _ = await asyncio.wait({waiter, interrupt}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            interrupt.cancel()
        if waiter not in done:
            waiter.cancel()
            return await self.interrupt(call)
        try:
            job = waiter.result()
        except TimeoutError as exc:
            await ksandbox.delete_quietly(self.kube, "Job", call.namespace, names.job)
            return unconfirmed(call, str(exc))
        if job is None:
            return unconfirmed(call, f"sandbox job {names.job} disappeared before it finished")
        return await self.outcome_of(call, job)

    async def interrupt(self, call: Call) -> Outcome:
        names = LeaseNames.for_uid(call.uid)
        pod = await ksandbox.job_pod(self.kube, call.namespace, call.uid)
        started = ksandbox.pod_started(pod)
        await ksandbox.delete_quietly(self.kube, "Job", call.namespace, names.job)
        contained = call.effective_class in (SideEffectClass.READ, SideEffectClass.SANDBOX)
        if not started or contained:
            why = "before the tool started" if not started else "inside its own sandbox only"
            return Outcome(
                InvocationState.CANCELLED,
                failure_class=FailureClass.CANCELLED,
                message=f"interrupted {why}; job {names.job} deleted",
            )
        return Outcome(
            InvocationState.UNCERTAIN,
            failure_class=FailureClass.EFFECT_UNCONFIRMED,
            message=f"interrupted after the tool started; job {names.job} deleted",
        )

    async def outcome_of(self, call: Call, job: dict[str, Any]) -> Outcome:
        finished = ksandbox.job_finished(job)
        result = await ksandbox.pod_outcome(
            self.kube, call.namespace, call.uid, max_bytes=call.max_result_bytes
        )
        if finished == "Complete":
            return Outcome.observed(
                result.log, exit_code=result.exit_code, structured=_json_object(result.log)
            )
        reason = ksandbox.job_failure_reason(job)
        if reason == "DeadlineExceeded":
            # The Job controller removes the pod of a Job past its deadline; whether the
            # tool had started is then unknown, so it counts as started.
            return _contained_failure(
                call,
                FailureClass.TIMEOUT,
                f"the tool ran past its timeout of {call.timeout_seconds}s",
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
            return Outcome.failed(
                FailureClass.TOOL_ERROR,
                f"the tool exited with code {result.exit_code}",
                output=result.log,
                exit_code=result.exit_code,
            )
        return unconfirmed(
            call, f"sandbox failed ({reason or 'unknown reason'}) without an exit code"
        )


def _contained_failure(
    call: Call, failure: FailureClass, message: str, result: ksandbox.PodOutcome
) -> Outcome:
    """A killed tool: Failed when its class keeps effects inside the sandbox, else Uncertain."""
    if (
        call.effective_class in (SideEffectClass.READ, SideEffectClass.SANDBOX)
        or not result.started
    ):
        return Outcome.failed(failure, message, output=result.log, exit_code=result.exit_code)
    return Outcome(
        InvocationState.UNCERTAIN,
        result.log,
        None,
        result.exit_code,
        FailureClass.EFFECT_UNCONFIRMED,
        f"{message}; its effect is unconfirmed",
    )


def _json_object(output: bytes) -> dict[str, Any] | None:
    """A tool that prints one JSON object gets it as structured content too."""
    text = output.strip()
    if not text.startswith(b"{") or len(text) > 1_048_576:
        return None
    try:
        value = json.loads(text)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None
