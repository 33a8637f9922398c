"""Issue 39: before every call of an attempt, git configuration an earlier call left in the
workspace that runs commands is refused: the call ends Denied at `sandbox` naming it, from
Brokered, before Executing is written and before anything runs in the workspace pod; a
check that cannot be made ends the call Failed (nothing ran either)."""

from __future__ import annotations

from typing import Any

import pytest

from tests.unit.fake_cluster import FakeCluster, Harness, invocation, make_runtime, shell_descriptor
from tooladapter.enums import ToolKind
from tooladapter.executors import Call, Outcome
from tooladapter.executors.sandbox import SandboxExecutor
from tooladapter.executors.warm import WorkspaceCheck
from tooladapter.settings import Settings

pytestmark = [pytest.mark.timeout(10)]

PLANTED = "/workspace/repo/.git/config: core.fsmonitor (line 2)"


class FakeWarm:
    """Stands in for `WarmSandboxes`: the check answers `found`; a run is recorded."""

    def __init__(self, found: WorkspaceCheck) -> None:
        self.found = found
        self.checked: list[tuple[str, str, str]] = []
        self.ran: list[Call] = []

    async def check_workspace(self, namespace: str, caller: str, attempt_id: str) -> WorkspaceCheck:
        self.checked.append((namespace, caller, attempt_id))
        return self.found

    async def run(self, call: Call) -> Outcome | None:
        self.ran.append(call)
        return Outcome.observed(b"ran\n", exit_code=0)


def harness(found: WorkspaceCheck) -> tuple[Harness, FakeWarm]:
    cluster = FakeCluster()
    settings = Settings()
    executor = SandboxExecutor(cluster, settings)
    warm = FakeWarm(found)
    executor.warm = warm  # type: ignore[assignment]
    h = make_runtime(
        cluster,
        settings=settings,
        executors={ToolKind.SHELL: executor, ToolKind.CONTAINER: executor},
    )
    h.publish(
        shell_descriptor(
            sandbox={
                "workspace": "attempt",
                "resources": {"limits": {"cpu": "500m", "memory": "64Mi"}},
                "egress": {"allow": []},
            }
        )
    )
    h.cluster.grant(tools=["sh"], classes=["sandbox"])
    return h, warm


def stages(status: dict[str, Any]) -> list[tuple[str, str]]:
    return [(s["stage"], s["outcome"]) for s in status["stages"]]


async def test_planted_config_denies_the_call_at_sandbox_before_it_executes() -> None:
    h, warm = harness(WorkspaceCheck(checked=True, refused=f"refused: {PLANTED}"))
    body = h.submit(invocation("c-1", tool="sh", arguments={"command": "ls"}, attemptId="a1"))
    status = (await h.run(body))["status"]
    assert status["state"] == "Denied"
    assert status["deniedStage"] == "sandbox" and status["failureClass"] == "policy-denied"
    assert PLANTED in status["message"]
    assert warm.checked and warm.checked[0][2] == "a1"
    # Nothing ran, and the call never was Executing.
    assert warm.ran == [] and not status.get("execution")
    assert ("execute", "started") not in stages(status)
    assert ("sandbox", "denied") in stages(status)


async def test_a_check_that_cannot_be_made_fails_the_call_before_it_executes() -> None:
    h, warm = harness(WorkspaceCheck(unchecked="could not be checked (find: Permission denied)"))
    body = h.submit(invocation("c-2", tool="sh", arguments={"command": "ls"}, attemptId="a1"))
    status = (await h.run(body))["status"]
    assert status["state"] == "Failed" and status["failureClass"] == "transient"
    assert "could not be checked" in status["message"]
    assert warm.ran == [] and not status.get("execution")


async def test_a_clean_workspace_runs_the_call_and_says_it_was_checked() -> None:
    h, warm = harness(WorkspaceCheck(checked=True))
    body = h.submit(invocation("c-3", tool="sh", arguments={"command": "ls"}, attemptId="a1"))
    status = (await h.run(body))["status"]
    assert status["state"] == "Observed", status.get("message")
    assert len(warm.ran) == 1
    assert ("sandbox", "passed") in stages(status)


async def test_a_call_without_an_attempt_is_not_checked() -> None:
    h, warm = harness(WorkspaceCheck(checked=True, refused="never asked"))
    body = h.submit(invocation("c-4", tool="sh", arguments={"command": "ls"}))
    await h.run(body)
    assert warm.checked == []
