"""Sandbox seconds measure what ran (issue 37): the operator's own clock around the run, to
the millisecond, on the Job, pool and workspace paths alike; never 0 for a tool that
started, the whole run of a call killed at its deadline, and one value for the metric and
the receipt's `usage`."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Iterator
from typing import Any

import pytest

from tests.unit.executors.test_settlement import make_call
from tests.unit.fake_cluster import (
    NAMESPACE,
    FakeCluster,
    finished_job,
    invocation,
    make_runtime,
    pod_result,
    shell_descriptor,
)
from tests.unit.sandbox.test_warm_settlement import (
    FakeWarmKube,
    call,
    existing_workspace,
    ran,
    tool,
    warm,
)
from tooladapter.enums import FailureClass, InvocationState, ToolKind
from tooladapter.executors import Outcome
from tooladapter.executors.meter import MIN_SECONDS, JobRunClock, metered
from tooladapter.executors.sandbox import SandboxExecutor
from tooladapter.metrics import SANDBOX_SECONDS
from tooladapter.naming import LeaseNames
from tooladapter.settings import Settings

pytestmark = pytest.mark.timeout(10)

#: The kubelet's record of a quick run: start and finish in the same second.
SAME_SECOND: dict[str, Any] = {
    "started_at": "2026-01-01T00:00:07Z",
    "finished_at": "2026-01-01T00:00:07Z",
}


def stepping(*times: float) -> Any:
    """A clock that answers `times` in turn, then keeps the last."""
    values: Iterator[float] = iter(times)
    last = [times[-1]]

    def now() -> float:
        last[0] = next(values, last[0])
        return last[0]

    return now


def job_state(*, ready: int = 0) -> dict[str, Any]:
    """A Job still running: its pod created (active), Ready or not yet."""
    return {"kind": "Job", "metadata": {"name": "job"}, "status": {"active": 1, "ready": ready}}


def deadline_job() -> dict[str, Any]:
    job = finished_job("Failed", "DeadlineExceeded")
    job["status"]["failed"] = 1  # its pod was made, then removed at the deadline
    return job


def executor_with(cluster: FakeCluster, *times: float) -> SandboxExecutor:
    executor = SandboxExecutor(cluster, Settings())
    executor.clock = stepping(*times)
    return executor


async def settle(
    executor: SandboxExecutor, *, job: dict[str, Any], sightings: list[Any], outcome: Any
) -> Outcome:
    cluster = executor.cluster
    assert isinstance(cluster, FakeCluster)
    call = make_call()
    cluster.script_job(call.uid, job, outcome=outcome)
    cluster.job_sightings[LeaseNames.for_uid(call.uid).job] = sightings
    return await asyncio.wait_for(executor.execute(call), 5)


def test_a_span_is_metered_to_the_millisecond_and_never_below_it() -> None:
    assert metered(0.2504) == 0.25
    assert metered(0.0) == MIN_SECONDS == 0.001
    assert metered(0.0001) == MIN_SECONDS


async def test_a_quick_job_meters_its_run_on_the_operators_clock_not_0() -> None:
    cluster = FakeCluster()
    # Last seen pending at 10.0, its end seen at 10.2; the kubelet says 0 seconds.
    executor = executor_with(cluster, 10.0, 10.2)
    outcome = await settle(
        executor,
        job=finished_job(),
        sightings=[job_state()],
        outcome=dataclasses.replace(pod_result(log=b"hi"), **SAME_SECOND),
    )
    assert outcome.state == InvocationState.OBSERVED
    assert outcome.sandbox_seconds == pytest.approx(0.2)


async def test_a_job_seen_running_meters_from_its_gate_passing_to_its_end() -> None:
    cluster = FakeCluster()
    # Pending at 0 (scheduling, image pull, the gate: not metered), Ready at 1.5, end at 4.0.
    executor = executor_with(cluster, 0.0, 1.5, 1.7, 4.0)
    outcome = await settle(
        executor,
        job=finished_job(),
        sightings=[job_state(), job_state(ready=1), job_state(ready=1)],
        outcome=pod_result(log=b"hi"),
    )
    assert outcome.sandbox_seconds == 2.5


async def test_a_job_killed_at_its_deadline_meters_its_whole_run() -> None:
    cluster = FakeCluster()
    executor = executor_with(cluster, 0.0, 0.5, 60.5)
    # The Job controller removed the pod: no container times are left.
    outcome = await settle(
        executor,
        job=deadline_job(),
        sightings=[job_state(), job_state(ready=1)],
        outcome=pod_result(name=None, started=False, exit_code=None, reason="PodGone"),
    )
    assert outcome.failure_class == FailureClass.TIMEOUT
    assert outcome.sandbox_seconds == 60.0


async def test_a_job_killed_at_its_deadline_before_it_was_seen_ready_meters_until_the_kill() -> (
    None
):
    cluster = FakeCluster()
    executor = executor_with(cluster, 0.0, 30.0)
    outcome = await settle(
        executor,
        job=deadline_job(),
        sightings=[job_state()],
        outcome=pod_result(name=None, started=False, exit_code=None, reason="PodGone"),
    )
    assert outcome.sandbox_seconds == 30.0


async def test_a_tool_that_never_started_meters_nothing() -> None:
    cluster = FakeCluster()
    gate = await settle(
        executor_with(cluster, 0.0, 5.0),
        job=finished_job("Failed", "PodFailurePolicy"),
        sightings=[job_state()],
        outcome=pod_result(exit_code=None, started=False, gate_failed=True),
    )
    assert gate.state == InvocationState.FAILED and gate.sandbox_seconds is None
    never = await settle(
        executor_with(cluster, 0.0, 5.0),
        job=finished_job("Failed", "DeadlineExceeded"),  # no pod ever counted
        sightings=[job_state()],
        outcome=pod_result(name=None, started=False, exit_code=None, reason="PodGone"),
    )
    assert never.state == InvocationState.FAILED and never.sandbox_seconds is None


async def test_a_job_whose_end_was_there_at_the_first_look_falls_back_to_the_kubelet() -> None:
    """An operator resumed after the end saw no span: the container's own times, and a
    tool that started is still never metered 0."""
    cluster = FakeCluster()
    timed = dataclasses.replace(
        pod_result(), started_at="2026-01-01T00:00:00Z", finished_at="2026-01-01T00:00:04Z"
    )
    assert (
        await settle(executor_with(cluster, 9.0), job=finished_job(), sightings=[], outcome=timed)
    ).sandbox_seconds == 4.0
    quick = dataclasses.replace(pod_result(), **SAME_SECOND)
    assert (
        await settle(executor_with(cluster, 9.0), job=finished_job(), sightings=[], outcome=quick)
    ).sandbox_seconds == MIN_SECONDS


def test_the_run_clock_keeps_the_first_ready_and_the_last_quiet_sighting() -> None:
    run = JobRunClock(stepping(1.0, 2.0, 3.0, 4.0, 9.0))
    for job in (job_state(), job_state(), job_state(ready=1), job_state(ready=1)):
        run.saw(job)
    run.saw(finished_job())
    assert (run.quiet, run.running, run.ended) == (2.0, 3.0, 9.0)
    assert run.seconds() == 6.0


def pod_state(phase: str, tool: dict[str, Any] | None = None) -> dict[str, Any]:
    """The Job's pod as its follower sees it (`kind` Pod): its phase, the tool's state."""
    statuses = [{"name": "tool", "state": tool}] if tool is not None else []
    return {"kind": "Pod", "status": {"phase": phase, "containerStatuses": statuses}}


def test_the_run_clock_reads_the_pod_before_the_job_catches_up() -> None:
    """The pod's states arrive a second before the Job's ready count and end (the Job
    controller batches pod updates): the span runs from the tool's container seen started
    to the pod seen terminal, and the Job's later states change nothing."""
    run = JobRunClock(stepping(1.0, 2.0, 2.5, 3.0, 8.0, 9.0))
    run.saw(pod_state("Pending", {"waiting": {"reason": "ContainerCreating"}}))
    run.saw(pod_state("Running", {"running": {}}))
    run.saw(job_state(ready=1))
    run.saw(pod_state("Succeeded", {"terminated": {"exitCode": 0}}))
    run.saw(job_state(ready=1))  # read once the pod ended: not yet marked by its controller
    run.saw(finished_job())
    assert (run.quiet, run.running, run.ended) == (1.0, 2.0, 3.0)
    assert run.seconds() == 1.0
    # A pod that failed ends the span as well.
    failed = JobRunClock(stepping(5.0, 5.25))
    failed.saw(pod_state("Pending"))
    failed.saw(pod_state("Failed", {"terminated": {"exitCode": 3}}))
    assert failed.seconds() == 0.25


def test_a_warm_call_meters_from_the_exec_to_its_answer() -> None:
    kube = FakeWarmKube()
    existing_workspace(kube)
    kube.answers = [ran(b"hi\n", 0)]
    sandboxes = warm(kube)
    sandboxes.clock = stepping(100.0, 100.0004)
    outcome = asyncio.run(sandboxes.run(call(tool())))
    assert outcome is not None and outcome.state == InvocationState.OBSERVED
    assert outcome.sandbox_seconds == MIN_SECONDS  # quick, still never 0


def test_a_warm_pool_call_killed_at_its_timeout_meters_its_whole_run() -> None:
    kube = FakeWarmKube()
    existing_workspace(kube)
    kube.answers = [None]  # runs on
    sandboxes = warm(kube)
    sandboxes.clock = stepping(0.0, 0.75)
    outcome = asyncio.run(asyncio.wait_for(sandboxes.run(call(tool(), timeout=0)), 5))
    assert outcome is not None and outcome.failure_class == FailureClass.TIMEOUT
    assert outcome.sandbox_seconds == 0.75


async def test_the_metric_and_the_receipt_meter_one_value_for_a_quick_call() -> None:
    cluster = FakeCluster()
    executor = executor_with(cluster, 5.0, 5.3)
    h = make_runtime(cluster, executors={ToolKind.SHELL: executor})
    h.publish(shell_descriptor())
    h.cluster.grant(tools=["sh"], classes=["sandbox"])
    body = h.submit(invocation("sh-1", tool="sh", arguments={"command": "true"}))
    uid = body["metadata"]["uid"]
    cluster.script_job(
        uid, finished_job(), outcome=dataclasses.replace(pod_result(), **SAME_SECOND)
    )
    cluster.job_sightings[LeaseNames.for_uid(uid).job] = [job_state()]
    metered_ = SANDBOX_SECONDS.labels(NAMESPACE)
    before = metered_._value.get()

    stored = await h.run(body)

    status = stored["status"]
    assert status["execution"]["sandboxSeconds"] == 0.3
    assert metered_._value.get() - before == pytest.approx(0.3)
    receipt = h.store.receipt(status["receiptRef"])
    assert receipt["usage"]["sandboxSeconds"] == 0.3
