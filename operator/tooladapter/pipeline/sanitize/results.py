"""A tool's result, sanitized: redacted first, then bounded in size.

The size bound comes only after redaction: truncation at a UTF-8 boundary with a marker,
so a secret cut in half by truncation has already been removed. The sha256 of the full
original output is recorded, so the stored artifact can be tied to what the tool
produced. Structured results are redacted value by value (`sanitize_structured`), never by
a regex over serialised JSON.
"""

from __future__ import annotations

import hashlib
import json
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from tooladapter.model import DEFAULT_MAX_RESULT_BYTES
from tooladapter.pipeline.sanitize.redaction import Redactor, utf8


@dataclass(frozen=True)
class Sanitized:
    content: str
    truncated: bool
    original_bytes: int
    original_sha256: str
    redactions: tuple[str, ...]
    redaction_count: int = 0


def _truncate_utf8(data: bytes, max_bytes: int) -> bytes:
    if len(data) <= max_bytes:
        return data
    return data[:max_bytes].decode("utf-8", errors="ignore").encode("utf-8")


def sanitize(
    raw: bytes | str,
    *,
    secrets: Sequence[str] = (),
    max_bytes: int = DEFAULT_MAX_RESULT_BYTES,
) -> Sanitized:
    """Redact, then bound: the sanitized result of one tool call.

    `raw` bytes are decoded as UTF-8 with replacement characters. `original_bytes` and
    `original_sha256` describe the raw output; the content, when truncated, ends with
    `\\n[TRUNCATED: N of M bytes shown]` where N and M count the redacted text (M counts
    the raw text when more than the bound plus a margin came in: only that much is read).
    CPU-heavy for large outputs: the flow runs it on a worker thread (RE2 matches without
    the GIL).
    """
    data = raw if isinstance(raw, bytes) else raw.encode("utf-8", errors="surrogatepass")
    text = raw.decode("utf-8", errors="replace") if isinstance(raw, bytes) else raw
    redactor = Redactor(secrets)
    counts: Counter[str] = Counter()
    scan = max_bytes + 2 * redactor.margin
    if len(text) > scan:  # only the part that can be shown is read (plus the margin)
        window = utf8(text[:scan])
        redacted = redactor.redact(window, counts, keep=len(window) - redactor.margin)
        total = len(data)
    else:
        redacted = redactor.redact(utf8(text), counts)
        total = len(redacted)
    shown = _truncate_utf8(redacted, max_bytes)
    truncated = len(shown) < total
    content = shown.decode("utf-8", errors="replace")
    if truncated:
        content += f"\n[TRUNCATED: {len(shown)} of {total} bytes shown]"
    return Sanitized(
        content=content,
        truncated=truncated,
        original_bytes=len(data),
        original_sha256="sha256:" + hashlib.sha256(data).hexdigest(),
        redactions=tuple(sorted(counts)),
        redaction_count=sum(counts.values()),
    )


@dataclass(frozen=True)
class SanitizedStructure:
    """Structured content redacted value by value; `value` is None when it was too large
    (or too deep) to keep, like a truncated text result."""

    value: Any
    redactions: tuple[str, ...]
    redaction_count: int


#: Structured content nests at most this deep (deeper content is dropped, not walked).
MAX_STRUCTURED_DEPTH = 64


def sanitize_structured(
    value: Any, *, secrets: Sequence[str] = (), max_bytes: int = DEFAULT_MAX_RESULT_BYTES
) -> SanitizedStructure:
    """Redact every string (keys included) of parsed JSON in place of a regex over its
    serialisation, which a redaction could cut through; None when the redacted value is
    larger than `max_bytes` as compact JSON or nests deeper than MAX_STRUCTURED_DEPTH.
    Iterative: a deep value cannot exhaust the stack."""
    redactor = Redactor(secrets)
    counts: Counter[str] = Counter()
    budget = max_bytes

    def clean(text: str) -> str:
        nonlocal budget
        budget -= len(text)
        if budget < 0:
            raise _TooLarge
        return redactor.redact(utf8(text), counts).decode("utf-8", errors="replace")

    root: list[Any] = [None]
    # (source node, container to fill, key or index in it, depth)
    stack: list[tuple[Any, Any, Any, int]] = [(value, root, 0, 0)]
    try:
        while stack:
            node, parent, slot, depth = stack.pop()
            if depth > MAX_STRUCTURED_DEPTH:
                raise _TooLarge
            if isinstance(node, dict):
                copy: dict[str, Any] = {}
                parent[slot] = copy
                # Two keys redacted alike stay apart as `name'2`, `name'3`, ...; the next
                # number per name is kept, so thousands of keys redacted alike cost linear
                # time and size (appending a quote per clash was quadratic in both).
                clashes: dict[str, int] = {}
                for key, child in node.items():
                    name = clean(str(key))
                    if name in copy:
                        base, n = name, clashes.get(name, 1)
                        while name in copy:
                            n += 1
                            name = f"{base}'{n}"
                        clashes[base] = n
                    copy[name] = None
                    stack.append((child, copy, name, depth + 1))
            elif isinstance(node, list | tuple):
                items: list[Any] = [None] * len(node)
                parent[slot] = items
                stack.extend((child, items, i, depth + 1) for i, child in enumerate(node))
            elif isinstance(node, str):
                parent[slot] = clean(node)
            else:
                budget -= 8
                parent[slot] = node
        result = root[0]
        if len(json.dumps(result, ensure_ascii=False).encode("utf-8", errors="replace")) > (
            max_bytes
        ):
            raise _TooLarge
    except _TooLarge:
        result = None
    return SanitizedStructure(
        value=result, redactions=tuple(sorted(counts)), redaction_count=sum(counts.values())
    )


class _TooLarge(Exception):
    pass
