"""Shell command checks on parsed argv: allow-list prefixes, block-list patterns, evasions.

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
2. Nested command strings (`sh -c`, `bash -lc`, `su -c`, `env -S`, ...) are checked
   recursively with the same rules, wherever they appear in argv (`sudo bash -c ...`).
3. Block-list patterns (`escalate_ok` is True: the tenant policy decides between deny
   and escalation to production). A pattern is `program [flags] [words]`: the program
   matches any argv token by basename, case-insensitively, with globs in the token
   honoured (`/bin/r?`), so wrappers (`env`, `sudo`, `nice`, `timeout`, `xargs`,
   `find -exec`, `busybox`, ...) need no special cases; short flags match as a set in any
   clustering (`-rf` = `-r -f` = `-fr` = `-Rf`), long flags and GNU prefixes map to short
   ones (`--recursive`, `--rec`); words match in order among the remaining tokens
   (`kubectl -n x delete ns/foo`). The same matcher runs over a word split of every
   token with embedded text, with SQL comments stripped and Unicode normalised, which
   catches `psql -c "DrOp/**/DataBase x"` and `python -c "os.system('rm -fr /')"`.
   The matching is deliberately conservative: a false block is a clear, fixable denial;
   a false pass is an incident.
4. The allow list, when non-empty, is matched by argv-prefix tokens; `argv[0]` is reduced
   to its basename only when it is an absolute path into a standard bin directory.
"""

from __future__ import annotations

import re
import shlex
import unicodedata
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from enum import StrEnum
from fnmatch import fnmatchcase
from functools import lru_cache

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
SHELLS = frozenset(
    {"sh", "bash", "zsh", "dash", "ksh", "ash", "mksh", "yash", "fish", "csh", "tcsh", "rbash"}
)

#: Wrappers that take a command line in an option: program -> option spellings.
STRING_OPTIONS: dict[str, tuple[str, ...]] = {
    "su": ("-c", "--command"),
    "runuser": ("-c", "--command"),
    "flock": ("-c", "--command"),
    "script": ("-c", "--command"),
    "env": ("-S", "--split-string"),
}

#: Other names of a blocked program (same CLI, same effect).
PROGRAM_ALIASES: dict[str, frozenset[str]] = {
    "terraform": frozenset({"tofu"}),
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
    "drop database": ("dropdb", "mysqladmin drop"),
    "kubectl delete namespace": ("oc delete project", "oc delete projects"),
}


class ShellRule(StrEnum):
    """Why a command was refused before any pattern was looked at."""

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

    `allowed`: matches the allow list (always true for an empty allow list).
    `blocked`: refused by a structural rule or a block-list pattern.
    `matched`: the block or allow pattern, or the `ShellRule` value that refused it.
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
        """Runs as is: allow-listed and not blocked."""
        return self.allowed and not self.blocked


def check_command(command: str, *, allow: Sequence[str], block: Sequence[str]) -> ShellVerdict:
    """Check a command line against the allow and block lists; see the module docstring."""
    argv, refusal = _check(command, tuple(block), depth=0)
    allowed, allow_match = _allowed(argv, allow) if argv else (False, None)
    if refusal is not None:
        matched, reason, escalate_ok = refusal
        return ShellVerdict(command, argv, allowed, True, matched, reason, escalate_ok)
    if not allowed:
        shown = " ".join(shlex.quote(a) for a in argv[:3])
        return ShellVerdict(
            command,
            argv,
            False,
            False,
            ShellRule.NOT_ALLOWED.value,
            f"command `{_clip(shown)}` is not on the shell allow list "
            f"({', '.join(allow)}): only allow-listed commands run",
            False,
        )
    reason = (
        f"command matches allow-list entry {allow_match!r} and no block-list pattern"
        if allow_match
        else "command matches no block-list pattern (no allow list is configured)"
    )
    return ShellVerdict(command, argv, True, False, allow_match, reason, False)


# --------------------------------------------------------------------------- structure

_Refusal = tuple[str, str, bool]  # matched, reason, escalate_ok

_NO_SHELL = "tools run argv without a shell"


def _check(
    command: str, block: tuple[str, ...], *, depth: int
) -> tuple[list[str], _Refusal | None]:
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


def _nested_commands(argv: Sequence[str]) -> Iterable[tuple[str, str]]:
    """(wrapper description, inner command line) for every nested command string."""
    for i, token in enumerate(argv):
        program = _basename(token)
        if program in SHELLS:
            inner = _shell_c_argument(argv, i)
            if inner is not None:
                yield f"{program} -c", inner
        options = STRING_OPTIONS.get(program)
        if options:
            for j in range(i + 1, len(argv)):
                arg = argv[j]
                for option in options:
                    if arg == option and j + 1 < len(argv):
                        yield f"{program} {option}", argv[j + 1]
                    elif option.startswith("--") and arg.startswith(option + "="):
                        yield f"{program} {option}", arg[len(option) + 1 :]
                    elif (
                        not option.startswith("--")
                        and arg.startswith(option)
                        and len(arg) > len(option)
                    ):
                        yield f"{program} {option}", arg[len(option) :]


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
    """Every way a non-flag token can spell a word: `ns/foo`, `ns,pods`, `ns.v1`."""
    lower = token.lower()
    forms = {lower}
    for piece in re.split(r"[,\s]+", lower):
        if not piece:
            continue
        forms.add(piece)
        forms.add(piece.split("/", 1)[0])
        forms.add(piece.split(".", 1)[0])
    aliases = TOKEN_ALIASES.get(program, {})
    return frozenset(forms | {aliases[f] for f in forms if f in aliases})


def _program_matches(token: str, programs: frozenset[str]) -> bool:
    base = _basename(token)
    candidates = {base, _canonical_program(base)}
    if "{" in base:
        candidates.update(p for p in re.split(r"[{},]", base) if p)
    for candidate in candidates:
        if candidate in programs:
            return True
        if any(ch in candidate for ch in "*?[") and any(
            fnmatchcase(program, candidate) for program in programs
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
            if _program_matches(token, pattern.programs):
                if _rest_matches(pattern, pattern.program, tokens[i + 1 :]):
                    return pattern.name, " ".join(tokens[i:])
    return None


_SQL_BLOCK_COMMENT = re.compile(r"/\*.*?\*/", re.DOTALL)
_SQL_COMMENT_DELIMITERS = re.compile(r"/\*!?\d*|\*/")
_NOT_WORD = re.compile(r"[^\w./\-]+")
_PLAIN_TOKEN = re.compile(r"^[A-Za-z0-9_.\-/]*$")


def _text_variants(argv: Sequence[str]) -> list[list[str]]:
    """Word splits of argv with embedded text opened up (SQL comments, code strings)."""
    if all(_PLAIN_TOKEN.match(token) for token in argv):
        return []
    variants: list[list[str]] = []
    for strip in (_SQL_BLOCK_COMMENT, _SQL_COMMENT_DELIMITERS):
        words: list[str] = []
        for token in argv:
            text = unicodedata.normalize("NFKC", token)
            text = strip.sub(" ", text)
            words.extend(_NOT_WORD.sub(" ", text).split())
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


@lru_cache(maxsize=512)
def _allow_tokens(pattern: str) -> tuple[str, ...]:
    try:
        tokens = shlex.split(pattern)
    except ValueError:
        return ()
    return tuple(_normalise_head(tokens)) if tokens else ()


def _allowed(argv: Sequence[str], allow: Sequence[str]) -> tuple[bool, str | None]:
    if not allow:
        return True, None
    normalised = _normalise_head(argv)
    for pattern in allow:
        tokens = _allow_tokens(pattern)
        if tokens and tuple(normalised[: len(tokens)]) == tokens:
            return True, pattern
    return False, None
