"""How the flow settles what goes wrong: Failed (nothing could have happened), Uncertain
(something may have happened), Cancelled, retries of transient API errors, and the one
receipt every terminal state writes."""

from __future__ import annotations

import asyncio
import base64
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import pytest

import tooladapter.flow
from tests.unit.fake_cluster import (
    CALLER,
    NAMESPACE,
    FakeCluster,
    Harness,
    ScriptedExecutor,
    container_descriptor,
    credential,
    descriptor,
    http_descriptor,
    invocation,
    is_receipt,
    make_runtime,
    merge_patch,
    pod,
    shell_descriptor,
)
from tooladapter.artifacts import ArtifactStoreError, Space
from tooladapter.enums import (
    EventLevel,
    FailureClass,
    InvocationState,
    Resource,
    SideEffectClass,
    ToolKind,
)
from tooladapter.executors import Executor, Outcome, unconfirmed_for
from tooladapter.executors.sandbox import SandboxExecutor
from tooladapter.kube.client import Conflict, Refused
from tooladapter.naming import LeaseNames
from tooladapter.settings import Settings
from tooladapter.settings.live import LiveSettings

pytestmark = [pytest.mark.timeout(10), pytest.mark.usefixtures("fast_retries")]

WRITER_SCHEMA = {"type": "object", "properties": {"path": {"type": "string"}}}
ATTEMPTS = 1 + len(tooladapter.flow.RETRY_DELAYS)


def with_executor(executor: ScriptedExecutor, cluster: FakeCluster | None = None) -> Harness:
    return make_runtime(cluster, executors={ToolKind.NATIVE: executor})


def sandboxed(cluster: FakeCluster) -> Harness:
    executor = SandboxExecutor(cluster, Settings())
    return make_runtime(cluster, executors={ToolKind.SHELL: executor, ToolKind.CONTAINER: executor})


def read_call(h: Harness, **spec: Any) -> dict:
    h.publish(descriptor())
    h.cluster.grant(tools=["lister"], classes=["read"])
    return h.submit(invocation(**spec))


def approved_write(h: Harness) -> dict:
    """A shared-write call whose approval is already there (it never waits)."""
    h.publish(descriptor("writer", side_effect_class="shared-write", inputSchema=WRITER_SCHEMA))
    h.cluster.grant(tools=["writer"], classes=["shared-write"])
    body = h.submit(invocation("write-1", tool="writer", arguments={"path": "/x"}))
    h.pre_approve(body)
    return body


def shell_call(h: Harness, side_effect_class: str = "sandbox", **descriptor_spec: Any) -> dict:
    h.publish(shell_descriptor(side_effect_class=side_effect_class, **descriptor_spec))
    h.cluster.grant(tools=["sh"], classes=[side_effect_class])
    body = h.submit(invocation("sh-1", tool="sh", arguments={"command": "echo hi"}))
    h.pre_approve(body)
    return body


def stages(status: dict) -> list[tuple[str, str]]:
    return [(s["stage"], s["outcome"]) for s in status["stages"]]


def write_states(h: Harness, name: str) -> list[str]:
    return [w["state"] for w in h.cluster.writes_of(name) if "state" in w]


# --------------------------------------------------------------------------- the executor fails


async def test_an_executor_failing_once_a_shared_write_started_ends_uncertain_never_rerun() -> None:
    executor = ScriptedExecutor(raises=RuntimeError("connection reset mid-call"))
    h = with_executor(executor)
    body = approved_write(h)

    stored = await h.run(body)

    status = stored["status"]
    assert status["state"] == "Uncertain"
    assert status["failureClass"] == "effect-unconfirmed"
    assert len(executor.executed) == 1
    assert len(executor.resumed) == 1
    assert h.events.of("ToolEffectUncertain")


async def test_an_executor_failing_during_a_read_ends_failed_transient() -> None:
    executor = ScriptedExecutor(raises=RuntimeError("boom"))
    h = with_executor(executor)

    stored = await h.run(read_call(h))

    assert stored["status"]["state"] == "Failed"
    assert stored["status"]["failureClass"] == "transient"
    assert len(executor.executed) == 1
    assert h.events.of("ToolEffectUncertain") == []


@pytest.mark.parametrize(
    ("make_call", "state", "failure"),
    [(approved_write, "Uncertain", "effect-unconfirmed"), (read_call, "Failed", "transient")],
    ids=["shared-write", "read"],
)
async def test_an_execution_that_keeps_failing_is_settled_by_its_class_after_the_retries(
    make_call: Callable[[Harness], dict], state: str, failure: str
) -> None:
    executor = ScriptedExecutor(raises=RuntimeError("boom"), resume_raises=OSError("down"))
    h = with_executor(executor)

    stored = await h.run(make_call(h))

    status = stored["status"]
    assert (status["state"], status["failureClass"]) == (state, failure)
    assert "the operator failed while the tool ran (OSError)" in status["message"]
    assert len(executor.executed) == 1
    assert len(executor.resumed) == len(tooladapter.flow.RETRY_DELAYS)


async def test_a_tool_error_outcome_ends_failed_with_its_output_and_exit_code() -> None:
    executor = ScriptedExecutor(
        Outcome.failed(FailureClass.TOOL_ERROR, "exit 3", output=b"no such file", exit_code=3)
    )
    h = with_executor(executor)

    stored = await h.run(read_call(h))

    status = stored["status"]
    assert (status["state"], status["failureClass"]) == ("Failed", "tool-error")
    assert status["result"]["exitCode"] == 3
    assert status["result"]["content"] == "no such file"


# ------------------------------------------------------------------- API errors before Executing


@pytest.mark.parametrize(
    ("method", "error"),
    [
        ("can", OSError("connection refused")),
        ("can", Conflict("the object has been modified")),
        ("claim_idempotency_key", TimeoutError("read timed out")),
        ("check_fencing_token", Conflict("lease changed")),
        ("read_secret", OSError("connection reset")),
    ],
)
async def test_a_transient_api_error_before_executing_is_retried_and_the_call_succeeds(
    method: str, error: Exception
) -> None:
    executor = ScriptedExecutor()
    h = make_runtime(executors={ToolKind.HTTP: executor})
    h.cluster.secrets[(NAMESPACE, "api")] = {"token": base64.b64encode(b"t").decode()}
    h.publish(
        http_descriptor(
            "lister",
            "https://api.example.test/items",
            credentials=[credential("api", hosts=["api.example.test"])],
        )
    )
    h.cluster.grant(tools=["lister"], classes=["read"])
    h.cluster.fail_next[method] = error
    body = h.submit(invocation(idempotencyKey="k", attemptId="a", fencingToken=1))

    stored = await h.run(body)

    assert stored["status"]["state"] == "Observed"
    assert method not in h.cluster.fail_next  # the fault was hit
    assert len(executor.executed) == 1


async def test_a_transient_api_error_that_never_clears_ends_failed_transient(h: Harness) -> None:
    def unreachable(**_: object) -> None:
        raise OSError("connection refused")

    h.cluster.hooks["can"] = unreachable

    stored = await h.run(read_call(h))

    status = stored["status"]
    assert (status["state"], status["failureClass"]) == ("Failed", "transient")
    assert "no effect was started" in status["message"]
    assert ("permission", "failed") in stages(status)
    assert len(h.cluster.calls_of("can")) == 2 * ATTEMPTS  # tool and class, per attempt


async def test_a_non_transient_error_before_executing_ends_failed_internal_without_retrying(
    h: Harness,
) -> None:
    def broken(**_: object) -> None:
        raise ValueError("unexpected answer")

    h.cluster.hooks["can"] = broken

    stored = await h.run(read_call(h))

    status = stored["status"]
    assert (status["state"], status["failureClass"]) == ("Failed", "internal")
    assert len(h.cluster.calls_of("can")) == 2  # one attempt: tool and class together


async def test_a_failed_write_of_awaiting_approval_is_retried_so_reviewers_see_the_wait() -> None:
    h = make_runtime()
    h.publish(descriptor("writer", side_effect_class="shared-write", inputSchema=WRITER_SCHEMA))
    h.cluster.grant(tools=["writer"], classes=["shared-write"])
    body = h.submit(invocation("write-1", tool="writer", arguments={"path": "/x"}))
    h.cluster.fail_next["patch_status"] = OSError("connection reset")

    task = h.start(body)
    try:
        waiting = await h.cluster.wait_for_state("write-1", InvocationState.AWAITING_APPROVAL)
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)

    assert waiting["status"]["approvalRequestedAt"]
    assert waiting["status"]["requestHash"]


@pytest.mark.parametrize(
    "error", [OSError("connection reset"), Conflict("changed")], ids=["OSError", "Conflict"]
)
async def test_a_failed_write_of_executing_is_retried_and_the_call_runs_once(
    error: Exception,
) -> None:
    executor = ScriptedExecutor()
    h = with_executor(executor)
    body = approved_write(h)

    def fail_the_executing_write(status: dict, **_: object) -> None:
        if status.get("state") == "Executing":
            del h.cluster.hooks["patch_status"]
            raise error

    h.cluster.hooks["patch_status"] = fail_the_executing_write

    stored = await h.run(body)

    assert stored["status"]["state"] == "Observed"
    assert len(executor.executed) == 1
    assert executor.resumed == []


async def test_an_execution_claimed_by_another_operator_is_left_to_it() -> None:
    executor = ScriptedExecutor()
    h = with_executor(executor)
    body = approved_write(h)

    def another_operator_claims_it_first(
        resource: str, namespace: str, name: str, status: dict, resource_version: str | None
    ) -> None:
        if status.get("state") != "Executing":
            return
        del h.cluster.hooks["patch_status"]
        obj = h.cluster.objects[(str(resource), namespace, name)]
        claimed = {**status, "execution": {**status["execution"], "holder": "other-operator"}}
        obj["status"] = merge_patch(obj["status"], claimed)
        obj["metadata"]["resourceVersion"] = "other"

    h.cluster.hooks["patch_status"] = another_operator_claims_it_first

    stored = await h.run(body)

    assert stored["status"]["state"] == "Executing"
    assert stored["status"]["execution"]["holder"] == "other-operator"
    assert executor.executed == []
    assert executor.resumed == []


# ------------------------------------------------------------------- sandbox before any effect


async def test_a_container_tool_without_a_sandbox_block_fails_at_sandbox_without_a_job() -> None:
    cluster = FakeCluster()
    h = sandboxed(cluster)
    # The CRD requires the block; put one that slipped by straight into the catalog.
    h.publish(descriptor("box", kind="container", side_effect_class="sandbox"))
    cluster.grant(tools=["box"], classes=["sandbox"])

    stored = await h.run(h.submit(invocation("box-1", tool="box")))

    status = stored["status"]
    assert (status["state"], status["failureClass"]) == ("Failed", "validation")
    assert ("sandbox", "failed") in stages(status)
    assert "no sandbox block" in status["message"]
    assert cluster.created == []
    assert cluster.calls_of("wait_for_job") == []


@pytest.mark.parametrize("side_effect_class", ["sandbox", "shared-write"])
async def test_a_refused_job_fails_transient_and_is_never_uncertain(side_effect_class: str) -> None:
    cluster = FakeCluster()
    h = sandboxed(cluster)
    body = shell_call(h, side_effect_class)

    def quota(obj: dict) -> None:
        if obj["kind"] == "Job":
            raise Refused("403: exceeded quota: pods")

    cluster.hooks["create"] = quota

    stored = await h.run(body)

    status = stored["status"]
    assert (status["state"], status["failureClass"]) == ("Failed", "transient")
    assert "exceeded quota" in status["message"]
    assert [obj["kind"] for obj in cluster.created] == ["NetworkPolicy"]
    assert status["sandboxLease"]["releasedAt"]
    assert cluster.calls_of("wait_for_job") == []


async def test_an_interrupt_before_execution_cancels_and_releases_the_lease() -> None:
    cluster = FakeCluster()
    cluster.secrets[(NAMESPACE, "api")] = {"token": base64.b64encode(b"t").decode()}
    h = sandboxed(cluster)
    # A container tool: a shell tool may not carry brokered secrets.
    h.publish(
        container_descriptor(
            "sh", credentials=[credential("api", file="/tooladapter/credentials/api")]
        )
    )
    h.cluster.grant(tools=["sh"], classes=["sandbox"])
    body = h.submit(invocation("sh-1", tool="sh", arguments={"command": "echo hi"}))
    h.pre_approve(body)
    uid = body["metadata"]["uid"]

    def interrupt_on_brokered(result: dict, **_: object) -> None:
        if result["status"]["state"] == "Brokered":
            h.rt.interrupt_event(uid).set()

    cluster.after["patch_status"] = interrupt_on_brokered
    h.rt = type(h.rt)(**{**h.rt.__dict__, "live": LiveSettings(Settings(write_every_state=True))})

    stored = await h.run(body)

    status = stored["status"]
    assert (status["state"], status["failureClass"]) == ("Cancelled", "cancelled")
    assert "before execution started" in status["message"]
    assert "Job" not in [obj["kind"] for obj in cluster.created]
    assert (NAMESPACE, LeaseNames.for_uid(uid).secret) not in cluster.secrets
    assert h.events.of("SandboxReleased")


@pytest.mark.parametrize(
    ("side_effect_class", "started", "state"),
    [
        ("sandbox", False, "Cancelled"),
        ("sandbox", True, "Cancelled"),
        ("shared-write", False, "Cancelled"),
        ("shared-write", True, "Uncertain"),
    ],
)
async def test_an_interrupt_during_a_sandbox_job_deletes_it_and_settles_by_start_and_class(
    side_effect_class: str, started: bool, state: str
) -> None:
    cluster = FakeCluster()
    h = sandboxed(cluster)
    body = shell_call(h, side_effect_class)
    uid = body["metadata"]["uid"]
    cluster.pods[uid] = pod(started=started)  # the Job's wait never ends: it is running

    task = h.start(body)
    await cluster.wait_for_state("sh-1", InvocationState.EXECUTING)
    for _ in range(50):
        if cluster.calls_of("wait_for_job"):
            break
        await asyncio.sleep(0)
    h.rt.interrupt_event(uid).set()
    await asyncio.wait_for(task, 5)

    status = cluster.invocation("sh-1")["status"]
    assert status["state"] == state
    assert ("Job", NAMESPACE, LeaseNames.for_uid(uid).job) in cluster.deleted


# --------------------------------------------------------------------------- the terminal write


async def test_a_terminal_write_that_fails_once_is_retried_and_the_end_is_persisted(
    h: Harness,
) -> None:
    def fail_first_end(status: dict, **_: object) -> None:
        if status.get("state") == "Observed":
            del h.cluster.hooks["patch_status"]
            raise Conflict("the object has been modified")

    h.cluster.hooks["patch_status"] = fail_first_end
    h.rt.settings = replace(h.rt.settings, events=EventLevel.ALL)  # the end's event counted

    stored = await h.run(read_call(h))

    status = stored["status"]
    assert status["state"] == "Observed"
    assert write_states(h, "call-1") == ["Observed"]
    assert h.store.receipt(status["receiptRef"])["state"] == "Observed"
    executor = h.executors[ToolKind.NATIVE]
    assert isinstance(executor, ScriptedExecutor)
    assert len(executor.executed) == 1 and executor.resumed == []
    assert h.events.reasons() == ["ToolInvoked"]


async def test_a_denial_whose_write_fails_once_still_ends_persisted(h: Harness) -> None:
    h.publish(descriptor())  # no grant: denied at permission
    h.cluster.fail_next["patch_status"] = OSError("connection reset")

    stored = await h.run(h.submit(invocation()))

    assert stored["status"]["state"] == "Denied"
    assert stored["status"]["deniedStage"] == "permission"
    assert h.events.reasons() == ["ToolInvocationDenied"]


async def test_an_uncertain_end_whose_write_fails_once_still_warns(h: Harness) -> None:
    executor = ScriptedExecutor(unconfirmed_for(SideEffectClass.SHARED_WRITE, "lost the link"))
    h = with_executor(executor)
    body = approved_write(h)

    def fail_first_end(status: dict, **_: object) -> None:
        if status.get("state") == "Uncertain":
            del h.cluster.hooks["patch_status"]
            raise OSError("connection reset")

    h.cluster.hooks["patch_status"] = fail_first_end

    stored = await h.run(body)

    assert stored["status"]["state"] == "Uncertain"
    assert len(h.events.of("ToolEffectUncertain")) == 1


# --------------------------------------------------------------------------- receipts


def observed(h: Harness) -> dict:
    return read_call(h)


def failed(h: Harness) -> dict:
    h.executors[ToolKind.NATIVE] = ScriptedExecutor(Outcome.failed(FailureClass.TOOL_ERROR, "x"))
    return read_call(h)


def uncertain(h: Harness) -> dict:
    h.executors[ToolKind.NATIVE] = ScriptedExecutor(
        unconfirmed_for(SideEffectClass.SHARED_WRITE, "lost")
    )
    return approved_write(h)


def cancelled(h: Harness) -> dict:
    return read_call(h, interrupt=True)


def denied(h: Harness) -> dict:
    h.publish(descriptor())
    return h.submit(invocation())


@pytest.mark.parametrize(
    ("scenario", "state"),
    [
        (observed, InvocationState.OBSERVED),
        (failed, InvocationState.FAILED),
        (uncertain, InvocationState.UNCERTAIN),
        (cancelled, InvocationState.CANCELLED),
        (denied, InvocationState.DENIED),
    ],
    ids=lambda v: v if isinstance(v, str) else None,
)
async def test_every_terminal_state_writes_a_receipt_and_its_summary(
    scenario: Callable[[Harness], dict], state: InvocationState
) -> None:
    executors: dict[ToolKind, Executor] = {ToolKind.NATIVE: ScriptedExecutor()}
    h = make_runtime(executors=executors)
    body = scenario(h)

    stored = await h.run(body)

    status = stored["status"]
    assert status["state"] == state
    assert status["receiptRef"] == status["auditRef"]
    receipt = h.store.receipt(status["receiptRef"])
    assert receipt["schema"] == "tool-invocation-v1"
    assert receipt["state"] == state
    assert receipt["invocationId"] == body["metadata"]["uid"]
    assert receipt["caller"] == {"kind": "agent", "name": CALLER}
    assert status["receipt"]["state"] == state
    assert status["receipt"]["writtenAt"] == status["endedAt"]
    assert stages(status)[-1] == ("audit", "receipt")
    assert h.cluster.stored(Resource.INVOCATIONS, NAMESPACE, body["metadata"]["name"])


@pytest.mark.parametrize(
    ("make_call", "state"),
    [(read_call, "Observed"), (denied, "Denied")],
    ids=["observed", "denied"],
)
async def test_a_receipt_write_that_fails_once_is_retried_before_the_end_is_persisted(
    h: Harness, make_call: Callable[[Harness], dict], state: str
) -> None:
    def disk_full_once(data: bytes) -> None:
        if is_receipt(data):
            h.store.hook = None
            raise OSError(28, "No space left on device")

    h.store.hook = disk_full_once

    stored = await h.run(make_call(h))

    status = stored["status"]
    assert status["state"] == state
    assert status["receipt"]["state"] == state
    assert h.store.receipt(status["auditRef"])["state"] == state
    assert len(h.store.receipts()) == 1


async def test_a_result_the_store_refuses_is_kept_until_stored_and_the_call_runs_once() -> None:
    executor = ScriptedExecutor()
    h = with_executor(executor)
    body = approved_write(h)
    refusals: list[bytes] = []

    def store_down_three_times(data: bytes) -> None:
        if len(refusals) < 3:
            refusals.append(data)
            raise ArtifactStoreError("put tooladapter/sha256/..: EndpointConnectionError")

    h.store.hook = store_down_three_times

    stored = await h.run(body)

    status = stored["status"]
    assert status["state"] == "Observed", status
    assert len(executor.executed) == 1
    assert (
        h.store.get(status["resultRef"], Space.RESULTS) == refusals[0]
    )  # the very output, kept meanwhile
    assert h.store.receipt(status["receiptRef"])["resultHash"] == status["resultRef"]
    warnings = h.events.of("ArtifactStoreUnavailable")
    assert len(warnings) == 1 and warnings[0].warning
    assert "did not take the result" in warnings[0].message


async def test_a_receipt_the_store_refuses_delays_the_end_and_warns_once(h: Harness) -> None:
    refused: list[bytes] = []

    def receipts_refused_twice(data: bytes) -> None:
        if is_receipt(data) and len(refused) < 2:
            refused.append(data)
            raise ArtifactStoreError("put: 503 SlowDown")

    h.store.hook = receipts_refused_twice

    stored = await h.run(read_call(h))

    status = stored["status"]
    assert status["state"] == "Observed"
    assert len(refused) == 2
    assert h.store.receipt(status["receiptRef"])["state"] == "Observed"
    assert [e.message for e in h.events.of("ArtifactStoreUnavailable")] == [
        "the artifact store did not take the receipt (ArtifactStoreError: put: 503 SlowDown); "
        "retrying: the call ends once it is stored"
    ]


async def test_a_finalizer_that_cannot_be_removed_does_not_swallow_the_ends_event() -> None:
    executor = ScriptedExecutor()
    h = with_executor(executor)
    body = approved_write(h)

    def removal_fails(finalizers: list[str], **_: object) -> None:
        if not finalizers:
            raise OSError("connection reset")

    h.cluster.hooks["set_finalizers"] = removal_fails
    h.rt.settings = replace(h.rt.settings, events=EventLevel.ALL)

    stored = await h.run(body)

    assert stored["status"]["state"] == "Observed"
    assert stored["metadata"]["finalizers"]  # left for the finalizer reconciler
    assert h.events.reasons().count("ToolInvoked") == 1
    assert len(executor.executed) == 1
