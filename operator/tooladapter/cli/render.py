"""Output: aligned tables for people, JSON or YAML for scripts; the live stage lines.

Pure: every function returns text. Commands print tables and documents to stdout and
progress to stderr, so `-o json` output stays parseable while a call is followed.

Much of what is printed was typed by an agent (a run id, a caller's name, a tool id, a
message quoting arguments). Nothing of it reaches the terminal raw: table cells, `fields`
and stage lines show control, bidirectional and invisible characters as `⟨U+XXXX⟩`
(pipeline/shown.visible), so an escape sequence can neither retitle, rewrite nor hide a
line of a reviewer's screen; JSON documents write the same characters as `\\uXXXX`
escapes (the same JSON, parsed).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from enum import StrEnum
from typing import Any

import yaml

from tooladapter.review.shown import OPEN, kind_of, visible


class Output(StrEnum):
    TABLE = "table"
    JSON = "json"
    YAML = "yaml"


def document(data: Any, fmt: Output) -> str:
    """`data` as JSON (indented, keys in insertion order) or YAML."""
    if fmt is Output.YAML:
        return str(yaml.safe_dump(data, sort_keys=False, allow_unicode=True)).rstrip("\n")
    return json_text(json.dumps(data, indent=2, ensure_ascii=False))


#: Line feeds are JSON's indentation (inside strings JSON escapes them); the marker
#: bracket is harmless in a document.
_AS_IS = frozenset(["\n", OPEN])


def _escape(char: str) -> str:
    point = ord(char)
    if point > 0xFFFF:  # a surrogate pair, as JSON spells a character beyond the BMP
        point -= 0x10000
        return f"\\u{0xD800 + (point >> 10):04x}\\u{0xDC00 + (point & 0x3FF):04x}"
    return f"\\u{point:04x}"


def json_text(text: str) -> str:
    """JSON text (from `json.dumps(..., ensure_ascii=False)`) with every character that
    `shown.visible` would mark written as a `\\uXXXX` escape: the same document once
    parsed, and nothing a terminal acts on or reorders. Such characters occur only inside
    strings (JSON's own syntax is ASCII), where an escape means the character itself."""
    if text.isascii() and text.isprintable():
        return text
    return "".join(_escape(c) if c not in _AS_IS and kind_of(c) is not None else c for c in text)


def cell(value: Any) -> str:
    """One table cell: `-` for nothing, compact JSON for structures, no line breaks, and
    what does not print (control, bidirectional, invisible characters) as `⟨U+XXXX⟩`."""
    if value is None or value == "" or value == []:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, dict | list):
        value = json.dumps(value, separators=(",", ":"), ensure_ascii=False)
    return visible(" ".join(str(value).split()))


def table(headers: Sequence[str], rows: Sequence[Sequence[Any]], *, max_width: int = 60) -> str:
    """Columns padded to their widest cell (cells clipped at `max_width`), as kubectl does."""
    cells = [[_clip(cell(v), max_width) for v in row] for row in rows]
    widths = [len(h) for h in headers]
    for row in cells:
        for i, text in enumerate(row):
            widths[i] = max(widths[i], len(text))
    lines = ["   ".join(h.upper().ljust(widths[i]) for i, h in enumerate(headers)).rstrip()]
    lines += ["   ".join(t.ljust(widths[i]) for i, t in enumerate(row)).rstrip() for row in cells]
    return "\n".join(lines)


def _clip(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 3] + "..."


def fields(pairs: Sequence[tuple[str, Any]]) -> str:
    """`key:  value` lines, keys aligned (a `describe` block)."""
    width = max((len(k) for k, _ in pairs), default=0) + 1
    return "\n".join(f"{(k + ':').ljust(width)}  {cell(v)}" for k, v in pairs)


def stage_line(entry: dict[str, Any]) -> str:
    """One pipeline stage as it happened: `12:00:01  validation      passed   detail`."""
    time = str(entry.get("time") or "")
    clock = time[11:19] if len(time) >= 19 else time
    detail = visible(" ".join(str(entry.get("detail") or "").split()))
    stage, outcome = visible(str(entry.get("stage", "?"))), visible(str(entry.get("outcome", "?")))
    line = f"{clock:8}  {stage:<14}  {outcome:<12}  {detail}"
    return line.rstrip()


def new_stage_lines(status: dict[str, Any], already: int) -> tuple[list[str], int]:
    """Lines for the stages recorded since the first `already`; and the new count."""
    stages = list(status.get("stages") or [])
    if len(stages) < already:  # cannot shrink; a restart of the list would repeat lines
        return [], already
    return [stage_line(s) for s in stages[already:]], len(stages)
