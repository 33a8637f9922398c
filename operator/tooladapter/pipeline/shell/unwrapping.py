"""What a command runs: wrappers unwrapped (`env`, `sudo`, `xargs`, `find -exec`,
`sh -c`, ...).

The allow list judges the commands a line runs, not its first word, so an allow entry
for a wrapper never lists what the wrapper runs. What cannot be judged (an option not
understood, `env` assignments, `sudo -e`) is reported as a problem, never guessed.
"""

from __future__ import annotations

import shlex
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from tooladapter.pipeline.shell.nesting import (
    ENV_OPTIONS,
    FLOCK_OPTIONS,
    SU_OPTIONS,
    WATCH_OPTIONS,
    env_split_string,
    shell_c_argument,
)
from tooladapter.pipeline.shell.options import Getopt, getopt, permuted_options
from tooladapter.pipeline.shell.parsing import MAX_NESTING, split_command
from tooladapter.pipeline.shell.programs import (
    SHELLS,
    basename,
    names_of,
    normalise_head,
    program_name,
)
from tooladapter.pipeline.shell.verdict import clip

Judged = tuple[list[list[str]], str | None]


def judge(argv: Sequence[str], *, depth: int) -> Judged:
    """The commands `argv` runs, wrappers unwrapped, or why that cannot be judged."""
    if depth > MAX_NESTING:
        return [], f"wrappers nest more than {MAX_NESTING} levels deep"
    if not argv:
        return [], "a wrapper without a command"
    name = program_name(argv[0])
    if name is None:
        return [list(argv)], None
    if name in SHELLS:
        inner = shell_c_argument(argv, 0)
        if inner is None:
            return [list(argv)], None
        startup = _shell_startup_option(argv)
        if any(a.startswith("+") and "c" in a for a in argv[1 : argv.index(inner)]):
            return [], f"`{name}` has a `+c` option, which shells read differently"
        if startup is not None:
            return [], f"`{name} {startup}` runs a startup file or command first"
        return _judge_line(inner, f"{name} -c", depth)
    unwrap = _UNWRAPPERS.get(name)
    if unwrap is None:
        return [list(argv)], None
    runs = unwrap(argv)
    if runs is None:
        return [list(argv)], None
    if isinstance(runs, _Problem):
        return [], f"`{name}` {runs.what}"
    if isinstance(runs, _Line):
        return _judge_line(runs.line, runs.wrapper, depth)
    if isinstance(runs, _Many):
        commands: list[list[str]] = [list(runs.parts[0])]
        for part in runs.parts[1:]:
            more, problem = judge(part, depth=depth + 1)
            if problem is not None:
                return [], problem
            commands.extend(more)
        return commands, None
    return judge(runs, depth=depth + 1)


def _shell_startup_option(argv: Sequence[str]) -> str | None:
    """An option that makes a shell run more than its `-c` string (`bash --rcfile F -ic`,
    `fish -C CMD`), before the command string."""
    for arg in argv[1:]:
        if not arg.startswith(("-", "+")) or arg == "--":
            return None
        if arg.startswith(("--rcfile", "--init-file", "--init-command")):
            return arg.split("=", 1)[0]
        if basename(argv[0]) == "fish" and not arg.startswith("--") and "C" in arg:
            return "-C"
    return None


def _judge_line(line: str, wrapper: str, depth: int) -> Judged:
    inner = split_command(line)
    if inner is None:
        return [], f"the command string of `{wrapper}` cannot be judged"
    return judge(inner, depth=depth + 1)


@dataclass(frozen=True)
class _Problem:
    what: str


@dataclass(frozen=True)
class _Line:
    line: str
    wrapper: str


@dataclass(frozen=True)
class _Many:
    """find: the find command itself first, then every command it executes."""

    parts: tuple[list[str], ...]


#: What an unwrapper returns: the argv it runs, a command line, several commands, a
#: reason it cannot be judged, or None (it runs nothing else: judged as itself).
_Runs = list[str] | _Line | _Many | _Problem | None


def _not_understood(option: str) -> _Problem:
    return _Problem(f"option {option!r} is not understood")


@dataclass(frozen=True)
class _After:
    """A wrapper that runs the command after its options and `operands` fixed operands,
    unless it is given one of the options `unless`: then it runs `instead` instead (a
    problem: what it does that cannot be judged), or nothing when `instead` is None (it
    acts on a running process: `taskset -p`, `ionice -p`)."""

    spec: Getopt
    operands: int = 0
    unless: tuple[str, ...] = ()
    instead: str | None = None

    def __call__(self, argv: Sequence[str]) -> _Runs:
        parsed = getopt(argv, 1, self.spec)
        if self.unless and parsed.has(*self.unless):
            return None if self.instead is None else _Problem(self.instead)
        if parsed.unknown is not None:
            return _not_understood(parsed.unknown)
        start = parsed.rest + self.operands
        if start >= len(argv):
            return None
        return list(argv[start:])


def _unwrap_env(argv: Sequence[str]) -> _Runs:
    parsed = getopt(argv, 1, ENV_OPTIONS)
    if parsed.unknown is not None:
        return _not_understood(parsed.unknown)
    split = parsed.values("S", "split-string")
    rest = list(argv[parsed.rest :])
    if rest and rest[0] == "-":
        rest = rest[1:]
    k = 0
    while k < len(rest) and "=" in rest[k]:
        k += 1
    if k:
        return _Problem(
            f"sets environment variables ({clip(' '.join(rest[: min(k, 2)]), 60)}), "
            "which can change what any program does (LD_PRELOAD, GIT_EXTERNAL_DIFF, PAGER)"
        )
    if split:
        line = " ".join([env_split_string(v) for v in split] + [shlex.quote(t) for t in rest])
        return _Line(line, "env -S")
    return rest or None


def _unwrap_su(argv: Sequence[str]) -> _Runs:
    options, operands, unknown = permuted_options(argv, 1, SU_OPTIONS)
    if unknown is not None:
        return _not_understood(unknown)
    if any(name in ("s", "shell") for name, _ in options):
        return _Problem("runs the command with a shell of the caller's choosing (-s)")
    strings = [v for n, v in options if n in ("c", "command", "session-command") and v]
    if len(strings) == 1:
        return _Line(strings[0], f"{basename(argv[0])} -c")
    if strings:
        return _Problem("has more than one command string")
    if operands > 1:
        return _Problem("passes arguments to a shell")
    return None


def _unwrap_flock(argv: Sequence[str]) -> _Runs:
    parsed = getopt(argv, 1, FLOCK_OPTIONS)
    if parsed.unknown is not None:
        return _not_understood(parsed.unknown)
    strings = parsed.values("c", "command")
    rest = list(argv[parsed.rest + 1 :])
    if rest and rest[0] in ("-c", "--command") and len(rest) > 1:
        strings.append(rest[1])
        rest = []
    if strings:
        return _Line(strings[0], "flock -c") if len(strings) == 1 else _Problem("two commands")
    return rest or None


_XARGS = _After(
    Getopt(
        short_flags="0oprtx",
        short_values="adEILnPs",
        short_optional="eil",
        long_flags=names_of(
            "null open-tty interactive no-run-if-empty verbose exit show-limits eof replace"
            " max-lines help version"
        ),
        long_values=names_of("arg-file delimiter max-args max-procs max-chars process-slot-var"),
    ),
    unless=("a", "arg-file"),
    instead="reads its arguments from a file, which cannot be judged",
)


def _unwrap_xargs(argv: Sequence[str]) -> _Runs:
    runs = _XARGS(argv)
    return ["echo"] if runs is None else runs


def _unwrap_find(argv: Sequence[str]) -> _Runs:
    own: list[str] = []
    parts: list[list[str]] = []
    i = 1
    while i < len(argv):
        token = argv[i]
        if token in ("-exec", "-execdir", "-ok", "-okdir"):
            j = i + 1
            while j < len(argv) and argv[j] not in (";", "+"):
                j += 1
            parts.append(list(argv[i + 1 : j]))
            own.append(token)
            i = j + 1
            continue
        own.append(token)
        i += 1
    if not parts:
        return None
    if any(not part for part in parts):
        return _Problem("-exec names no command")
    return _Many((normalise_head([argv[0]]) + own, *parts))


def _unwrap_busybox(argv: Sequence[str]) -> _Runs:
    if len(argv) < 2 or argv[1].startswith("-"):
        return None
    return list(argv[1:])


def _unwrap_watch(argv: Sequence[str]) -> _Runs:
    parsed = getopt(argv, 1, WATCH_OPTIONS)
    if parsed.unknown is not None:
        return _not_understood(parsed.unknown)
    rest = argv[parsed.rest :]
    if not rest:
        return None
    if parsed.has("x", "exec"):
        return list(rest)
    return _Line(" ".join(rest), "watch")


def _unwrap_eval(argv: Sequence[str]) -> _Runs:
    return _Line(" ".join(argv[1:]), "eval") if len(argv) > 1 else None


def _unwrap_command(argv: Sequence[str]) -> _Runs:
    parsed = getopt(argv, 1, Getopt(short_flags="pvV"))
    if parsed.unknown is not None:
        return _not_understood(parsed.unknown)
    if parsed.has("v", "V") or parsed.rest >= len(argv):
        return None
    return list(argv[parsed.rest :])


#: Wrappers: how to find the command each runs.
_UNWRAPPERS: dict[str, Callable[[Sequence[str]], _Runs]] = {
    "env": _unwrap_env,
    "sudo": _After(
        Getopt(
            short_flags="AbEeHiKklnPSsVvBN",
            short_values="CDghprRTtUu",
            short_optional="",
            long_flags=names_of(
                "askpass edit background bell preserve-env set-home login remove-timestamp"
                " reset-timestamp list non-interactive preserve-groups stdin shell validate"
                " version help"
            ),
            long_values=names_of(
                "close-from chdir group host prompt chroot role type command-timeout"
                " other-user user"
            ),
        ),
        unless=("e", "edit"),
        instead="-e edits files",
    ),
    "doas": _After(Getopt(short_flags="nsL", short_values="Cua")),
    "su": _unwrap_su,
    "runuser": _unwrap_su,
    "flock": _unwrap_flock,
    "xargs": _unwrap_xargs,
    "find": _unwrap_find,
    "busybox": _unwrap_busybox,
    "watch": _unwrap_watch,
    "eval": _unwrap_eval,
    "command": _unwrap_command,
    "builtin": lambda argv: list(argv[1:]) or None,
    "exec": _After(Getopt(short_flags="cl", short_values="a")),
    "nohup": _After(Getopt(long_flags=("help", "version"))),
    "timeout": _After(
        Getopt(
            short_flags="v",
            short_values="sk",
            long_flags=("preserve-status", "foreground", "verbose", "help", "version"),
            long_values=("signal", "kill-after"),
        ),
        operands=1,
    ),
    "nice": _After(Getopt(short_values="n", long_values=("adjustment",), numeric=True)),
    "stdbuf": _After(Getopt(short_values="ioe", long_values=("input", "output", "error"))),
    "time": _After(
        Getopt(
            short_flags="pvqa",
            short_values="fo",
            long_flags=("portability", "verbose", "quiet", "append", "help"),
            long_values=("format", "output"),
        ),
        unless=("o", "output"),
        instead="-o writes a file",
    ),
    "ionice": _After(
        Getopt(
            short_flags="th",
            short_values="cnpPu",
            long_flags=("ignore", "help"),
            long_values=("class", "classdata", "pid", "pgid", "uid"),
        ),
        unless=("p", "P", "u", "pid", "pgid", "uid"),
    ),
    "setsid": _After(Getopt(short_flags="cfw", long_flags=("ctty", "fork", "wait", "help"))),
    "taskset": _After(
        Getopt(short_flags="acphV", long_flags=("all-tasks", "cpu-list", "pid", "help")),
        operands=1,
        unless=("p", "pid"),
    ),
    "chroot": _After(
        Getopt(long_flags=("skip-chdir", "help"), long_values=("userspec", "groups")),
        operands=1,
    ),
}
