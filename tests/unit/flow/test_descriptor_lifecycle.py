"""A descriptor's lifecycle beyond its publication (issue 27): the default timeout when it
sets none, retirement with an in-flight policy, extended resources passed to the sandbox
pod, and a class denial that says what raised the class."""

from __future__ import annotations

import asyncio
import dataclasses
from typing import Any

import pytest
from pydantic import ValidationError

from tests.unit.fake_cluster import (
    NAMESPACE,
    FakeCluster,
    Harness,
    ScriptedExecutor,
    descriptor,
    finished_job,
    invocation,
    make_runtime,
    pod_result,
    shell_descriptor,
)
from tooladapter.enums import (
    EnvironmentClass,
    FailureClass,
    InFlightPolicy,
    InvocationState,
    Resource,
    SideEffectClass,
    ToolKind,
    UnlistedAction,
)
from tooladapter.executors.sandbox import SandboxExecutor
from tooladapter.handlers.descriptors import desired_status
from tooladapter.metrics import SANDBOX_SECONDS
from tooladapter.model import (
    DEFAULT_TIMEOUT_SECONDS,
    ResourceQuantities,
    Resources,
    SandboxSpec,
    ToolDescriptorSpec,
    effective_timeout,
)
from tooladapter.pipeline.availability import unavailable
from tooladapter.pipeline.classification import classify, raised_note
from tooladapter.pipeline.refusals import permission_denied
from tooladapter.sandbox.job import build_job
from tooladapter.settings import LimitSettings, Settings

pytestmark = [pytest.mark.timeout(10), pytest.mark.usefixtures("fast_retries")]

UID = "0b7c6a52-6a3e-4a3b-9f0e-1c2d3e4f5a6b"
WRITER_SCHEMA = {"type": "object", "properties": {"path": {"type": "string"}}}


def spec_of(**fields: Any) -> ToolDescriptorSpec:
    return ToolDescriptorSpec.model_validate(descriptor("t", **fields)["spec"])


# --------------------------------------------------------------------------- timeout


def test_a_descriptor_without_timeout_takes_the_operators_default() -> None:
    unset = spec_of()
    assert unset.timeout_seconds is None
    assert "timeoutSeconds" not in unset.wire()  # nothing stored for the API server to keep
    assert effective_timeout(unset, 8) == 8
    assert effective_timeout(spec_of(timeoutSeconds=40), 8) == 40
    assert effective_timeout(None, 8) == 8


def test_the_status_shows_the_effective_timeout() -> None:
    body = {**descriptor("t"), "metadata": {"name": "t", "namespace": "n", "generation": 1}}
    assert desired_status(body, default_timeout_seconds=8).effective_timeout_seconds == 8
    assert desired_status(body).effective_timeout_seconds == DEFAULT_TIMEOUT_SECONDS
    body["spec"]["timeoutSeconds"] = 300  # what the old CRD default stored: kept as given
    assert desired_status(body, default_timeout_seconds=8).effective_timeout_seconds == 300


def test_the_status_shows_the_effective_result_bound() -> None:
    body = {**descriptor("t"), "metadata": {"name": "t", "namespace": "n", "generation": 1}}
    assert "maxResultBytes" not in spec_of().wire()  # no CRD default to store
    raised = 8 * 1_048_576
    assert desired_status(body, max_result_bytes=raised).effective_max_result_bytes == raised
    body["spec"]["maxResultBytes"] = 1_048_576  # what the old CRD default stored: kept
    assert desired_status(body, max_result_bytes=raised).effective_max_result_bytes == 1_048_576


async def test_a_call_of_a_descriptor_without_timeout_runs_with_the_setting() -> None:
    h = make_runtime(settings=Settings(limits=LimitSettings(default_timeout_seconds=8)))
    h.publish(descriptor("lister"))
    h.cluster.grant(tools=["lister"], classes=["read"])
    stored = await h.run(h.submit(invocation()))
    assert stored["status"]["state"] == "Observed"
    executor = h.executors[ToolKind.NATIVE]
    assert isinstance(executor, ScriptedExecutor)
    assert executor.executed[0].limits.timeout_seconds == 8


# --------------------------------------------------------------------------- extended resources


def test_extended_resources_reach_the_pod_as_given() -> None:
    resources = Resources.model_validate(
        {
            "requests": {"cpu": "50m", "example.com/widget": 1},
            "limits": {"cpu": "500m", "memory": "64Mi", "example.com/widget": "1"},
        }
    )
    job = build_job(
        namespace="team-a",
        uid=UID,
        invocation_name="c",
        owner={"kind": "ToolInvocation", "name": "c", "uid": UID},
        sandbox=SandboxSpec(resources=resources),
        image="localhost/tooladapter-sandbox:dev",
        argv=["true"],
        arguments={},
        timeout_seconds=5,
        lease_id=UID,
    )
    pod = job["spec"]["template"]["spec"]
    tool = next(c for c in pod["containers"] if c["name"] == "tool")
    assert tool["resources"] == {
        "requests": {"cpu": "50m", "example.com/widget": "1"},
        "limits": {"cpu": "500m", "memory": "64Mi", "example.com/widget": "1"},
    }


@pytest.mark.parametrize(
    ("limits", "words"),
    [
        ({"gpu": 1}, "gpu: not a resource name"),
        ({"kubernetes.io/gpu": 1}, "reserved"),
        ({"nvidia.com/gpu": "0.5"}, "whole number"),
        ({"nvidia.com/gpu": "lots"}, "whole number"),
        ({"nvidia.com/gpu": True}, "whole number"),
    ],
)
def test_an_invalid_extended_resource_is_refused_naming_the_field(
    limits: dict[str, object], words: str
) -> None:
    body = descriptor("t", kind="container", sandbox={"command": ["true"]})
    body["spec"]["sandbox"]["resources"] = {"limits": limits}
    body["metadata"]["generation"] = 1
    status = desired_status(body)
    assert status.active is False
    assert status.message is not None
    assert "spec.sandbox.resources.limits" in status.message and words in status.message


def test_an_extended_request_must_equal_its_limit() -> None:
    with pytest.raises(ValidationError, match=r"requests\.example\.com/widget"):
        Resources.model_validate({"requests": {"example.com/widget": "1"}})
    assert ResourceQuantities(cpu="1").extended == {}


def test_an_mcp_tool_held_back_until_a_person_acts_is_refused_as_validation_not_transient() -> None:
    """A changed schema (re-pin) or a server schema admitting unknown keys (close it) does
    not pass by retrying; a server that is not active may come back."""
    body = descriptor("t", kind="mcp")
    expected = {
        "SchemaChanged": FailureClass.VALIDATION,
        "OpenSchema": FailureClass.VALIDATION,
        "ServerDegraded": FailureClass.TRANSIENT,
    }
    for reason, failure in expected.items():
        ready = {"type": "Ready", "status": "False", "reason": reason}
        body["status"] = {"active": True, "healthy": False, "conditions": [ready]}
        refused = unavailable(namespace="n", tool_id="t", version="1.0.0", body=body)
        assert refused is not None and refused[1] == failure, reason


# --------------------------------------------------------------------------- retirement


def test_retirement_defaults_to_complete_and_denies_new_calls_as_retired() -> None:
    spec = spec_of(retired=True)
    assert spec.retirement.in_flight == InFlightPolicy.COMPLETE
    assert not spec.interrupts_in_flight
    assert spec_of(retired=True, retirement={"inFlight": "Cancel"}).interrupts_in_flight
    assert not spec_of(retirement={"inFlight": "Cancel"}).interrupts_in_flight
    body = descriptor("t", retired=True)
    # The status may still say active (the operator has not written it yet): the spec rules.
    body["status"] = {"active": True, "healthy": True}
    refused = unavailable(namespace="n", tool_id="t", version="1.0.0", body=body)
    assert refused is not None and refused[1] == FailureClass.RETIRED


async def test_a_new_call_of_a_retired_version_is_denied_retired(h: Harness) -> None:
    h.publish(descriptor("lister", retired=True), active=False)
    h.cluster.grant(tools=["lister"], classes=["read"])
    stored = await h.run(h.submit(invocation()))
    assert stored["status"]["state"] == "Denied"
    assert stored["status"]["failureClass"] == "retired"


def writer(h: Harness, **spec: Any) -> None:
    h.publish(
        descriptor("writer", side_effect_class="shared-write", inputSchema=WRITER_SCHEMA, **spec)
    )
    h.cluster.grant(tools=["writer"], classes=["shared-write"])


async def test_retiring_denies_a_call_waiting_for_approval_at_once(h: Harness) -> None:
    writer(h)
    task = h.start(h.submit(invocation("w-1", tool="writer", arguments={"path": "/x"})))
    await h.cluster.wait_for_state("w-1", InvocationState.AWAITING_APPROVAL)

    writer(h, retired=True)  # the catalog's update wakes the wait: no approval needed
    await asyncio.wait_for(task, 5)

    status = h.cluster.invocation("w-1")["status"]
    assert status["state"] == "Denied"
    assert status["failureClass"] == "retired"
    assert "retired while the call waited" in status["message"]
    executor = h.executors[ToolKind.NATIVE]
    assert isinstance(executor, ScriptedExecutor) and executor.executed == []


async def test_an_approved_call_of_a_version_retired_meanwhile_never_runs(h: Harness) -> None:
    writer(h)
    task = h.start(h.submit(invocation("w-1", tool="writer", arguments={"path": "/x"})))
    await h.cluster.wait_for_state("w-1", InvocationState.AWAITING_APPROVAL)
    h.approve_waiting("w-1")
    # Retired on the API server only (the watch has not delivered it): the re-check reads it.
    stored = h.cluster.stored(Resource.DESCRIPTORS, "team-a", "writer-1-0-0")
    stored["spec"]["retired"] = True
    h.cluster.put(Resource.DESCRIPTORS, stored)
    await asyncio.wait_for(task, 5)
    assert h.cluster.invocation("w-1")["status"]["failureClass"] == "retired"


@pytest.mark.parametrize("policy", [InFlightPolicy.CANCEL, InFlightPolicy.COMPLETE])
async def test_retiring_with_cancel_interrupts_an_executing_call(
    policy: InFlightPolicy,
) -> None:
    gate = asyncio.Event()
    executor = ScriptedExecutor(gate=gate)
    h = make_runtime(executors={ToolKind.NATIVE: executor})
    h.publish(descriptor("lister"))
    h.cluster.grant(tools=["lister"], classes=["read"])
    task = h.start(h.submit(invocation()))
    await asyncio.wait_for(executor.started.wait(), 5)
    call = executor.executed[0]

    h.publish(descriptor("lister", retired=True, retirement={"inFlight": policy.value}))
    await asyncio.sleep(0.05)
    assert call.interrupted.is_set() is (policy == InFlightPolicy.CANCEL)
    gate.set()
    await asyncio.wait_for(task, 5)
    if policy == InFlightPolicy.CANCEL:
        assert "ToolInvocationInterrupted" in h.events.reasons()


# --------------------------------------------------------------------------- one message


def test_a_class_denial_says_what_raised_the_class() -> None:
    classification = classify(
        declared=SideEffectClass.SANDBOX,
        environment=EnvironmentClass.DEVELOPMENT,
        frozen=False,
        shell_unlisted=True,
        unlisted_action=UnlistedAction.ESCALATE,
        shell_reason="rm is on no allow-list entry",
    )
    assert classification.effective == SideEffectClass.SHARED_WRITE
    note = raised_note(classification.raised_by)
    denied = permission_denied(
        caller="agent",
        groups=[],
        namespace="n",
        tool_id="sh",
        effective=classification.effective,
        may_invoke=True,
        may_use=False,
        raised=note,
    )
    assert denied is not None
    assert "may not use sideeffectclasses/shared-write" in denied.reason
    assert "not on the allow list" in denied.reason
    assert "rm is on no allow-list entry" in denied.reason
    assert raised_note(()) == ""


def test_a_frozen_refusal_of_an_escalated_shell_command_names_the_escalation() -> None:
    classification = classify(
        declared=SideEffectClass.SANDBOX,
        environment=EnvironmentClass.DEVELOPMENT,
        frozen=True,
        shell_unlisted=True,
        unlisted_action=UnlistedAction.ESCALATE,
    )
    assert classification.refused
    assert "frozen" in classification.reason
    assert "not on the allow list raised sandbox to shared-write" in classification.reason


# --------------------------------------------------------------------------- usage meters


def test_the_pod_outcome_measures_the_tool_containers_run_time() -> None:
    ran = pod_result()
    assert ran.run_seconds is None  # no recorded end: nothing metered
    timed = dataclasses.replace(
        ran, started_at="2026-01-01T00:00:01Z", finished_at="2026-01-01T00:00:03.5+00:00"
    )
    assert timed.run_seconds == 2.5
    assert dataclasses.replace(timed, finished_at="garbage").run_seconds is None


async def test_a_sandboxed_call_meters_its_seconds_per_tenant_and_on_the_receipt() -> None:
    cluster = FakeCluster()
    executor = SandboxExecutor(cluster, Settings())
    h = make_runtime(cluster, executors={ToolKind.SHELL: executor})
    limits = {"cpu": "500m", "memory": "64Mi", "example.com/widget": 1}
    h.publish(
        shell_descriptor(
            sandbox={"resources": {"limits": limits}, "egress": {"allow": []}},
        )
    )
    h.cluster.grant(tools=["sh"], classes=["sandbox"])
    body = h.submit(invocation("sh-1", tool="sh", arguments={"command": "echo hi"}))
    uid = body["metadata"]["uid"]
    timed = dataclasses.replace(
        pod_result(log=b"hi\n"),
        started_at="2026-01-01T00:00:00Z",
        finished_at="2026-01-01T00:00:04Z",
    )
    cluster.script_job(uid, finished_job(), outcome=timed)
    metered = SANDBOX_SECONDS.labels(NAMESPACE)
    before = metered._value.get()

    stored = await h.run(body)

    status = stored["status"]
    assert status["state"] == "Observed"
    assert status["execution"]["sandboxSeconds"] == 4.0
    # The counter is the process's: earlier tests' fractional seconds make the difference
    # a float subtraction, so compared as one.
    assert metered._value.get() - before == pytest.approx(4.0)
    receipt = h.store.receipt(status["receiptRef"])
    assert receipt["usage"] == {
        "sandboxSeconds": 4.0,
        "resourceLimits": {"cpu": "500m", "memory": "64Mi", "example.com/widget": "1"},
        "timeoutSeconds": 60,
        "egressBytesUp": 0,
        "egressBytesDown": 0,
    }
    (job,) = [o for o in cluster.created if o["kind"] == "Job"]
    tool = job["spec"]["template"]["spec"]["containers"][0]
    assert tool["resources"]["limits"]["example.com/widget"] == "1"
