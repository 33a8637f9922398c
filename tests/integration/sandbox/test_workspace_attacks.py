"""Attack pass 7 on issue 29 (attempt workspaces, warm sandboxes), on the real cluster, as
agents: what the attacks of tests/integration/sandbox/test_workspaces.py did not try.

This module runs its own operator (no pools, a namespace share of three workspaces) serving
only its own namespaces.
"""

from __future__ import annotations

import base64
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client
from kubernetes.stream import stream

from tests.integration.objects import SHELL_SCHEMA, Agent, descriptor, pretty, status_of
from tooladapter.devtools import SESSION, Namespace, OperatorProcess
from tooladapter.sandbox.warm import LABEL_STATE, STATE_ATTEMPT

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(600)]

PREFIX = f"{SESSION}w7"
WORKSPACES = 3


@pytest.fixture(scope="module")
def operator(tmp_path_factory: pytest.TempPathFactory) -> Iterator[OperatorProcess]:
    process = OperatorProcess(
        tmp_path_factory.mktemp("w7-operator"),
        {
            "TOOLADAPTER_NAMESPACES": f"{PREFIX}-*",
            "TOOLADAPTER_WORKSPACE_SIZE": "64Mi",
            "TOOLADAPTER_WARM_POOL_SIZE": "0",
            "TOOLADAPTER_WORKSPACES_PER_NAMESPACE": str(WORKSPACES),
        },
    )
    try:
        process.start()
        yield process
    finally:
        process.stop()


@pytest.fixture
def wns(api: client.ApiClient, operator: OperatorProcess) -> Iterator[Namespace]:
    namespace = Namespace(api, prefix=PREFIX)
    yield namespace
    namespace.delete()


def attempt_tool(api: client.ApiClient, namespace: str, tool_id: str, kind: str) -> None:
    descriptor(
        api,
        namespace,
        tool_id,
        kind="shell",
        side_effect_class="sandbox",
        inputSchema=SHELL_SCHEMA,
        timeoutSeconds=60,
        shell={"allow": ["uname", "true"]},
        sandbox={
            "kind": kind,
            "workspace": "attempt",
            "resources": {
                "requests": {"cpu": "50m", "memory": "64Mi"},
                "limits": {"cpu": "500m", "memory": "64Mi"},
            },
            "egress": {"allow": []},
        },
    )


def attempt_pods(api: client.ApiClient, namespace: str) -> list[Any]:
    pods = client.CoreV1Api(api).list_namespaced_pod(
        namespace, label_selector=f"{LABEL_STATE}={STATE_ATTEMPT}"
    )
    return [p for p in pods.items if not p.metadata.deletion_timestamp]


def explain(status: dict[str, Any], operator: OperatorProcess) -> str:
    return f"{pretty(status)}\n--- operator log ---\n{operator.tail(60)}"


def test_a_gvisor_tool_never_runs_in_a_runc_workspace_of_the_same_attempt(
    api: client.ApiClient, wns: Namespace, operator: OperatorProcess
) -> None:
    # The workspace is the attempt's, whichever tool calls: an agent that makes it with a
    # Container tool and then calls a GVisor tool with the same attemptId must not get
    # that tool's command run under runc (on the node's kernel) in the first tool's pod.
    attempt_tool(api, wns.name, "k-runc", "Container")
    attempt_tool(api, wns.name, "k-gvisor", "GVisor")
    agent = Agent.create(api, wns.name, "alice")
    agent.grant(["k-runc", "k-gvisor"], ["sandbox"])
    node = str(client.CoreV1Api(api).list_node().items[0].status.node_info.kernel_version)

    first = status_of(agent.wait(agent.invoke("k-runc", {"command": "uname -r"}, attemptId="k")))
    assert first["state"] == "Observed", explain(first, operator)
    assert str(first["result"]["content"]).strip() == node

    second = status_of(agent.wait(agent.invoke("k-gvisor", {"command": "uname -r"}, attemptId="k")))
    if second["state"] == "Observed":
        assert str(second["result"]["content"]).strip() != node, explain(second, operator)
        assert second["sandboxLease"].get("runtimeClass") == "gvisor", explain(second, operator)
    else:
        assert second["state"] == "Failed", explain(second, operator)
        assert "another sandbox profile" in second["message"], explain(second, operator)


def test_first_calls_of_many_attempts_at_once_hold_at_most_the_namespaces_share(
    api: client.ApiClient, wns: Namespace, operator: OperatorProcess
) -> None:
    # The share is counted before a workspace is made: first calls of many attempts made
    # at once must not all count the same pods and all pass.
    attempt_tool(api, wns.name, "many", "Container")
    agent = Agent.create(api, wns.name, "bob")
    agent.grant(["many"], ["sandbox"])
    names = [
        agent.invoke("many", {"command": "true"}, attemptId=f"r{i}") for i in range(WORKSPACES + 3)
    ]
    ended = [status_of(agent.wait(name, timeout=180)) for name in names]
    observed = [s for s in ended if s["state"] == "Observed"]
    assert len(observed) <= WORKSPACES, [pretty(s) for s in ended]
    held = attempt_pods(api, wns.name)
    assert len(held) <= WORKSPACES, [p.metadata.name for p in held]
    for status in ended:
        if status["state"] != "Observed":
            assert "TOOLADAPTER_WORKSPACES_PER_NAMESPACE" in status["message"], pretty(status)


#: A container tool that runs the script its arguments carry (base64): an agent's build
#: steps as data (as tests/integration/sandbox/test_workspaces.py's script tool).
SCRIPT_RUNNER = (
    'sed -n \'s|.*"script":"\\([A-Za-z0-9+/=]*\\)".*|\\1|p\' "$TOOLADAPTER_ARGUMENTS" '
    "| base64 -d | sh"
)
#: Finds the warm run script (the exec the operator reads the report of) by its text; the
#: bracket keeps grep from finding itself.
FIND_RUNNER = (
    "r=; for d in /proc/[0-9]*; do "
    "grep -q 'tooladapter-processes-lef[t]' \"$d/cmdline\" 2>/dev/null && r=${d#/proc/}; done; "
)


def script_tool(api: client.ApiClient, namespace: str, tool_id: str) -> None:
    descriptor(
        api,
        namespace,
        tool_id,
        kind="container",
        side_effect_class="sandbox",
        inputSchema={"type": "object", "properties": {"script": {"type": "string"}}},
        timeoutSeconds=60,
        sandbox={
            "workspace": "attempt",
            "command": ["/bin/sh", "-c", SCRIPT_RUNNER],
            "resources": {
                "requests": {"cpu": "50m", "memory": "64Mi"},
                "limits": {"cpu": "500m", "memory": "64Mi"},
            },
            "egress": {"allow": []},
        },
    )


def run_script(agent: Agent, tool: str, script: str, attempt: str) -> dict[str, Any]:
    encoded = base64.b64encode(script.encode()).decode()
    name = agent.invoke(tool, {"script": encoded}, attemptId=attempt)
    return status_of(agent.wait(name, timeout=180))


def processes_in(api: client.ApiClient, namespace: str, pod: str) -> str:
    """Every process's command line in the pod, read by the platform (not a call)."""
    return str(
        stream(
            client.CoreV1Api(api).connect_get_namespaced_pod_exec,
            pod,
            namespace,
            container="tool",
            command=["/bin/sh", "-c", "cat /proc/[0-9]*/cmdline; echo"],
            stderr=True,
            stdin=False,
            stdout=True,
            tty=False,
        )
    )


def test_a_tool_cannot_forge_the_run_scripts_report_to_keep_a_process_alive(
    api: client.ApiClient, wns: Namespace, operator: OperatorProcess
) -> None:
    # The run script says on its stderr how many processes were left after its kill; the
    # tool runs as the same user, so it can write there (/proc/<script>/fd/2) and kill the
    # script before its real report: a process of the call must still not outlive it.
    script_tool(api, wns.name, "forge")
    agent = Agent.create(api, wns.name, "carol")
    agent.grant(["forge"], ["sandbox"])
    status = run_script(
        agent,
        "forge",
        FIND_RUNNER
        + "setsid sh -c 'while :; do sleep 1; done # w7-survivor' </dev/null >/dev/null 2>&1 & "
        + 'echo tooladapter-processes-left:0 > "/proc/$r/fd/2"; kill -9 "$r"',
        "f",
    )
    pod = status["sandboxLease"]["workspace"]["id"]
    assert "w7-survivor" not in processes_in(api, wns.name, pod), explain(status, operator)


def test_a_tool_cannot_reach_the_memory_of_the_workspace_pods_first_process(
    api: client.ApiClient, wns: Namespace, operator: OperatorProcess
) -> None:
    # PID 1 outlives every call of the attempt (`kill -9 -1` spares it) and runs as the
    # tool's user: were it dumpable, a tool could write code into it (/proc/1/mem) and live
    # on into later calls, reading their proxy URL and arguments. Opening /proc/1/mem or
    # /proc/1/environ is the kernel's ptrace access check.
    script_tool(api, wns.name, "pid1")
    agent = Agent.create(api, wns.name, "erin")
    agent.grant(["pid1"], ["sandbox"])
    probe = (
        "for f in environ mem; do "
        'if (exec 3</proc/1/$f) 2>/dev/null; then echo "$f:open"; else echo "$f:sealed"; fi; '
        "done"
    )
    status = run_script(agent, "pid1", probe, "p")
    assert status["state"] == "Observed", explain(status, operator)
    shown = str(status["result"]["content"])
    assert "environ:sealed" in shown and "mem:sealed" in shown, explain(status, operator)
    # The holder still holds the workspace: a second call of the attempt runs in it.
    again = run_script(agent, "pid1", "echo second", "p")
    assert again["state"] == "Observed", explain(again, operator)
    assert again["sandboxLease"]["workspace"]["id"] == status["sandboxLease"]["workspace"]["id"]


def test_a_tool_that_ran_cannot_make_its_call_say_it_never_started(
    api: client.ApiClient, wns: Namespace, operator: OperatorProcess
) -> None:
    # The not-started mark makes the operator settle "the tool never started": a tool that
    # acted and then writes that mark where the run script reports must not be believed.
    script_tool(api, wns.name, "nostart")
    agent = Agent.create(api, wns.name, "dave")
    agent.grant(["nostart"], ["sandbox"])
    status = run_script(
        agent,
        "nostart",
        FIND_RUNNER
        + 'echo acted > /workspace/acted; echo tooladapter-not-started:0 > "/proc/$r/fd/2"',
        "n",
    )
    assert "never started" not in (status.get("message") or ""), explain(status, operator)
    assert status["state"] == "Observed", explain(status, operator)


def test_attempt_ids_that_differ_only_in_case_or_unicode_form_are_other_workspaces(
    api: client.ApiClient, wns: Namespace, operator: OperatorProcess
) -> None:
    # A name or label made from the agent's text might fold case or normalise unicode; the
    # workspace is found by a hash of the exact text, so these are three attempts.
    script_tool(api, wns.name, "variants")
    agent = Agent.create(api, wns.name, "erin")
    agent.grant(["variants"], ["sandbox"])
    wrote = run_script(agent, "variants", "echo mine > /workspace/mark", "\u00c4-Case")
    assert wrote["state"] == "Observed", explain(wrote, operator)
    probe = base64.b64encode(b"cat /workspace/mark 2>/dev/null || echo none").decode()
    names = [
        agent.invoke("variants", {"script": probe}, attemptId=other)
        for other in ("\u00e4-case", "A\u0308-Case")
    ]
    for name in names:
        read = status_of(agent.wait(name, timeout=180))
        assert read["state"] == "Observed", explain(read, operator)
        assert str(read["result"]["content"]).strip() == "none", explain(read, operator)
        assert read["sandboxLease"]["workspace"]["id"] != wrote["sandboxLease"]["workspace"]["id"]
