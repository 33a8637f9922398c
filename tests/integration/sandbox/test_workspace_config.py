"""Issue 39: an attempt's workspace is data, never a later call's configuration, on the
real cluster, as an agent.

An earlier call of an attempt plants git configuration that runs a command (a
`~/.gitconfig`-style file in /workspace, an XDG one, a repository's `.git/config`, a hook);
a later call of the same attempt runs `git status` in the repository. Either the later call
is Denied naming the file and key before its tool starts, or git runs without reading the
planted file: the marker the planted command would write never exists.

This module runs its own operator (no pools) serving only its own namespaces.
"""

from __future__ import annotations

import base64
import subprocess
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client

from tests.integration.objects import Agent, descriptor, pretty, status_of
from tooladapter.devtools import SESSION, Namespace, OperatorProcess

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(600)]

PREFIX = f"{SESSION}wc"
SCRIPT_RUNNER = (
    'sed -n \'s|.*"script":"\\([A-Za-z0-9+/=]*\\)".*|\\1|p\' "$TOOLADAPTER_ARGUMENTS" '
    "| base64 -d | sh"
)
#: A repository with one commit: `git status` then refreshes its index, which is when git
#: asks `core.fsmonitor`.
REPO = (
    "set -e; mkdir -p /workspace/repo; cd /workspace/repo; git init -q .; echo x > f; "
    "git add f; git -c user.name=a -c user.email=a@example.test commit -q -m one; cd /workspace; "
)
#: User-level config an earlier call writes where HOME used to be (and XDG's place under it).
PLANT_USER = (
    "printf '[core]\\n\\tpager = touch /workspace/pwned-pager\\n"
    "\\tfsmonitor = touch /workspace/pwned-global\\n' > /workspace/.gitconfig; "
    "mkdir -p /workspace/.config/git; cp /workspace/.gitconfig /workspace/.config/git/config; "
    'touch "$HOME/left-in-home" /dev/shm/left-in-shm; echo "home=$HOME tmp=$TMPDIR"; '
)
STATUS = "git -C /workspace/repo status --short; git -C /workspace/repo log --oneline; echo ran"


@pytest.fixture(scope="module")
def operator(tmp_path_factory: pytest.TempPathFactory) -> Iterator[OperatorProcess]:
    process = OperatorProcess(
        tmp_path_factory.mktemp("wc-operator"),
        {
            "TOOLADAPTER_NAMESPACES": f"{PREFIX}-*",
            "TOOLADAPTER_WORKSPACE_SIZE": "64Mi",
            "TOOLADAPTER_WARM_POOL_SIZE": "0",
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


def script_agent(api: client.ApiClient, namespace: str, tool_id: str) -> Agent:
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
    agent = Agent.create(api, namespace, "mallory")
    agent.grant([tool_id], ["sandbox"])
    return agent


def run(agent: Agent, tool: str, script: str, attempt: str) -> dict[str, Any]:
    encoded = base64.b64encode(script.encode()).decode()
    name = agent.invoke(tool, {"script": encoded}, attemptId=attempt)
    return status_of(agent.wait(name, timeout=180))


def listing(api: client.ApiClient, namespace: str, pod: str) -> str:
    """What the workspace holds, read by the platform (not a call)."""
    done = subprocess.run(
        ["kubectl", "exec", "-n", namespace, pod, "-c", "tool", "--", "ls", "-A", "/workspace"],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    return done.stdout


def explain(status: dict[str, Any], operator: OperatorProcess) -> str:
    return f"{pretty(status)}\n--- operator log ---\n{operator.tail(60)}"


def test_user_config_planted_in_the_workspace_is_never_read_by_a_later_call(
    api: client.ApiClient, wns: Namespace, operator: OperatorProcess
) -> None:
    agent = script_agent(api, wns.name, "git-user")
    planted = run(agent, "git-user", REPO + PLANT_USER, "u")
    assert planted["state"] == "Observed", explain(planted, operator)
    assert not planted["result"].get("isError"), explain(planted, operator)
    # HOME and TMPDIR were never the workspace.
    assert "home=/home/sandbox tmp=/home/sandbox" in planted["result"]["content"]
    later = run(agent, "git-user", f'{STATUS}; ls -A "$HOME" /dev/shm', "u")
    assert later["state"] == "Observed", explain(later, operator)
    shown = str(later["result"]["content"])
    assert "one" in shown and "ran" in shown, explain(later, operator)
    # Nothing of the earlier call's HOME or shared memory is left for the later one.
    assert "left-in-home" not in shown and "left-in-shm" not in shown, shown
    pod = later["sandboxLease"]["workspace"]["id"]
    assert later["sandboxLease"]["workspace"]["fresh"] is False
    files = listing(api, wns.name, pod)
    assert ".gitconfig" in files and "repo" in files, files
    assert "pwned" not in files, files

    # The planted file is one git would act on when it is read: the same status with it
    # named as the global config writes the marker (so the test above could fail).
    control = run(
        agent, "git-user", f"GIT_CONFIG_GLOBAL=/workspace/.gitconfig {STATUS}; ls /workspace", "u"
    )
    assert control["state"] == "Observed", explain(control, operator)
    assert "pwned-global" in listing(api, wns.name, pod), explain(control, operator)


def test_repository_config_that_runs_a_command_denies_the_next_call_before_it_runs(
    api: client.ApiClient, wns: Namespace, operator: OperatorProcess
) -> None:
    agent = script_agent(api, wns.name, "git-repo")
    plant = (
        REPO
        + "git -C /workspace/repo config core.fsmonitor 'touch /workspace/pwned-fsmonitor'; "
        + "printf '#!/bin/sh\\ntouch /workspace/pwned-hook\\n' > repo/.git/hooks/post-checkout; "
        + "chmod +x repo/.git/hooks/post-checkout; echo planted"
    )
    planted = run(agent, "git-repo", plant, "r")
    assert planted["state"] == "Observed", explain(planted, operator)
    assert "planted" in planted["result"]["content"], explain(planted, operator)
    pod = planted["sandboxLease"]["workspace"]["id"]

    later = run(agent, "git-repo", f"{STATUS}; git -C /workspace/repo checkout -q -b x", "r")
    assert later["state"] == "Denied", explain(later, operator)
    assert later["deniedStage"] == "sandbox" and later["failureClass"] == "policy-denied"
    message = str(later["message"])
    assert "/workspace/repo/.git/config: core.fsmonitor (line" in message, message
    assert "/workspace/repo/.git/hooks/post-checkout: an executable hook" in message, message
    # Denied before the tool: no execution was recorded, and nothing the config names ran.
    assert not later.get("execution"), explain(later, operator)
    files = listing(api, wns.name, pod)
    assert "repo" in files and "pwned" not in files, files

    # Every later call of the attempt meets the same refusal: the workspace serves no
    # call while it holds the config.
    again = run(agent, "git-repo", "echo harmless", "r")
    assert again["state"] == "Denied", explain(again, operator)
    assert "pwned" not in listing(api, wns.name, pod)
