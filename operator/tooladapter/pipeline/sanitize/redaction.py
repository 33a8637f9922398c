"""Redaction of one call's texts: brokered values and known secret formats, by kind.

Every text that reaches status, events, logs, the artifact store or the agent is treated
as hostile data and redacted here (`bounded_message` for messages). Redactions are
reported by kind (`brokered-secret`, `github-token`, ...), never by value.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

from tooladapter.pipeline.sanitize.rules import SHORTEST_MATCH, rule_spans
from tooladapter.pipeline.sanitize.secret_forms import (
    occurrences,
    secret_forms,
    smallest_period,
    views,
)

BROKERED_SECRET = "brokered-secret"  # noqa: S105 (a redaction kind, not a password)
#: Text scanned beyond the bound, and the margin kept clear of a cut.
_MIN_MARGIN = 16 * 1024


def marker(kind: str) -> str:
    """The text that replaces a redacted secret."""
    return f"[REDACTED:{kind}]"


class Redactor:
    """The redaction of one call: its brokered values' forms, computed once."""

    def __init__(self, secrets: Sequence[str]) -> None:
        forms: set[bytes] = set()
        for value in secrets:
            if value:
                forms.update(f.encode("utf-8", errors="surrogatepass") for f in secret_forms(value))
        self.needles = sorted((f, smallest_period(f)) for f in forms)
        longest = max((len(f) for f in forms), default=0)
        #: A secret spelled with every byte escaped (`\\u0041`) is six times as long.
        self.margin = max(_MIN_MARGIN, 8 * longest + 4096)
        #: Shorter texts cannot hold a match: views only ever shrink a text, and no rule
        #: matches fewer than `SHORTEST_MATCH` bytes (the many tiny strings of structured
        #: content cost nothing).
        self.floor = min([SHORTEST_MATCH, *(len(f) for f in forms)])

    def spans(self, data: bytes) -> list[tuple[int, int, int, str]]:
        spans: list[tuple[int, int, int, str]] = []
        if self.needles:
            for view, to_source in views(data):
                for needle, period in self.needles:
                    for start, end in occurrences(view, needle, period):
                        source_start, source_end = to_source(start, end)
                        spans.append((source_start, source_end, -1, BROKERED_SECRET))
        rule_spans(data, spans)
        return spans

    def redact(self, data: bytes, counts: Counter[str], keep: int | None = None) -> bytes:
        """`data` with every span replaced by its marker; with `keep`, the text from that
        offset on is left out (a span that starts before it is still replaced whole)."""
        if len(data) < self.floor:
            return data if keep is None else data[:keep]
        spans = self.spans(data)
        if not spans and keep is None:
            return data
        limit = len(data) if keep is None else keep
        out: list[bytes] = []
        position = 0
        # By start, then by rule: where spans overlap, the most specific names the marker.
        for start, end, _priority, kind in sorted(spans, key=lambda s: (s[0], s[2], -s[1])):
            if start < position:  # overlaps the previous span: extend it instead
                position = max(position, end)
                continue
            if start >= limit:
                break
            out.append(data[position:start])
            out.append(marker(kind).encode())
            counts[kind] += 1
            position = end
        if position < limit:
            out.append(data[position:limit])
        return b"".join(out)


def utf8(text: str) -> bytes:
    return text.encode("utf-8", errors="replace")


def redact_text(text: str, secrets: Sequence[str] = ()) -> str:
    """`text` with brokered secret values and known secret patterns redacted (for logs)."""
    counts: Counter[str] = Counter()
    return Redactor(secrets).redact(utf8(text), counts).decode("utf-8", errors="replace")


#: Bounds of texts that reach status and events (`bounded_message`).
STATUS_MESSAGE_CHARS = 2048
EVENT_MESSAGE_CHARS = 1024


def bounded_message(
    text: str | None, secrets: Sequence[str] = (), *, max_chars: int = STATUS_MESSAGE_CHARS
) -> str:
    """A message for status, an event or a log line: redacted like a result, then cut to
    `max_chars` with an ellipsis. Only a bounded prefix is scanned (the cut drops the rest
    anyway), and the cut happens after redaction, so no secret is left half-shown."""
    if not text:
        return ""
    redactor = Redactor(secrets)
    window = text[: 4 * max_chars + 2 * redactor.margin]
    data = utf8(window)
    keep = None
    if len(window) < len(text):
        keep = max(0, len(data) - redactor.margin)
    counts: Counter[str] = Counter()
    clean = redactor.redact(data, counts, keep).decode("utf-8", errors="replace")
    if len(clean) <= max_chars and keep is None:
        return clean
    return clean[: max_chars - 1] + "…"


#: A recorded command line is a record, not the argv: bounded per element and in length.
RECORDED_ARG_CHARS = 1024
RECORDED_ARGS = 64


def redact_argv(argv: Sequence[str], secrets: Sequence[str] = ()) -> list[str]:
    """A command line as it may be recorded (status, receipts): every element redacted
    like a result, bounded. The agent's own command can carry a secret it typed."""
    recorded = [
        bounded_message(arg, secrets, max_chars=RECORDED_ARG_CHARS) for arg in argv[:RECORDED_ARGS]
    ]
    if len(argv) > RECORDED_ARGS:
        recorded.append(f"[TRUNCATED: {len(argv) - RECORDED_ARGS} more arguments]")
    return recorded
