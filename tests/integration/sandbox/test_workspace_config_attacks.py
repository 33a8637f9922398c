"""Issue 39, attack pass on the workspace-is-data half, on the real cluster, as an agent
(a container tool whose script the agent chooses: the widest allow-list there is).

An earlier call of an attempt plants what could run in a later one: git keys beyond the
first refused list (each shown running in the planting call itself, so the image's git
does act on it), and user config, shells' rc files and a `.git` file pointing at HOME.
The later call is Denied naming the keys, or runs without any of it taking effect.
"""

from __future__ import annotations

import base64
import subprocess
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import pytest
from kubernetes import client

from tests.integration.conftest import Configured
from tests.integration.objects import Agent, descriptor, pretty, status_of
from tooladapter.devtools import Namespace

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(600)]

SETTINGS = {"TOOLADAPTER_WORKSPACE_SIZE": "64Mi", "TOOLADAPTER_WARM_POOL_SIZE": "0"}
SCRIPT_RUNNER = (
    'sed -n \'s|.*"script":"\\([A-Za-z0-9+/=]*\\)".*|\\1|p\' "$TOOLADAPTER_ARGUMENTS" '
    "| base64 -d | sh"
)
REPO = (
    "set -e; mkdir -p /workspace/repo; cd /workspace/repo; git init -q .; echo x > f; "
    "git add f; git -c user.name=a -c user.email=a@example.test commit -q -m one; cd /workspace; "
)


@pytest.fixture
def setup(
    api: client.ApiClient, configured: Callable[[Mapping[str, str]], Configured]
) -> Iterator[tuple[Configured, Namespace]]:
    serving = configured(SETTINGS)
    namespace = serving.namespace(api)
    yield serving, namespace
    namespace.delete()


def script_agent(api: client.ApiClient, namespace: str) -> Agent:
    descriptor(
        api,
        namespace,
        "script",
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
    agent.grant(["script"], ["sandbox"])
    return agent


def run(agent: Agent, script: str, attempt: str) -> dict[str, Any]:
    encoded = base64.b64encode(script.encode()).decode()
    name = agent.invoke("script", {"script": encoded}, attemptId=attempt)
    return status_of(agent.wait(name, timeout=180))


def listing(namespace: str, pod: str, *paths: str) -> str:
    """What the pod holds, read by the platform (not a call)."""
    done = subprocess.run(
        ["kubectl", "exec", "-n", namespace, pod, "-c", "tool", "--", "ls", "-A", *paths],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    return done.stdout + done.stderr


def test_git_keys_beyond_the_first_list_that_run_a_program_deny_the_next_call(
    api: client.ApiClient, setup: tuple[Configured, Namespace]
) -> None:
    _serving, namespace = setup
    agent = script_agent(api, namespace.name)
    plant = (
        REPO
        + "printf '#!/bin/sh\\ntouch /workspace/ran-difftool\\n' > /workspace/dt.sh; "
        + "chmod +x /workspace/dt.sh; cd repo; "
        + "git config tar.tgz.command 'touch /workspace/ran-tar; cat'; "
        + "git config diff.tool vimdiff; git config difftool.vimdiff.path /workspace/dt.sh; "
        # Both run in this very call: the keys are live in this image's git.
        + "git archive --format=tgz HEAD > /dev/null; echo y >> f; git difftool -y; "
        # A repository whose HEAD is a dangling symlink (an unborn branch, the old symref
        # form): git still opens it, and its fsmonitor runs on status.
        + "cd /workspace; mkdir repo2; git -C repo2 init -q; "
        + "git -C repo2 config core.fsmonitor 'touch /workspace/ran-fsmonitor; echo'; "
        + "rm repo2/.git/HEAD; ln -s refs/heads/unborn repo2/.git/HEAD; "
        + "git -C repo2 status > /dev/null; "
        # A linked worktree whose common directory has no HEAD: git reads its config.
        + "git -C repo worktree add -q /workspace/wt; mv repo/.git/HEAD repo/.git/HEAD.moved; "
        + "git config -f repo/.git/config core.fsmonitor 'touch /workspace/ran-common; echo'; "
        + "git -C /workspace/wt status > /dev/null; "
        # A repository whose hooks directory is a symlink to one named otherwise.
        + "mkdir repo3 hookbox; git -C repo3 init -q; rm -rf repo3/.git/hooks; "
        + "ln -s /workspace/hookbox repo3/.git/hooks; "
        + "printf '#!/bin/sh\\ntouch /workspace/ran-hook\\n' > hookbox/post-commit; "
        + "chmod +x hookbox/post-commit; "
        + "git -C repo3 -c user.name=a -c user.email=a@example.test commit -q --allow-empty -m x; "
        + "ls; rm -f ran-tar ran-difftool ran-fsmonitor ran-common ran-hook; echo planted"
    )
    planted = run(agent, plant, "g")
    assert planted["state"] == "Observed", pretty(planted)
    shown = str(planted["result"]["content"])
    assert "ran-tar" in shown and "ran-difftool" in shown and "planted" in shown, shown
    assert "ran-fsmonitor" in shown and "ran-common" in shown and "ran-hook" in shown, shown
    pod = planted["sandboxLease"]["workspace"]["id"]

    later = run(
        agent,
        "cd /workspace/repo; git archive --format=tgz HEAD > /dev/null; git difftool -y; "
        "git -C /workspace/repo2 status; git -C /workspace/wt status",
        "g",
    )
    assert later["state"] == "Denied", pretty(later)
    message = str(later["message"])
    assert "/workspace/repo/.git/config: tar.tgz.command (line" in message, message
    assert "/workspace/repo/.git/config: difftool.vimdiff.path (line" in message, message
    assert "/workspace/repo2/.git/config: core.fsmonitor (line" in message, message
    assert "/workspace/repo/.git/config: core.fsmonitor (line" in message, message
    assert "/workspace/repo3/.git/hooks/post-commit: an executable hook" in message, message
    assert not later.get("execution"), pretty(later)
    files = listing(namespace.name, pod, "/workspace")
    assert "repo" in files and "ran-" not in files, files


def test_user_config_rc_files_and_a_git_file_into_home_never_act_in_a_later_call(
    api: client.ApiClient, setup: tuple[Configured, Namespace]
) -> None:
    _serving, namespace = setup
    agent = script_agent(api, namespace.name)
    curlrc = 'write-out = "CURLRC-READ\\n"\\n'
    rc = "touch /workspace/pwned-rc\\n"
    plant = (
        # curl's config where HOME is, where XDG is under it, and in the workspace.
        f'printf \'{curlrc}\' > "$HOME/.curlrc"; mkdir -p "$HOME/.config" /workspace/.config; '
        f'cp "$HOME/.curlrc" "$HOME/.config/curlrc"; cp "$HOME/.curlrc" /workspace/.curlrc; '
        "cp /workspace/.curlrc /workspace/.config/curlrc; "
        # The control: this call's own HOME is read.
        'echo "== control"; curl -sS -o /dev/null file:///etc/hostname; '
        # rc files of shells, a dotenv, a netrc and a wgetrc, in the workspace and HOME.
        f"for f in .profile .bashrc .shrc .env; do printf '{rc}' > /workspace/$f; "
        f"printf '{rc}' > \"$HOME/$f\"; done; "
        "printf 'machine evil.test login a password b\\n' > /workspace/.netrc; "
        "printf 'header = X-Planted: 1\\n' > /workspace/.wgetrc; "
        # A repository whose git directory lives in HOME, with a command in its config.
        'git init -q --bare "$HOME/evil.git"; '
        'git -C "$HOME/evil.git" config core.fsmonitor "touch /workspace/pwned-fsmonitor"; '
        'mkdir -p /workspace/r2; echo "gitdir: $HOME/evil.git" > /workspace/r2/.git; '
        "ln -s /home/sandbox /workspace/home-link; ln -s /tooladapter /workspace/ta-link; "
        # A remote whose URL runs a command (git refuses the ext transport by default).
        "git init -q /workspace/r3; "
        "git -C /workspace/r3 config remote.origin.url 'ext::sh -c touch% /workspace/pwned-ext'; "
        'echo "== preload"; echo /workspace/x.so > /etc/ld.so.preload 2>&1 || echo refused; '
        'echo "== end"'
    )
    planted = run(agent, plant, "u")
    assert planted["state"] == "Observed", pretty(planted)
    shown = str(planted["result"]["content"])
    assert "CURLRC-READ" in shown.split("== control", 1)[1], shown
    assert "refused" in shown.split("== preload", 1)[1], shown
    pod = planted["sandboxLease"]["workspace"]["id"]

    later = run(
        agent,
        'echo "== curl"; curl -sS -o /dev/null file:///etc/hostname; '
        'echo "== git"; git -C /workspace/r2 status 2>&1; '
        'echo "== ext"; git -C /workspace/r3 fetch -q origin 2>&1; '
        'echo "== shells"; sh -lc true; sh -c true; '
        'echo "== home"; ls -A "$HOME" /workspace/home-link/ /workspace/ta-link/; echo "== end"',
        "u",
    )
    assert later["state"] == "Observed", pretty(later)
    out = str(later["result"]["content"])
    assert "== end" in out and "CURLRC-READ" not in out, out
    # The git directory the `.git` file named went with the earlier call's HOME.
    assert "not a git repository" in out.split("== git", 1)[1], out
    assert "transport 'ext' not allowed" in out.split("== ext", 1)[1], out
    home = out.split("== home", 1)[1]
    assert ".curlrc" not in home and "evil.git" not in home and ".profile" not in home, home
    files = listing(namespace.name, pod, "/workspace")
    assert ".curlrc" in files and "r2" in files, files
    assert "pwned" not in files, files
