"""Attack pass 7 on issue 29's warm sandboxes: an attempt's workspace pod is one sandbox
profile's, a namespace's share of workspaces holds when many attempts start at once, and
what a tool writes on its run script's stderr never settles its call."""

from __future__ import annotations

import asyncio
from typing import Any

from tests.unit.sandbox.test_warm_settlement import (
    FakeWarmKube,
    call,
    existing_workspace,
    ran,
    warm,
)
from tooladapter.enums import InvocationState
from tooladapter.model import ToolDescriptorSpec
from tooladapter.sandbox.warm import (
    LABEL_STATE,
    RUN_SCRIPT,
    STARTED_MARK,
    STATE_ATTEMPT,
    not_started,
)


def gvisor_tool() -> ToolDescriptorSpec:
    return ToolDescriptorSpec.model_validate(
        {
            "toolId": "sh-gvisor",
            "version": "1.0.0",
            "kind": "shell",
            "sideEffectClass": "sandbox",
            "sandbox": {"workspace": "attempt", "kind": "GVisor"},
        }
    )


def test_a_call_of_another_profile_never_runs_in_the_attempts_workspace_pod() -> None:
    # The attempt's workspace pod was made for a runc tool; a GVisor tool's call with the
    # same attemptId must not run in it (nor a tool with other limits or image).
    kube = FakeWarmKube()
    existing_workspace(kube)
    kube.answers = [ran(b"5.10.0-node\n", 0)]
    outcome = asyncio.run(warm(kube).run(call(gvisor_tool())))
    assert outcome is not None and outcome.state == InvocationState.FAILED
    assert "another sandbox profile" in outcome.message
    assert kube.execs == []
    assert "ws-1" in kube.pods  # the workspace itself is left as it was


class SlowWarmKube(FakeWarmKube):
    """The API server answers after other calls had their turn, as a real one does."""

    async def list_pods(self, namespace: str | None, selector: str) -> list[dict[str, Any]]:
        await asyncio.sleep(0)
        return await super().list_pods(namespace, selector)

    async def create_pod(self, pod: dict[str, Any]) -> dict[str, Any]:
        await asyncio.sleep(0)
        return await super().create_pod(pod)


def test_first_calls_of_many_attempts_at_once_hold_at_most_the_namespaces_share() -> None:
    kube = SlowWarmKube()
    sandboxes = warm(kube, workspaces_per_namespace=2)

    async def main() -> list[object]:
        kube.answers = [ran(b"", 0) for _ in range(6)]
        calls = [
            sandboxes.run(
                call(ToolDescriptorSpec.model_validate(_tool()), attempt=f"x{i}", uid=f"uid-{i}")
            )
            for i in range(6)
        ]
        return list(await asyncio.gather(*calls))

    outcomes = asyncio.run(main())
    held = [
        p for p in kube.pods.values() if p["metadata"]["labels"].get(LABEL_STATE) == STATE_ATTEMPT
    ]
    assert len(held) <= 2, [p["metadata"]["name"] for p in held]
    assert sum(o.state == InvocationState.OBSERVED for o in outcomes) == 2  # type: ignore[attr-defined]


def _tool() -> dict[str, object]:
    return {
        "toolId": "sh",
        "version": "1.0.0",
        "kind": "shell",
        "sideEffectClass": "sandbox",
        "sandbox": {"workspace": "attempt"},
    }


def test_a_not_started_mark_the_tool_wrote_after_it_started_is_not_believed() -> None:
    assert not_started(b"tooladapter-not-started:1\n")
    assert not not_started(b"tooladapter-tool-started\ntooladapter-not-started:0\n")
    assert STARTED_MARK in RUN_SCRIPT
    # The mark is written before the tool is started, never after.
    assert RUN_SCRIPT.index(STARTED_MARK) < RUN_SCRIPT.index('exec "$@"')


def test_a_workspace_call_is_stopped_by_an_exec_of_its_own_whatever_its_run_reported() -> None:
    # The tool forged a clean report and killed the run script (exit 137): the stop that
    # follows, not the report, shows the end.
    kube = FakeWarmKube()
    existing_workspace(kube)
    kube.answers = [ran(b"", 137, left=0)]
    outcome = asyncio.run(warm(kube).run(call(tool_spec())))
    assert outcome is not None and kube.stops == 1
    assert "ws-1" in kube.pods


def test_a_stop_killed_before_its_end_deletes_the_workspace_whatever_it_reported() -> None:
    kube = FakeWarmKube()
    existing_workspace(kube)
    kube.answers = [ran(b"", 0, left=0)]
    kube.stop_answer = ran(b"", 137, left=0)  # a report, but no clean exit
    asyncio.run(warm(kube).run(call(tool_spec())))
    assert "ws-1" in kube.deleted and "ws-1" not in kube.pods


def tool_spec() -> ToolDescriptorSpec:
    return ToolDescriptorSpec.model_validate(_tool())
