"""The executors' settlement decisions: what a sandbox Job's end, or its absence, means for
the call, and the one Failed-vs-Uncertain rule (`unconfirmed_for`) behind all of them."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from tests.unit.fake_cluster import (
    CALLER,
    NAMESPACE,
    PENDING,
    FakeCluster,
    descriptor,
    finished_job,
    new_uid,
    pod,
    pod_result,
    shell_descriptor,
)
from tooladapter.enums import FailureClass, InvocationState, SideEffectClass
from tooladapter.executors import Call, InOperator, Outcome, unconfirmed, unconfirmed_for
from tooladapter.executors.limits import CallLimits
from tooladapter.executors.sandbox import SCHEDULING_MARGIN_SECONDS, SandboxExecutor, job_deadline
from tooladapter.kube.client import Refused
from tooladapter.model import ToolDescriptorSpec
from tooladapter.naming import LeaseNames
from tooladapter.settings import Settings

pytestmark = pytest.mark.timeout(10)

S = SideEffectClass
CONTAINED = [S.READ, S.SANDBOX]
NOT_CONTAINED = [S.SHARED_WRITE, S.EXTERNAL, S.PRODUCTION, S.SPEND]


def make_call(
    effective: SideEffectClass = S.SANDBOX,
    *,
    spec: dict[str, Any] | None = None,
    interrupted: bool = False,
) -> Call:
    event = asyncio.Event()
    if interrupted:
        event.set()
    return Call(
        namespace=NAMESPACE,
        name="sh-1",
        uid=new_uid(),
        caller=CALLER,
        descriptor=ToolDescriptorSpec.model_validate(spec or shell_descriptor()["spec"]),
        arguments={"command": "echo hi"},
        effective_class=effective,
        limits=CallLimits(timeout_seconds=60, max_result_bytes=4096),
        argv=("echo", "hi"),
        interrupted=event,
    )


@pytest.fixture
def cluster() -> FakeCluster:
    return FakeCluster()


@pytest.fixture
def executor(cluster: FakeCluster) -> SandboxExecutor:
    return SandboxExecutor(cluster, Settings())


def job_name(call: Call) -> str:
    return LeaseNames.for_uid(call.uid).job


async def settle(executor: SandboxExecutor, call: Call, *, resume: bool = False) -> Outcome:
    run = executor.resume(call) if resume else executor.execute(call)
    return await asyncio.wait_for(run, 5)


# --------------------------------------------------------------------------- a Job that ends


async def test_a_complete_job_is_observed_with_its_output_and_exit_code(
    cluster: FakeCluster, executor: SandboxExecutor
) -> None:
    call = make_call()
    cluster.script_job(call.uid, finished_job(), outcome=pod_result(log=b"hello\n"))

    outcome = await settle(executor, call)

    assert outcome.state == InvocationState.OBSERVED
    assert (outcome.output, outcome.exit_code, outcome.structured) == (b"hello\n", 0, None)
    (job,) = cluster.created
    assert job["kind"] == "Job" and job["metadata"]["name"] == job_name(call)
    wait = cluster.calls_of("wait_for_job")[0]
    assert wait["timeout"] == (
        job_deadline(call.limits.timeout_seconds, Settings().capacity.wait_seconds)
        + SCHEDULING_MARGIN_SECONDS
    )


async def test_a_tool_printing_one_json_object_gets_structured_content(
    cluster: FakeCluster, executor: SandboxExecutor
) -> None:
    call = make_call()
    cluster.script_job(call.uid, finished_job(), outcome=pod_result(log=b'{"n": 3}\n'))

    outcome = await settle(executor, call)

    assert outcome.structured == {"n": 3}


async def test_execute_follows_a_job_an_earlier_run_already_made(
    cluster: FakeCluster, executor: SandboxExecutor
) -> None:
    call = make_call()
    cluster.owned[("Job", NAMESPACE, job_name(call))] = {"kind": "Job"}
    cluster.script_job(call.uid, finished_job(), outcome=pod_result(log=b"ok"))

    outcome = await settle(executor, call)

    assert outcome.state == InvocationState.OBSERVED
    assert cluster.created == []


async def test_resume_follows_the_job_and_never_creates_one(
    cluster: FakeCluster, executor: SandboxExecutor
) -> None:
    call = make_call(S.SHARED_WRITE)
    cluster.script_job(call.uid, finished_job(), outcome=pod_result(log=b"ok"))

    outcome = await settle(executor, call, resume=True)

    assert outcome.state == InvocationState.OBSERVED
    assert cluster.calls_of("create") == []


@pytest.mark.parametrize("effective", [*CONTAINED, *NOT_CONTAINED])
async def test_a_job_past_its_deadline_whose_pod_is_gone_settles_by_class(
    cluster: FakeCluster, executor: SandboxExecutor, effective: SideEffectClass
) -> None:
    call = make_call(effective)
    job = finished_job("Failed", "DeadlineExceeded")
    job["status"]["failed"] = 1  # its pod, removed at the deadline, counted by the controller
    cluster.script_job(call.uid, job)

    outcome = await settle(executor, call)

    if effective.effects_contained:
        assert outcome.state == InvocationState.FAILED
        assert outcome.failure_class == FailureClass.TIMEOUT
    else:
        assert outcome.state == InvocationState.UNCERTAIN
        assert outcome.failure_class == FailureClass.EFFECT_UNCONFIRMED
        assert outcome.message.endswith("its effect is unconfirmed")
    assert "past its timeout of 60s" in outcome.message


async def test_a_job_past_its_deadline_whose_tool_never_started_failed_even_for_a_write(
    cluster: FakeCluster, executor: SandboxExecutor
) -> None:
    call = make_call(S.SHARED_WRITE)
    cluster.script_job(
        call.uid,
        finished_job("Failed", "DeadlineExceeded"),
        outcome=pod_result(exit_code=None, reason="", started=False),
    )

    outcome = await settle(executor, call)

    assert (outcome.state, outcome.failure_class) == (InvocationState.FAILED, FailureClass.TIMEOUT)


@pytest.mark.parametrize(
    ("effective", "state", "failure"),
    [
        (S.SANDBOX, InvocationState.FAILED, FailureClass.OOM_KILLED),
        (S.SHARED_WRITE, InvocationState.UNCERTAIN, FailureClass.EFFECT_UNCONFIRMED),
    ],
)
async def test_an_oom_killed_tool_settles_by_class(
    cluster: FakeCluster,
    executor: SandboxExecutor,
    effective: SideEffectClass,
    state: InvocationState,
    failure: FailureClass,
) -> None:
    call = make_call(effective)
    cluster.script_job(
        call.uid,
        finished_job("Failed", "BackoffLimitExceeded"),
        outcome=pod_result(exit_code=137, reason="OOMKilled", log=b"partial"),
    )

    outcome = await settle(executor, call)

    assert (outcome.state, outcome.failure_class) == (state, failure)
    assert (outcome.exit_code, outcome.output) == (137, b"partial")
    assert "OOMKilled" in outcome.message


@pytest.mark.parametrize("effective", [S.SANDBOX, S.SHARED_WRITE])
async def test_a_non_zero_exit_is_a_tool_error_whatever_the_class(
    cluster: FakeCluster, executor: SandboxExecutor, effective: SideEffectClass
) -> None:
    call = make_call(effective)
    cluster.script_job(
        call.uid,
        finished_job("Failed", "BackoffLimitExceeded"),
        outcome=pod_result(exit_code=2, reason="Error", log=b"no such file"),
    )

    outcome = await settle(executor, call)

    # It ran to its end and answered: Observed with the error, never "safe to retry".
    assert (outcome.state, outcome.failure_class, outcome.is_error) == (
        InvocationState.OBSERVED,
        FailureClass.TOOL_ERROR,
        True,
    )
    assert (outcome.exit_code, outcome.output) == (2, b"no such file")


def running_job() -> dict[str, Any]:
    """A Job the Job controller has not yet marked (it batches pod updates by a second)."""
    return {"kind": "Job", "metadata": {"name": "job"}, "status": {"active": 1}}


async def test_a_job_whose_pod_succeeded_is_observed_before_the_controller_marks_it(
    cluster: FakeCluster, executor: SandboxExecutor
) -> None:
    """The follower returns the Job as it is once its pod ended (`kube.sandbox.wait_for_job`
    with the call's uid): a pod Succeeded is the tool's end, Complete in all but name."""
    call = make_call(S.SHARED_WRITE)
    cluster.script_job(call.uid, running_job(), outcome=pod_result(log=b"done", succeeded=True))

    outcome = await settle(executor, call)

    assert outcome.state == InvocationState.OBSERVED
    assert (outcome.output, outcome.exit_code) == (b"done", 0)
    assert cluster.calls_of("wait_for_job")[0]["uid"] == call.uid


@pytest.mark.parametrize("effective", [S.SANDBOX, S.SHARED_WRITE])
async def test_a_job_whose_pod_failed_settles_from_the_pod_as_the_finished_job_would(
    cluster: FakeCluster, executor: SandboxExecutor, effective: SideEffectClass
) -> None:
    # The tool's own error answer.
    call = make_call(effective)
    cluster.script_job(call.uid, running_job(), outcome=pod_result(exit_code=3, log=b"no"))
    outcome = await settle(executor, call)
    assert (outcome.state, outcome.exit_code, outcome.is_error) == (
        InvocationState.OBSERVED,
        3,
        True,
    )
    # A failed gate init container: never started.
    call = make_call(effective)
    cluster.script_job(
        call.uid,
        running_job(),
        outcome=pod_result(exit_code=None, reason="", started=False, gate_failed=True),
    )
    outcome = await settle(executor, call)
    assert (outcome.state, outcome.failure_class) == (
        InvocationState.FAILED,
        FailureClass.TRANSIENT,
    )
    # Neither Succeeded nor an exit code (the pod read after its end is gone): never
    # Observed, and Failed only where the class contains its effects.
    call = make_call(effective)
    cluster.script_job(
        call.uid, running_job(), outcome=pod_result(exit_code=None, reason="", name="ta-pod")
    )
    outcome = await settle(executor, call)
    assert outcome.state == (
        InvocationState.FAILED if effective == S.SANDBOX else InvocationState.UNCERTAIN
    )


async def test_a_failed_network_gate_is_transient_because_the_tool_never_ran(
    cluster: FakeCluster, executor: SandboxExecutor
) -> None:
    call = make_call(S.SHARED_WRITE)
    cluster.script_job(
        call.uid,
        finished_job("Failed", "BackoffLimitExceeded"),
        outcome=pod_result(exit_code=None, reason="", started=False, gate_failed=True),
    )

    outcome = await settle(executor, call)

    assert (outcome.state, outcome.failure_class) == (
        InvocationState.FAILED,
        FailureClass.TRANSIENT,
    )


@pytest.mark.parametrize(
    ("effective", "state"),
    [(S.SANDBOX, InvocationState.FAILED), (S.SHARED_WRITE, InvocationState.UNCERTAIN)],
)
async def test_a_failed_job_whose_pod_is_gone_follows_the_unconfirmed_rule(
    cluster: FakeCluster,
    executor: SandboxExecutor,
    effective: SideEffectClass,
    state: InvocationState,
) -> None:
    call = make_call(effective)
    cluster.script_job(call.uid, finished_job("Failed", "BackoffLimitExceeded"))

    outcome = await settle(executor, call)

    assert outcome.state == state
    assert "pod is gone" in outcome.message


@pytest.mark.parametrize(
    ("effective", "state"),
    [(S.SANDBOX, InvocationState.FAILED), (S.SHARED_WRITE, InvocationState.UNCERTAIN)],
)
async def test_a_failed_job_without_an_exit_code_follows_the_unconfirmed_rule(
    cluster: FakeCluster,
    executor: SandboxExecutor,
    effective: SideEffectClass,
    state: InvocationState,
) -> None:
    call = make_call(effective)
    cluster.script_job(
        call.uid, finished_job("Failed", "PodFailurePolicy"), outcome=pod_result(exit_code=None)
    )

    outcome = await settle(executor, call)

    assert outcome.state == state
    assert "without an exit code" in outcome.message


# ------------------------------------------------------------------------- a Job that does not end


@pytest.mark.parametrize(
    ("effective", "state"),
    [(S.SANDBOX, InvocationState.FAILED), (S.SHARED_WRITE, InvocationState.UNCERTAIN)],
)
async def test_a_job_that_vanished_follows_the_unconfirmed_rule(
    cluster: FakeCluster,
    executor: SandboxExecutor,
    effective: SideEffectClass,
    state: InvocationState,
) -> None:
    call = make_call(effective)
    cluster.script_job(call.uid, None)

    outcome = await settle(executor, call)

    assert outcome.state == state
    assert "does not exist" in outcome.message


@pytest.mark.parametrize(
    ("effective", "state"),
    [(S.READ, InvocationState.FAILED), (S.PRODUCTION, InvocationState.UNCERTAIN)],
)
async def test_a_job_that_outlives_the_wait_is_deleted_and_follows_the_unconfirmed_rule(
    cluster: FakeCluster,
    executor: SandboxExecutor,
    effective: SideEffectClass,
    state: InvocationState,
) -> None:
    call = make_call(effective)
    cluster.script_job(call.uid, TimeoutError("job did not finish within 180s"))

    outcome = await settle(executor, call)

    assert outcome.state == state
    assert ("Job", NAMESPACE, job_name(call)) in cluster.deleted


@pytest.mark.parametrize(
    ("effective", "started", "state"),
    [
        (S.SANDBOX, False, InvocationState.CANCELLED),
        (S.SHARED_WRITE, False, InvocationState.CANCELLED),
        (S.SANDBOX, True, InvocationState.CANCELLED),
        (S.SHARED_WRITE, True, InvocationState.UNCERTAIN),
        (S.PRODUCTION, True, InvocationState.UNCERTAIN),
    ],
)
async def test_an_interrupt_deletes_the_job_and_settles_by_whether_the_tool_started(
    cluster: FakeCluster,
    executor: SandboxExecutor,
    effective: SideEffectClass,
    started: bool,
    state: InvocationState,
) -> None:
    call = make_call(effective, interrupted=True)
    cluster.script_job(call.uid, PENDING, pod=pod(started=started))

    outcome = await settle(executor, call)

    assert outcome.state == state
    expected = (
        FailureClass.EFFECT_UNCONFIRMED
        if state == InvocationState.UNCERTAIN
        else FailureClass.CANCELLED
    )
    assert outcome.failure_class == expected
    assert ("Job", NAMESPACE, job_name(call)) in cluster.deleted
    assert cluster.calls_of("pod_outcome") == []


async def test_an_interrupt_before_any_pod_exists_is_cancelled(
    cluster: FakeCluster, executor: SandboxExecutor
) -> None:
    call = make_call(S.SHARED_WRITE, interrupted=True)
    cluster.script_job(call.uid, PENDING)

    outcome = await settle(executor, call)

    assert outcome.state == InvocationState.CANCELLED
    assert "never started" in outcome.message


async def test_an_interrupt_proves_an_unscheduled_pod_never_ran_by_deleting_it_as_read(
    cluster: FakeCluster, executor: SandboxExecutor
) -> None:
    call = make_call(S.EXTERNAL, interrupted=True)
    cluster.script_job(call.uid, PENDING, pod=pod(started=False))

    outcome = await settle(executor, call)

    assert outcome.state == InvocationState.CANCELLED
    assert cluster.calls_of("delete_unscheduled_pod")  # the proof: deleted at its version
    assert cluster.pods[call.uid] is None


async def test_a_pod_bound_between_the_interrupts_read_and_its_deletion_is_uncertain(
    cluster: FakeCluster, executor: SandboxExecutor
) -> None:
    """Attack: interrupt an approved external call just as its pod is scheduled. The pod
    was read unscheduled, then bound (the kubelet starts the tool) before the deletion of
    its Job reached it (through the garbage collector): the call ended Cancelled though its
    effect may have happened."""
    call = make_call(S.EXTERNAL, interrupted=True)
    cluster.script_job(call.uid, PENDING, pod=pod(started=False))
    reads = 0

    def bound_after_first_read(result: Any, **_: Any) -> None:
        nonlocal reads
        reads += 1
        if reads == 1:
            body = cluster.pods[call.uid]
            assert body is not None
            body["spec"] = {"nodeName": "node-1"}
            body["metadata"]["resourceVersion"] = "6"

    cluster.after["job_pod"] = bound_after_first_read

    outcome = await settle(executor, call)

    assert (outcome.state, outcome.failure_class) == (
        InvocationState.UNCERTAIN,
        FailureClass.EFFECT_UNCONFIRMED,
    )


async def test_a_pod_gone_before_it_could_be_deleted_as_read_may_have_run(
    cluster: FakeCluster, executor: SandboxExecutor
) -> None:
    call = make_call(S.EXTERNAL, interrupted=True)
    cluster.script_job(call.uid, PENDING, pod=pod(started=False))

    def gone_after_first_read(result: Any, **_: Any) -> None:
        cluster.pods[call.uid] = None

    cluster.after["job_pod"] = gone_after_first_read

    outcome = await settle(executor, call)

    assert outcome.state == InvocationState.UNCERTAIN


async def test_a_replacement_pod_made_before_the_jobs_deletion_is_judged_too(
    cluster: FakeCluster, executor: SandboxExecutor
) -> None:
    call = make_call(S.EXTERNAL, interrupted=True)
    cluster.script_job(call.uid, PENDING)
    replacement = pod(started=False)
    replacement["spec"] = {"nodeName": "node-1"}  # bound: its tool may have run

    def made_meanwhile(*_: Any, **__: Any) -> None:
        cluster.pods[call.uid] = replacement

    cluster.hooks["delete"] = made_meanwhile

    outcome = await settle(executor, call)

    assert outcome.state == InvocationState.UNCERTAIN


async def test_an_interrupt_that_finds_its_job_already_gone_and_no_pod_is_uncertain(
    cluster: FakeCluster, executor: SandboxExecutor
) -> None:
    # Deleted by someone else (its pod with it), or never made before a restart: the two
    # cannot be told apart, so the tool may have run (as `follow` says of a vanished Job).
    call = make_call(S.EXTERNAL, interrupted=True)
    outcome = await asyncio.wait_for(executor.interrupt(call), 5)
    assert outcome.state == InvocationState.UNCERTAIN


# --------------------------------------------------------------------------- no Job at all


async def test_a_refused_job_fails_transient_without_waiting(
    cluster: FakeCluster, executor: SandboxExecutor
) -> None:
    call = make_call(S.SHARED_WRITE)
    cluster.fail_next["create"] = Refused("403: exceeded quota")

    outcome = await settle(executor, call)

    assert (outcome.state, outcome.failure_class) == (
        InvocationState.FAILED,
        FailureClass.TRANSIENT,
    )
    assert "exceeded quota" in outcome.message
    assert cluster.calls_of("wait_for_job") == []


async def test_a_descriptor_without_a_sandbox_fails_internal_without_creating_anything(
    cluster: FakeCluster, executor: SandboxExecutor
) -> None:
    spec = descriptor("box", kind="container", side_effect_class="sandbox")["spec"]
    call = make_call(S.SANDBOX, spec=spec)

    outcome = await settle(executor, call)

    assert (outcome.state, outcome.failure_class) == (
        InvocationState.FAILED,
        FailureClass.INTERNAL,
    )
    assert cluster.calls_of("create") == []


# --------------------------------------------------------------------------- the one rule


def test_only_read_and_sandbox_keep_their_effects_contained() -> None:
    assert {c for c in SideEffectClass if c.effects_contained} == set(CONTAINED)


@pytest.mark.parametrize("effective", list(SideEffectClass))
def test_unconfirmed_for_fails_a_contained_class_and_leaves_any_other_uncertain(
    effective: SideEffectClass,
) -> None:
    outcome = unconfirmed_for(effective, "lost track", output=b"out", exit_code=9)

    if effective in CONTAINED:
        assert (outcome.state, outcome.failure_class) == (
            InvocationState.FAILED,
            FailureClass.TRANSIENT,
        )
    else:
        assert (outcome.state, outcome.failure_class) == (
            InvocationState.UNCERTAIN,
            FailureClass.EFFECT_UNCONFIRMED,
        )
    assert outcome.message == "lost track"
    assert (outcome.output, outcome.exit_code) == (b"out", 9)


@pytest.mark.parametrize("effective", list(SideEffectClass))
def test_unconfirmed_for_keeps_a_specific_failure_or_says_the_effect_is_unconfirmed(
    effective: SideEffectClass,
) -> None:
    outcome = unconfirmed_for(effective, "killed", failure=FailureClass.TIMEOUT)

    if effective in CONTAINED:
        assert outcome.failure_class == FailureClass.TIMEOUT
        assert outcome.message == "killed"
    else:
        assert outcome.failure_class == FailureClass.EFFECT_UNCONFIRMED
        assert outcome.message == "killed; its effect is unconfirmed"


@pytest.mark.parametrize("effective", list(SideEffectClass))
def test_unconfirmed_judges_by_the_calls_effective_class(effective: SideEffectClass) -> None:
    assert unconfirmed(make_call(effective), "x") == unconfirmed_for(effective, "x")


@pytest.mark.parametrize("effective", list(SideEffectClass))
async def test_an_in_operator_resume_settles_by_class_and_names_the_kind(
    effective: SideEffectClass,
) -> None:
    call = make_call(effective, spec=descriptor()["spec"])

    outcome = await InOperator().resume(call)

    expected = InvocationState.FAILED if effective in CONTAINED else InvocationState.UNCERTAIN
    assert outcome.state == expected
    assert "during the native call" in outcome.message


async def test_an_interrupt_of_a_scheduled_pod_whose_status_still_says_pending_is_uncertain(
    cluster: FakeCluster, executor: SandboxExecutor
) -> None:
    # A pod's status lags its kubelet: bound to a node, its tool may already have acted.
    call = make_call(S.SHARED_WRITE, interrupted=True)
    scheduled = pod(started=False)
    scheduled.setdefault("spec", {})["nodeName"] = "node-1"
    cluster.script_job(call.uid, PENDING, pod=scheduled)

    outcome = await settle(executor, call)

    assert outcome.state == InvocationState.UNCERTAIN
    assert "may have run" in outcome.message
