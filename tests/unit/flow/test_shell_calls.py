"""Shell commands in the pipeline: listed commands run at once as their class; a command on
no allow list waits for an approval (raised to shared-write) or is denied by policy, and
never has a Job before that."""

from __future__ import annotations

import asyncio

import pytest

from tests.unit.fake_cluster import (
    FakeCluster,
    Harness,
    finished_job,
    invocation,
    make_runtime,
    pod_result,
    policy,
    shell_descriptor,
)
from tooladapter.enums import InvocationState, ToolKind
from tooladapter.executors.sandbox import SandboxExecutor
from tooladapter.settings import Settings

pytestmark = [pytest.mark.timeout(10), pytest.mark.usefixtures("fast_retries")]


def sandboxed() -> Harness:
    cluster = FakeCluster()
    executor = SandboxExecutor(cluster, Settings())
    return make_runtime(cluster, executors={ToolKind.SHELL: executor})


def call(h: Harness, command: str, *, classes: tuple[str, ...] = ("sandbox",)) -> dict:
    h.cluster.grant(tools=["sh"], classes=list(classes))
    body = h.submit(invocation("sh-1", tool="sh", arguments={"command": command}))
    h.cluster.script_job(body["metadata"]["uid"], finished_job(), outcome=pod_result(log=b"ok\n"))
    return body


def jobs(h: Harness) -> list[dict]:
    return [obj for obj in h.cluster.created if obj["kind"] == "Job"]


def classification_detail(status: dict) -> str:
    return next(s.get("detail", "") for s in status["stages"] if s["stage"] == "classification")


async def test_a_listed_command_runs_at_once_as_sandbox() -> None:
    h = sandboxed()
    h.publish(shell_descriptor())
    stored = await h.run(call(h, "echo hello"))
    status = stored["status"]
    assert status["state"] == "Observed", status
    assert status["effectiveClass"] == "sandbox"
    assert not status.get("approvalForced")
    assert len(jobs(h)) == 1


async def test_an_unlisted_command_waits_for_an_approval_as_shared_write_without_a_job() -> None:
    h = sandboxed()
    h.publish(shell_descriptor())
    body = call(h, "rm -r /workspace", classes=("sandbox", "shared-write"))
    task = h.start(body)
    try:
        waiting = (await h.cluster.wait_for_state("sh-1", InvocationState.AWAITING_APPROVAL))[
            "status"
        ]
        assert waiting["effectiveClass"] == "shared-write"
        assert waiting["approvalForced"] is True
        detail = classification_detail(waiting)
        assert "raised sandbox to shared-write" in detail and "not on the allow list" in detail
        assert "`rm -r /workspace` matches no entry" in detail
        assert jobs(h) == []

        h.approve_waiting("sh-1")
        await asyncio.wait_for(task, 5)
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
    status = h.cluster.invocation("sh-1")["status"]
    assert status["state"] == "Observed", status
    assert len(jobs(h)) == 1


async def test_an_unlisted_command_without_the_shared_write_grant_is_denied() -> None:
    h = sandboxed()
    h.publish(shell_descriptor())
    stored = await h.run(call(h, "rm -r /workspace"))
    status = stored["status"]
    assert (status["state"], status["deniedStage"]) == ("Denied", "permission")
    assert "sideeffectclasses/shared-write" in status["message"]
    assert jobs(h) == []


async def test_a_policy_can_deny_unlisted_commands_outright() -> None:
    h = sandboxed()
    h.publish(shell_descriptor())
    h.add_policy(policy(shell={"unlisted": "deny"}))
    stored = await h.run(call(h, "python3 -c 'import shutil'", classes=("sandbox",)))
    status = stored["status"]
    assert (status["state"], status["deniedStage"]) == ("Denied", "classification")
    assert "shell.unlisted is deny" in status["message"]
    assert "runs inline code" in status["message"]
    assert jobs(h) == []


async def test_a_policy_allow_list_narrows_the_tools() -> None:
    h = sandboxed()
    h.publish(shell_descriptor())  # lists echo, ls, ...
    h.add_policy(policy(shell={"allow": ["ls"], "unlisted": "deny"}))
    stored = await h.run(call(h, "echo hello"))
    status = stored["status"]
    assert (status["state"], status["deniedStage"]) == ("Denied", "classification")
    assert "ToolPolicy shell allow lists (ls)" in status["message"]


async def test_without_a_shell_allow_list_the_reference_default_applies() -> None:
    h = sandboxed()
    h.publish(shell_descriptor(shell={"block": []}))
    h.add_policy(policy(shell={"unlisted": "deny"}))
    denied = (await h.run(call(h, "echo hello")))["status"]
    assert denied["state"] == "Denied" and "git status" in denied["message"]

    h2 = sandboxed()
    h2.publish(shell_descriptor(shell={"block": []}))
    listed = (await h2.run(call(h2, "timeout 30 git status")))["status"]
    assert listed["state"] == "Observed" and listed["effectiveClass"] == "sandbox"


async def test_the_block_list_still_decides_first() -> None:
    h = sandboxed()
    h.publish(shell_descriptor(shell={"allow": ["rm"]}))
    stored = await h.run(call(h, "env -vS'rm -rf /workspace'"))
    status = stored["status"]
    assert (status["state"], status["deniedStage"]) == ("Denied", "classification")
    assert "block list" in status["message"] and "rm -rf" in status["message"]
