"""Issue 39: a workspace is data, never a later call's configuration. Repository config
that runs a command or sends requests elsewhere is refused before every call of an attempt
(`sandbox.gitconfig`): git-config syntax read as git reads it, the pod's listing framed so
no file name can hide a record, and the check's answer as the flow sees it."""

from __future__ import annotations

import asyncio
import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

from tests.unit.sandbox.test_warm_settlement import (
    FakeWarmKube,
    call,
    existing_workspace,
    tool,
    warm,
)
from tooladapter.kube.warm import ExecResult
from tooladapter.sandbox.gitconfig import (
    EMIT_SCRIPT,
    END_MARK,
    FILE_CAP,
    REFUSED,
    REFUSED_SHELL_VALUES,
    SCAN_ROOTS,
    SCAN_SCRIPT,
    ConfigError,
    FileKind,
    Finding,
    ScannedFile,
    attribute_drivers,
    findings,
    parse_config,
    parse_scan,
    refusal,
    refused_entries,
)
from tooladapter.sandbox.podspec import (
    CONFIG_ENV,
    GATE_PASSED,
    HOME_DIR,
    SHARED_MEMORY,
    TOOLADAPTER_DIR,
)
from tooladapter.sandbox.warm import (
    ARGUMENTS_FILE,
    CHECK_SCRIPT,
    CLEAR_SCRIPT,
    HOLDER_SHELL,
    NOT_STARTED_MARK,
    RUN_SCRIPT,
    STARTED_MARK,
    STOP_SCRIPT,
    check_command,
)


def names(text: str) -> list[str]:
    return [e.name for e in refused_entries(parse_config(text))]


# ---------------------------------------------------------------- git-config syntax


def test_sections_subsections_and_keys_are_read_as_git_reads_them() -> None:
    entries = parse_config(
        "\ufeff# a comment\n"
        "[core]\n"
        "\trepositoryformatversion = 0\n"
        "\tbare\n"
        '[remote "origin"]\n'
        "\turl = https://example.com/r.git ; trailing comment\n"
        '[Branch "Main"] Remote = origin\n'
        '[weird "a \\"quoted\\" \\\\ name"]\n'
        "  key = x\n"
        "[old.Style]\n"
        "  key = y\n"
    )
    assert [(e.name, e.value, e.line) for e in entries] == [
        ("core.repositoryformatversion", "0", 3),
        ("core.bare", None, 4),
        ("remote.origin.url", "https://example.com/r.git", 6),
        ("branch.Main.remote", "origin", 7),
        ('weird.a "quoted" \\ name.key', "x", 9),
        ("old.style.key", "y", 11),
    ]


def test_values_quotes_escapes_comments_and_continuations() -> None:
    entries = parse_config(
        "[s]\n"
        'a = "x # not a comment" # a comment\n'
        "b = one \\\n  two\n"
        'c = "tab\\there"\n'
        "d = trailing   \n"
        "e =\n"
        "f\n"
    )
    values = {e.key: (e.value, e.line) for e in entries}
    assert values == {
        "a": ("x # not a comment", 2),
        "b": ("one   two", 3),
        "c": ("tab\there", 5),
        "d": ("trailing", 6),
        "e": ("", 7),
        "f": (None, 8),
    }


@pytest.mark.parametrize(
    "text",
    [
        "key = outside any section\n",
        "[core\n",
        '[core "unterminated]\n',
        "[]\n",
        "[core]\n9key = x\n",
        '[core]\npager = "unterminated\n',
        "[core]\npager = bad \\q escape\n",
        "[core]\npager x\n",
        '[a.b "c"]\nk = v\n',
    ],
)
def test_a_line_git_would_not_read_as_this_parser_does_is_an_error(text: str) -> None:
    with pytest.raises(ConfigError):
        parse_config(text)


# ---------------------------------------------------------------- refused keys


@pytest.mark.parametrize(
    ("text", "refused"),
    [
        ("[core]\nfsmonitor = touch /workspace/pwned\n", "core.fsmonitor"),
        ("[core]\nhooksPath = /workspace/h\n", "core.hookspath"),
        ("[core]\nsshCommand = sh -c x\n", "core.sshcommand"),
        ("[core]\npager = touch /workspace/pwned\n", "core.pager"),
        ("[core]\neditor = x\n", "core.editor"),
        ("[core]\naskPass = x\n", "core.askpass"),
        ("[core]\ngitProxy = x\n", "core.gitproxy"),
        ("[core]\nalternateRefsCommand = x\n", "core.alternaterefscommand"),
        ("[diff]\nexternal = x\n", "diff.external"),
        ('[diff "d"]\ntextconv = x\n', "diff.d.textconv"),
        ('[diff "d"]\ncommand = x\n', "diff.d.command"),
        ('[difftool "t"]\ncmd = x\n', "difftool.t.cmd"),
        ('[mergetool "t"]\ncmd = x\n', "mergetool.t.cmd"),
        ('[merge "m"]\ndriver = x\n', "merge.m.driver"),
        ('[filter "lfs"]\nclean = x\n', "filter.lfs.clean"),
        ('[filter "lfs"]\nprocess = x\n', "filter.lfs.process"),
        ("[credential]\nhelper = store\n", "credential.helper"),
        ('[credential "https://h"]\nhelper = x\n', "credential.https://h.helper"),
        ('[url "https://evil/"]\ninsteadOf = https://github.com/\n', "url.https://evil/.insteadof"),
        ('[url "https://evil/"]\npushInsteadOf = https://g/\n', "url.https://evil/.pushinsteadof"),
        ("[http]\nproxy = http://evil\n", "http.proxy"),
        ('[http "https://g/"]\nproxy = http://evil\n', "http.https://g/.proxy"),
        ('[remote "origin"]\nproxy = http://evil\n', "remote.origin.proxy"),
        ('[remote "origin"]\nuploadpack = x\n', "remote.origin.uploadpack"),
        ('[remote "origin"]\nreceivepack = x\n', "remote.origin.receivepack"),
        ("[include]\npath = ../elsewhere\n", "include.path"),
        ('[includeIf "gitdir:/workspace/"]\npath = x\n', "includeif.gitdir:/workspace/.path"),
        ("[protocol]\nallow = always\n", "protocol.allow"),
        ('[protocol "ext"]\nallow = always\n', "protocol.ext.allow"),
        ("[uploadpack]\npackObjectsHook = x\n", "uploadpack.packobjectshook"),
        ("[sequence]\neditor = x\n", "sequence.editor"),
        ("[gpg]\nprogram = x\n", "gpg.program"),
        ('[gpg "ssh"]\nprogram = x\n', "gpg.ssh.program"),
        ('[gpg "ssh"]\ndefaultKeyCommand = x\n', "gpg.ssh.defaultkeycommand"),
        ("[pager]\nlog = x\n", "pager.log"),
        ("[alias]\nst = !touch /workspace/pwned\n", "alias.st"),
        ('[submodule "s"]\nupdate = !x\n', "submodule.s.update"),
        # Case-insensitive section and key names, the old subsection form, a key on the
        # header's line.
        ("[CORE]\nFsMonitor = x\n", "core.fsmonitor"),
        ("[Core] Pager = x\n", "core.pager"),
        ("[Diff.Foo]\nTextConv = x\n", "diff.foo.textconv"),
        ("[Include]\nPath = x\n", "include.path"),
        ("[core]\nfsmonitor\n", "core.fsmonitor"),
    ],
)
def test_a_key_that_runs_a_command_or_redirects_requests_is_refused(
    text: str, refused: str
) -> None:
    assert names(text) == [refused]


def test_what_git_clone_and_init_write_is_not_refused() -> None:
    clone = (
        "[core]\n\trepositoryformatversion = 0\n\tfilemode = true\n\tbare = false\n"
        "\tlogallrefupdates = true\n"
        '[remote "origin"]\n\turl = https://github.com/o/r.git\n'
        "\tfetch = +refs/heads/*:refs/remotes/origin/*\n"
        '[branch "main"]\n\tremote = origin\n\tmerge = refs/heads/main\n'
        "[alias]\n\tco = checkout\n"
        '[submodule "s"]\n\turl = https://g/s\n\tupdate = rebase\n'
        '[diff "py"]\n\txfuncname = "^def .*"\n'
        "[user]\n\tname = agent\n"
    )
    assert names(clone) == []


def test_a_key_of_the_same_name_in_another_section_or_subsection_is_not_refused() -> None:
    assert (
        names('[core "x"]\npager = y\n[http "u"]\nsslVerify = true\n[diff]\ntextconv = z\n') == []
    )


# ---------------------------------------------------------------- the listing


def frame(kind: str, path: bytes, content: bytes | None) -> bytes:
    size = -1 if content is None else len(content)
    return f"{kind} {len(path)} {0 if kind == 'H' else size}\n".encode() + path + (content or b"")


def test_a_listing_is_read_record_by_record_whatever_the_names_hold() -> None:
    name = b"/workspace/we\nird/.git/config"
    listing = (
        frame("C", name, b"[core]\npager = x\n")
        + frame("H", b"/workspace/r/.git/hooks/post-checkout", None)
        + b"A 25 -1\n/workspace/.gitattributes"
        + END_MARK.encode()
        + b"\n"
    )
    files, whole = parse_scan(listing)
    assert whole
    assert files == [
        ScannedFile(FileKind.CONFIG, name.decode(), "[core]\npager = x\n"),
        ScannedFile(FileKind.HOOK, "/workspace/r/.git/hooks/post-checkout", None),
        ScannedFile(FileKind.ATTRIBUTES, "/workspace/.gitattributes", None),
    ]


@pytest.mark.parametrize(
    "listing",
    [
        b"",
        frame("C", b"/w/.git/config", b"[core]\n"),  # no end mark: cut short
        frame("C", b"/w/.git/config", b"[core]\n")[:-3] + END_MARK.encode() + b"\n",
        END_MARK.encode() + b"\nC 3 0\n/w/",  # something after the end
        b"X 3 0\n/w/" + END_MARK.encode() + b"\n",
        b"C three 0\n/w/" + END_MARK.encode() + b"\n",
    ],
)
def test_a_listing_cut_short_or_malformed_is_not_whole(listing: bytes) -> None:
    assert not parse_scan(listing)[1]


# ---------------------------------------------------------------- findings


def test_findings_name_the_file_and_key_hooks_and_what_could_not_be_read() -> None:
    files = [
        ScannedFile(FileKind.CONFIG, "/workspace/r/.git/config", '[filter "x"]\nclean = y\n'),
        ScannedFile(FileKind.CONFIG, "/workspace/r/.git/modules/s/config", "[core]\n[bad\n"),
        ScannedFile(FileKind.CONFIG, "/workspace/big/.git/config", None),
        ScannedFile(FileKind.HOOK, "/workspace/r/.git/hooks/pre-commit", None),
        ScannedFile(
            FileKind.ATTRIBUTES, "/workspace/r/.gitattributes", "*.c filter=x\n*.py diff=python\n"
        ),
        ScannedFile(FileKind.ATTRIBUTES, "/workspace/.gitattributes", "# filter=x\n* text\n"),
    ]
    assert [str(f) for f in findings(files)] == [
        "/workspace/r/.git/config: filter.x.clean (line 2)",
        "/workspace/r/.git/modules/s/config: not readable as git config "
        "(line 2: bad section header)",
        f"/workspace/big/.git/config: larger than {FILE_CAP} bytes, not checked",
        "/workspace/r/.git/hooks/pre-commit: an executable hook",
        "/workspace/r/.gitattributes: filter=x (line 1)",
    ]


def test_attributes_alone_name_no_command() -> None:
    # A driver is a command only where config defines one: attributes without it are data.
    files = [
        ScannedFile(FileKind.ATTRIBUTES, "/workspace/.gitattributes", "* filter=lfs diff=lfs\n")
    ]
    assert findings(files) == []
    assert attribute_drivers("* filter=lfs diff=lfs merge=m -text\n") == [
        (1, "filter", "lfs"),
        (1, "diff", "lfs"),
        (1, "merge", "m"),
    ]


def test_the_refusal_names_file_and_key_on_one_line_and_is_bounded() -> None:
    found = [Finding(f"/workspace/r{i}/.git\n/config", "core.pager (line 2)") for i in range(12)]
    text = refusal(found)
    assert "/workspace/r0/.git\\n/config: core.pager (line 2)" in text
    assert "\n" not in text and "and 2 more" in text


# ---------------------------------------------------------------- the scan, in a shell


def scan_here(root: Path, shell: list[str]) -> subprocess.CompletedProcess[bytes]:
    script = SCAN_SCRIPT.replace(" ".join(SCAN_ROOTS), f"{root} {root}/absent")
    assert script != SCAN_SCRIPT
    return subprocess.run([*shell, script, EMIT_SCRIPT], capture_output=True, check=False)


def git_dir(path: Path, config: str) -> None:
    (path / "hooks").mkdir(parents=True)
    (path / "HEAD").write_text("ref: refs/heads/main\n")
    (path / "config").write_text(config)
    (path / "hooks" / "pre-commit.sample").write_text("#!/bin/sh\n")
    (path / "hooks" / "pre-commit.sample").chmod(0o755)


SHELLS = [["/bin/sh", "-c"]] + (
    [["busybox", "sh", "-c"]] if os.path.exists("/usr/bin/busybox") else []
)


@pytest.mark.parametrize("shell", SHELLS, ids=lambda s: s[0])
def test_the_scan_lists_git_directories_hooks_and_attributes_and_nothing_else(
    tmp_path: Path, shell: list[str]
) -> None:
    git_dir(tmp_path / "repo" / ".git", "[core]\n\tfsmonitor = touch pwned\n")
    git_dir(tmp_path / "line\nbreak" / ".git", "[core]\n\tbare = false\n")
    git_dir(tmp_path / "bare.git", "[core]\n\tpager = x\n")
    hook = tmp_path / "repo" / ".git" / "hooks" / "post-checkout"
    hook.write_text("#!/bin/sh\ntouch pwned\n")
    hook.chmod(0o755)
    (tmp_path / "repo" / ".git" / "hooks" / "pre-push").write_text("not executable\n")
    (tmp_path / "repo" / ".git" / "hooks" / "post-merge").symlink_to("/bin/true")
    (tmp_path / "repo" / ".gitattributes").write_text("* filter=x\n")
    (tmp_path / "notgit").mkdir()
    (tmp_path / "notgit" / "config").write_text("[core]\npager = not a git dir\n")
    (tmp_path / "repo" / "linked").mkdir()
    (tmp_path / "repo" / "linked" / "HEAD").write_text("ref: refs/heads/main\n")
    (tmp_path / "repo" / "linked" / "config").symlink_to(tmp_path / "notgit" / "config")
    (tmp_path / "repo" / "dangling").mkdir()
    (tmp_path / "repo" / "dangling" / "HEAD").write_text("x\n")
    (tmp_path / "repo" / "dangling" / "config").symlink_to(tmp_path / "nowhere")
    result = scan_here(tmp_path, shell)
    assert result.returncode == 0, result.stderr
    files, whole = parse_scan(result.stdout)
    assert whole
    listed = {(f.kind, f.path[len(str(tmp_path)) :]) for f in files}
    assert listed == {
        (FileKind.CONFIG, "/repo/.git/config"),
        (FileKind.CONFIG, "/line\nbreak/.git/config"),
        (FileKind.CONFIG, "/bare.git/config"),
        (FileKind.CONFIG, "/repo/linked/config"),  # a symlink: read through, as git does
        (FileKind.HOOK, "/repo/.git/hooks/post-checkout"),
        (FileKind.HOOK, "/repo/.git/hooks/post-merge"),
        (FileKind.ATTRIBUTES, "/repo/.gitattributes"),
    }
    refused = {str(f)[len(str(tmp_path)) :] for f in findings(files)}
    assert refused == {
        "/repo/.git/config: core.fsmonitor (line 2)",
        "/bare.git/config: core.pager (line 2)",
        "/repo/linked/config: core.pager (line 2)",
        "/repo/.git/hooks/post-checkout: an executable hook",
        "/repo/.git/hooks/post-merge: an executable hook",
    }


def test_a_config_over_the_cap_is_listed_unread(tmp_path: Path) -> None:
    git_dir(tmp_path / "r" / ".git", "[core]\n" + "#" * FILE_CAP + "\n")
    files, whole = parse_scan(scan_here(tmp_path, ["/bin/sh", "-c"]).stdout)
    assert whole and [(f.kind, f.content) for f in files] == [(FileKind.CONFIG, None)]


def test_a_directory_the_scan_cannot_read_fails_it() -> None:
    # The sandbox user is not root: the scan runs as an unprivileged user here too (root
    # reads any directory), in a tree that user can walk, except the hidden directory.
    unprivileged = ["/bin/sh", "-c"]
    if os.geteuid() == 0:
        unprivileged = [
            "setpriv",
            "--reuid=65534",
            "--regid=65534",
            "--clear-groups",
            *unprivileged,
        ]
    root = Path(tempfile.mkdtemp(prefix="scan-", dir="/tmp"))
    try:
        root.chmod(0o755)
        (root / "open").mkdir(mode=0o755)
        hidden = root / "hidden"
        git_dir(hidden / ".git", "[core]\npager = x\n")
        hidden.chmod(0o100)
        result = scan_here(root, unprivileged)
        hidden.chmod(0o755)
        assert result.returncode != 0 and not parse_scan(result.stdout)[1]
        # The same user walks the tree once the directory is readable: the failure above
        # was the hidden directory's, not the user's reach.
        opened = scan_here(root, unprivileged)
        assert opened.returncode == 0, opened.stderr
        assert parse_scan(opened.stdout)[1]
    finally:
        shutil.rmtree(root, ignore_errors=True)


# ---------------------------------------------------------------- clearing between calls


def test_everything_but_the_workspace_and_the_gates_mark_is_emptied_between_calls(
    tmp_path: Path,
) -> None:
    places = {
        d: tmp_path / d.strip("/").replace("/", "_")
        for d in (HOME_DIR, TOOLADAPTER_DIR, *SHARED_MEMORY)
    }
    script = CLEAR_SCRIPT
    for real, fake in places.items():
        fake.mkdir()
        script = script.replace(real, str(fake))
    home, tooladapter = places[HOME_DIR], places[TOOLADAPTER_DIR]
    (home / ".gitconfig").write_text("[core]\npager = x\n")
    (home / ".config" / "git").mkdir(parents=True)
    locked = home / "locked"
    (locked / "inside").mkdir(parents=True)
    locked.chmod(0o000)
    (home / "..odd").write_text("x")
    (tooladapter / "call").mkdir()
    (tooladapter / "call" / "arguments.json").write_text("{}")
    # The holder's shell goes too (PID 1 runs from it since its start, not from the file): a
    # tool could have put anything in its place (attack of 2026-12-07).
    holder = tooladapter / HOLDER_SHELL.rsplit("/", 1)[1]
    holder.mkdir()
    (holder / "left").write_text("a call's data")
    # The network gate's mark stays, made anew: every call of an inline-gated pod checks
    # it, and no mode or time a call set on it reaches the next.
    mark = tooladapter / GATE_PASSED.rsplit("/", 1)[1]
    mark.write_text("")
    mark.chmod(0o741)
    os.utime(mark, (981173106, 981173106))
    keep = tmp_path / "workspace-file"
    keep.write_text("data")
    (places["/dev/shm"] / "link").symlink_to(keep)
    result = subprocess.run(
        ["/bin/sh", "-c", script + 'echo "left:$left"'], capture_output=True, check=False
    )
    assert result.stdout == b"left:\n", result.stderr
    assert [p.name for p in tooladapter.iterdir()] == [mark.name]
    assert mark.stat().st_mtime != 981173106 and oct(mark.stat().st_mode)[-3:] != "741"
    for place in (home, *[places[d] for d in SHARED_MEMORY]):
        assert list(place.iterdir()) == []
    # A symlink is removed, never followed: its target in the workspace is untouched.
    assert keep.read_text() == "data" and oct(keep.stat().st_mode)[-3:] == "644"


# ---------------------------------------------------------------- the check, as the flow sees it


def checked(kube: FakeWarmKube) -> object:
    return asyncio.run(warm(kube).check_workspace("ns", "alice", "a1"))


class ScanKube(FakeWarmKube):
    def __init__(self, answer: ExecResult | BaseException) -> None:
        super().__init__()
        self.scan_answer = answer

    async def exec(
        self, namespace: str, name: str, command: list[str], *, stdin: bytes, max_bytes: int
    ) -> ExecResult:
        if command[2] == CHECK_SCRIPT:
            self.execs.append((name, command, stdin))
            if isinstance(self.scan_answer, BaseException):
                raise self.scan_answer
            return self.scan_answer
        return await super().exec(namespace, name, command, stdin=stdin, max_bytes=max_bytes)


def scan_result(stdout: bytes, code: int = 0) -> ExecResult:
    return ExecResult(stdout, b"", code, {"status": "Success"} if code == 0 else {})


def test_an_attempt_without_a_workspace_pod_has_nothing_to_check() -> None:
    kube = ScanKube(scan_result(b""))
    found = checked(kube)
    assert found == type(found)() and kube.execs == []


def test_planted_config_ends_the_check_refused_naming_file_and_key() -> None:
    listing = frame("C", b"/workspace/repo/.git/config", b"[core]\n\tfsmonitor = x\n")
    kube = ScanKube(scan_result(listing + END_MARK.encode() + b"\n"))
    existing_workspace(kube)
    found = checked(kube)
    assert getattr(found, "refused", None) is not None
    assert "/workspace/repo/.git/config: core.fsmonitor (line 2)" in found.refused  # type: ignore[attr-defined]
    (exec_,) = kube.execs
    assert exec_[1] == check_command() and exec_[2] == b""


def test_a_clean_workspace_passes_and_a_check_that_cannot_be_made_fails_closed() -> None:
    clean = ScanKube(scan_result(END_MARK.encode() + b"\n"))
    existing_workspace(clean)
    found = checked(clean)
    assert getattr(found, "checked", False) and found.refused is None and found.unchecked is None  # type: ignore[attr-defined]
    for answer in (
        scan_result(b"", 3),  # find could not read a directory
        scan_result(b"", 4),  # processes were left
        scan_result(b"C 3 10\n/w/[core]"),  # cut short
        ConnectionError("stream lost"),
    ):
        kube = ScanKube(answer)
        existing_workspace(kube)
        found = checked(kube)
        assert getattr(found, "unchecked", None) and found.refused is None  # type: ignore[attr-defined]


def test_the_check_stops_what_an_earlier_call_left_before_it_lists() -> None:
    assert CHECK_SCRIPT.index("kill -9 -1") < CHECK_SCRIPT.index("find ")
    assert check_command()[3] == EMIT_SCRIPT


def test_a_call_after_a_clean_check_still_runs() -> None:
    kube = ScanKube(scan_result(END_MARK.encode() + b"\n"))
    existing_workspace(kube)
    kube.answers = [
        ExecResult(b"hi\n", b"tooladapter-processes-left:0\n", 0, {"status": "Success"})
    ]
    assert getattr(checked(kube), "refused", 1) is None
    outcome = asyncio.run(warm(kube).run(call(tool())))
    assert outcome is not None and outcome.output == b"hi\n"


def test_a_warm_call_runs_with_a_cleared_home_outside_the_workspace_and_no_user_config() -> None:
    started = RUN_SCRIPT.index(STARTED_MARK)
    # Cleared after the kill, before the tool; what cannot be cleared keeps it from starting.
    assert RUN_SCRIPT.index("kill -9 -1") < RUN_SCRIPT.index(CLEAR_SCRIPT) < started
    assert f"{NOT_STARTED_MARK}cleanup" in RUN_SCRIPT[RUN_SCRIPT.index(CLEAR_SCRIPT) : started]
    exported = RUN_SCRIPT[:started].rsplit("export ", 1)[1].split(";", 1)[0].split()
    assert dict(e.split("=", 1) for e in exported) == {
        "HOME": HOME_DIR,
        "TMPDIR": HOME_DIR,
        **dict(CONFIG_ENV),
        "TOOLADAPTER_ARGUMENTS": ARGUMENTS_FILE,
    }
    # And after the call: its end and a stop clear it too.
    assert RUN_SCRIPT.rindex(CLEAR_SCRIPT) > RUN_SCRIPT.index("wait $tool")
    assert CLEAR_SCRIPT in STOP_SCRIPT


def test_the_docs_list_every_refused_key() -> None:
    docs = Path(__file__).parents[3] / "docs" / "concepts" / "workspaces.md"
    text = re.sub(r"<(url|format)>", "<name>", docs.read_text().lower())
    listed = set(re.findall(r"`([a-z.<>*]+)`", text))
    for key in (*REFUSED, *REFUSED_SHELL_VALUES):
        forms = (
            [key.replace("[<name>.]", ""), key.replace("[<name>.]", "<name>.")]
            if "[<name>.]" in key
            else [key]
        )
        for form in forms:
            assert form in listed, form


def test_the_gates_mark_is_kept_only_as_the_gate_made_it(tmp_path: Path) -> None:
    """Hit (second attack pass): the clearing skipped the mark's path whatever it was, so a
    tool of an attempt could keep data there, or an unreadable directory, between calls."""
    tooladapter = tmp_path / "tooladapter"
    tooladapter.mkdir()
    script = CLEAR_SCRIPT.replace(TOOLADAPTER_DIR, str(tooladapter))
    for d in (HOME_DIR, *SHARED_MEMORY):
        script = script.replace(d, str(tmp_path / "absent"))
    mark = tooladapter / GATE_PASSED.rsplit("/", 1)[1]
    for planted in ("directory", "data", "symlink"):
        if planted == "directory":
            (mark / "config").mkdir(parents=True)
            mark.chmod(0o000)
        elif planted == "data":
            mark.write_text("[core]\nfsmonitor = x\n")
        else:
            mark.symlink_to(tmp_path)
        result = subprocess.run(
            ["/bin/sh", "-c", script + 'echo "left:$left"'], capture_output=True, check=False
        )
        assert result.stdout == b"left:\n", (planted, result.stderr)
        assert not mark.exists() and not mark.is_symlink(), planted
    mark.write_text("")  # what the gate made: kept
    subprocess.run(["/bin/sh", "-c", script], check=True)
    assert mark.exists()
