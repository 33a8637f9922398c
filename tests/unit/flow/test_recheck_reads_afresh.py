"""Attacks on wave 5 (the re-check reads afresh; atomic status maps; a leaner receipt
summary), by a helper with only an agent's view.

HIT 1: the re-check ran right before executing, after brokering had made the sandbox lease
from the watch's view: a ToolPolicy narrowing egress, stored a moment before the approval
and not yet delivered by the watch, was read by the re-check (it denies nothing, so it
passed) but the NetworkPolicy kept the tool's wider allow-list. Also, a call the re-check
then denied had had its Secrets read and a token minted. Now the re-check runs before
brokering, and brokering uses what it read.

HIT 2: a ToolPolicy narrowing who may approve (`approval.reviewerGroups`) added while a call
waited did not hold: the wait took the reviewer groups once, before waiting, and the
re-check never looked at the bound approval again. Now the re-check requires the bound
approval to qualify under the policies as they are.

Not hits (the helper's report): a failing fresh read (NotFound, errors, the namespace
deleted) ends the call Failed with nothing run; the fresh view never writes through to the
shared catalog; nothing reads the summary fields that went (the stored receipt keeps them);
stored objects with them are pruned by the API server; atomic maps change only ownership,
not merge patches; an agent cannot multiply the re-check's reads (only approved or resumed
calls make them); no secret in the re-check's messages.
"""

from __future__ import annotations

import asyncio

import pytest

from tests.unit.fake_cluster import (
    NAMESPACE,
    FakeCluster,
    Harness,
    finished_job,
    invocation,
    make_runtime,
    pod_result,
    policy,
    shell_descriptor,
)
from tests.unit.flow.test_states import native, writer_call, writer_tool
from tooladapter.enums import InvocationState, Resource, ToolKind
from tooladapter.executors.sandbox import SandboxExecutor
from tooladapter.kube.client import NotFound
from tooladapter.settings import Settings


@pytest.fixture
def h() -> Harness:
    return make_runtime()


async def test_egress_narrowed_a_moment_before_the_approval_applies_to_the_lease() -> None:
    cluster = FakeCluster()
    h = make_runtime(cluster, executors={ToolKind.SHELL: SandboxExecutor(cluster, Settings())})
    h.publish(
        shell_descriptor(
            sandbox={
                "resources": {"limits": {"cpu": "500m", "memory": "64Mi"}},
                "egress": {"allow": ["10.0.0.0/24"]},
            }
        )
    )
    h.cluster.grant(tools=["sh"], classes=["sandbox", "shared-write"])
    body = h.submit(invocation("sh-1", tool="sh", arguments={"command": "rm -r /workspace"}))
    h.cluster.script_job(body["metadata"]["uid"], finished_job(), outcome=pod_result(log=b"ok\n"))
    task = h.start(body)
    await h.cluster.wait_for_state("sh-1", InvocationState.AWAITING_APPROVAL)

    # Stored on the API server, not yet delivered by the watch: no egress at all but one host.
    h.cluster.put(Resource.POLICIES, policy("lockdown", egress={"allow": ["192.0.2.1/32"]}))
    h.approve_waiting("sh-1")
    await asyncio.wait_for(task, 5)

    status = h.cluster.invocation("sh-1")["status"]
    assert status["state"] == "Observed", status
    (netpol,) = [o for o in h.cluster.created if o["kind"] == "NetworkPolicy"]
    assert "10.0.0.0/24" not in str(netpol["spec"]["egress"])


async def test_a_call_the_recheck_denies_has_nothing_brokered(h: Harness) -> None:
    writer_tool(h)
    task = h.start(h.submit(writer_call()))
    await h.cluster.wait_for_state("write-1", InvocationState.AWAITING_APPROVAL)

    h.cluster.namespaces[NAMESPACE] = {"tooladapter.dev/frozen": "true"}
    h.approve_waiting("write-1")
    await asyncio.wait_for(task, 5)

    status = h.cluster.invocation("write-1")["status"]
    assert status["state"] == "Denied" and status["deniedStage"] == "classification"
    assert "credentials" not in [s["stage"] for s in status["stages"]], status["stages"]
    assert h.cluster.calls_of("request_token") == [] and h.cluster.created == []


@pytest.mark.parametrize(
    ("groups", "state"),
    [(["interns"], "Denied"), (["sre-leads"], "Observed")],
    ids=["outside-the-narrowed-group", "inside-it"],
)
async def test_reviewer_groups_narrowed_while_the_call_waited_hold_for_its_approval(
    h: Harness, groups: list[str], state: str
) -> None:
    writer_tool(h)
    task = h.start(h.submit(writer_call()))
    await h.cluster.wait_for_state("write-1", InvocationState.AWAITING_APPROVAL)

    h.add_policy(policy("reviewers", approval={"reviewerGroups": ["sre-leads"]}))
    h.approve_waiting("write-1", reviewerGroups=groups)
    await asyncio.wait_for(task, 5)

    status = h.cluster.invocation("write-1")["status"]
    assert status["state"] == state, status
    assert len(native(h).executed) == (state == "Observed")
    if state == "Denied":
        assert status["deniedStage"] == "approval"
        assert "sre-leads" in status["message"] and "interns" in status["message"]


@pytest.mark.parametrize(
    ("method", "error"),
    [("namespace_labels", NotFound("namespace gone")), ("list_all", OSError("reset"))],
)
async def test_a_failing_fresh_read_ends_the_call_with_nothing_run(
    h: Harness, method: str, error: Exception, monkeypatch: pytest.MonkeyPatch
) -> None:
    import tooladapter.flow

    monkeypatch.setattr(tooladapter.flow, "RETRY_DELAYS", (0, 0, 0, 0, 0))
    writer_tool(h)
    task = h.start(h.submit(writer_call()))
    await h.cluster.wait_for_state("write-1", InvocationState.AWAITING_APPROVAL)

    async def fail(**_: object) -> None:
        raise error

    h.cluster.hooks[method] = fail
    h.approve_waiting("write-1")
    await asyncio.wait_for(task, 10)

    assert h.cluster.invocation("write-1")["status"]["state"] in ("Failed", "Denied")
    assert native(h).executed == []
