"""Capacity within budget: a sandboxed call whose quota refuses it waits in Brokered, before
any effect and without a calls-in-flight slot, then runs once, or ends Failed transient;
a Job whose pod the quota refuses after all ends Failed, not Uncertain."""

from __future__ import annotations

import asyncio
import functools
from dataclasses import replace
from typing import Any

import pytest

from tests.unit.fake_cluster import (
    FakeCluster,
    Harness,
    container_descriptor,
    credential,
    descriptor,
    finished_job,
    invocation,
    make_runtime,
    pod_result,
    shell_descriptor,
)
from tooladapter.enums import FailureClass, InvocationState, ToolKind
from tooladapter.executors import Call
from tooladapter.executors.limits import CallLimits
from tooladapter.executors.sandbox import SandboxExecutor
from tooladapter.flow import capacity, run_invocation
from tooladapter.kube.capacity import pod_of, quota_named
from tooladapter.kube.sandbox import job_never_had_pod
from tooladapter.model import ToolDescriptorSpec
from tooladapter.settings import CapacitySettings, Settings

pytestmark = [pytest.mark.timeout(10), pytest.mark.usefixtures("fast_retries")]

REFUSAL = (
    'pods "ta-x-" is forbidden: exceeded quota: pod-budget, requested: count/pods=1, '
    "used: count/pods=1, limited: count/pods=1"
)


@pytest.fixture(autouse=True)
def quick_backoff(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(capacity, "FIRST_DELAY_SECONDS", 0.01)
    monkeypatch.setattr(capacity, "MAX_DELAY_SECONDS", 0.02)


def sandboxed(*, budget: int = 120, slots: int = 16) -> Harness:
    cluster = FakeCluster()
    settings = Settings(capacity=CapacitySettings(wait_seconds=budget, calls_in_flight=slots))
    executor = SandboxExecutor(cluster, settings)
    return make_runtime(
        cluster,
        settings=settings,
        executors={ToolKind.SHELL: executor, ToolKind.CONTAINER: executor},
    )


def shell_call(h: Harness, name: str = "sh-1") -> dict[str, Any]:
    h.publish(shell_descriptor())
    h.cluster.grant(tools=["sh"], classes=["sandbox"])
    body = h.submit(invocation(name, tool="sh", arguments={"command": "echo hi"}))
    h.cluster.script_job(body["metadata"]["uid"], finished_job(), outcome=pod_result(log=b"hi\n"))
    return body


def jobs(h: Harness) -> list[dict[str, Any]]:
    return [obj for obj in h.cluster.created if obj["kind"] == "Job"]


def stages(status: dict[str, Any]) -> list[tuple[str, str]]:
    return [(s["stage"], s["outcome"]) for s in status["stages"]]


def waiting(status: dict[str, Any]) -> bool:
    return status.get("state") == "Brokered" and "pod-budget" in (status.get("message") or "")


async def test_a_call_that_fits_at_once_asks_once_and_runs_without_waiting() -> None:
    h = sandboxed()
    stored = await h.run(shell_call(h))
    status = stored["status"]
    assert status["state"] == "Observed", status
    assert len(jobs(h)) == 1
    asked = h.cluster.calls_of("quota_refusal")
    assert len(asked) == 1
    # The dry run is asked about the very Job the executor then creates.
    assert asked[0]["job"] == jobs(h)[0]
    assert ("sandbox", "waiting") not in stages(status)
    assert ("recheck", "passed") not in stages(status)  # nothing waited: nothing re-read


async def test_a_call_waits_in_brokered_naming_the_quota_then_runs_once() -> None:
    h = sandboxed(slots=1)
    h.cluster.quota_answers = [REFUSAL]
    body = shell_call(h)
    meta = body["metadata"]
    h.rt.admit(meta["namespace"], meta["uid"], functools.partial(run_invocation, h.rt, body))
    seen = (await h.cluster.wait_for_status("sh-1", waiting))["status"]
    assert "quota pod-budget" in seen["message"] and "up to 120s" in seen["message"]
    assert ("sandbox", "waiting") in stages(seen)
    assert jobs(h) == []  # nothing created while it waits
    # The wait holds no calls-in-flight slot: another tenant's call may run meanwhile.
    for _ in range(200):
        if not h.rt.gate.holders:
            break
        await asyncio.sleep(0.01)
    assert not h.rt.gate.holders

    h.cluster.quota_answers = [None]  # the blocking pod went
    status = (await h.cluster.wait_for_state("sh-1", InvocationState.OBSERVED))["status"]
    assert len(jobs(h)) == 1
    assert not status.get("message")
    order = stages(status)
    # Capacity first, then the re-check of everything that may have changed, then Executing.
    assert order.index(("sandbox", "waiting")) < order.index(("sandbox", "passed"))
    assert order.index(("sandbox", "passed")) < order.index(("recheck", "passed"))
    assert order.index(("recheck", "passed")) < order.index(("execute", "started"))
    await asyncio.gather(*list(h.rt.tasks.values()))


async def test_a_call_that_never_fits_ends_failed_transient_without_a_job() -> None:
    h = sandboxed(budget=0)
    h.cluster.quota_answers = [REFUSAL]
    stored = await h.run(shell_call(h))
    status = stored["status"]
    assert status["state"] == "Failed", status
    assert status["failureClass"] == FailureClass.TRANSIENT
    assert "no capacity within 0s" in status["message"] and "pod-budget" in status["message"]
    assert ("sandbox", "failed") in stages(status)
    assert ("execute", "started") not in stages(status)
    assert jobs(h) == []
    # Its lease is released as any call that ended before acting.
    assert status["sandboxLease"]["releasedAt"]


async def test_the_budget_runs_out_while_waiting() -> None:
    h = sandboxed(budget=1)
    h.cluster.quota_answers = [REFUSAL]
    stored = await h.run(shell_call(h))
    assert stored["status"]["state"] == "Failed"
    assert stored["status"]["failureClass"] == FailureClass.TRANSIENT
    assert len(h.cluster.calls_of("quota_refusal")) > 1  # asked again while it waited
    assert jobs(h) == []


async def test_an_interrupt_cancels_a_waiting_call() -> None:
    h = sandboxed()
    h.cluster.quota_answers = [REFUSAL]
    body = shell_call(h)
    task = h.start(body)
    try:
        await h.cluster.wait_for_status("sh-1", waiting)
        h.rt.interrupt_event(body["metadata"]["uid"]).set()
        await asyncio.wait_for(task, 5)
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
    status = h.cluster.invocation("sh-1")["status"]
    assert status["state"] == "Cancelled", status
    assert "waiting for capacity" in status["message"]
    assert jobs(h) == []


async def test_a_grant_revoked_while_waiting_denies_the_call() -> None:
    h = sandboxed()
    h.cluster.quota_answers = [REFUSAL]
    body = shell_call(h)
    task = h.start(body)
    try:
        await h.cluster.wait_for_status("sh-1", waiting)
        h.cluster.grants.clear()
        h.cluster.quota_answers = [None]
        await asyncio.wait_for(task, 5)
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
    status = h.cluster.invocation("sh-1")["status"]
    assert (status["state"], status["deniedStage"]) == ("Denied", "permission"), status
    assert jobs(h) == []


async def test_a_restarted_operator_keeps_the_budget_already_spent() -> None:
    h = sandboxed(budget=120)
    h.cluster.quota_answers = [REFUSAL]
    body = shell_call(h)
    task = h.start(body)
    try:
        await h.cluster.wait_for_status("sh-1", waiting)
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
    stored = h.cluster.invocation("sh-1")
    # The wait began long ago, as a restarted operator finds it.
    for stage in stored["status"]["stages"]:
        if (stage["stage"], stage["outcome"]) == ("sandbox", "waiting"):
            stage["time"] = "2020-01-01T00:00:00Z"
    h.cluster.put("toolinvocations", stored)
    again = make_runtime(
        h.cluster,
        settings=h.rt.settings,
        executors={ToolKind.SHELL: SandboxExecutor(h.cluster, h.rt.settings)},
    )
    again.publish(shell_descriptor())
    await asyncio.wait_for(run_invocation(again.rt, h.cluster.invocation("sh-1")), 5)
    status = h.cluster.invocation("sh-1")["status"]
    assert (status["state"], status["failureClass"]) == ("Failed", "transient"), status
    assert jobs(h) == []


async def test_brokered_credentials_outlive_the_capacity_wait() -> None:
    """Credentials are brokered before the waits: a call that waited its whole budget for
    its quota, then again for the scheduler, still gets a token valid for its whole timeout
    (it dies with the lease's Secret anyway)."""
    h = sandboxed(budget=30)
    h.cluster.service_accounts.add(("team-a", "deployer"))
    token = credential("deploy", service_account="deployer", file="/tooladapter/credentials/token")
    h.publish(container_descriptor(credentials=[token]))
    h.cluster.grant(tools=["ct"], classes=["sandbox"])
    body = h.submit(invocation("ct-1", tool="ct", arguments={"command": "x"}))
    h.cluster.script_job(body["metadata"]["uid"], finished_job(), outcome=pod_result())
    stored = await h.run(body)
    assert stored["status"]["state"] == "Observed", stored["status"]
    (asked,) = h.cluster.calls_of("request_token")
    assert asked["expiration_seconds"] == 60 + 2 * 30


async def test_tools_run_in_the_operator_are_never_asked_about() -> None:
    h = make_runtime()
    h.publish(descriptor())
    h.cluster.grant(tools=["lister"], classes=["read"])
    h.cluster.quota_answers = [REFUSAL]
    stored = await h.run(h.submit(invocation()))
    assert stored["status"]["state"] == "Observed"
    assert h.cluster.calls_of("quota_refusal") == []


# --------------------------------------------------------------------------- after the check


def past_deadline(**status: Any) -> dict[str, Any]:
    job = finished_job("Failed", "DeadlineExceeded")
    job["status"].update(status)
    return job


def sandbox_call(uid: str) -> Call:
    spec = ToolDescriptorSpec.model_validate(shell_descriptor()["spec"])
    return Call(
        namespace="team-a",
        name="sh-1",
        uid=uid,
        caller="agent",
        descriptor=spec,
        arguments={"command": "echo hi"},
        effective_class=spec.side_effect_class,
        limits=CallLimits(timeout_seconds=60, max_result_bytes=1024),
        argv=("echo", "hi"),
        interrupted=asyncio.Event(),
    )


async def test_a_job_that_never_had_a_pod_before_its_deadline_ended_failed() -> None:
    """It passed the check, then another pod took the quota: every pod create was refused
    (FailedCreate) until activeDeadlineSeconds: the tool never started."""
    cluster = FakeCluster()
    executor = SandboxExecutor(cluster, Settings())
    outcome = await executor.outcome_of(sandbox_call("u-1"), past_deadline())
    assert outcome.state == InvocationState.FAILED
    assert outcome.failure_class == FailureClass.TRANSIENT
    assert "never got a pod" in outcome.message


async def test_a_job_whose_pod_was_removed_at_its_deadline_is_not_failed_as_never_started() -> None:
    cluster = FakeCluster()
    executor = SandboxExecutor(cluster, Settings())
    outcome = await executor.outcome_of(sandbox_call("u-2"), past_deadline(failed=1))
    assert outcome.failure_class == FailureClass.TIMEOUT
    assert "never got a pod" not in (outcome.message or "")


@pytest.mark.parametrize(
    ("status", "never"),
    [
        ({}, True),
        ({"active": 0, "failed": 0, "succeeded": 0}, True),
        ({"failed": 1}, False),
        ({"active": 1}, False),
        ({"terminating": 1}, False),
        ({"uncountedTerminatedPods": {"failed": ["uid"]}}, False),
        ({"uncountedTerminatedPods": {}}, True),
    ],
)
def test_a_job_never_had_a_pod_only_when_the_controller_counted_none(
    status: dict[str, Any], never: bool
) -> None:
    assert job_never_had_pod({"status": status}) is never


def test_the_quota_named_and_the_pod_a_job_makes() -> None:
    assert quota_named(REFUSAL) == "pod-budget"
    assert quota_named("pods is forbidden: failed quota: q: must specify limits.cpu") is None
    executor = SandboxExecutor(FakeCluster(), Settings())
    job = executor.job_for(replace(sandbox_call("00000000-0000-4000-8000-000000000009")))
    pod = pod_of(job)
    assert pod["kind"] == "Pod" and pod["metadata"]["namespace"] == "team-a"
    assert pod["metadata"]["generateName"].startswith(job["metadata"]["name"])
    assert pod["spec"] == job["spec"]["template"]["spec"]
    assert pod["metadata"]["labels"] == job["spec"]["template"]["metadata"]["labels"]


def test_the_capacity_backoff_doubles_to_its_bound() -> None:
    delays = [capacity.backoff(n) for n in range(8)]
    assert delays[0] == capacity.FIRST_DELAY_SECONDS
    assert delays == sorted(delays) and max(delays) == capacity.MAX_DELAY_SECONDS


def test_only_a_refusal_of_what_pods_hold_makes_idle_warm_pods_give_way() -> None:
    """Issue 41: a quota wait deletes idle pool pods (then idle workspaces) of the namespace
    only when they hold what the quota refused; a Job count is not freed by deleting pods."""
    jobs = (
        'jobs.batch "ta-x" is forbidden: exceeded quota: no-jobs, requested: '
        "count/jobs.batch=1, used: count/jobs.batch=0, limited: count/jobs.batch=0"
    )
    cpu = (
        'pods "ta-x-" is forbidden: exceeded quota: small, requested: limits.cpu=500m,pods=1, '
        "used: limits.cpu=1800m,pods=3, limited: limits.cpu=2,pods=4"
    )
    assert not capacity.pods_refused(jobs)
    assert capacity.pods_refused(cpu)
    assert capacity.pods_refused("exceeded quota: q")  # unreadable: pods may hold it
