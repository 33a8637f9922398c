"""Arguments as a reviewer reads them: exactly what will run, with nothing hidden.

An approval binds to the hash of the exact arguments, so every review view (the page,
`tooladapter approvals`, REST, the MCP pending result) must show those arguments byte for
byte. Issue 28 found the page redacting by secret patterns and by key name: an agent could
make the destination of an upload look like a credential and the reviewer approved a
`[REDACTED:...]`. Nothing secret needs hiding here anyway: what the operator injects
(brokered secrets) never enters arguments; what is in them the agent typed itself.

So this module hides nothing. It changes only what a person cannot see:

- Characters that print nothing or change how the text around them reads (categories Cc,
  Cf, Zl, Zp, Co, Cn, Cs; bidirectional controls; zero-width characters; spaces other than
  U+0020; variation selectors and blank fillers) are each replaced by a visible marker
  `⟨U+XXXX⟩` and listed in a warning with the JSON pointer of the string that holds them.
  Tab, line feed and carriage return are left to JSON, which shows them as `\\t`, `\\n`,
  `\\r`.
- A `⟨` (U+27E8) the agent typed is itself shown as `⟨U+27E8⟩`, so every marker on screen
  stands for exactly one character and no text can pose as a marker (or hide one).
- Tokens shaped like a credential (the result sanitizer's patterns) are flagged with their
  offsets in the raw string, never masked: a mask would have to cover exactly the token,
  and a reviewer gains nothing by not seeing what the agent sent.
- Homoglyphs (U+0430 CYRILLIC SMALL LETTER A for a Latin `a`) are printing characters and shown as
  themselves: the text on screen is the text that runs; telling scripts apart is not
  attempted here.

The mapping is injective, so two different arguments never look the same. Diffs compare
the raw values (pipeline/argdiff); only their display goes through `visible`.
"""

from __future__ import annotations

import json
import re
import unicodedata
from collections import Counter
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, Final

from tooladapter.pipeline.sanitize.rules import pattern_spans
from tooladapter.review.argdiff import canonical

#: Opens and closes a marker; the opening bracket typed by an agent is itself marked.
OPEN: Final = "\u27e8"
CLOSE: Final = "\u27e9"
#: At most this many warnings and flags are listed (the rest are counted).
MAX_LISTED: Final = 50
#: What JSON already shows as an escape: not marked, not warned about.
_JSON_ESCAPED: Final = frozenset("\t\n\r")
#: A marker in shown text (`visible` output); nothing else matches, see the docstring.
MARKER: Final = re.compile(f"{OPEN}U\\+[0-9A-F]{{4,6}}{CLOSE}")


class CharacterKind(StrEnum):
    """Why a character is shown as a marker."""

    BIDI = "bidirectional-control"
    ZERO_WIDTH = "zero-width"
    CONTROL = "control"
    FORMAT = "format"
    SPACE = "unusual-space"
    SEPARATOR = "line-separator"
    PRIVATE_USE = "private-use"
    UNASSIGNED = "unassigned"
    SURROGATE = "surrogate"
    BLANK = "blank-lookalike"
    MARKER = "marker-bracket"


#: Reorder the text around them: what reads left to right may run in another order.
_BIDI: Final = frozenset([0x061C, 0x200E, 0x200F, *range(0x202A, 0x202F), *range(0x2066, 0x206A)])
_ZERO_WIDTH: Final = frozenset([0x200B, 0x200C, 0x200D, 0x2060, 0xFEFF, 0x180E])
#: Printing nothing though not in a non-printing category: combining grapheme joiner,
#: Hangul and Khmer fillers, Mongolian and other variation selectors, braille blank.
_BLANK: Final = frozenset(
    [
        0x034F,
        0x115F,
        0x1160,
        0x17B4,
        0x17B5,
        0x2800,
        0x3164,
        0xFFA0,
        *range(0x180B, 0x1810),
        *range(0xFE00, 0xFE10),
        *range(0xE0100, 0xE01F0),
    ]
)
_BY_CATEGORY: Final = {
    "Cc": CharacterKind.CONTROL,
    "Cf": CharacterKind.FORMAT,
    "Zl": CharacterKind.SEPARATOR,
    "Zp": CharacterKind.SEPARATOR,
    "Zs": CharacterKind.SPACE,
    "Co": CharacterKind.PRIVATE_USE,
    "Cn": CharacterKind.UNASSIGNED,
    "Cs": CharacterKind.SURROGATE,
}
_WHY: Final = {
    CharacterKind.BIDI: "a bidirectional control: the text may read in another order than it runs",
    CharacterKind.ZERO_WIDTH: "a zero-width character: invisible, yet part of the value",
    CharacterKind.CONTROL: "a control character",
    CharacterKind.FORMAT: "an invisible format character",
    CharacterKind.SPACE: "a space that is not U+0020",
    CharacterKind.SEPARATOR: "a line or paragraph separator",
    CharacterKind.PRIVATE_USE: "a private-use character (no agreed glyph)",
    CharacterKind.UNASSIGNED: "an unassigned code point",
    CharacterKind.SURROGATE: "a lone surrogate (not valid text)",
    CharacterKind.BLANK: "a character that prints as blank",
    CharacterKind.MARKER: "the marker bracket itself, typed in the value",
}


def kind_of(char: str) -> CharacterKind | None:
    """Why `char` is shown as a marker, or None when it is shown as itself."""
    point = ord(char)
    if char == OPEN:
        return CharacterKind.MARKER
    if point in _BIDI:
        return CharacterKind.BIDI
    if point in _ZERO_WIDTH:
        return CharacterKind.ZERO_WIDTH
    if point in _BLANK:
        return CharacterKind.BLANK
    if char == " ":
        return None
    return _BY_CATEGORY.get(unicodedata.category(char))


def _marker(char: str) -> str:
    return f"{OPEN}U+{ord(char):04X}{CLOSE}"


def visible(text: str, *, keep: frozenset[str] = frozenset()) -> str:
    """`text` with every character `kind_of` names replaced by its marker (but those in
    `keep`); one-line contexts (a terminal, a reason) keep nothing."""
    if text.isascii() and text.isprintable() and OPEN not in text:
        return text  # the common case, without a look at each character
    return "".join(_marker(c) if c not in keep and kind_of(c) is not None else c for c in text)


def visible_value(value: Any) -> Any:
    """`value` with `visible` applied to every string in it, object keys included (JSON
    shows tab, line feed and carriage return as escapes: those stay)."""
    if isinstance(value, str):
        return visible(value, keep=_JSON_ESCAPED)
    if isinstance(value, dict):
        return {visible(str(k), keep=_JSON_ESCAPED): visible_value(v) for k, v in value.items()}
    if isinstance(value, list):
        return [visible_value(v) for v in value]
    return value


def _pointer(path: str, key: str) -> str:
    return f"{path}/{key.replace('~', '~0').replace('/', '~1')}"


def _strings(value: Any, path: str = "") -> list[tuple[str, str]]:
    """Every string of `value` with its JSON pointer (a key's pointer is its member's)."""
    found: list[tuple[str, str]] = []
    stack: list[tuple[Any, str]] = [(value, path)]
    while stack:  # a loop, not recursion: arguments may nest as deep as the CRD allows
        item, where = stack.pop()
        if isinstance(item, str):
            found.append((where or "/", item))
        elif isinstance(item, dict):
            for key, sub in item.items():
                found.append((_pointer(where, str(key)), str(key)))
                stack.append((sub, _pointer(where, str(key))))
        elif isinstance(item, list):
            stack.extend((sub, f"{where}/{i}") for i, sub in enumerate(item))
    found.reverse()
    return found


@dataclass(frozen=True)
class Flag:
    """A token that looks like a credential: shown whole, flagged for the reviewer."""

    path: str
    start: int
    end: int
    kind: str

    def wire(self) -> dict[str, Any]:
        return {"path": self.path, "start": self.start, "end": self.end, "kind": self.kind}

    def text(self) -> str:
        return (
            f"{visible(self.path)} [{self.start}:{self.end}] looks like a credential "
            f"({self.kind}); shown as sent"
        )


class SegmentKind(StrEnum):
    """How the page marks a piece of shown text."""

    PLAIN = "plain"
    HIDDEN = "hidden-character"
    CREDENTIAL = "credential-like"


@dataclass(frozen=True)
class Segment:
    text: str
    kind: SegmentKind


@dataclass(frozen=True)
class Shown:
    """One call's arguments for review: `pretty` (indented JSON, keys sorted) and
    `canonical` (RFC 8785, one line) with markers, what the markers stand for, and the
    credential-like tokens."""

    pretty: str
    canonical: str
    warnings: tuple[str, ...]
    flags: tuple[Flag, ...]

    def wire(self) -> dict[str, Any]:
        return {
            "arguments": self.canonical,
            "warnings": list(self.warnings),
            "flags": [f.wire() for f in self.flags],
        }

    def segments(self) -> list[Segment]:
        return segments(self.pretty)


def warnings_of(value: Any) -> list[str]:
    """One warning per string and marked character, counted: `/command: U+202E RIGHT-TO-LEFT
    OVERRIDE x1, a bidirectional control: ...`. The pointer is built from the raw keys and
    shown through `visible`: a key's escape sequence or override is marked, never printed."""
    rows: list[str] = []
    for path, text in _strings(value):
        if text.isascii() and text.isprintable():
            continue
        counts = Counter(c for c in text if c not in _JSON_ESCAPED and kind_of(c) is not None)
        for char, count in counts.items():
            kind = kind_of(char)
            assert kind is not None
            if kind is CharacterKind.MARKER:
                continue  # shown marked so it cannot pose as a marker; nothing to warn of
            name = unicodedata.name(char, "")
            rows.append(
                f"{visible(path)}: U+{ord(char):04X}{' ' + name if name else ''} x{count}, "
                f"{_WHY[kind]}"
            )
    return _bounded(rows)


def flags_of(value: Any) -> list[Flag]:
    """Credential-shaped tokens in the strings of `value`, offsets in the raw string."""
    return [
        Flag(path, start, end, kind)
        for path, text in _strings(value)
        for start, end, kind in pattern_spans(text)
    ]


def _bounded(rows: list[str]) -> list[str]:
    if len(rows) <= MAX_LISTED:
        return rows
    return [*rows[:MAX_LISTED], f"and {len(rows) - MAX_LISTED} more"]


def pretty(value: Any) -> str:
    """Indented JSON, keys sorted, non-ASCII as itself (markers included)."""
    return json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False)


def shown(arguments: Any) -> Shown:
    """`arguments` as every review view shows them (see the module docstring)."""
    marked = visible_value(arguments)
    return Shown(
        pretty=pretty(marked),
        canonical=canonical(marked),
        warnings=tuple(warnings_of(arguments)),
        flags=tuple(flags_of(arguments)[:MAX_LISTED]),
    )


def shown_json(value: Any) -> str:
    """One value of a change (before or after) as JSON with markers."""
    return json.dumps(visible_value(value), sort_keys=True, ensure_ascii=False)


def segments(text: str) -> list[Segment]:
    """`text` (shown text) cut into plain pieces, markers and credential-like tokens, for
    the page to highlight. Every character of `text` is in exactly one segment, in order."""
    cuts: list[tuple[int, int, SegmentKind]] = [
        (m.start(), m.end(), SegmentKind.HIDDEN) for m in MARKER.finditer(text)
    ]
    for start, end, _kind in pattern_spans(text):
        cuts.append((start, end, SegmentKind.CREDENTIAL))
    cuts.sort(key=lambda c: (c[0], c[2] is not SegmentKind.HIDDEN))
    out: list[Segment] = []
    position = 0
    for start, end, kind in cuts:
        if start < position:
            continue  # overlaps the previous cut: that one is shown marked already
        if start > position:
            out.append(Segment(text[position:start], SegmentKind.PLAIN))
        out.append(Segment(text[start:end], kind))
        position = end
    if position < len(text):
        out.append(Segment(text[position:], SegmentKind.PLAIN))
    return out
