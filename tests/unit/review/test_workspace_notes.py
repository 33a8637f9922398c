"""A gated call of an attempt whose command runs the project's own files (`npm test`,
`dotnet build`, `make`, ...) says so in the reviewer's view: what earlier calls of the
attempt wrote there runs with this call's egress and credentials (issue 39)."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from tests.unit.fake_cluster import shell_descriptor
from tests.unit.review.test_credentials_shown import digest_of
from tooladapter.review.texts import pending_view
from tooladapter.review.workspace import workspace_notes


def attempt_tool(workspace: str = "attempt") -> dict[str, Any]:
    body = shell_descriptor("build", shell={"allow": []})
    body["spec"]["sandbox"]["workspace"] = workspace
    return body


def waiting(body: dict[str, Any], command: str, attempt: str | None = "a1") -> dict[str, Any]:
    spec: dict[str, Any] = {
        "tool": {"id": body["spec"]["toolId"], "version": body["spec"]["version"]},
        "arguments": {"command": command},
        "caller": {"kind": "agent", "name": "agent-1"},
    }
    if attempt is not None:
        spec["attemptId"] = attempt
    return {
        "metadata": {"name": "c", "namespace": "team-a", "uid": "u"},
        "spec": spec,
        "status": {
            "state": "AwaitingApproval",
            "requestHash": "sha256:" + "1" * 64,
            "descriptorDigest": digest_of(body),
        },
    }


@pytest.mark.parametrize(
    ("command", "runs"),
    [
        ("npm test", ".npmrc"),
        ("CI=1 npm run build", "package.json"),
        ("dotnet build", "Directory.Build.props"),
        ("make check", "Makefile"),
        ("/usr/bin/python3 -m pytest", "standard library"),
        ("./configure", "a program from the workspace"),
    ],
)
def test_a_command_that_runs_the_projects_files_is_said_so(command: str, runs: str) -> None:
    (note,) = workspace_notes({"command": command}, "a1")
    assert "attempt a1" in note and runs in note and "egress and credentials" in note


@pytest.mark.parametrize("command", ["git status", "ls -la", "cat README.md", "'unclosed"])
def test_a_command_that_runs_no_project_file_gets_no_note(command: str) -> None:
    assert workspace_notes({"command": command}, "a1") == []


def test_no_note_outside_an_attempt() -> None:
    assert workspace_notes({"command": "npm test"}, None) == []


def test_the_pending_view_carries_the_note_beside_the_argument_warnings() -> None:
    body = attempt_tool()
    view = pending_view(waiting(body, "npm test"), None, [body])
    assert any("npm" in w and "attempt a1" in w for w in view["warnings"]), view["warnings"]
    # The arguments are still shown whole.
    assert view["arguments"] == {"command": "npm test"}


def test_a_tool_that_keeps_no_attempt_workspace_gets_no_note() -> None:
    body = attempt_tool("call")
    view = pending_view(waiting(body, "npm test"), None, [body])
    assert not any("attempt" in w for w in view["warnings"]), view["warnings"]


def test_an_unknown_descriptor_keeps_the_note() -> None:
    body = attempt_tool("call")
    changed = copy.deepcopy(body)
    changed["spec"]["timeoutSeconds"] = 61  # changed after the call was validated
    view = pending_view(waiting(body, "npm test"), None, [changed])
    assert any("attempt a1" in w for w in view["warnings"]), view["warnings"]
