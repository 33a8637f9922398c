"""Command strings nested in argv (`sh -c`, `su -c`, `env -S`, `flock -c`, `watch`,
`eval`): found wherever they stand, so the block list checks them too (rule 2).

The option grammars of these wrappers live here; unwrapping reads them as well.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence

from tooladapter.pipeline.shell.options import Getopt, getopt, permuted_options
from tooladapter.pipeline.shell.programs import SHELLS, basename, names_of

#: The options of the wrappers that take a command string (unwrapping reads them too).
ENV_OPTIONS = Getopt(
    short_flags="i0v",
    short_values="uCSaP",
    long_flags=names_of(
        "ignore-environment null debug list-signal-handling block-signal default-signal"
        " ignore-signal help version"
    ),
    long_values=("unset", "chdir", "split-string", "argv0"),
)
SU_OPTIONS = Getopt(
    short_flags="lmpfPhV",
    short_values="cgGswu",
    long_flags=("login", "preserve-environment", "pty", "fast", "help", "version"),
    long_values=names_of("command session-command group supp-group shell whitelist-environment"),
)
FLOCK_OPTIONS = Getopt(
    short_flags="sexunoFhV",
    short_values="wEc",
    long_flags=("shared", "exclusive", "unlock", "nonblock", "close", "no-fork", "verbose"),
    long_values=("timeout", "wait", "conflict-exit-code", "command"),
)
WATCH_OPTIONS = Getopt(
    short_flags="bcCegptwxrqh",
    short_values="n",
    short_optional="d",
    long_flags=names_of(
        "beep color no-color differences errexit chgexit precise no-title no-wrap exec no-rerun"
        " equexit help version"
    ),
    long_values=("interval",),
)
_SCRIPT_OPTIONS = Getopt(
    short_flags="aefqTh",
    short_values="cEIlLOmBt",
    long_flags=("append", "return", "flush", "force", "quiet", "timing", "help"),
    long_values=("command", "echo", "log-in", "log-out", "log-io", "log-timing", "logging-format"),
)


def env_split_string(text: str) -> str:
    """An `env -S` string as env splits it: `\\_` separates, `\\c` ends it."""
    text = text.split("\\c", 1)[0]
    return text.replace("\\_", " ")


def nested_commands(argv: Sequence[str]) -> Iterable[tuple[str, str]]:
    """(wrapper description, inner command line) for every nested command string."""
    for i, token in enumerate(argv):
        program = basename(token)
        if program in SHELLS:
            inner = shell_c_argument(argv, i)
            if inner is not None:
                yield f"{program} -c", inner
        elif program == "env":
            for value in getopt(argv, i + 1, ENV_OPTIONS).values("S", "split-string"):
                yield "env -S", env_split_string(value)
        elif program in ("su", "runuser"):
            yield from _permuted_values(argv, i + 1, SU_OPTIONS, program, ("c", "command"))
            yield from _permuted_values(argv, i + 1, SU_OPTIONS, program, ("session-command",))
        elif program in ("flock", "script"):
            spec = FLOCK_OPTIONS if program == "flock" else _SCRIPT_OPTIONS
            yield from _permuted_values(argv, i + 1, spec, program, ("c", "command"))
        elif program == "watch":
            parsed = getopt(argv, i + 1, WATCH_OPTIONS)
            if parsed.rest < len(argv):
                yield "watch", " ".join(argv[parsed.rest :])
        elif program == "eval" and i + 1 < len(argv):
            yield "eval", " ".join(argv[i + 1 :])


def _permuted_values(
    argv: Sequence[str], start: int, spec: Getopt, program: str, names: tuple[str, ...]
) -> Iterator[tuple[str, str]]:
    """Values of the options `names`, wherever they are; when an option is not
    understood, any `-c`/`--command` token after it counts too (conservative)."""
    options, _operands, unknown = permuted_options(argv, start, spec)
    for name, value in options:
        if name in names and value is not None:
            yield f"{program} -c", value
    if unknown is not None:
        for k in range(start, len(argv)):
            if argv[k] in ("-c", "--command", "--session-command") and k + 1 < len(argv):
                yield f"{program} -c", argv[k + 1]
            elif argv[k].startswith(("--command=", "--session-command=")):
                yield f"{program} -c", argv[k].split("=", 1)[1]


def shell_c_argument(argv: Sequence[str], index: int) -> str | None:
    saw_c = False
    j = index + 1
    while j < len(argv):
        arg = argv[j]
        if arg == "--":
            j += 1
            break
        if arg in ("-o", "+o", "-O", "+O", "--rcfile", "--init-file"):
            j += 2
            continue
        if arg.startswith("--"):
            j += 1
            continue
        if len(arg) > 1 and arg[0] in "-+":
            if "c" in arg[1:]:
                saw_c = True
            j += 1
            continue
        break
    if saw_c and j < len(argv):
        return argv[j]
    return None
