"""The block list: patterns `program [flags] [words]` and their matching on argv (rule 3).

A pattern matches any argv token by basename with the flags as a set and the words in
order, so wrappers need no special cases; the same matcher runs over the words of
embedded text (SQL comments stripped, quoted fragments joined, Unicode normalised).
Conservative on purpose: a false block is a fixable denial, a false pass an incident.
"""

from __future__ import annotations

import re
import shlex
import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass, field
from enum import Enum, auto
from fnmatch import fnmatchcase
from functools import lru_cache

from tooladapter.pipeline.linear_regex import compile_linear
from tooladapter.pipeline.shell.programs import basename

#: The reference's default block list (Tools:Shell:BlockList): denied or escalated.
DEFAULT_BLOCK_LIST: tuple[str, ...] = (
    "terraform destroy",
    "az group delete",
    "kubectl delete namespace",
    "DROP DATABASE",
    "rm -rf",
)


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
        program = _canonical_program(basename(tokens[0]))
        sorted_tokens = _sort_tokens(program, tokens[1:])
        compiled.append(
            _BlockPattern(
                name=pattern,
                program=program,
                programs=frozenset({program} | PROGRAM_ALIASES.get(program, frozenset())),
                short_flags=frozenset(sorted_tokens.short),
                long_flags=frozenset(sorted_tokens.long),
                words=tuple(word for _, forms in sorted_tokens.words for word in forms),
            )
        )
    return tuple(compiled)


class _TokenKind(Enum):
    """What a token after a program is to the matcher."""

    WORD = auto()
    SHORT = auto()  # short flag letters (long options that mean one map here too)
    LONG = auto()


def _classify_token(program: str, token: str) -> tuple[_TokenKind, list[str]]:
    """(WORD, forms) | (SHORT, letters) | (LONG, names) for one token after `program`."""
    lower = token.lower()
    alias = TOKEN_ALIASES.get(program, {}).get(lower)
    if alias is not None:
        return _TokenKind.WORD, [alias]
    if lower.startswith("--") and len(lower) > 2:
        name = lower[2:].split("=", 1)[0]
        table = LONG_TO_SHORT.get(program, {})
        letters = [short for full, short in table.items() if name and full.startswith(name)]
        if letters:
            return _TokenKind.SHORT, letters
        return _TokenKind.LONG, [name]
    if lower.startswith("-") and len(lower) > 1:
        return _TokenKind.SHORT, list(lower[1:])
    return _TokenKind.WORD, [lower]


@dataclass
class _SortedTokens:
    """The tokens after a program by kind: flag letters, long option names, and each
    word token with the forms `_classify_token` gives it."""

    short: set[str] = field(default_factory=set)
    long: set[str] = field(default_factory=set)
    words: list[tuple[str, list[str]]] = field(default_factory=list)


def _sort_tokens(program: str, tokens: Sequence[str]) -> _SortedTokens:
    """Patterns and argv sort their tokens alike, so flags match as sets either way."""
    found = _SortedTokens()
    for token in tokens:
        kind, values = _classify_token(program, token)
        if kind is _TokenKind.SHORT:
            found.short.update(values)
        elif kind is _TokenKind.LONG:
            found.long.update(values)
        else:
            found.words.append((token, values))
    return found


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
    base = basename(token)
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
    sorted_tokens = _sort_tokens(program, rest)
    words = [_word_forms(program, token) for token, _ in sorted_tokens.words]
    if not pattern.short_flags <= sorted_tokens.short:
        return False
    for flag in pattern.long_flags:
        if not any(flag.startswith(name) for name in sorted_tokens.long if name):
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


def block_hit(argv: Sequence[str], block: Sequence[str]) -> tuple[str, str] | None:
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
