"""Regular expressions that meet agent-influenced text run on RE2: linear time, no backtracking.

Python's `re` backtracks: `^(a+)+$` against `aaaa…b` takes exponential time, and even a
careful-looking pattern can be quadratic over repeated input (detect-secrets' npm rule over
`seq -s // 1 40000` took ~20 s). It also holds the GIL for the whole match, so neither a
thread nor a timeout inside the process can stop it. RE2 (`google-re2`) compiles to automata
and matches in time linear in the text (for one match; callers keep the work after each
match bounded too), refuses what it cannot do in linear time (backreferences, look-around)
and releases the GIL while it matches, so a long match on a worker thread leaves the event
loop running. Everything that runs a regular expression over text an agent can influence
uses this module: the sanitizer's secret formats, JSON Schema `pattern`,
`patternProperties` and `format: regex`, and policy conditions with `matches`.

Patterns written by people (a descriptor's schema, a policy) are also refused when they nest
unbounded quantifiers so that one string can match in many ways (`(a+)+`, `(a*)*`,
`(\\w+\\s?)+`): RE2 runs them in linear time, but the schema is published to agents, whose
validators (JavaScript, Python `re`) backtrack.
"""

from __future__ import annotations

import functools
import importlib
from typing import Any, Protocol

import re2

#: Python's own regex parser (`re._parser`), used only to judge a pattern's shape.
sre_parse: Any = importlib.import_module("re._parser")

#: The engine every pattern of this module runs on (tests and `make bench` assert it).
ENGINE = "re2"

#: Program size bound of one compiled pattern (RE2's default); larger patterns are refused.
MAX_PROGRAM_BYTES = 8 << 20
#: For patterns an agent supplies (`format: regex` values): compiled only to be checked.
MAX_AGENT_PROGRAM_BYTES = 1 << 20
#: Longest pattern accepted at all (descriptor and policy patterns are short in practice).
MAX_PATTERN_CHARS = 4096
#: An outer repetition bounded above this counts as unbounded for the nesting rule.
_NESTING_REPEAT = 10


class LinearMatch(Protocol):
    def span(self, group: int = 0) -> tuple[int, int]: ...
    def group(self, group: int = 0) -> Any: ...


class LinearPattern(Protocol):
    """What this module returns: a compiled RE2 pattern (the `re2` wrapper's `_Regexp`)."""

    @property
    def pattern(self) -> str: ...
    @property
    def groups(self) -> int: ...
    def search(self, text: Any) -> LinearMatch | None: ...
    def finditer(self, text: Any) -> Any: ...
    def sub(self, repl: Any, text: Any, count: int = 0) -> Any: ...


class UnsafePattern(ValueError):
    """A pattern the linear engine cannot run, or one refused by the nesting rule."""


def _options(max_mem: int) -> Any:
    options = re2.Options()
    options.max_mem = max_mem
    options.log_errors = False  # an agent's broken pattern must not write the operator's log
    return options


def _compile(pattern: str, max_mem: int) -> LinearPattern:
    if len(pattern) > MAX_PATTERN_CHARS:
        raise UnsafePattern(
            f"the pattern is {len(pattern)} characters long, more than {MAX_PATTERN_CHARS}"
        )
    try:
        # Not `re2.compile`: its cache is unbounded in memory (128 entries of up to 8 MiB).
        compiled: LinearPattern = re2._Regexp(pattern, _options(max_mem))
    except re2.error as err:
        detail = err.args[0] if err.args else err
        if isinstance(detail, bytes):
            detail = detail.decode("utf-8", errors="replace")
        raise UnsafePattern(f"{detail} (RE2 syntax: no backreferences, no look-around)") from None
    except (TypeError, ValueError) as err:  # e.g. a lone surrogate cannot be encoded
        raise UnsafePattern(str(err)) from None
    return compiled


@functools.lru_cache(maxsize=512)
def compile_linear(pattern: str) -> LinearPattern:
    """A pattern of ours, a descriptor's or a policy's, compiled for RE2 (cached).

    Raises `UnsafePattern` when RE2 cannot run it (see `pattern_problem` for the checks a
    descriptor or policy pattern gets before it is accepted)."""
    return _compile(pattern, MAX_PROGRAM_BYTES)


def compile_internal(pattern: str) -> LinearPattern:
    """One of tooladapter's own patterns, of any length (not cached: compile it once)."""
    try:
        compiled: LinearPattern = re2._Regexp(pattern, _options(MAX_PROGRAM_BYTES))
    except re2.error as err:
        raise UnsafePattern(str(err)) from None
    return compiled


def is_valid_agent_regex(pattern: str) -> bool:
    """Whether an agent-supplied string is a regular expression (JSON Schema `format:
    regex`), checked by compiling it with a small program bound and no cache."""
    try:
        _compile(pattern, MAX_AGENT_PROGRAM_BYTES)
    except UnsafePattern:
        return False
    return True


def search(pattern: str, text: str) -> bool:
    """Whether `pattern` matches anywhere in `text` (JSON Schema `pattern` semantics)."""
    return compile_linear(pattern).search(text) is not None


def pattern_problem(pattern: str) -> str | None:
    """Why a descriptor's or policy's pattern is refused ("does not compile ..." or "is
    refused: ..."), or None when it is accepted."""
    try:
        compile_linear(pattern)
    except UnsafePattern as err:
        return f"does not compile on the linear regex engine ({ENGINE}): {err}"
    nested = _ambiguous_repetition(pattern)
    if nested:
        return (
            f"is refused: it nests unbounded quantifiers ({nested} around another), so one "
            "string matches it in exponentially many ways and backtracking validators "
            "(agents', other tools') stall on it; write it without the nested repetition "
            "(e.g. '^a+$' for '^(a+)+$')"
        )
    return None


# --------------------------------------------------------------------------- nesting rule

_REPEATS = {
    sre_parse.MAX_REPEAT,
    sre_parse.MIN_REPEAT,
    getattr(sre_parse, "POSSESSIVE_REPEAT", None),
}


def _ambiguous_repetition(pattern: str) -> str | None:
    """The first repeated group whose body can match one string in many ways: it is empty-
    matchable, or its only mandatory part is itself an unbounded repetition (`(a+)+`,
    `(\\w+\\s?)*`). A group with a mandatory separator (`([a-z]+\\.)+`) is fine. Patterns
    Python's parser does not know (RE2-only syntax) are not judged: RE2 runs them linearly."""
    try:
        parsed = sre_parse.parse(pattern)
    except Exception:  # RE2-only syntax (RE2 already accepted it): not judged
        return None
    stack: list[Any] = [parsed]
    while stack:
        items = stack.pop()
        for op, av in items:
            if op in _REPEATS:
                low, high, body = av
                repeated = high == sre_parse.MAXREPEAT or high > _NESTING_REPEAT
                if repeated and _matches_many_ways(body):
                    return _describe(low, high)
                stack.append(body)
            elif op is sre_parse.SUBPATTERN:
                stack.append(av[-1])
            elif op is sre_parse.BRANCH:
                stack.extend(av[1])
            elif op in (sre_parse.ASSERT, sre_parse.ASSERT_NOT):
                stack.append(av[1])
    return None


def _describe(low: int, high: int) -> str:
    if high == sre_parse.MAXREPEAT:
        return {0: "a group repeated with '*'", 1: "a group repeated with '+'"}.get(
            low, f"a group repeated {{{low},}}"
        )
    return f"a group repeated {{{low},{high}}}"


def _mandatory(items: Any) -> list[tuple[Any, Any]]:
    """The items of a sequence that must match at least one character, groups unwrapped."""
    out: list[tuple[Any, Any]] = []
    for op, av in items:
        if op is sre_parse.SUBPATTERN:
            out.extend(_mandatory(av[-1]))
            continue
        sub = sre_parse.SubPattern(items.state, [(op, av)])
        if sub.getwidth()[0] > 0:
            out.append((op, av))
    return out


def _matches_many_ways(body: Any) -> bool:
    if body.getwidth()[0] == 0:
        return True  # an empty-matchable body repeated: `(a*)*`, `(a?)+`
    mandatory = _mandatory(body)
    return (
        len(mandatory) == 1
        and mandatory[0][0] in _REPEATS
        and (mandatory[0][1][1] == sre_parse.MAXREPEAT or mandatory[0][1][1] > _NESTING_REPEAT)
    )
