"""Shell command checks on parsed argv: block-list patterns, evasions, and the allow list.

Why it works on argv and not on strings: a block list of strings ("rm -rf") is beaten by
`rm -r -f`, `rm -fr`, `/bin/rm --recursive --force`, `'r''m' -rf` or `sudo rm -rf`. So the
command line is parsed once, the way it will be executed (POSIX `shlex`, no comments),
and the rules are applied to the resulting argv:

1. Refusals that no policy can override (`escalate_ok` is False): empty or over-long
   commands, control or invisible characters (newlines included), unparseable quoting,
   shell operators (`;`, `&&`, `||`, `|`, `&`, `>`, `<`, `(`), and expansions
   (`$(...)`, backticks, `${...}`, `$VAR`, `$'...'`). Tools run argv without a shell, so
   these have no legitimate use, and when a descriptor does opt into a shell they are
   exactly how a checked command turns into an unchecked one.
2. Nested command strings (`sh -c`, `bash -lc`, `su -c`, `env -S` and `env -vS'...'`,
   `flock -c`, `watch`, `eval`, ...) are checked recursively with the same rules,
   wherever they appear in argv (`sudo bash -c ...`).
3. Block-list patterns (`escalate_ok` is True: the tenant policy decides between deny
   and escalation to production). A pattern is `program [flags] [words]`: the program
   matches any argv token by basename, case-insensitively, with globs in the token
   honoured (`/bin/r?`), so wrappers (`env`, `sudo`, `nice`, `timeout`, `xargs`,
   `find -exec`, `busybox`, ...) need no special cases; short flags match as a set in any
   clustering (`-rf` = `-r -f` = `-fr` = `-Rf`), long flags and GNU prefixes map to short
   ones (`--recursive`, `--rec`); words match in order among the remaining tokens
   (`kubectl -n x delete ns/foo`). The same matcher runs over word splits of every
   token with embedded text, with SQL comments stripped, quoted fragments joined and
   Unicode normalised, which catches `psql -c "DrOp/**/DataBase x"`, `DROP SCHEMA`
   (MySQL's synonym) and `python -c "os.system('rm -fr /')"`.
   The matching is deliberately conservative: a false block is a clear, fixable denial;
   a false pass is an incident.
4. The allow list. A command runs as its declared class only when it is *listed*:
   every command it runs matches an allow entry by argv-prefix tokens (`argv[0]` is
   reduced to its basename only when it is an absolute path into a standard bin
   directory). What a command runs is found by unwrapping wrappers: `env` (assignments
   make it unlisted: `LD_PRELOAD`, `GIT_EXTERNAL_DIFF` change what a listed program
   does), `sudo`, `doas`, `xargs`, `nice`, `timeout`, `nohup`, `stdbuf`, `time`,
   `ionice`, `setsid`, `taskset`, `chroot`, `busybox`, `command`, `exec`, the command
   strings of `sh -c`, `su -c`, `flock -c`, `env -S`, `watch` and `eval`, and each
   `find -exec` command. So an allow entry for a wrapper never lists what it runs.
   Beyond that, a listed program is not listed with:
   - inline code: interpreters with `-c`/`-e`/`-m`/... (`python3 -c`, `perl -e`,
     `node -e`, `ruby -e`, `php -r`, ...), awk programs that call `system` or
     redirect, sed scripts that execute or write (`e`, `w`), SQL clients' shell escapes
     (`psql -c '\\! ...'`, `mysql -e 'system ...'`, `sqlite3 '.shell ...'`); and
     programs whose purpose is to run another command (`strace`, `ssh`, `pwsh`, ...).
     What they run cannot be judged, so no allow entry covers them;
   - an option that deletes, writes elsewhere, uploads or runs a helper (`find -delete`,
     `rsync --delete`/`-e`, `tar --to-command`, `git diff --output`/`--ext-diff`,
     `git -c`, `dotnet build -p:PreBuildEvent=...`, `npm test --script-shell`,
     `sed -i`, `curl -T`/`-d`/`-X`, `wget --post-file`, `nc -e`, `make VAR=...`, ...),
     unless the allow entry itself names that option (`rsync -a --delete` lists
     `rsync -a --delete src dst`).
   An unlisted command is not refused here: classification raises it (see
   `classification.classify`), so it waits for an approval or is denied by policy.

The allow list in force is the descriptor's `shell.allow`, or the reference's
`DEFAULT_ALLOW_LIST` when the descriptor sets none (`allow_list_for`); tenant policies'
`shell.allow` lists narrow it (`narrow`: a command must be on both).
"""

from __future__ import annotations

import re
import shlex
import unicodedata
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from enum import StrEnum
from fnmatch import fnmatchcase
from functools import lru_cache

from tooladapter.pipeline.linear_regex import compile_linear


def _names(text: str) -> tuple[str, ...]:
    return tuple(text.split())


#: The reference's default allow list (Tools:Shell:AllowList): run as sandbox class.
DEFAULT_ALLOW_LIST: tuple[str, ...] = (
    "dotnet restore",
    "dotnet build",
    "dotnet test",
    "git diff",
    "git status",
    "npm test",
)

#: The reference's default block list (Tools:Shell:BlockList): denied or escalated.
DEFAULT_BLOCK_LIST: tuple[str, ...] = (
    "terraform destroy",
    "az group delete",
    "kubectl delete namespace",
    "DROP DATABASE",
    "rm -rf",
)

MAX_COMMAND_CHARS = 65_536
MAX_NESTING = 4

STANDARD_BIN_DIRS = frozenset(
    {"/bin", "/usr/bin", "/usr/local/bin", "/sbin", "/usr/sbin", "/usr/local/sbin"}
)

#: Interpreters whose `-c STRING` is a shell command line.
SHELLS = frozenset(_names("sh bash zsh dash ksh ash mksh yash fish csh tcsh rbash hush msh posh"))

#: Other names of a blocked program (same CLI, same effect).
PROGRAM_ALIASES: dict[str, frozenset[str]] = {
    "terraform": frozenset({"tofu", "terragrunt"}),
    "kubectl": frozenset({"oc", "kubecolor"}),
}

#: Per program: long option names (GNU prefixes accepted) -> the short flag they mean.
LONG_TO_SHORT: dict[str, dict[str, str]] = {
    "rm": {"recursive": "r", "force": "f", "dir": "d", "interactive": "i", "verbose": "v"},
    "git": {"force": "f", "delete": "d"},
}

#: Per program: tokens that mean a word (Go-style single-dash flags, plural forms).
TOKEN_ALIASES: dict[str, dict[str, str]] = {
    "terraform": {"-destroy": "destroy", "--destroy": "destroy"},
    "kubectl": {"ns": "namespace", "namespaces": "namespace"},
}

#: Commands with the same effect as a block pattern, matched under the pattern's name.
EQUIVALENTS: dict[str, tuple[str, ...]] = {
    "drop database": (
        "dropdb",
        "mysqladmin drop",
        # MySQL/MariaDB: DROP SCHEMA is a synonym of DROP DATABASE.
        "drop schema",
        # MongoDB and Redis: the whole database in one call.
        "dropdatabase",
        "redis-cli flushall",
        "redis-cli flushdb",
    ),
    "kubectl delete namespace": ("oc delete project", "oc delete projects"),
    "terraform destroy": ("pulumi destroy", "pulumi down", "cdktf destroy"),
}


class ShellRule(StrEnum):
    """Why a command was refused before any pattern was looked at, or is not listed."""

    EMPTY = "empty-command"
    TOO_LONG = "command-too-long"
    CONTROL_CHARACTER = "control-character"
    UNPARSEABLE = "unparseable"
    SHELL_OPERATOR = "shell-operator"
    EXPANSION = "shell-expansion"
    NESTING = "nesting-too-deep"
    NOT_ALLOWED = "not-on-allow-list"


@dataclass(frozen=True)
class ShellVerdict:
    """The outcome of checking one command line.

    `allowed`: listed, i.e. everything it runs matches the allow list (and the policies'
    narrowing lists).
    `blocked`: refused by a structural rule or a block-list pattern.
    `matched`: the block pattern, the allow entries, or the `ShellRule` value that
    refused it (`not-on-allow-list` when it is merely unlisted).
    `escalate_ok`: true only when a block-list pattern (not a structural rule) blocked
    it, so a policy with `blockAction: escalate` may run it as production class.
    """

    command: str
    argv: list[str]
    allowed: bool
    blocked: bool
    matched: str | None
    reason: str
    escalate_ok: bool

    @property
    def ok(self) -> bool:
        """Runs as is: listed and not blocked."""
        return self.allowed and not self.blocked

    @property
    def unlisted(self) -> bool:
        """Not blocked, but not listed either: it may run only with an approval."""
        return not self.allowed and not self.blocked


def allow_list_for(configured: Sequence[str] | None) -> tuple[str, ...]:
    """The allow list in force for a descriptor: its own `shell.allow` when it sets one
    (even an empty one: nothing is listed), else the reference's `DEFAULT_ALLOW_LIST`."""
    return DEFAULT_ALLOW_LIST if configured is None else tuple(configured)


def check_command(
    command: str,
    *,
    allow: Sequence[str],
    block: Sequence[str],
    narrow: Sequence[str] | None = None,
) -> ShellVerdict:
    """Check a command line against the block list, then the allow list.

    `allow` is the allow list in force (see `allow_list_for`; an empty one lists
    nothing); `narrow`, when not None, is the union of the tenant policies' allow lists,
    which a command must match as well. See the module docstring for the rules.
    """
    argv, refusal = _check(command, tuple(block), depth=0)
    entries, why = _listing(argv, tuple(allow), None if narrow is None else tuple(narrow))
    if refusal is not None:
        matched, reason, escalate_ok = refusal
        return ShellVerdict(command, argv, entries is not None, True, matched, reason, escalate_ok)
    if entries is None:
        return ShellVerdict(
            command, argv, False, False, ShellRule.NOT_ALLOWED.value, why, escalate_ok=False
        )
    shown = ", ".join(repr(e) for e in dict.fromkeys(entries))
    reason = f"command matches allow-list entry {shown} and no block-list pattern"
    return ShellVerdict(
        command, argv, True, False, ", ".join(dict.fromkeys(entries)), reason, False
    )


# --------------------------------------------------------------------------- structure

_Refusal = tuple[str, str, bool]  # matched, reason, escalate_ok

_NO_SHELL = "tools run argv without a shell"


def _structure(command: str, *, depth: int) -> tuple[list[str], _Refusal | None]:
    """Parse one command line, refusing what no policy may override (rule 1)."""
    if depth > MAX_NESTING:
        return [], (
            ShellRule.NESTING.value,
            f"command strings nest more than {MAX_NESTING} levels deep (sh -c inside sh -c ...)",
            False,
        )
    if not command.strip():
        return [], (ShellRule.EMPTY.value, "the command is empty", False)
    if len(command) > MAX_COMMAND_CHARS:
        return [], (
            ShellRule.TOO_LONG.value,
            f"the command is longer than {MAX_COMMAND_CHARS} characters",
            False,
        )
    bad = _control_character(command)
    if bad is not None:
        return [], (
            ShellRule.CONTROL_CHARACTER.value,
            f"control or invisible character U+{ord(bad):04X} is not allowed in a command "
            "(one line, printable characters only)",
            False,
        )
    meta = _metacharacter(command)
    if meta is not None:
        text, rule = meta
        if rule is ShellRule.SHELL_OPERATOR:
            reason = f"shell operator {text!r} is not allowed: {_NO_SHELL}"
        else:
            reason = f"shell expansion {text!r} is not allowed: {_NO_SHELL}"
        return [], (rule.value, reason, False)
    try:
        argv = shlex.split(command, comments=False, posix=True)
    except ValueError as err:
        return [], (ShellRule.UNPARSEABLE.value, f"the command does not parse: {err}", False)
    if not argv or not argv[0]:
        return argv, (ShellRule.EMPTY.value, "the command has no program name", False)
    return argv, None


def _check(
    command: str, block: tuple[str, ...], *, depth: int
) -> tuple[list[str], _Refusal | None]:
    argv, refusal = _structure(command, depth=depth)
    if refusal is not None:
        return argv, refusal

    for wrapper, inner in _nested_commands(argv):
        _inner_argv, inner_refusal = _check(inner, block, depth=depth + 1)
        if inner_refusal is not None:
            matched, reason, escalate_ok = inner_refusal
            return argv, (matched, f"inside `{wrapper}`: {reason}", escalate_ok)

    hit = _block_hit(argv, block)
    if hit is not None:
        pattern, found = hit
        return argv, (
            pattern,
            f"command matches block-list pattern {pattern!r} (as `{_clip(found)}`)",
            True,
        )
    return argv, None


def _clip(text: str, limit: int = 120) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _control_character(command: str) -> str | None:
    for ch in command:
        if ch == "\t":
            continue
        if unicodedata.category(ch) in ("Cc", "Cf", "Zl", "Zp", "Cs", "Co", "Cn"):
            return ch
    return None


_OPERATOR_CHARS = ";&|<>"
_EXPANSION_START = re.compile(r"[A-Za-z0-9_@*#?$!{(\-'\"]")


def _metacharacter(command: str) -> tuple[str, ShellRule] | None:
    """The first shell operator or expansion outside single quotes, if any."""
    quote: str | None = None
    i = 0
    n = len(command)
    while i < n:
        ch = command[i]
        if quote == "'":
            if ch == "'":
                quote = None
            i += 1
            continue
        if ch == "\\":
            i += 2
            continue
        if ch == "`":
            return "`", ShellRule.EXPANSION
        if ch == "$" and i + 1 < n and _EXPANSION_START.match(command[i + 1]):
            if quote == '"' and command[i + 1] in "'\"":
                i += 1
                continue
            end = i + 2
            if command[i + 1] not in "({'\"":
                while end < n and (command[end].isalnum() or command[end] == "_"):
                    end += 1
            return command[i:end], ShellRule.EXPANSION
        if quote == '"':
            if ch == '"':
                quote = None
            i += 1
            continue
        if ch in "'\"":
            quote = ch
        elif ch in _OPERATOR_CHARS:
            end = i
            while end < n and command[end] in _OPERATOR_CHARS:
                end += 1
            return command[i:end], ShellRule.SHELL_OPERATOR
        elif ch in "()":
            return ch, ShellRule.SHELL_OPERATOR
        i += 1
    return None


def _basename(token: str) -> str:
    return token.rsplit("/", 1)[-1].lower()


# --------------------------------------------------------------------------- options


@dataclass(frozen=True)
class _Getopt:
    """How a program parses its options: enough to find what it runs, getopt style.

    Short options cluster (`-vS...`); a short option with a value takes the rest of its
    token or the next token; long options accept unambiguous GNU prefixes and `=value`.
    """

    short_flags: str = ""
    short_values: str = ""
    #: Short options whose value, if any, is attached (`-i.bak`, `-l5`).
    short_optional: str = ""
    long_flags: tuple[str, ...] = ()
    long_values: tuple[str, ...] = ()
    #: `-5`, `-10`: numeric options (nice).
    numeric: bool = False

    def long_name(self, given: str) -> str | None:
        names = (*self.long_flags, *self.long_values)
        if given in names:
            return given
        found = [name for name in names if name.startswith(given)] if given else []
        return found[0] if len(found) == 1 else None


@dataclass
class _Parsed:
    #: (option, value): a short letter or a long name; the value when it takes one.
    options: list[tuple[str, str | None]]
    #: Index of the first operand (len(argv) when there is none).
    rest: int
    #: The first option not understood, if any.
    unknown: str | None = None

    def has(self, *names: str) -> bool:
        return any(name in names for name, _ in self.options)

    def values(self, *names: str) -> list[str]:
        return [value for name, value in self.options if name in names and value is not None]


def _getopt(argv: Sequence[str], start: int, spec: _Getopt) -> _Parsed:
    """Parse options from `argv[start]` up to the first operand or `--`."""
    options: list[tuple[str, str | None]] = []
    i = start
    n = len(argv)
    while i < n:
        token = argv[i]
        if token.startswith("--") and len(token) == 2:
            return _Parsed(options, i + 1)
        if token.startswith("--"):
            given, eq, value = token[2:].partition("=")
            name = spec.long_name(given)
            if name is None:
                return _Parsed(options, i, unknown=token)
            if name in spec.long_values and not eq:
                if i + 1 >= n:
                    return _Parsed(options, n, unknown=token)
                options.append((name, argv[i + 1]))
                i += 2
                continue
            options.append((name, value if eq else None))
            i += 1
            continue
        if len(token) < 2 or not token.startswith("-"):
            return _Parsed(options, i)
        if spec.numeric and token[1:].isdigit():
            options.append(("n", token[1:]))
            i += 1
            continue
        j = 1
        consumed_next = False
        while j < len(token):
            letter = token[j]
            if letter in spec.short_values:
                attached = token[j + 1 :]
                if attached:
                    options.append((letter, attached))
                elif i + 1 < n:
                    options.append((letter, argv[i + 1]))
                    consumed_next = True
                else:
                    return _Parsed(options, n, unknown=token)
                break
            if letter in spec.short_optional:
                options.append((letter, token[j + 1 :] or None))
                break
            if letter in spec.short_flags:
                options.append((letter, None))
                j += 1
                continue
            return _Parsed(options, i, unknown=token)
        i += 2 if consumed_next else 1
    return _Parsed(options, n)


# --------------------------------------------------------------------------- nesting

_ENV = _Getopt(
    short_flags="i0v",
    short_values="uCSaP",
    long_flags=_names(
        "ignore-environment null debug list-signal-handling block-signal default-signal"
        " ignore-signal help version"
    ),
    long_values=("unset", "chdir", "split-string", "argv0"),
)
_SU = _Getopt(
    short_flags="lmpfPhV",
    short_values="cgGswu",
    long_flags=("login", "preserve-environment", "pty", "fast", "help", "version"),
    long_values=_names("command session-command group supp-group shell whitelist-environment"),
)
_FLOCK = _Getopt(
    short_flags="sexunoFhV",
    short_values="wEc",
    long_flags=("shared", "exclusive", "unlock", "nonblock", "close", "no-fork", "verbose"),
    long_values=("timeout", "wait", "conflict-exit-code", "command"),
)
_WATCH = _Getopt(
    short_flags="bcCegptwxrqh",
    short_values="n",
    short_optional="d",
    long_flags=_names(
        "beep color no-color differences errexit chgexit precise no-title no-wrap exec no-rerun"
        " equexit help version"
    ),
    long_values=("interval",),
)
_SCRIPT = _Getopt(
    short_flags="aefqTh",
    short_values="cEIlLOmBt",
    long_flags=("append", "return", "flush", "force", "quiet", "timing", "help"),
    long_values=("command", "echo", "log-in", "log-out", "log-io", "log-timing", "logging-format"),
)


def _env_split_string(text: str) -> str:
    """An `env -S` string as env splits it: `\\_` separates, `\\c` ends it."""
    text = text.split("\\c", 1)[0]
    return text.replace("\\_", " ")


def _nested_commands(argv: Sequence[str]) -> Iterable[tuple[str, str]]:
    """(wrapper description, inner command line) for every nested command string."""
    for i, token in enumerate(argv):
        program = _basename(token)
        if program in SHELLS:
            inner = _shell_c_argument(argv, i)
            if inner is not None:
                yield f"{program} -c", inner
        elif program == "env":
            for value in _getopt(argv, i + 1, _ENV).values("S", "split-string"):
                yield "env -S", _env_split_string(value)
        elif program in ("su", "runuser"):
            yield from _permuted_values(argv, i + 1, _SU, program, ("c", "command"))
            yield from _permuted_values(argv, i + 1, _SU, program, ("session-command",))
        elif program in ("flock", "script"):
            spec = _FLOCK if program == "flock" else _SCRIPT
            yield from _permuted_values(argv, i + 1, spec, program, ("c", "command"))
        elif program == "watch":
            parsed = _getopt(argv, i + 1, _WATCH)
            if parsed.rest < len(argv):
                yield "watch", " ".join(argv[parsed.rest :])
        elif program == "eval" and i + 1 < len(argv):
            yield "eval", " ".join(argv[i + 1 :])


def _permuted_options(
    argv: Sequence[str], start: int, spec: _Getopt
) -> tuple[list[tuple[str, str | None]], int, str | None]:
    """Options that may also follow operands (`su - root -c '...'`): (options, number of
    operands, the first option not understood)."""
    options: list[tuple[str, str | None]] = []
    operands = 0
    j = start
    while j < len(argv):
        parsed = _getopt(argv, j, spec)
        options.extend(parsed.options)
        if parsed.unknown is not None:
            return options, operands, parsed.unknown
        if parsed.rest > j and argv[parsed.rest - 1] == "--":
            return options, operands + len(argv) - parsed.rest, None
        if parsed.rest >= len(argv):
            break
        operands += 1
        j = parsed.rest + 1
    return options, operands, None


def _permuted_values(
    argv: Sequence[str], start: int, spec: _Getopt, program: str, names: tuple[str, ...]
) -> Iterator[tuple[str, str]]:
    """Values of the options `names`, wherever they are; when an option is not
    understood, any `-c`/`--command` token after it counts too (conservative)."""
    options, _operands, unknown = _permuted_options(argv, start, spec)
    for name, value in options:
        if name in names and value is not None:
            yield f"{program} -c", value
    if unknown is not None:
        for k in range(start, len(argv)):
            if argv[k] in ("-c", "--command", "--session-command") and k + 1 < len(argv):
                yield f"{program} -c", argv[k + 1]
            elif argv[k].startswith(("--command=", "--session-command=")):
                yield f"{program} -c", argv[k].split("=", 1)[1]


def _shell_c_argument(argv: Sequence[str], index: int) -> str | None:
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


# --------------------------------------------------------------------------- patterns


@dataclass(frozen=True)
class _BlockPattern:
    name: str
    program: str
    programs: frozenset[str]
    short_flags: frozenset[str]
    long_flags: frozenset[str]
    words: tuple[str, ...]


def _canonical_program(program: str) -> str:
    for canonical, aliases in PROGRAM_ALIASES.items():
        if program in aliases:
            return canonical
    return program


@lru_cache(maxsize=512)
def _compile_pattern(pattern: str) -> tuple[_BlockPattern, ...]:
    """A block pattern and its equivalents, ready for matching (empty if unusable)."""
    key = " ".join(pattern.lower().split())
    compiled = []
    for text in (pattern, *EQUIVALENTS.get(key, ())):
        try:
            tokens = shlex.split(text)
        except ValueError:
            tokens = text.split()
        if not tokens:
            continue
        program = _canonical_program(_basename(tokens[0]))
        short: set[str] = set()
        long: set[str] = set()
        words: list[str] = []
        for token in tokens[1:]:
            kind, value = _classify_token(program, token)
            if kind == "word":
                words.extend(value)
            elif kind == "short":
                short.update(value)
            else:
                long.update(value)
        compiled.append(
            _BlockPattern(
                name=pattern,
                program=program,
                programs=frozenset({program} | PROGRAM_ALIASES.get(program, frozenset())),
                short_flags=frozenset(short),
                long_flags=frozenset(long),
                words=tuple(words),
            )
        )
    return tuple(compiled)


def _classify_token(program: str, token: str) -> tuple[str, list[str]]:
    """('word', forms) | ('short', letters) | ('long', names) for one token after `program`."""
    lower = token.lower()
    alias = TOKEN_ALIASES.get(program, {}).get(lower)
    if alias is not None:
        return "word", [alias]
    if lower.startswith("--") and len(lower) > 2:
        name = lower[2:].split("=", 1)[0]
        table = LONG_TO_SHORT.get(program, {})
        letters = [short for full, short in table.items() if name and full.startswith(name)]
        if letters:
            return "short", letters
        return "long", [name]
    if lower.startswith("-") and len(lower) > 1:
        return "short", list(lower[1:])
    return "word", [lower]


def _word_forms(program: str, token: str) -> frozenset[str]:
    """Every way a non-flag token can spell a word: `ns/foo`, `ns,pods`, `ns.v1`,
    `/api/v1/namespaces/prod`."""
    lower = token.lower()
    forms = {lower}
    for piece in re.split(r"[,\s]+", lower):
        if not piece:
            continue
        forms.add(piece)
        forms.add(piece.split(".", 1)[0])
        forms.update(part for part in piece.split("/") if part)
        forms.add(piece.split("/", 1)[0])
    aliases = TOKEN_ALIASES.get(program, {})
    return frozenset(forms | {aliases[f] for f in forms if f in aliases})


_ONLY_WILDCARDS = re.compile(r"^[*?]+$")


def _program_matches(token: str, programs: frozenset[str], *, first: bool = False) -> bool:
    """Whether `token` names one of `programs`. Globs count (`/bin/r?`, a shell tool
    expands them), but a bare `*` or `?` only in the program position: elsewhere it is
    an ordinary argument (`ls *`), not every program at once."""
    base = _basename(token)
    candidates = {base, _canonical_program(base)}
    if "{" in base:
        candidates.update(p for p in re.split(r"[{},]", base) if p)
    for candidate in candidates:
        if candidate in programs:
            return True
        if (
            any(ch in candidate for ch in "*?[")
            and (first or not _ONLY_WILDCARDS.match(candidate))
            and any(fnmatchcase(program, candidate) for program in programs)
        ):
            return True
    return False


def _rest_matches(pattern: _BlockPattern, program: str, rest: Sequence[str]) -> bool:
    short: set[str] = set()
    long: set[str] = set()
    words: list[frozenset[str]] = []
    for token in rest:
        kind, values = _classify_token(program, token)
        if kind == "short":
            short.update(values)
        elif kind == "long":
            long.update(values)
        else:
            words.append(_word_forms(program, token))
    if not pattern.short_flags <= short:
        return False
    for flag in pattern.long_flags:
        if not any(flag.startswith(name) for name in long if name):
            return False
    position = 0
    for word in pattern.words:
        while position < len(words) and word not in words[position]:
            position += 1
        if position == len(words):
            return False
        position += 1
    return True


def _match(patterns: Sequence[_BlockPattern], tokens: Sequence[str]) -> tuple[str, str] | None:
    for pattern in patterns:
        for i, token in enumerate(tokens):
            if _program_matches(token, pattern.programs, first=i == 0):
                if _rest_matches(pattern, pattern.program, tokens[i + 1 :]):
                    return pattern.name, " ".join(tokens[i:])
    return None


#: On RE2 (linear): with Python `re`, `echo '/* /* /* ...'` (64 KiB) took ~6 s holding the GIL.
_SQL_BLOCK_COMMENT = compile_linear(r"(?s)/\*.*?\*/")
_SQL_COMMENT_DELIMITERS = re.compile(r"/\*!?\d*|\*/")
#: Adjacent quoted fragments (`'DROP DA' || 'TABASE'`, `CONCAT('DROP ', 'DATABASE')`).
_QUOTED_JOIN = re.compile(r"""['"]\s*(?:\|\||\+|,)?\s*['"]""")
_NOT_WORD = re.compile(r"[^\w./\-]+")
_NOT_NAME = re.compile(r"[^\w\-]+")
_PLAIN_TOKEN = re.compile(r"^[A-Za-z0-9_.\-/]*$")


def _text_variants(argv: Sequence[str]) -> list[list[str]]:
    """Word splits of argv with embedded text opened up (SQL comments, code strings)."""
    if all(_PLAIN_TOKEN.match(token) for token in argv):
        return []
    variants: list[list[str]] = []
    for strip, join, split in (
        (_SQL_BLOCK_COMMENT, False, _NOT_WORD),
        (_SQL_COMMENT_DELIMITERS, False, _NOT_WORD),
        (_SQL_COMMENT_DELIMITERS, True, _NOT_NAME),
    ):
        words: list[str] = []
        for token in argv:
            text = unicodedata.normalize("NFKC", token)
            text = strip.sub(" ", text)
            if join:
                text = _QUOTED_JOIN.sub("", text)
            words.extend(split.sub(" ", text).split())
        variants.append(words)
    return variants


def _block_hit(argv: Sequence[str], block: Sequence[str]) -> tuple[str, str] | None:
    patterns = [compiled for pattern in block for compiled in _compile_pattern(pattern)]
    if not patterns:
        return None
    hit = _match(patterns, argv)
    if hit is not None:
        return hit
    for words in _text_variants(argv):
        hit = _match(patterns, words)
        if hit is not None:
            return hit
    return None


# --------------------------------------------------------------------------- allow list


def _normalise_head(argv: Sequence[str]) -> list[str]:
    head = argv[0]
    if head.startswith("/"):
        directory, _, base = head.rpartition("/")
        if directory in STANDARD_BIN_DIRS and base:
            head = base
    return [head, *argv[1:]]


def _program_name(token: str) -> str | None:
    """The name a program is known by here: a bare name, or the basename of a standard
    bin path. None for any other path (`./env`, `/tmp/x/timeout`): not a known wrapper."""
    head = _normalise_head([token])[0]
    return None if "/" in head else head


@lru_cache(maxsize=512)
def _allow_tokens(pattern: str) -> tuple[str, ...]:
    try:
        tokens = shlex.split(pattern)
    except ValueError:
        return ()
    return tuple(_normalise_head(tokens)) if tokens else ()


def _show(argv: Sequence[str], limit: int = 4) -> str:
    shown = " ".join(shlex.quote(a) for a in argv[:limit])
    return _clip(shown + (" ..." if len(argv) > limit else ""), 100)


def _listing(
    argv: Sequence[str], allow: tuple[str, ...], narrow: tuple[str, ...] | None
) -> tuple[tuple[str, ...] | None, str]:
    """(the allow entries that list every command argv runs, "") or (None, why not)."""
    if not argv:
        return None, "the command is empty: nothing is on the allow list"
    commands, problem = _judge(argv, depth=0)
    if problem is not None:
        return None, f"command `{_show(argv)}` is not on the shell allow list: {problem}"
    entries: list[str] = []
    for command in commands:
        entry, why = _entry_for(command, allow)
        if entry is None:
            listed = ", ".join(allow) if allow else "empty"
            return None, (
                f"command `{_show(argv)}` is not on the shell allow list ({listed}): "
                f"{why}; only listed commands run as declared"
            )
        if narrow is not None:
            narrowed, why = _entry_for(command, narrow)
            if narrowed is None:
                listed = ", ".join(narrow) if narrow else "empty"
                return None, (
                    f"command `{_show(argv)}` is not on the ToolPolicy shell allow lists "
                    f"({listed}), which narrow the tool's: {why}"
                )
        entries.append(entry)
    return tuple(entries), ""


def _entry_for(command: Sequence[str], allow: Sequence[str]) -> tuple[str | None, str]:
    """The allow entry that lists one unwrapped command, or (None, why none does)."""
    normalised = _normalise_head(command)
    name = _basename(command[0])
    shown = f"`{_show(command)}`"
    code = _runs_code(name, command)
    if code is not None:
        return None, f"{shown} {code}, which no allow entry covers"
    candidates = [
        pattern
        for pattern in allow
        if (tokens := _allow_tokens(pattern)) and tuple(normalised[: len(tokens)]) == tokens
    ]
    if not candidates:
        return None, f"{shown} matches no entry"
    effects = _effects(name, command)
    for pattern in sorted(candidates, key=lambda p: -len(_allow_tokens(p))):
        length = len(_allow_tokens(pattern))
        if all(index < length for index, _ in effects):
            return pattern, ""
    longest = max(candidates, key=lambda p: len(_allow_tokens(p)))
    index, what = next(e for e in effects if e[0] >= len(_allow_tokens(longest)))
    return None, (
        f"{shown}: `{_clip(command[index], 60)}` {what}, and no allow entry names it "
        f"(entry {longest!r} does not)"
    )


# ---- what a command runs: wrappers unwrapped

_Judged = tuple[list[list[str]], str | None]


def _split(line: str) -> list[str] | None:
    argv, refusal = _structure(line, depth=0)
    return None if refusal is not None else argv


def _judge(argv: Sequence[str], *, depth: int) -> _Judged:
    """The commands `argv` runs, wrappers unwrapped, or why that cannot be judged."""
    if depth > MAX_NESTING:
        return [], f"wrappers nest more than {MAX_NESTING} levels deep"
    if not argv:
        return [], "a wrapper without a command"
    name = _program_name(argv[0])
    if name is None:
        return [list(argv)], None
    if name in SHELLS:
        inner = _shell_c_argument(argv, 0)
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
            more, problem = _judge(part, depth=depth + 1)
            if problem is not None:
                return [], problem
            commands.extend(more)
        return commands, None
    return _judge(runs, depth=depth + 1)


def _shell_startup_option(argv: Sequence[str]) -> str | None:
    """An option that makes a shell run more than its `-c` string (`bash --rcfile F -ic`,
    `fish -C CMD`), before the command string."""
    for arg in argv[1:]:
        if not arg.startswith(("-", "+")) or arg == "--":
            return None
        if arg.startswith(("--rcfile", "--init-file", "--init-command")):
            return arg.split("=", 1)[0]
        if _basename(argv[0]) == "fish" and not arg.startswith("--") and "C" in arg:
            return "-C"
    return None


def _judge_line(line: str, wrapper: str, depth: int) -> _Judged:
    inner = _split(line)
    if inner is None:
        return [], f"the command string of `{wrapper}` cannot be judged"
    return _judge(inner, depth=depth + 1)


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


def _after(argv: Sequence[str], spec: _Getopt, operands: int = 0) -> _Runs:
    """The command after a wrapper's options and `operands` fixed operands."""
    parsed = _getopt(argv, 1, spec)
    if parsed.unknown is not None:
        return _Problem(f"option {parsed.unknown!r} is not understood")
    start = parsed.rest + operands
    if start >= len(argv):
        return None
    return list(argv[start:])


def _unwrap_env(argv: Sequence[str]) -> _Runs:
    parsed = _getopt(argv, 1, _ENV)
    if parsed.unknown is not None:
        return _Problem(f"option {parsed.unknown!r} is not understood")
    split = parsed.values("S", "split-string")
    rest = list(argv[parsed.rest :])
    if rest and rest[0] == "-":
        rest = rest[1:]
    k = 0
    while k < len(rest) and "=" in rest[k]:
        k += 1
    if k:
        return _Problem(
            f"sets environment variables ({_clip(' '.join(rest[: min(k, 2)]), 60)}), "
            "which can change what any program does (LD_PRELOAD, GIT_EXTERNAL_DIFF, PAGER)"
        )
    if split:
        line = " ".join([_env_split_string(v) for v in split] + [shlex.quote(t) for t in rest])
        return _Line(line, "env -S")
    return rest or None


def _unwrap_sudo(argv: Sequence[str]) -> _Runs:
    spec = _Getopt(
        short_flags="AbEeHiKklnPSsVvBN",
        short_values="CDghprRTtUu",
        short_optional="",
        long_flags=_names(
            "askpass edit background bell preserve-env set-home login remove-timestamp"
            " reset-timestamp list non-interactive preserve-groups stdin shell validate version"
            " help"
        ),
        long_values=_names(
            "close-from chdir group host prompt chroot role type command-timeout other-user user"
        ),
    )
    if _getopt(argv, 1, spec).has("e", "edit"):
        return _Problem("-e edits files")
    return _after(argv, spec)


def _unwrap_su(argv: Sequence[str]) -> _Runs:
    options, operands, unknown = _permuted_options(argv, 1, _SU)
    if unknown is not None:
        return _Problem(f"option {unknown!r} is not understood")
    if any(name in ("s", "shell") for name, _ in options):
        return _Problem("runs the command with a shell of the caller's choosing (-s)")
    strings = [v for n, v in options if n in ("c", "command", "session-command") and v]
    if len(strings) == 1:
        return _Line(strings[0], f"{_basename(argv[0])} -c")
    if strings:
        return _Problem("has more than one command string")
    if operands > 1:
        return _Problem("passes arguments to a shell")
    return None


def _unwrap_flock(argv: Sequence[str]) -> _Runs:
    parsed = _getopt(argv, 1, _FLOCK)
    if parsed.unknown is not None:
        return _Problem(f"option {parsed.unknown!r} is not understood")
    strings = parsed.values("c", "command")
    rest = list(argv[parsed.rest + 1 :])
    if rest and rest[0] in ("-c", "--command") and len(rest) > 1:
        strings.append(rest[1])
        rest = []
    if strings:
        return _Line(strings[0], "flock -c") if len(strings) == 1 else _Problem("two commands")
    return rest or None


def _unwrap_xargs(argv: Sequence[str]) -> _Runs:
    spec = _Getopt(
        short_flags="0oprtx",
        short_values="adEILnPs",
        short_optional="eil",
        long_flags=_names(
            "null open-tty interactive no-run-if-empty verbose exit show-limits eof replace"
            " max-lines help version"
        ),
        long_values=_names("arg-file delimiter max-args max-procs max-chars process-slot-var"),
    )
    if _getopt(argv, 1, spec).has("a", "arg-file"):
        return _Problem("reads its arguments from a file, which cannot be judged")
    runs = _after(argv, spec)
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
    return _Many((_normalise_head([argv[0]]) + own, *parts))


def _unwrap_busybox(argv: Sequence[str]) -> _Runs:
    if len(argv) < 2 or argv[1].startswith("-"):
        return None
    return list(argv[1:])


def _unwrap_watch(argv: Sequence[str]) -> _Runs:
    parsed = _getopt(argv, 1, _WATCH)
    if parsed.unknown is not None:
        return _Problem(f"option {parsed.unknown!r} is not understood")
    rest = argv[parsed.rest :]
    if not rest:
        return None
    if parsed.has("x", "exec"):
        return list(rest)
    return _Line(" ".join(rest), "watch")


def _unwrap_eval(argv: Sequence[str]) -> _Runs:
    return _Line(" ".join(argv[1:]), "eval") if len(argv) > 1 else None


def _unwrap_command(argv: Sequence[str]) -> _Runs:
    parsed = _getopt(argv, 1, _Getopt(short_flags="pvV"))
    if parsed.unknown is not None:
        return _Problem(f"option {parsed.unknown!r} is not understood")
    if parsed.has("v", "V") or parsed.rest >= len(argv):
        return None
    return list(argv[parsed.rest :])


def _unwrap_ionice(argv: Sequence[str]) -> _Runs:
    spec = _Getopt(
        short_flags="th",
        short_values="cnpPu",
        long_flags=("ignore", "help"),
        long_values=("class", "classdata", "pid", "pgid", "uid"),
    )
    parsed = _getopt(argv, 1, spec)
    if parsed.has("p", "P", "u", "pid", "pgid", "uid"):
        return None
    return _after(argv, spec)


def _unwrap_taskset(argv: Sequence[str]) -> _Runs:
    spec = _Getopt(short_flags="acphV", long_flags=("all-tasks", "cpu-list", "pid", "help"))
    if _getopt(argv, 1, spec).has("p", "pid"):
        return None
    return _after(argv, spec, operands=1)


_TIME = _Getopt(
    short_flags="pvqa",
    short_values="fo",
    long_flags=("portability", "verbose", "quiet", "append", "help"),
    long_values=("format", "output"),
)


def _unwrap_time(argv: Sequence[str]) -> _Runs:
    if _getopt(argv, 1, _TIME).has("o", "output"):
        return _Problem("-o writes a file")
    return _after(argv, _TIME)


#: Wrappers: how to find the command each runs.
_UNWRAPPERS: dict[str, Callable[[Sequence[str]], _Runs]] = {
    "env": _unwrap_env,
    "sudo": _unwrap_sudo,
    "doas": lambda argv: _after(argv, _Getopt(short_flags="nsL", short_values="Cua")),
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
    "exec": lambda argv: _after(argv, _Getopt(short_flags="cl", short_values="a")),
    "nohup": lambda argv: _after(argv, _Getopt(long_flags=("help", "version"))),
    "timeout": lambda argv: _after(
        argv,
        _Getopt(
            short_flags="v",
            short_values="sk",
            long_flags=("preserve-status", "foreground", "verbose", "help", "version"),
            long_values=("signal", "kill-after"),
        ),
        operands=1,
    ),
    "nice": lambda argv: _after(
        argv, _Getopt(short_values="n", long_values=("adjustment",), numeric=True)
    ),
    "stdbuf": lambda argv: _after(
        argv, _Getopt(short_values="ioe", long_values=("input", "output", "error"))
    ),
    "time": _unwrap_time,
    "ionice": _unwrap_ionice,
    "setsid": lambda argv: _after(
        argv, _Getopt(short_flags="cfw", long_flags=("ctty", "fork", "wait", "help"))
    ),
    "taskset": _unwrap_taskset,
    "chroot": lambda argv: _after(
        argv,
        _Getopt(long_flags=("skip-chdir", "help"), long_values=("userspec", "groups")),
        operands=1,
    ),
}

#: Programs whose purpose is to run another command or code that cannot be judged here:
#: an allow entry for them would list whatever they run.
RUNNERS = frozenset(
    _names(
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
_AWK = _Getopt(
    short_flags="bcCdDghMnNoOpPrsStVWy",
    short_values="FvfeiIlEL",
    long_flags=("characters-as-bytes", "traditional", "posix", "sandbox", "version", "help"),
    long_values=("field-separator", "assign", "file", "source", "include", "load", "exec"),
)
_SED = _Getopt(
    short_flags="nrEsuzb",
    short_values="efl",
    short_optional="i",
    long_flags=_names(
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


def _runs_code(name: str, argv: Sequence[str]) -> str | None:
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


def _script_operand(name: str, argv: Sequence[str]) -> int | None:
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
    parsed = _getopt(argv, 1, _AWK)
    if parsed.has("f", "e", "i", "l", "E", "file", "source", "include", "load", "exec"):
        return "runs a program from a file or a library"
    if parsed.unknown is not None:
        return f"has an option that is not understood ({parsed.unknown!r})"
    if parsed.rest < len(argv) and _AWK_CODE.search(argv[parsed.rest]):
        return "runs a program that calls commands or redirects output"
    return None


def _sed_code(argv: Sequence[str]) -> str | None:
    parsed = _getopt(argv, 1, _SED)
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


# ---- effect options: covered only when the allow entry names them


@dataclass(frozen=True)
class _EffectSpec:
    what: str
    exact: frozenset[str] = frozenset()
    long: tuple[str, ...] = ()
    short: str = ""
    short_values: str = ""
    prefixes: tuple[str, ...] = ()


_DELETES = "deletes files"
_RUNS = "runs a helper command"
_UPLOADS = "sends data or changes the request"

_EFFECT_SPECS: dict[str, tuple[_EffectSpec, ...]] = {
    "find": (
        _EffectSpec(_DELETES, exact=frozenset({"-delete"})),
        _EffectSpec("writes files", exact=frozenset({"-fprint", "-fprint0", "-fprintf", "-fls"})),
    ),
    "rsync": (
        _EffectSpec(
            _DELETES,
            long=_names(
                "delete del delete-before delete-during delete-delay delete-after delete-excluded"
                " delete-missing-args remove-source-files remove-sent-files"
            ),
        ),
        _EffectSpec(
            _RUNS, long=("rsh", "rsync-path", "remote-option"), short="eM", short_values="BfT"
        ),
    ),
    "tar": (
        _EffectSpec(
            _DELETES,
            long=("remove-files", "delete", "recursive-unlink", "unlink-first"),
            short="U",
            short_values="fbCgHKLNTVX",
        ),
        _EffectSpec(
            _RUNS,
            long=_names(
                "to-command checkpoint-action use-compress-program rsh-command rmt-command"
                " info-script new-volume-script"
            ),
            short="IF",
            short_values="fbCgHKLNTVX",
        ),
    ),
    "npm": (
        _EffectSpec(
            _RUNS,
            long=_names(
                "script-shell shell node-options userconfig globalconfig prefix git editor"
                " browser viewer onload-script init-module"
            ),
        ),
    ),
    "curl": (
        _EffectSpec(
            _UPLOADS,
            long=_names(
                "upload-file data data-binary data-raw data-ascii data-urlencode form form-string"
                " json config request"
            ),
            short="TdFKX",
            short_values="AbcCdDeEFhHKmoQrTuUwxXyYz",
        ),
    ),
    "wget": (
        _EffectSpec(
            _UPLOADS,
            long=_names("post-file post-data body-file body-data method execute input-file config"),
            short="ei",
            short_values="aABdDeiIlOoPQRtTUwXY",
        ),
    ),
    "nc": (_EffectSpec(_RUNS, long=("exec", "sh-exec", "lua-exec"), short="ec"),),
    "zip": (_EffectSpec(_RUNS, exact=frozenset({"-TT"}), long=("unzip-command",)),),
    "sed": (
        _EffectSpec("edits files in place", long=("in-place",), short="i", short_values="efl"),
    ),
    "perl": (_EffectSpec("edits files in place", short="i", short_values="I"),),
    "ruby": (_EffectSpec("edits files in place", short="i", short_values="CEFIKTWx"),),
    "dd": (_EffectSpec("writes to a file or device", prefixes=("of=",)),),
    "sort": (
        _EffectSpec(
            "writes its output to a file", long=("output",), short="o", short_values="kStT"
        ),
    ),
    "psql": (
        _EffectSpec(
            "writes a file", long=("output", "log-file"), short="oL", short_values="cdfhpUvPTF"
        ),
    ),
    "mysql": (_EffectSpec(_RUNS, long=("pager", "tee", "init-command")),),
}
_EFFECT_SPECS["netcat"] = _EFFECT_SPECS["ncat"] = _EFFECT_SPECS["nc"]
_EFFECT_SPECS["mariadb"] = _EFFECT_SPECS["mysql"]
_EFFECT_SPECS["gtar"] = _EFFECT_SPECS["tar"]

_GIT_LONG = _names(
    "ext-diff output upload-pack receive-pack exec extcmd open-files-in-pager tree-filter"
    " index-filter msg-filter commit-filter env-filter parent-filter tag-name-filter template"
    " config config-env exec-path"
)
_GIT_SUBCOMMAND_SHORT = {
    "rebase": "x",
    "grep": "O",
    "difftool": "x",
    "clone": "uc",
    "ls-remote": "u",
    "fetch": "u",
    "pull": "u",
}
_GIT_RUNNERS = frozenset(
    {"filter-branch", "difftool", "mergetool", "daemon", "instaweb", "web--browse"}
)
_DOTNET_SWITCH = re.compile(r"^(?:--?|/)([a-z][a-z-]*)(?:[:=].*)?$", re.I)
_DOTNET_EFFECTS = frozenset(
    _names(
        "p property t target l logger dl distributedlogger restoreproperty rp test-adapter-path"
        " collect settings s diag d source configfile bl binarylogger e environment pp"
        " preprocess fl filelogger flp fileloggerparameters orc outputresultscache"
    )
)
_COMPRESSORS = frozenset(
    _names("gzip gunzip bzip2 bunzip2 xz unxz lzma unlzma zstd unzstd compress uncompress")
)
_MAKE_ASSIGNMENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_.]*\s*[:+?!]*=")


def _effects(name: str, argv: Sequence[str]) -> list[tuple[int, str]]:
    """(token index, what it does) for every option of `argv` with an effect beyond its
    program's plain job; an allow entry covers it only by naming it."""
    found: list[tuple[int, str]] = []
    for spec in _EFFECT_SPECS.get(name, ()):
        found.extend(_spec_effects(spec, argv, name))
    script = _script_operand(name, argv)
    if script is not None:
        found.append(
            (script, "is a script file run by its interpreter (its content cannot be judged)")
        )
    if name == "git":
        found.extend(_git_effects(argv))
    elif name == "dotnet":
        subcommand = next((t for t in argv[1:] if not t.startswith("-")), "")
        for i, token in enumerate(argv[1:], start=1):
            match = _DOTNET_SWITCH.match(token)
            switch = match.group(1).lower() if match else ""
            if switch in _DOTNET_EFFECTS or (switch == "a" and subcommand == "test"):
                found.append((i, "sets properties, targets, loggers or adapters (can run code)"))
            elif token.startswith("@") or token in ("--",):
                found.append((i, "reads settings that can run code"))
    elif name == "uniq":
        operands = [i for i, t in enumerate(argv[1:], start=1) if not t.startswith("-")]
        if len(operands) > 1:
            found.append((operands[1], "is an output file uniq writes"))
    elif name in _COMPRESSORS:
        keeps = any(
            t in ("-c", "--stdout", "-k", "--keep", "-l", "--list", "-t", "--test")
            or (t.startswith("-") and not t.startswith("--") and set(t[1:]) & set("cklt"))
            for t in argv[1:]
        )
        operands = [i for i, t in enumerate(argv[1:], start=1) if not t.startswith("-")]
        if operands and not keeps:
            found.append((operands[0], "is replaced (the original deleted) unless -c or -k"))
    elif name in ("make", "gmake"):
        for i, token in enumerate(argv[1:], start=1):
            if (
                _MAKE_ASSIGNMENT.match(token)
                or token in ("-E", "-f")
                or token.startswith(("--eval", "--file", "--makefile", "-E", "-f"))
            ):
                found.append((i, "overrides variables or makefiles (recipes can run anything)"))
    return sorted(found)


def _spec_effects(spec: _EffectSpec, argv: Sequence[str], name: str) -> Iterator[tuple[int, str]]:
    tokens = list(argv)
    if name in ("tar", "gtar") and len(tokens) > 1 and not tokens[1].startswith("-"):
        tokens[1] = "-" + tokens[1]  # tar's old-style bundled options: `tar xIf ...`
    skip = False
    for i, token in enumerate(tokens[1:], start=1):
        if skip:
            skip = False
            continue
        if token in spec.exact or any(token.startswith(p) for p in spec.prefixes):
            yield i, spec.what
        elif token.startswith("--") and len(token) > 2:
            # npm and others also accept `--script_shell`, `--Script-Shell`.
            given = token[2:].split("=", 1)[0].lower().replace("_", "-")
            if len(given) >= 2 and any(long.startswith(given) for long in spec.long):
                yield i, spec.what
        elif token.startswith("-") and len(token) > 1:
            for j, letter in enumerate(token[1:], start=1):
                if letter in spec.short:
                    yield i, spec.what
                    break
                if letter in spec.short_values:
                    skip = j == len(token) - 1
                    break


def _git_effects(argv: Sequence[str]) -> Iterator[tuple[int, str]]:
    i = 1
    with_value = ("-c", "-C", "--git-dir", "--work-tree", "--namespace", "--config-env")
    while i < len(argv) and argv[i].startswith("-"):
        token = argv[i]
        if token in ("-c", "--config-env") or token.startswith(("--config-env=", "--exec-path")):
            yield i, "sets configuration that can run commands (pager, aliases, helpers)"
        i += 2 if token in with_value else 1
    subcommand = argv[i] if i < len(argv) else ""
    if subcommand in _GIT_RUNNERS:
        yield i, "runs configured or given commands"
    shorts = _GIT_SUBCOMMAND_SHORT.get(subcommand, "")
    rest = argv[i + 1 :]
    for j, token in enumerate(rest, start=i + 1):
        if token.startswith("--") and len(token) > 2:
            given = token[2:].split("=", 1)[0]
            if len(given) >= 2 and any(long.startswith(given) for long in _GIT_LONG):
                yield j, "writes elsewhere or runs a helper command"
        elif token.startswith("-") and len(token) > 1 and shorts and token[1] in shorts:
            yield j, "runs a helper command"
        elif (subcommand, token) in (("bisect", "run"), ("submodule", "foreach")):
            yield j, "runs the command that follows"
