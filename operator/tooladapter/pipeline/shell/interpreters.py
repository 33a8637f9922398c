"""Inline code and runners: what interpreters, awk, sed and SQL clients run from their
arguments (`python3 -c`, `node -e`, `awk '{system(...)}'`, `psql -c '\\! ...'`).

What they run cannot be judged, so no allow entry covers it; a script file an
interpreter runs is listed only when the allow entry names it.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass

from tooladapter.pipeline.linear_regex import compile_linear
from tooladapter.pipeline.shell.options import Getopt, getopt
from tooladapter.pipeline.shell.programs import SHELLS, names_of

#: Programs whose purpose is to run another command or code that cannot be judged here:
#: an allow entry for them would list whatever they run.
RUNNERS = frozenset(
    names_of(
        "at batch bwrap capsh catchsegv cgexec chpst chrt cpulimit daemonize dbus-launch"
        " dbus-run-session emacs entr ex expect fakechroot fakeroot faketime firejail"
        " flatpak-spawn gdb ltrace man newgrp npx nsenter numactl nvim parallel perf pkexec"
        " powershell prlimit proot proxychains proxychains4 pwsh rlwrap run-parts runcon schroot"
        " screen script setarch setpriv sg socat ssh sshpass ssh-agent start-stop-daemon strace"
        " systemd-run tclsh tmux torsocks unbuffer unshare valgrind vi view vim vimdiff wish"
        " xvfb-run"
    )
)


# ---- inline code: never covered by an allow entry

_PYTHON = re.compile(r"^(python|pypy)[0-9.]*$")
_VERSION_SUFFIX = re.compile(r"(?<=[a-z])[0-9][0-9.]*$")


def _interpreter(name: str) -> _Interpreter | None:
    """The interpreter a program name runs (`python3.12`, `perl5.36`, `php8.2`, `lua5.4`)."""
    if _PYTHON.match(name):
        return _INTERPRETERS["python"]
    base = _VERSION_SUFFIX.sub("", name)
    return _INTERPRETERS.get(name) or (_INTERPRETERS.get(base) if len(base) >= 3 else None)


@dataclass(frozen=True)
class _Interpreter:
    """Inline-code options of an interpreter: short letters and long names."""

    code_short: str
    code_long: tuple[str, ...] = ()
    short_values: str = ""
    #: Long options that take the next token as their value.
    long_values: tuple[str, ...] = ()


_INTERPRETERS: dict[str, _Interpreter] = {
    "python": _Interpreter("cm", short_values="WX", long_values=("check-hash-based-pycs",)),
    "perl": _Interpreter("eEMm", short_values="I"),
    "ruby": _Interpreter("er", short_values="CEFIKTWx"),
    "node": _Interpreter(
        "epr", ("eval", "print", "require", "import", "loader", "experimental-loader")
    ),
    "bun": _Interpreter("epr", ("eval", "print", "preload", "require")),
    "php": _Interpreter("rBREFd", short_values="cfzt"),
    "lua": _Interpreter("el"),
    "luajit": _Interpreter("elj"),
    "rscript": _Interpreter("e", ("expr",)),
    "r": _Interpreter("e", ("expr", "file")),
    "julia": _Interpreter("eEL", ("eval", "print", "load")),
    "osascript": _Interpreter("e"),
    "jshell": _Interpreter("", ("startup",)),
}
_INTERPRETERS["nodejs"] = _INTERPRETERS["node"]
_INTERPRETERS["deno"] = _Interpreter("", ("eval",))

_AWKS = frozenset({"awk", "gawk", "mawk", "nawk"})
#: On RE2 (linear): `print` repeated made Python `re` scan to the end from every one.
# A print's redirect may follow a `{` or `}` inside a string (`print "{" > "f"`): only the
# statement separator ends the search (a comparison after a print, `print; if (a > b)`,
# is cut off by its `;`; without one, the program needs an approval: conservative).
_AWK_CODE = compile_linear(r"system|\||@|\b(?:print|printf)\b[^;]*>|getline")
_AWK = Getopt(
    short_flags="bcCdDghMnNoOpPrsStVWy",
    short_values="FvfeiIlEL",
    long_flags=("characters-as-bytes", "traditional", "posix", "sandbox", "version", "help"),
    long_values=("field-separator", "assign", "file", "source", "include", "load", "exec"),
)
_SED = Getopt(
    short_flags="nrEsuzb",
    short_values="efl",
    short_optional="i",
    long_flags=names_of(
        "quiet silent regexp-extended separate unbuffered null-data posix sandbox debug"
        " follow-symlinks in-place binary help version"
    ),
    long_values=("expression", "file", "line-length"),
)
_SQL_CODE: dict[str, re.Pattern[str]] = {
    "psql": re.compile(r"\\!|\\[ow]\b|\\g\s*\||\\i|\bprogram\b|\\copy\b", re.I),
    "mysql": re.compile(
        r"\\!|(?:^|;)\s*(?:system|source|pager|tee)\b|\\\.|\binto\s+(?:out|dump)file\b", re.I
    ),
    "sqlite3": re.compile(
        r"(?:^|[\s;])\.(?:shell|system|load|once|output|import|save|backup|restore|open|excel)"
        r"\b|\bload_extension\b|\bwritefile\b|\bedit\s*\(",
        re.I,
    ),
}
_SQL_CODE["mariadb"] = _SQL_CODE["mysql"]


def runs_code(name: str, argv: Sequence[str]) -> str | None:
    """Why `argv` runs code that cannot be judged (inline code, a runner), or None."""
    if name in RUNNERS:
        return "runs another command or code given in its arguments"
    interpreter = _interpreter(name)
    if interpreter is not None:
        return _inline_code(argv, interpreter)
    if name in _AWKS:
        return _awk_code(argv)
    if name == "sed":
        return _sed_code(argv)
    sql = _SQL_CODE.get(name)
    if sql is not None:
        if any(sql.search(unicodedata.normalize("NFKC", arg).strip()) for arg in argv[1:]):
            return "runs a client command that reaches the shell or the file system"
        if name == "psql" and any(t in ("-f", "--file") or t.startswith("--file=") for t in argv):
            return "runs SQL from a file"
    return None


def script_operand(name: str, argv: Sequence[str]) -> int | None:
    """The index of the script file a shell or an interpreter runs, if any: listed only
    when the allow entry names it (`python3 tools/lint.py`), since a file such as
    /tooladapter/arguments.json holds text the agent chose."""
    if name in SHELLS:
        j = 1
        while j < len(argv):
            arg = argv[j]
            if arg in ("-o", "+o", "-O", "+O", "--rcfile", "--init-file"):
                j += 2
            elif arg == "--":
                j += 1
                break
            elif len(arg) > 1 and arg[0] in "-+":
                j += 1
            else:
                break
        return j if j < len(argv) else None
    interpreter = _interpreter(name)
    if interpreter is None:
        return None
    i = 1
    while i < len(argv):
        arg = argv[i]
        if arg in ("-",):
            return None
        if arg in ("--",):
            return i + 1 if i + 1 < len(argv) else None
        if not arg.startswith("-"):
            return i
        if arg.startswith("--"):
            long_name, eq, _value = arg[2:].partition("=")
            i += 2 if long_name in interpreter.long_values and not eq else 1
            continue
        letters = arg[1:]
        step = 1
        for j, letter in enumerate(letters, start=1):
            if letter in interpreter.short_values:
                step = 2 if j == len(letters) else 1
                break
        i += step
    return None


def _inline_code(argv: Sequence[str], interpreter: _Interpreter) -> str | None:
    i = 1
    while i < len(argv):
        token = argv[i]
        if token in ("--", "-") or not token.startswith("-"):
            if interpreter.code_long and token in interpreter.code_long:
                return f"runs inline code ({token})"
            return None
        if token.startswith("--"):
            name, eq, _value = token[2:].partition("=")
            if name and any(long.startswith(name) for long in interpreter.code_long):
                return f"runs inline code ({token.split('=', 1)[0]})"
            i += 2 if name in interpreter.long_values and not eq else 1
            continue
        if token.lower() in ("-command", "-encodedcommand"):
            return f"runs inline code ({token})"
        for j, letter in enumerate(token[1:], start=1):
            if letter in interpreter.code_short:
                return f"runs inline code (-{letter})"
            if letter in interpreter.short_values:
                if j == len(token) - 1:
                    i += 1
                break
        i += 1
    return None


def _awk_code(argv: Sequence[str]) -> str | None:
    parsed = getopt(argv, 1, _AWK)
    if parsed.has("f", "e", "i", "l", "E", "file", "source", "include", "load", "exec"):
        return "runs a program from a file or a library"
    if parsed.unknown is not None:
        return f"has an option that is not understood ({parsed.unknown!r})"
    if parsed.rest < len(argv) and _AWK_CODE.search(argv[parsed.rest]):
        return "runs a program that calls commands or redirects output"
    return None


def _sed_code(argv: Sequence[str]) -> str | None:
    parsed = getopt(argv, 1, _SED)
    if parsed.has("f", "file"):
        return "runs a script from a file"
    scripts = parsed.values("e", "expression")
    if not parsed.has("e", "expression") and parsed.rest < len(argv):
        scripts.append(argv[parsed.rest])
    for script in scripts:
        if _sed_executes_or_writes(script):
            return "runs a script that executes commands or writes files (e, w)"
    return None


def _sed_executes_or_writes(script: str) -> bool:
    """Whether a sed script has an `e`, `w` or `W` command or an `s///e`/`s///w` flag.

    A small parser of GNU sed syntax; whatever it does not understand counts as yes."""
    i, n = 0, len(script)

    def skip_regex(k: int, delimiter: str) -> int:
        while k < n and script[k] != delimiter:
            k += 2 if script[k] == "\\" else 1
        return k + 1

    while i < n:
        ch = script[i]
        if ch in " \t;{}!":
            i += 1
            continue
        if ch.isdigit() or ch in "$,~+":
            i += 1
            continue
        if ch == "/":
            i = skip_regex(i + 1, "/")
            if i < n and script[i] in "IM":
                i += 1
            continue
        if ch == "\\" and i + 1 < n:
            i = skip_regex(i + 2, script[i + 1])
            continue
        if ch in "ewW":
            return True
        if ch in "sy":
            if i + 1 >= n:
                return True
            delimiter = script[i + 1]
            k = skip_regex(i + 2, delimiter)
            k = skip_regex(k, delimiter)
            flags_start = k
            while k < n and script[k] not in ";}\n":
                k += 1
            if ch == "s" and re.search(r"[ewW]", script[flags_start:k]):
                return True
            i = k
            continue
        if ch in "aic":
            return False  # text to the end of the script
        if ch in "rRbtTq:QlL":
            while i < n and script[i] not in ";}\n":
                i += 1
            continue
        if ch in "=dDgGhHnNpPxzF#":
            if ch == "#":
                return False
            i += 1
            continue
        return True
    return False
