"""What a reviewer must know about a call that runs in an attempt's workspace.

An attempt's workspace carries files from one call to the next. Planted git and user
configuration never runs in a later call (`sandbox.gitconfig`, the per-call HOME), but a
project's own build files run code by design: `npm test` runs `package.json` scripts and
reads the project's `.npmrc`, `make` its Makefile, `dotnet build` its project files,
`python -m pytest` the project's modules. Whoever approves such a call approves whatever
earlier calls of the attempt wrote there, run with this call's egress and credentials:
the review view says so, beside the arguments.
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping
from typing import Any

#: Commands that run the project's own files by design (the first word, after any
#: `NAME=value` assignments), and what they run.
PROJECT_RUNNERS: Mapping[str, str] = {
    "npm": "package.json scripts and the project's .npmrc",
    "npx": "packages and scripts the project names",
    "yarn": "package.json scripts and the project's .yarnrc",
    "pnpm": "package.json scripts and the project's .npmrc",
    "node": "the project's JavaScript",
    "dotnet": "the project's build files (.csproj, Directory.Build.props, MSBuild targets)",
    "make": "the project's Makefile",
    "cmake": "the project's CMakeLists.txt",
    "mvn": "the project's pom.xml plugins",
    "gradle": "the project's build.gradle",
    "./gradlew": "the project's Gradle wrapper and build files",
    "cargo": "the project's build.rs and dependencies",
    "go": "the project's code (go generate, tests)",
    "python": "the project's modules (a /workspace module shadows the standard library's)",
    "python3": "the project's modules (a /workspace module shadows the standard library's)",
    "pytest": "the project's conftest.py and tests",
    "tox": "the project's tox.ini",
    "pip": "the project's setup files and build backends",
    "bundle": "the project's Gemfile",
    "rake": "the project's Rakefile",
    "sh": "a script from the workspace",
    "bash": "a script from the workspace",
}


def workspace_notes(arguments: Any, attempt_id: str | None) -> list[str]:
    """The notes for a call of an attempt whose command runs the project's own files; none
    for a call outside an attempt or a command that runs none."""
    if not attempt_id or not isinstance(arguments, Mapping):
        return []
    command = arguments.get("command")
    if not isinstance(command, str):
        return []
    try:
        words = shlex.split(command)
    except ValueError:
        return []
    while words and "=" in words[0] and not words[0].startswith("="):
        words = words[1:]
    if not words:
        return []
    first = words[0]
    runs = PROJECT_RUNNERS.get(first) or PROJECT_RUNNERS.get(first.rsplit("/", 1)[-1])
    if runs is None and first.startswith("./"):
        runs = "a program from the workspace"
    if runs is None:
        return []
    return [
        f"runs in attempt {attempt_id}'s workspace: {first!r} runs {runs}, as earlier calls "
        "of the attempt left them, with this call's egress and credentials"
    ]
