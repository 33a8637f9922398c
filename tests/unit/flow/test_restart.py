"""A restarted operator resumes every persisted non-terminal state from the API server.

The first "operator" is stopped right after it persisted a state (a BaseException out of
the fake's write, which no stage catches, as a killed process would); a second one, a new
Runtime over the same FakeCluster with its catalog primed from it, walks the stored object.
"""

from __future__ import annotations

import base64
import copy

import pytest

from tests.unit.fake_cluster import (
    NAMESPACE,
    FakeCluster,
    Harness,
    ScriptedExecutor,
    ago,
    container_descriptor,
    credential,
    descriptor,
    finished_job,
    invocation,
    make_runtime,
    pod_result,
    policy,
    shell_descriptor,
)
from tooladapter.enums import Resource, ToolKind
from tooladapter.executors import Executor
from tooladapter.executors.sandbox import SandboxExecutor
from tooladapter.naming import LeaseNames
from tooladapter.settings import Settings

pytestmark = [pytest.mark.timeout(10), pytest.mark.usefixtures("fast_retries")]

EVERY_STATE = Settings(write_every_state=True)
WRITER_SCHEMA = {"type": "object", "properties": {"path": {"type": "string"}}}


class Stopped(BaseException):
    """The operator process stopped here (no stage catches it, as none survives a kill)."""


def stop_after_writing(cluster: FakeCluster, state: str) -> None:
    def after(result: dict, **_: object) -> None:
        if (result.get("status") or {}).get("state") == state:
            raise Stopped(state)

    cluster.after["patch_status"] = after


async def run_until_stopped(h: Harness, body: dict) -> None:
    with pytest.raises(Stopped):
        await h.run(body)
    h.cluster.after.clear()


def restart(
    first: Harness,
    *,
    settings: Settings | None = None,
    executors: dict[ToolKind, Executor] | None = None,
) -> Harness:
    """A new operator on the same API server: a fresh runtime whose catalog is primed from
    what the server holds (descriptors, policies, approvals)."""
    second = make_runtime(first.cluster, settings=settings, executors=executors)
    for (resource, _, _), obj in first.cluster.objects.items():
        if resource in (Resource.DESCRIPTORS, Resource.POLICIES, Resource.APPROVALS):
            second.catalog.update(Resource(resource), "ADDED", copy.deepcopy(obj))
    return second


def scripted(h: Harness) -> ScriptedExecutor:
    executor = h.executors[ToolKind.NATIVE]
    assert isinstance(executor, ScriptedExecutor)
    return executor


def sandboxed(cluster: FakeCluster) -> dict[ToolKind, Executor]:
    executor = SandboxExecutor(cluster, Settings())
    return {ToolKind.SHELL: executor, ToolKind.CONTAINER: executor}


def outcomes(status: dict) -> list[tuple[str, str]]:
    return [(s["stage"], s["outcome"]) for s in status["stages"]]


def read_tool(h: Harness) -> None:
    h.publish(descriptor())
    h.cluster.grant(tools=["lister"], classes=["read"])


def writer_tool(h: Harness) -> None:
    h.publish(descriptor("writer", side_effect_class="shared-write", inputSchema=WRITER_SCHEMA))
    h.cluster.grant(tools=["writer"], classes=["shared-write"])


def writer_call() -> dict:
    return invocation("write-1", tool="writer", arguments={"path": "/x"})


# --------------------------------------------------------------------------- before any wait


async def test_a_call_persisted_as_received_is_walked_from_the_start(h: Harness) -> None:
    read_tool(h)
    body = h.submit(invocation(status={"state": "Received"}))

    stored = await h.run(body)

    assert stored["status"]["state"] == "Observed"
    assert len(scripted(h).executed) == 1


@pytest.mark.parametrize("state", ["Validated", "Authorized"])
async def test_a_call_stopped_after_an_intermediate_state_resumes_from_it(state: str) -> None:
    first = make_runtime(settings=EVERY_STATE)
    read_tool(first)
    stop_after_writing(first.cluster, state)
    await run_until_stopped(first, first.submit(invocation()))
    assert first.cluster.invocation("call-1")["status"]["state"] == state

    second = restart(first)
    stored = await second.run(first.cluster.invocation("call-1"))

    status = stored["status"]
    assert status["state"] == "Observed"
    # Nothing already persisted is repeated: each stage is recorded once.
    assert outcomes(status).count(("validation", "passed")) == 1
    assert outcomes(status).count(("permission", "passed")) == 1
    assert scripted(first).executed == []
    assert len(scripted(second).executed) == 1


@pytest.mark.parametrize("state", ["Validated", "Authorized", "Brokered"])
async def test_a_call_whose_stored_arguments_changed_after_validation_is_denied_on_resume(
    state: str,
) -> None:
    """Admission keeps a call's spec as created (the CRD rule; a policy for the arguments,
    which the API server's CEL cannot compare in full: a renamed key passed the rule). Were
    either missing, a call resumed by another operator runs its spec as stored: it must
    still be the request that was hashed (and that an approval binds to)."""
    first = make_runtime(settings=EVERY_STATE)
    read_tool(first)
    stop_after_writing(first.cluster, state)
    await run_until_stopped(first, first.submit(invocation(arguments={"pad": "x"})))
    stored = first.cluster.objects[(str(Resource.INVOCATIONS), NAMESPACE, "call-1")]
    stored["spec"]["arguments"] = {"url": "http://elsewhere.example/"}  # same size, new key

    second = restart(first)
    status = (await second.run(first.cluster.invocation("call-1")))["status"]

    assert status["state"] == "Denied"
    assert status["deniedStage"] == "validation"
    assert "the request changed after it was validated" in status["message"]
    assert scripted(first).executed == scripted(second).executed == []


async def test_a_call_stopped_after_brokered_executes_once_on_the_new_operator() -> None:
    first = make_runtime(settings=EVERY_STATE)
    read_tool(first)
    stop_after_writing(first.cluster, "Brokered")
    await run_until_stopped(first, first.submit(invocation()))

    second = restart(first)
    stored = await second.run(first.cluster.invocation("call-1"))

    assert stored["status"]["state"] == "Observed"
    assert scripted(first).executed == []
    assert len(scripted(second).executed) == 1
    assert scripted(second).resumed == []


async def test_a_sandbox_call_stopped_after_brokered_keeps_its_lease_and_runs_one_job() -> None:
    cluster = FakeCluster()
    first = make_runtime(cluster, settings=EVERY_STATE, executors=sandboxed(cluster))
    first.publish(shell_descriptor())
    cluster.grant(tools=["sh"], classes=["sandbox"])
    body = first.submit(invocation("sh-1", tool="sh", arguments={"command": "echo hi"}))
    stop_after_writing(cluster, "Brokered")
    await run_until_stopped(first, body)
    lease = cluster.invocation("sh-1")["status"]["sandboxLease"]

    second = restart(first, executors=sandboxed(cluster))
    cluster.script_job(body["metadata"]["uid"], finished_job(), outcome=pod_result(log=b"hi\n"))
    stored = await second.run(cluster.invocation("sh-1"))

    status = stored["status"]
    assert status["state"] == "Observed"
    assert status["result"]["content"] == "hi\n"
    assert status["sandboxLease"]["leaseId"] == lease["leaseId"]
    assert status["sandboxLease"]["releasedAt"]
    kinds = [obj["kind"] for obj in cluster.created]
    assert kinds == ["NetworkPolicy", "Job"]


# --------------------------------------------------------------------------- awaiting approval


async def test_a_call_awaiting_approval_binds_after_a_restart_and_keeps_its_request_time() -> None:
    first = make_runtime()
    writer_tool(first)
    stop_after_writing(first.cluster, "AwaitingApproval")
    await run_until_stopped(first, first.submit(writer_call()))
    requested_at = first.cluster.invocation("write-1")["status"]["approvalRequestedAt"]

    second = restart(first)
    second.approve_waiting("write-1", name="yes")
    stored = await second.run(first.cluster.invocation("write-1"))

    status = stored["status"]
    assert status["state"] == "Observed"
    assert status["approvalRequestedAt"] == requested_at
    assert outcomes(status).count(("approval", "waiting")) == 1
    assert status["approval"]["name"] == "yes"
    assert len(scripted(second).executed) == 1


@pytest.mark.parametrize(
    ("policy_timeout", "waited"),
    [(None, 3600 + 60), (60, 120)],
    ids=["default-timeout", "policy-timeout"],
)
async def test_an_approval_wait_that_expired_while_the_operator_was_down_is_denied(
    policy_timeout: int | None, waited: int
) -> None:
    first = make_runtime()
    writer_tool(first)
    if policy_timeout is not None:
        first.add_policy(policy(approval={"timeoutSeconds": policy_timeout}))
    stop_after_writing(first.cluster, "AwaitingApproval")
    await run_until_stopped(first, first.submit(writer_call()))
    # The operator stayed down: the wait began `waited` seconds ago.
    await first.cluster.patch_status(
        Resource.INVOCATIONS, NAMESPACE, "write-1", {"approvalRequestedAt": ago(waited)}
    )

    second = restart(first)
    stored = await second.run(first.cluster.invocation("write-1"))

    status = stored["status"]
    assert status["state"] == "Denied"
    assert status["deniedStage"] == "approval"
    assert "wait expired" in status["message"]
    assert scripted(second).executed == []


async def test_a_call_awaiting_approval_that_was_rejected_meanwhile_is_denied() -> None:
    first = make_runtime()
    writer_tool(first)
    stop_after_writing(first.cluster, "AwaitingApproval")
    await run_until_stopped(first, first.submit(writer_call()))

    second = restart(first)
    second.approve_waiting("write-1", decision="Rejected")
    stored = await second.run(first.cluster.invocation("write-1"))

    assert stored["status"]["state"] == "Denied"
    assert stored["status"]["deniedStage"] == "approval"


# --------------------------------------------------------------------------- executing


async def test_a_resumed_in_operator_shared_write_ends_uncertain_without_running_again() -> None:
    first = make_runtime()
    writer_tool(first)
    body = first.submit(writer_call())
    first.pre_approve(body)
    stop_after_writing(first.cluster, "Executing")
    await run_until_stopped(first, body)

    second = restart(first)
    stored = await second.run(first.cluster.invocation("write-1"))

    status = stored["status"]
    assert status["state"] == "Uncertain"
    assert status["failureClass"] == "effect-unconfirmed"
    assert scripted(second).executed == []
    assert len(scripted(second).resumed) == 1
    (event,) = second.events.of("ToolEffectUncertain")
    assert event.warning
    assert "must confirm" in event.message
    assert status["receipt"]["state"] == "Uncertain"


async def test_a_resumed_read_in_the_operator_ends_failed_transient() -> None:
    first = make_runtime(settings=EVERY_STATE)
    read_tool(first)
    stop_after_writing(first.cluster, "Executing")
    await run_until_stopped(first, first.submit(invocation()))

    second = restart(first)
    stored = await second.run(first.cluster.invocation("call-1"))

    status = stored["status"]
    assert status["state"] == "Failed"
    assert status["failureClass"] == "transient"
    assert scripted(second).executed == []
    assert len(scripted(second).resumed) == 1
    assert second.events.of("ToolEffectUncertain") == []


async def test_a_resumed_sandbox_job_is_followed_to_its_end_and_never_created_twice() -> None:
    cluster = FakeCluster()
    first = make_runtime(cluster, executors=sandboxed(cluster))
    first.publish(shell_descriptor())
    cluster.grant(tools=["sh"], classes=["sandbox"])
    body = first.submit(invocation("sh-1", tool="sh", arguments={"command": "echo hi"}))

    def stop_once_the_job_exists(result: bool, obj: dict) -> None:
        if obj["kind"] == "Job":
            raise Stopped("job created")

    cluster.after["create"] = stop_once_the_job_exists
    with pytest.raises(Stopped):
        await first.run(body)
    cluster.after.clear()
    assert cluster.invocation("sh-1")["status"]["state"] == "Executing"

    second = restart(first, executors=sandboxed(cluster))
    cluster.script_job(body["metadata"]["uid"], finished_job(), outcome=pod_result(log=b"done"))
    stored = await second.run(cluster.invocation("sh-1"))

    assert stored["status"]["state"] == "Observed"
    assert stored["status"]["result"]["content"] == "done"
    assert [obj["kind"] for obj in cluster.created].count("Job") == 1
    assert len(cluster.calls_of("wait_for_job")) == 1


@pytest.mark.parametrize(
    ("side_effect_class", "state", "failure"),
    [("sandbox", "Failed", "transient"), ("shared-write", "Uncertain", "effect-unconfirmed")],
)
async def test_a_resumed_sandbox_call_whose_job_is_gone_settles_by_its_class(
    side_effect_class: str, state: str, failure: str
) -> None:
    cluster = FakeCluster()
    first = make_runtime(cluster, executors=sandboxed(cluster))
    first.publish(shell_descriptor(side_effect_class=side_effect_class))
    cluster.grant(tools=["sh"], classes=[side_effect_class])
    body = first.submit(invocation("sh-1", tool="sh", arguments={"command": "echo hi"}))
    first.pre_approve(body)
    stop_after_writing(cluster, "Executing")
    await run_until_stopped(first, body)

    second = restart(first, executors=sandboxed(cluster))
    stored = await second.run(cluster.invocation("sh-1"))  # no Job: it was never made

    status = stored["status"]
    assert (status["state"], status["failureClass"]) == (state, failure)
    assert "does not exist" in status["message"]
    assert [obj["kind"] for obj in cluster.created] == ["NetworkPolicy"]


async def test_a_resumed_sandbox_call_still_redacts_its_brokered_secret() -> None:
    cluster = FakeCluster()
    cluster.secrets[(NAMESPACE, "api")] = {"token": base64.b64encode(b"s3cr3t-value").decode()}
    first = make_runtime(cluster, executors=sandboxed(cluster))
    first.publish(  # a container tool: a shell tool may not carry brokered secrets
        container_descriptor(
            "sh",
            command=["env"],
            credentials=[credential("api", file="/tooladapter/credentials/api")],
        ),
    )
    cluster.grant(tools=["sh"], classes=["sandbox"])
    body = first.submit(invocation("sh-1", tool="sh", arguments={"command": "env"}))
    stop_after_writing(cluster, "Executing")
    await run_until_stopped(first, body)
    uid = body["metadata"]["uid"]
    assert (NAMESPACE, LeaseNames.for_uid(uid).secret) in cluster.secrets

    second = restart(first, executors=sandboxed(cluster))
    cluster.script_job(uid, finished_job(), outcome=pod_result(log=b"TOKEN=s3cr3t-value\n"))
    stored = await second.run(cluster.invocation("sh-1"))

    status = stored["status"]
    assert status["state"] == "Observed"
    assert "s3cr3t-value" not in status["result"]["content"]
    assert status["result"]["redactions"]
    # Credentials die with the call: the lease's Secret is deleted at the end.
    assert (NAMESPACE, LeaseNames.for_uid(uid).secret) not in cluster.secrets
