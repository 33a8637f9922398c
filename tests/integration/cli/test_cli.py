"""The `tooladapter` command line on the real cluster, run as its users run it: a process
with a kubeconfig holding only a ServiceAccount token (an agent, a reviewer)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client

from tests.integration.objects import Agent, descriptor, get, pretty, status_of
from tooladapter.devtools import Namespace, OperatorProcess, kubeconfig, token_for

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(420)]


class Cli:
    """`python -m tooladapter` as one ServiceAccount, in one namespace."""

    def __init__(self, tmp: Path, api: client.ApiClient, agent: Agent) -> None:
        admin = yaml.safe_load(Path(kubeconfig()).read_text())
        current = next(c for c in admin["contexts"] if c["name"] == admin["current-context"])
        cluster = next(c for c in admin["clusters"] if c["name"] == current["context"]["cluster"])
        token = token_for(api, agent.namespace, agent.name)
        self.user = agent.user
        self.path = tmp / f"{agent.name}.kubeconfig"
        self.path.write_text(
            yaml.safe_dump(
                {
                    "apiVersion": "v1",
                    "kind": "Config",
                    "clusters": [cluster],
                    "users": [{"name": agent.name, "user": {"token": token}}],
                    "contexts": [
                        {
                            "name": agent.name,
                            "context": {
                                "cluster": cluster["name"],
                                "user": agent.name,
                                "namespace": agent.namespace,
                            },
                        }
                    ],
                    "current-context": agent.name,
                }
            )
        )

    def __call__(
        self, *args: str, timeout: float = 180, env: dict[str, str] | None = None
    ) -> subprocess.CompletedProcess[str]:
        """`tooladapter ARGS` as this user; `env`: variables set on top (TOOLADAPTER_*)."""
        return subprocess.run(
            [sys.executable, "-m", "tooladapter", *args],
            env={**self.env(), **(env or {})},
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )

    def env(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("TOOLADAPTER_")}
        return {**env, "KUBECONFIG": str(self.path)}

    def complete(self, words: str) -> list[str]:
        """What bash completion offers for the last of `words` (click's protocol)."""
        done = subprocess.run(
            [sys.executable, "-m", "tooladapter"],
            env={
                **self.env(),
                "_TOOLADAPTER_COMPLETE": "bash_complete",
                "COMP_WORDS": words,
                "COMP_CWORD": str(len(words.split(" ")) - 1),
            },
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        return [line.split(",", 1)[1] for line in done.stdout.splitlines() if "," in line]

    def json(self, *args: str, code: int = 0) -> Any:
        done = self(*args, "-o", "json")
        assert done.returncode == code, explain(done)
        return json.loads(done.stdout)


def explain(done: subprocess.CompletedProcess[str]) -> str:
    return f"exit {done.returncode}\nstdout:\n{done.stdout[-3000:]}\nstderr:\n{done.stderr[-3000:]}"


def native_tool(api: client.ApiClient, namespace: str, tool: str, cls: str) -> None:
    descriptor(
        api, namespace, tool, kind="native", native={"name": "list-tools"}, side_effect_class=cls
    )


def test_an_agent_lists_its_tools_invokes_one_to_observed_and_verifies_the_receipt(
    api: client.ApiClient,
    ns: Namespace,
    agent: Agent,
    operator: OperatorProcess,
    tmp_path: Path,
) -> None:
    native_tool(api, ns.name, "listing", "read")
    native_tool(api, ns.name, "hidden", "read")
    agent.grant(["listing"], ["read"])
    cli = Cli(tmp_path, api, agent)

    tools = cli.json("tools")
    assert [t["toolId"] for t in tools] == ["listing"], tools
    assert tools[0]["classGranted"] is True
    assert cli.complete("tooladapter invoke li") == ["listing"]

    done = cli("invoke", "listing", "--run-id", "run-1", "-o", "json")
    assert done.returncode == 0, explain(done)
    outcome = json.loads(done.stdout)
    assert outcome["state"] == "Observed" and outcome["runId"] == "run-1", outcome
    assert "validation" in done.stderr and "passed" in done.stderr, done.stderr
    ref = outcome["receiptRef"]
    assert ref.startswith("sha256:")
    assert outcome["result"]["content"], outcome

    rows = cli.json("receipts", "--run", "run-1")
    assert [(r["name"], r["receiptRef"]) for r in rows] == [(outcome["name"], ref)], rows
    assert rows[0]["receipt"]["state"] == "Observed"
    assert cli("receipts", "--run", "no-such-run").returncode == 8

    store = str(operator.artifacts)
    verified = cli.json("receipt", "verify", ref, "--artifact-dir", store)
    assert verified["verified"] is True and verified["match"] == "bytes", verified

    # A copy under another name is checked against the invocation it names.
    digest = ref.removeprefix("sha256:")
    copy = tmp_path / "receipt.json"
    shutil.copy(operator.artifacts / "sha256" / digest[:2] / digest, copy)
    assert cli("receipt", "verify", str(copy)).returncode == 0
    # One changed byte (in the signed payload): the reference no longer matches.
    tampered = tmp_path / "tampered.json"
    tampered.write_bytes(copy.read_bytes().replace(b'"payload":"', b'"payload":"A', 1))
    mismatch = cli("receipt", "verify", str(tampered), "--ref", ref)
    assert mismatch.returncode == 10, explain(mismatch)
    # Re-encoded (the same JSON, pretty-printed) still verifies, and says so.
    pretty_copy = tmp_path / "pretty.json"
    pretty_copy.write_text(json.dumps(json.loads(copy.read_bytes()), indent=2))
    again = cli.json("receipt", "verify", str(pretty_copy), "--ref", ref)
    assert again["verified"] is True and again["match"] == "canonical", again

    # Without a store, the summary from the invocation's status.
    summary = cli.json("receipt", "get", ref)
    assert summary["name"] == outcome["name"] and summary["receiptRef"] == ref, summary
    full = cli.json("receipt", "get", ref, "--artifact-dir", store)
    assert full["invocationName"] == outcome["name"] and full["runId"] == "run-1", full


def test_a_reviewer_sees_the_arguments_and_what_changed_and_approves_a_waiting_call(
    api: client.ApiClient,
    ns: Namespace,
    agent: Agent,
    tmp_path: Path,
) -> None:
    native_tool(api, ns.name, "propose", "shared-write")
    agent.grant(["propose"], ["shared-write"])
    reviewer = Agent.create(api, ns.name, "reviewer", role="tooladapter-reviewer")
    agent_cli, reviewer_cli = Cli(tmp_path, api, agent), Cli(tmp_path, api, reviewer)

    # The agent follows its call while it waits; the reviewer approves it meanwhile.
    follower = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "tooladapter",
            "invoke",
            "propose",
            "--arg",
            "branch=a",
            "--name",
            "call-a",
            "--timeout",
            "240",
        ],
        env=agent_cli.env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        agent.wait("call-a", states={"AwaitingApproval", "Denied"}, timeout=120)
        waiting = status_of(get(api, ns.name, "toolinvocations", "call-a"))
        assert waiting["state"] == "AwaitingApproval", pretty(waiting)

        assert reviewer_cli.complete("tooladapter approve ") == ["call-a"]
        pending = reviewer_cli.json("approvals")
        assert [p["name"] for p in pending] == ["call-a"], pending
        assert pending[0]["arguments"] == {"branch": "a"}
        assert pending[0]["canonicalArguments"] == '{"branch":"a"}'
        assert pending[0]["requestHash"] == waiting["requestHash"]
        assert pending[0]["descriptorDigest"] == waiting["descriptorDigest"]
        assert pending[0]["effectiveClass"] == "shared-write"
        assert pending[0]["lastApproved"] is None

        approved = reviewer_cli("approve", "call-a", "--comment", "looks right")
        assert approved.returncode == 0, explain(approved)
        assert "bound" in approved.stdout, explain(approved)
        out, err = follower.communicate(timeout=240)
    finally:
        if follower.poll() is None:
            follower.kill()
            follower.communicate()
    assert follower.returncode == 0, f"exit {follower.returncode}\n{out}\n{err}"
    assert "waiting for an approval" in err and "Observed" in err, err
    done = status_of(get(api, ns.name, "toolinvocations", "call-a"))
    assert done["state"] == "Observed" and done["approval"]["reviewer"] == reviewer.user

    # The next call of the same tool by the same caller: the reviewer sees what changed.
    created = agent_cli(
        "invoke", "propose", "--arg", "branch=b", "--arg", "force:=true", "--no-wait"
    )
    assert created.returncode == 0, explain(created)
    second = created.stdout.strip()
    agent.wait(second, states={"AwaitingApproval"}, timeout=120)
    (view,) = reviewer_cli.json("approvals")
    assert view["name"] == second and view["lastApproved"]["name"] == "call-a", view
    assert view["changes"] == [
        {"kind": "changed", "path": "/branch", "before": "a", "after": "b"},
        {"kind": "added", "path": "/force", "after": True},
    ], view
    shown = reviewer_cli("approvals")
    assert shown.returncode == 0 and '~ /branch: "a" -> "b"' in shown.stdout, explain(shown)

    # Someone without the reviewer role may not approve: the API server says no.
    outsider = Cli(tmp_path, api, Agent.create(api, ns.name, "outsider"))
    forbidden = outsider("approve", second)
    assert forbidden.returncode == 9, explain(forbidden)
    # The caller may not approve its own call (refused before anything is created).
    assert agent_cli("approve", second).returncode == 9
    assert reviewer_cli("approve", "no-such-call").returncode == 8

    rejected = reviewer_cli("reject", second, "--comment", "not now")
    assert rejected.returncode == 0, explain(rejected)
    final = status_of(agent.wait(second, timeout=60))
    assert final["state"] == "Denied" and "not now" in final["message"], pretty(final)


def test_exit_codes_for_a_denied_call_an_unknown_tool_and_bad_usage(
    api: client.ApiClient,
    ns: Namespace,
    agent: Agent,
    tmp_path: Path,
) -> None:
    native_tool(api, ns.name, "secret-tool", "read")  # published, never granted
    cli = Cli(tmp_path, api, agent)

    denied = cli("invoke", "secret-tool", "-o", "json")
    assert denied.returncode == 3, explain(denied)
    outcome = json.loads(denied.stdout)
    assert outcome["state"] == "Denied" and outcome["deniedStage"] == "permission", outcome

    assert cli("invoke", "no-such-tool").returncode == 8
    assert cli("invoke", "secret-tool", "--arg", "novalue").returncode == 2
    assert cli("describe", "no-such-tool").returncode == 8
    described = cli.json("describe", "secret-tool")
    assert described["mayInvoke"] is False and described["versions"][0]["kind"] == "native"
