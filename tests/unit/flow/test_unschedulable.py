"""A call whose pod the scheduler cannot place waits for capacity like a quota wait, then
ends Failed transient saying it never started (its pod deleted as read: never bound), never
"ran past its timeout"; the tool's timeout is its pod's own deadline, counted on its node."""

from __future__ import annotations

import asyncio
import dataclasses
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from tests.unit.fake_cluster import (
    NAMESPACE,
    FakeCluster,
    Harness,
    finished_job,
    invocation,
    make_runtime,
    pod_result,
    shell_descriptor,
    unschedulable_pod,
)
from tooladapter.enums import FailureClass, InvocationState, SideEffectClass, ToolKind
from tooladapter.executors import Call
from tooladapter.executors import sandbox as xsandbox
from tooladapter.executors.limits import CallLimits
from tooladapter.executors.sandbox import SandboxExecutor, job_deadline
from tooladapter.kube.sandbox import pod_unschedulable
from tooladapter.model import ToolDescriptorSpec
from tooladapter.naming import LeaseNames
from tooladapter.settings import CapacitySettings, Settings
from tooladapter.timeutil import to_iso

pytestmark = [pytest.mark.timeout(10), pytest.mark.usefixtures("fast_retries")]

SCHEDULER = "0/1 nodes are available: 1 Insufficient cpu. preemption: 0/1 nodes are available"


@pytest.fixture(autouse=True)
def quick_looks(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(xsandbox, "POD_FIRST_DELAY_SECONDS", 0.01)
    monkeypatch.setattr(xsandbox, "POD_MAX_DELAY_SECONDS", 0.02)


def sandboxed(*, budget: int) -> Harness:
    cluster = FakeCluster()
    settings = Settings(capacity=CapacitySettings(wait_seconds=budget))
    executor = SandboxExecutor(cluster, settings)
    return make_runtime(
        cluster,
        settings=settings,
        executors={ToolKind.SHELL: executor, ToolKind.CONTAINER: executor},
    )


def ago(seconds: float) -> str:
    return to_iso(datetime.now(UTC) - timedelta(seconds=seconds))


def stages(status: dict[str, Any]) -> list[tuple[str, str, str]]:
    return [(s["stage"], s["outcome"], s.get("detail") or "") for s in status["stages"]]


async def test_an_unschedulable_pod_ends_failed_transient_naming_the_scheduler() -> None:
    h = sandboxed(budget=0)
    h.publish(shell_descriptor())
    h.cluster.grant(tools=["sh"], classes=["sandbox"])
    body = h.submit(invocation("sh-1", tool="sh", arguments={"command": "echo hi"}))
    uid = body["metadata"]["uid"]
    h.cluster.pods[uid] = unschedulable_pod(SCHEDULER)  # the Job runs on, its pod Pending

    status = (await h.run(body))["status"]

    assert status["state"] == "Failed", status
    assert status["failureClass"] == FailureClass.TRANSIENT.value
    message = status["message"]
    assert "Unschedulable" in message and "Insufficient cpu" in message
    assert "never started" in message and "timeout" not in message
    # The wait was recorded with the scheduler's words while it lasted.
    waits = [
        d for stage, outcome, d in stages(status) if (stage, outcome) == ("sandbox", "waiting")
    ]
    assert waits and "Insufficient cpu" in waits[0]
    # Nothing can start later: the pod was deleted as read (never bound), then its Job.
    job = LeaseNames.for_uid(uid).job
    assert ("Job", NAMESPACE, job) in h.cluster.deleted
    (deleted_pod,) = h.cluster.calls_of("delete_unscheduled_pod")
    assert deleted_pod["resource_version"] == "7"
    assert h.cluster.pods[uid] is None
    assert not status.get("usage", {}).get("sandboxSeconds")


def call_of(
    effective: SideEffectClass, *, uid: str = "00000000-0000-4000-8000-00000000000a"
) -> Call:
    spec = ToolDescriptorSpec.model_validate(shell_descriptor()["spec"])
    return Call(
        namespace=NAMESPACE,
        name="sh-1",
        uid=uid,
        caller="agent",
        descriptor=spec,
        arguments={"command": "echo hi"},
        effective_class=effective,
        limits=CallLimits(timeout_seconds=60, max_result_bytes=1024),
        argv=("echo", "hi"),
        interrupted=asyncio.Event(),
    )


async def test_a_pod_bound_meanwhile_is_not_given_up_and_follows_the_old_rules() -> None:
    """The scheduler binds the pod between the read and the delete: the precondition fails,
    nothing is deleted as never started, and the call settles as one that may have run."""
    cluster = FakeCluster()
    executor = SandboxExecutor(cluster, Settings(capacity=CapacitySettings(wait_seconds=0)))
    call = call_of(SideEffectClass.SHARED_WRITE)
    cluster.pods[call.uid] = unschedulable_pod(SCHEDULER, since=ago(30))
    refused_deletes: list[str] = []

    async def bound_first(namespace: str, name: str, resource_version: str) -> bool:
        bound = {"metadata": {"name": name, "resourceVersion": "8"}, "spec": {"nodeName": "n"}}
        cluster.pods[call.uid] = bound
        refused_deletes.append(resource_version)
        call.interrupted.set()  # then the call is interrupted: the pod may have run
        return False

    cluster.delete_unscheduled_pod = bound_first  # type: ignore[method-assign]
    outcome = await asyncio.wait_for(executor.execute(call), 5)

    assert refused_deletes == ["7"]
    assert outcome.state == InvocationState.UNCERTAIN
    assert "never started" not in outcome.message


async def test_a_pod_waiting_within_the_budget_says_so_and_is_not_given_up() -> None:
    cluster = FakeCluster()
    executor = SandboxExecutor(cluster, Settings(capacity=CapacitySettings(wait_seconds=600)))
    noted: list[str] = []

    async def waiting(detail: str) -> None:
        noted.append(detail)
        call.interrupted.set()  # the agent gives up first

    call = dataclasses.replace(call_of(SideEffectClass.SANDBOX), waiting=waiting)
    cluster.pods[call.uid] = unschedulable_pod(SCHEDULER)
    outcome = await asyncio.wait_for(executor.execute(call), 5)

    assert len(noted) == 1 and "up to 600s" in noted[0] and "Insufficient cpu" in noted[0]
    # Not given up for capacity: the one delete is the interrupt's proof that it never ran.
    assert len(cluster.calls_of("delete_unscheduled_pod")) == 1
    assert outcome.state == InvocationState.CANCELLED
    assert "before its pod was scheduled" in outcome.message


def test_the_tool_timeout_is_the_pods_deadline_and_the_job_bounds_the_wait() -> None:
    executor = SandboxExecutor(FakeCluster(), Settings(capacity=CapacitySettings(wait_seconds=30)))
    job = executor.job_for(call_of(SideEffectClass.SANDBOX))
    assert job["spec"]["template"]["spec"]["activeDeadlineSeconds"] == 60
    assert job["spec"]["activeDeadlineSeconds"] == job_deadline(60, 30) > 60 + 30


@pytest.mark.parametrize(
    ("started", "state", "words"),
    [
        (False, InvocationState.FAILED, "never started"),
        (True, InvocationState.UNCERTAIN, "ran past its timeout of 60s"),
    ],
)
async def test_a_pod_ended_at_its_own_deadline_is_a_timeout_started_or_not(
    started: bool, state: InvocationState, words: str
) -> None:
    cluster = FakeCluster()
    executor = SandboxExecutor(cluster, Settings())
    call = call_of(SideEffectClass.SHARED_WRITE)
    result = dataclasses.replace(
        pod_result(exit_code=137 if started else None, started=started, gate_failed=not started),
        deadline_exceeded=True,
    )
    cluster.pod_outcomes[call.uid] = result
    outcome = await executor.outcome_of(call, finished_job("Failed", "PodFailurePolicy"))
    assert outcome.state == state
    if not started:
        assert outcome.failure_class == FailureClass.TIMEOUT
    assert words in outcome.message
    assert (outcome.sandbox_seconds is None) is (not started)


def test_only_a_pod_refused_by_the_scheduler_and_not_bound_is_unschedulable() -> None:
    refused = pod_unschedulable(unschedulable_pod(SCHEDULER, since="2026-01-01T00:00:00Z"))
    assert refused is not None
    assert (refused.name, refused.message, refused.since, refused.resource_version) == (
        "ta-pod",
        SCHEDULER,
        "2026-01-01T00:00:00Z",
        "7",
    )
    bound = unschedulable_pod(SCHEDULER)
    bound["spec"]["nodeName"] = "node-1"
    assert pod_unschedulable(bound) is None
    assert pod_unschedulable(None) is None
    pending = unschedulable_pod(SCHEDULER)
    pending["status"]["conditions"][0]["reason"] = "SchedulingGated"
    assert pod_unschedulable(pending) is None
