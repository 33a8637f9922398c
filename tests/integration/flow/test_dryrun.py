"""Issue 16 (B): dry runs, run receipts and kubectl as a new user meets it, on the real
cluster: a dry run decides what the real call decides, a run's calls are one field
selector away, `kubectl wait` and `kubectl explain` work, events come from tooladapter."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from tests.integration.objects import Agent, create, descriptor, get, pretty, status_of
from tooladapter.devtools import Namespace, OperatorProcess, wait_for

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(300)]

ROOT = Path(__file__).resolve().parents[3]
PATH_SCHEMA = {
    "type": "object",
    "properties": {"path": {"type": "string"}},
    "required": ["path"],
}
WAIT = "AwaitingApproval"


def kubectl(*args: str) -> str:
    binary = os.environ.get("KUBECTL") or shutil.which("kubectl") or "kubectl"
    done = subprocess.run([binary, *args], capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, f"kubectl {' '.join(args)}:\n{done.stdout}{done.stderr}"
    return done.stdout


def native(api: client.ApiClient, namespace: str, tool_id: str, cls: str = "read") -> None:
    descriptor(
        api,
        namespace,
        tool_id,
        kind="native",
        side_effect_class=cls,
        native={"name": "list-tools"},
        inputSchema=PATH_SCHEMA,
    )


def tool_policy(api: client.ApiClient, namespace: str, name: str, spec: dict[str, Any]) -> None:
    create(
        api,
        namespace,
        "toolpolicies",
        {"kind": "ToolPolicy", "metadata": {"name": name}, "spec": spec},
    )
    wait_for(
        lambda: status_of(get(api, namespace, "toolpolicies", name)).get("valid"),
        timeout=30,
        what=f"policy {name} valid",
    )


def preview_agrees(
    shown: dict[str, Any], real: dict[str, Any], *, verdict: str, stage: str | None
) -> None:
    """A preview (`status.preview` or the REST answer) says what the real call's status
    says: the verdict, the stage that denied it and why, or the class and policy decision
    it passed with, and the request hash."""
    assert shown["verdict"] == verdict, pretty(shown)
    assert shown.get("deniedStage") == real.get("deniedStage") == stage, pretty([shown, real])
    assert shown.get("failureClass") == real.get("failureClass")
    if stage is not None:
        assert shown["message"] == real["message"]
    else:
        assert shown["classification"]["effective"] == real["effectiveClass"]
        assert shown["policy"]["decisionId"] == real["policyDecisionId"]
    if real.get("requestHash"):
        assert shown["validation"]["requestHash"] == real["requestHash"]


#: (case, tool, arguments, where the real call stops, the preview's verdict, denied stage)
CASES: list[tuple[str, str, dict[str, Any], str, str, str | None]] = [
    ("allowed", "lister", {"path": "/data"}, "Observed", "would-run", None),
    ("schema-invalid", "lister", {"path": 7}, "Denied", "would-be-denied", "validation"),
    ("policy-denied", "banned", {"path": "/x"}, "Denied", "would-be-denied", "policy"),
    ("permission-denied", "ungranted", {"path": "/x"}, "Denied", "would-be-denied", "permission"),
    ("gated-by-class", "writer", {"path": "/x"}, WAIT, "would-await-approval", None),
    ("gated-by-policy", "lister", {"path": "/etc/x"}, WAIT, "would-await-approval", None),
]  # fmt: skip


def test_a_dry_run_decides_what_the_real_call_decides(
    api: client.ApiClient, ns: Namespace, agent: Agent, operator: OperatorProcess
) -> None:
    native(api, ns.name, "lister")
    native(api, ns.name, "banned")
    native(api, ns.name, "ungranted")
    native(api, ns.name, "writer", "shared-write")
    tool_policy(api, ns.name, "no-banned", {"tools": {"deny": [{"id": "banned", "reason": "no"}]}})
    tool_policy(
        api,
        ns.name,
        "etc-needs-review",
        {
            "conditions": [
                {
                    "path": "/path",
                    "operator": "matches",
                    "value": "^/etc/",
                    "effect": "requireApproval",
                }
            ]
        },
    )
    agent.grant(["lister", "banned", "writer"], ["read", "shared-write"])

    calls = {}
    for case, tool, arguments, *_ in CASES:
        calls[case] = (
            agent.invoke(tool, arguments, name=f"dry-{case}", dryRun=True, runId="dry"),
            agent.invoke(tool, arguments, name=f"real-{case}", runId="real"),
        )
    for case, _tool, _arguments, state, verdict, stage in CASES:
        dry_name, real_name = calls[case]
        dry = status_of(agent.wait(dry_name))
        real = status_of(agent.wait(real_name, states={WAIT, state, "Denied", "Failed"}))
        shown = dry["preview"]
        assert (dry["state"], real["state"]) == ("Previewed", state), pretty([dry, real])
        preview_agrees(shown, real, verdict=verdict, stage=stage)
        # Nothing ran, nothing was stored: no stages, no receipt.
        assert not dry.get("stages") and not dry.get("receiptRef"), pretty(dry)


def test_run_receipts_conditions_explain_and_events_with_kubectl(
    api: client.ApiClient, ns: Namespace, agent: Agent, operator: OperatorProcess
) -> None:
    native(api, ns.name, "lister")
    agent.grant(["lister"], ["read"])
    first = agent.invoke("lister", {"path": "/a"}, runId="run-a")
    second = agent.invoke("lister", {"path": "/b"}, runId="run-a", dryRun=True)
    other = agent.invoke("lister", {"path": "/c"}, runId="run-b")
    for name in (first, second, other):
        agent.wait(name)

    # `kubectl wait` on the Finished condition (any terminal state, a dry run's too).
    kubectl("wait", "-n", ns.name, "--for=condition=Finished", f"ti/{first}", f"ti/{second}",
            "--timeout=60s")  # fmt: skip
    kubectl("wait", "-n", ns.name, "--for=condition=Succeeded", f"ti/{first}", "--timeout=60s")

    def names(selector: str) -> set[str]:
        out = kubectl("get", "ti", "-n", ns.name, "--field-selector", selector, "-o", "name")
        return {line.split("/", 1)[1] for line in out.split()}

    assert names("spec.runId=run-a") == {first, second}
    assert names("spec.runId=run-b") == {other}
    assert names("status.state=Previewed") == {second}
    assert names("spec.tool.id=lister,status.state=Observed") == {first, other}
    assert names(f"spec.caller.name={agent.user}") == {first, second, other}

    table = kubectl("get", "ti", "-n", ns.name, second)
    assert "MESSAGE" in table.splitlines()[0] and "dry run, would run" in table
    explained = kubectl("explain", "toolinvocation.spec.dryRun")
    assert "Evaluate the call without executing it" in explained
    for path in ("toolinvocation.spec", "toolinvocation.status", "toolinvocation.status.preview"):
        assert "<no description>" not in kubectl("explain", path), path

    events = json.loads(
        kubectl(
            "get",
            "events",
            "-n",
            ns.name,
            "--field-selector",
            f"involvedObject.name={second}",
            "-o",
            "json",
        )
    )["items"]
    previewed = [e for e in events if e["reason"] == "ToolInvocationPreviewed"]
    assert previewed, pretty(events)
    assert {e["source"]["component"] for e in previewed} == {"tooladapter"}
    assert {e["reportingComponent"] for e in previewed} == {"tooladapter"}
