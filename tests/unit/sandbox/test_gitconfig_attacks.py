"""Attack pass (issue 39): repository config keys, beyond the first list, that make git
run a program an earlier call of the attempt planted. Each is shown to run with the git
on this machine, then shown refused by the check before every call."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from tests.unit.sandbox.test_gitconfig import SHELLS, scan_here
from tooladapter.sandbox.gitconfig import (
    FileKind,
    ScannedFile,
    findings,
    parse_config,
    parse_scan,
)

#: (planted config, the git command a later, allowed call runs, the key refused).
RUNS = [
    (
        '[tar "tgz"]\n\tcommand = "touch {mark}; cat"\n',
        ["archive", "--format=tgz", "HEAD"],
        "tar.tgz.command",
    ),
    (
        '[diff]\n\ttool = vimdiff\n[difftool "vimdiff"]\n\tpath = {script}\n',
        ["difftool", "-y", "HEAD~1"],
        "difftool.vimdiff.path",
    ),
]


def _git(repo: Path, *args: str) -> subprocess.CompletedProcess[bytes]:
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(repo.parent),
        "GIT_CONFIG_GLOBAL": "/dev/null",
        "GIT_CONFIG_NOSYSTEM": "1",
        "GIT_AUTHOR_NAME": "a",
        "GIT_AUTHOR_EMAIL": "a@example.test",
        "GIT_COMMITTER_NAME": "a",
        "GIT_COMMITTER_EMAIL": "a@example.test",
    }
    return subprocess.run(
        ["git", *args],
        cwd=repo,
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        check=False,
        timeout=30,
    )


def _repository(path: Path, *, commit: bool = True) -> Path:
    """A repository at `path` with a file `f`, committed unless `commit` is false."""
    path.mkdir()
    _git(path, "init", "-q")
    (path / "f").write_text("x\n")
    if commit:
        _git(path, "add", "f")
        _git(path, "commit", "-qm", "x")
    return path


def _refused(root: Path, shell: list[str]) -> set[str]:
    """What the scan of `root` (run by `shell`) refuses, each path relative to `root`."""
    result = scan_here(root, shell)
    assert result.returncode == 0, result.stderr
    files, whole = parse_scan(result.stdout)
    assert whole
    return {str(f)[len(str(root)) :] for f in findings(files)}


@pytest.mark.parametrize(("planted", "command", "key"), RUNS)
def test_a_planted_key_that_runs_a_program_is_refused(
    tmp_path: Path, planted: str, command: list[str], key: str
) -> None:
    repo = _repository(tmp_path / "repo")
    (repo / "f").write_text("two\n")
    _git(repo, "commit", "-qam", "two")
    mark = tmp_path / "ran"
    script = tmp_path / "tool.sh"
    script.write_text(f"#!/bin/sh\ntouch {mark}\n")
    script.chmod(0o755)
    text = planted.format(mark=mark, script=script)
    config = repo / ".git" / "config"
    config.write_text(config.read_text() + text)
    # The key does run a program: git is not the one to stop it.
    _git(repo, *command)
    assert mark.exists(), key
    found = findings([ScannedFile(FileKind.CONFIG, str(config), config.read_text())])
    assert [f.what.split(" ")[0] for f in found] == [key]


@pytest.mark.parametrize(
    "text",
    [
        "[interactive]\n\tdiffFilter = sh -c evil\n",
        '[man "foo"]\n\tcmd = evil\n',
        '[man "man"]\n\tpath = /workspace/evil\n',
        '[browser "b"]\n\tcmd = evil\n',
        '[browser "firefox"]\n\tpath = /workspace/evil\n',
        '[guitool "g"]\n\tcmd = evil\n',
        '[mergetool "vimdiff"]\n\tpath = /workspace/evil\n',
        "[sendemail]\n\ttoCmd = evil\n",
        "[sendemail]\n\tccCmd = evil\n",
        "[sendemail]\n\theaderCmd = evil\n",
        "[sendemail]\n\tsendmailCmd = evil\n",
        "[sendemail]\n\tsmtpServer = /workspace/evil\n",
        '[sendemail "id"]\n\tsmtpServer = /workspace/evil\n',
    ],
)
def test_more_keys_that_name_a_program_are_refused(text: str) -> None:
    (entry,) = parse_config(text)
    found = findings([ScannedFile(FileKind.CONFIG, "/workspace/r/.git/config", text)])
    assert [f.what for f in found] == [f"{entry.name} (line 2)"]


@pytest.mark.parametrize(
    "text",
    [
        # Data, not commands: what these name is read, never run.
        "[core]\n\tattributesFile = /workspace/attrs\n",
        "[init]\n\ttemplateDir = /workspace/tpl\n",
        "[http]\n\tsslCAInfo = /workspace/ca.pem\n",
        '[remote "origin"]\n\turl = https://git.example.test/r.git\n',
        "[color]\n\tui = always\n",
    ],
)
def test_keys_that_run_nothing_stay_allowed(text: str) -> None:
    assert findings([ScannedFile(FileKind.CONFIG, "/workspace/r/.git/config", text)]) == []


@pytest.mark.parametrize("shell", SHELLS, ids=lambda s: s[0])
def test_a_repository_whose_head_is_a_dangling_symlink_is_scanned(
    tmp_path: Path, shell: list[str]
) -> None:
    # git takes `HEAD -> refs/heads/<unborn>` (the old symref form) as a repository's HEAD
    # though it points nowhere; `[ -f HEAD ]` is false there, so the scan once skipped the
    # config of a repository git still opens, and a planted core.fsmonitor ran.
    repo = _repository(tmp_path / "repo", commit=False)
    mark = tmp_path / "ran"
    _git(repo, "config", "core.fsmonitor", f"touch {mark}; echo")
    head = repo / ".git" / "HEAD"
    head.unlink()
    head.symlink_to("refs/heads/unborn")
    hook = repo / ".git" / "hooks" / "post-checkout"
    hook.write_text("#!/bin/sh\n")
    hook.chmod(0o755)
    assert not head.exists()
    _git(repo, "status")
    assert mark.exists()  # git opened it and ran the planted command
    refused = _refused(tmp_path, shell)
    assert any(r.startswith("/repo/.git/config: core.fsmonitor (line") for r in refused), refused
    assert "/repo/.git/hooks/post-checkout: an executable hook" in refused, refused


@pytest.mark.parametrize("shell", SHELLS, ids=lambda s: s[0])
def test_a_worktrees_common_directory_without_head_is_scanned(
    tmp_path: Path, shell: list[str]
) -> None:
    # A linked worktree's git directory has HEAD; the common directory it names
    # (`commondir`) needs only objects and refs, and git reads its config and runs its
    # hooks. Without HEAD there the scan once skipped it.
    main = _repository(tmp_path / "main")
    _git(main, "worktree", "add", "-q", str(tmp_path / "wt"))
    mark = tmp_path / "ran"
    _git(main, "config", "core.fsmonitor", f"touch {mark}; echo")
    (main / ".git" / "HEAD").rename(main / ".git" / "moved")
    hook = main / ".git" / "hooks" / "post-checkout"
    hook.write_text("#!/bin/sh\n")
    hook.chmod(0o755)
    _git(tmp_path / "wt", "status")
    assert mark.exists()  # git read the common directory's config
    refused = _refused(tmp_path, shell)
    assert any(r.startswith("/main/.git/config: core.fsmonitor (line") for r in refused), refused
    assert "/main/.git/hooks/post-checkout: an executable hook" in refused, refused


@pytest.mark.parametrize("shell", SHELLS, ids=lambda s: s[0])
def test_hooks_behind_a_symlinked_hooks_directory_are_scanned(
    tmp_path: Path, shell: list[str]
) -> None:
    # `.git/hooks -> ../../elsewhere`: git runs elsewhere/post-checkout, whose path holds
    # no `/hooks/`; the scan once listed nothing there.
    repo = _repository(tmp_path / "repo")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    mark = tmp_path / "ran"
    hook = elsewhere / "post-checkout"
    hook.write_text(f"#!/bin/sh\ntouch {mark}\n")
    hook.chmod(0o755)
    (elsewhere / "pre-commit.sample").write_text("#!/bin/sh\n")
    (elsewhere / "pre-commit.sample").chmod(0o755)
    hooks = repo / ".git" / "hooks"
    for sample in hooks.iterdir():
        sample.unlink()
    hooks.rmdir()
    hooks.symlink_to(elsewhere)
    _git(repo, "checkout", "-q", "-b", "other")
    assert mark.exists()  # git ran the hook behind the link
    refused = _refused(tmp_path, shell)
    assert refused == {"/repo/.git/hooks/post-checkout: an executable hook"}, refused
