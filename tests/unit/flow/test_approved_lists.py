"""What a reviewer approved stays what runs: a gated call's shell and egress lists are pinned
when its approval is asked for, and the re-check denies the call when a reloaded setting
widened them before it acted."""

from __future__ import annotations

import asyncio

from tests.unit.fake_cluster import (
    FakeCluster,
    Harness,
    finished_job,
    invocation,
    make_runtime,
    pod_result,
    shell_descriptor,
)
from tooladapter.enums import InvocationState, ToolKind
from tooladapter.executors.sandbox import SandboxExecutor
from tooladapter.settings import Settings

EGRESS = "TOOLADAPTER_DEFAULT_EGRESS_ALLOW"


def gated_shell_call(*, block: list[str] | None = None) -> tuple[Harness, asyncio.Task[None]]:
    """A shell call on the default egress list that waits for an approval (its command is
    on no allow entry)."""
    cluster = FakeCluster()
    h = make_runtime(cluster, executors={ToolKind.SHELL: SandboxExecutor(cluster, Settings())})
    h.rt.live.apply({EGRESS: "github.com"})
    shell = {"allow": ["echo"], **({"block": block} if block is not None else {})}
    h.publish(
        shell_descriptor(
            sandbox={"resources": {"limits": {"cpu": "1", "memory": "64Mi"}}}, shell=shell
        )
    )
    h.cluster.grant(tools=["sh"], classes=["sandbox", "shared-write"])
    body = h.submit(invocation("sh-1", tool="sh", arguments={"command": "rm -r /workspace"}))
    h.cluster.script_job(body["metadata"]["uid"], finished_job(), outcome=pod_result(log=b"ok\n"))
    return h, h.start(body)


async def test_the_lists_in_force_are_pinned_when_the_approval_is_asked_for() -> None:
    h, task = gated_shell_call()
    await h.cluster.wait_for_state("sh-1", InvocationState.AWAITING_APPROVAL)
    pinned = h.cluster.invocation("sh-1")["status"]["approvedLists"]
    assert pinned["egressAllow"] == ["github.com"]
    assert pinned["shellAllow"] == ["echo"]
    assert "rm -rf" in pinned["shellBlock"]
    h.approve_waiting("sh-1")
    await asyncio.wait_for(task, 5)
    status = h.cluster.invocation("sh-1")["status"]
    assert status["state"] == "Observed", status
    assert status["approval"]["listsDigest"] == pinned["digest"]


async def test_a_default_egress_list_widened_after_the_approval_denies_the_call() -> None:
    h, task = gated_shell_call()
    await h.cluster.wait_for_state("sh-1", InvocationState.AWAITING_APPROVAL)

    h.rt.live.apply({EGRESS: "github.com,exfil.example"})
    h.approve_waiting("sh-1")
    await asyncio.wait_for(task, 5)

    status = h.cluster.invocation("sh-1")["status"]
    assert status["state"] == "Denied" and status["deniedStage"] == "approval", status
    assert "exfil.example" in status["message"]
    assert h.cluster.created == []  # no Secret, grant, NetworkPolicy or Job


async def test_a_narrower_egress_list_after_the_approval_runs_with_the_narrower_list() -> None:
    h, task = gated_shell_call()
    await h.cluster.wait_for_state("sh-1", InvocationState.AWAITING_APPROVAL)

    h.rt.live.apply({EGRESS: ""})
    h.approve_waiting("sh-1")
    await asyncio.wait_for(task, 5)

    status = h.cluster.invocation("sh-1")["status"]
    assert status["state"] == "Observed", status
    assert status["sandboxLease"]["limits"].get("egressAllow", []) == []


async def test_a_block_pattern_removed_after_the_approval_denies_the_call() -> None:
    h, task = gated_shell_call()
    await h.cluster.wait_for_state("sh-1", InvocationState.AWAITING_APPROVAL)

    h.rt.live.apply({EGRESS: "github.com", "TOOLADAPTER_SHELL_BLOCK_LIST": "terraform destroy"})
    h.approve_waiting("sh-1")
    await asyncio.wait_for(task, 5)

    status = h.cluster.invocation("sh-1")["status"]
    assert status["state"] == "Denied" and status["deniedStage"] == "approval", status
    assert "'rm -rf'" in status["message"]


async def test_a_block_list_entry_added_by_a_reload_blocks_the_next_call() -> None:
    h = make_runtime()
    h.rt.live.apply({"TOOLADAPTER_SHELL_BLOCK_LIST": "echo"})
    cluster = h.cluster
    h.publish(shell_descriptor())
    cluster.grant(tools=["sh"], classes=["sandbox"])
    done = await h.run(h.submit(invocation("sh-2", tool="sh", arguments={"command": "echo hi"})))
    assert done["status"]["state"] == "Denied", done["status"]
    assert "block" in done["status"]["message"]
