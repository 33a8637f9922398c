"""Options of the programs the check looks into, parsed getopt style.

Wrappers and interpreters are judged by what their options make them run, so their
options are parsed as the programs parse them (clustering, values, GNU prefixes), not
matched as strings.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class Getopt:
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
class Parsed:
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


def getopt(argv: Sequence[str], start: int, spec: Getopt) -> Parsed:
    """Parse options from `argv[start]` up to the first operand or `--`."""
    options: list[tuple[str, str | None]] = []
    i = start
    n = len(argv)
    while i < n:
        token = argv[i]
        if token.startswith("--") and len(token) == 2:
            return Parsed(options, i + 1)
        if token.startswith("--"):
            given, eq, value = token[2:].partition("=")
            name = spec.long_name(given)
            if name is None:
                return Parsed(options, i, unknown=token)
            if name in spec.long_values and not eq:
                if i + 1 >= n:
                    return Parsed(options, n, unknown=token)
                options.append((name, argv[i + 1]))
                i += 2
                continue
            options.append((name, value if eq else None))
            i += 1
            continue
        if len(token) < 2 or not token.startswith("-"):
            return Parsed(options, i)
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
                    return Parsed(options, n, unknown=token)
                break
            if letter in spec.short_optional:
                options.append((letter, token[j + 1 :] or None))
                break
            if letter in spec.short_flags:
                options.append((letter, None))
                j += 1
                continue
            return Parsed(options, i, unknown=token)
        i += 2 if consumed_next else 1
    return Parsed(options, n)


def permuted_options(
    argv: Sequence[str], start: int, spec: Getopt
) -> tuple[list[tuple[str, str | None]], int, str | None]:
    """Options that may also follow operands (`su - root -c '...'`): (options, number of
    operands, the first option not understood)."""
    options: list[tuple[str, str | None]] = []
    operands = 0
    j = start
    while j < len(argv):
        parsed = getopt(argv, j, spec)
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
