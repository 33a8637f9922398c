"""Brokered secrets by exact value, in every form a tool is likely to print them.

Raw, trimmed, JSON-escaped, URL-encoded (`quote`, `quote_plus`), hex, and base64 (standard
and URL-safe, with and without padding) including the part of a longer base64 string that
encodes the value at each of the three byte alignments (so the password inside a base64
`user:password` header is caught too). Each form is also searched in views of the text
that undo what tools do to long values: line breaks (and the indentation after them, and
`\\n` escapes) removed, so a value split over lines or base64 wrapped at 76 (or 64) columns
is found; and escapes decoded (`%XX`, `\\xXX`, `\\uXXXX`, `\\/`, HTML character
references), so a fully percent- or JSON-escaped value is found. A match in a view redacts
the text it came from, line breaks included.
"""

from __future__ import annotations

import base64
import bisect
import json
import re
from collections.abc import Callable, Iterable
from urllib.parse import quote, quote_plus

from tooladapter.pipeline.linear_regex import LinearPattern, compile_linear

#: Shorter brokered values are not redacted by exact value (they would redact noise).
MIN_SECRET_CHARS = 4
#: Shortest base64 fragment searched for at a non-zero alignment.
MIN_FRAGMENT_CHARS = 6


def _base64_fragments(data: bytes) -> set[str]:
    """Base64 text that encodes `data` wherever it sits inside a longer encoded string.

    At byte offset k (mod 3) inside a longer string, the characters fully determined by
    `data` are those of `b64(k zero bytes + data)` from ceil(8k/6) up to (8(k+len))//6.
    """
    fragments: set[str] = set()
    for encode in (base64.b64encode, base64.urlsafe_b64encode):
        for offset in range(3):
            encoded = encode(b"\0" * offset + data).decode("ascii")
            start = (8 * offset + 5) // 6
            end = (8 * (offset + len(data))) // 6
            fragment = encoded[start:end]
            if len(fragment) >= MIN_FRAGMENT_CHARS:
                fragments.add(fragment)
    return fragments


def secret_forms(value: str) -> set[str]:
    """Every spelling of a secret value that is redacted (see the module docstring)."""
    forms: set[str] = set()
    for variant in {value, value.strip()}:
        if len(variant) < MIN_SECRET_CHARS:
            continue
        data = variant.encode("utf-8", errors="surrogatepass")
        forms.add(variant)
        forms.add(json.dumps(variant)[1:-1])
        forms.add(json.dumps(variant, ensure_ascii=False)[1:-1])
        for encoded in (quote(variant, safe=""), quote(variant), quote_plus(variant)):
            forms.add(encoded)
            forms.add(re.sub(r"%[0-9A-F]{2}", lambda m: m.group().lower(), encoded))
        forms.add(data.hex())
        forms.add(data.hex().upper())
        for encode in (base64.b64encode, base64.urlsafe_b64encode):
            encoded = encode(data).decode("ascii")
            forms.add(encoded)
            forms.add(encoded.rstrip("="))
        forms.update(_base64_fragments(data))
    return {form for form in forms if len(form) >= MIN_SECRET_CHARS}


def smallest_period(needle: bytes) -> int:
    """The smallest p such that needle[i] == needle[i + p] (KMP failure function): two
    occurrences of `needle` never start closer than p apart."""
    failure = [0] * len(needle)
    k = 0
    for i in range(1, len(needle)):
        while k and needle[i] != needle[k]:
            k = failure[k - 1]
        if needle[i] == needle[k]:
            k += 1
        failure[i] = k
    return len(needle) - failure[-1] if needle else 1


def occurrences(data: bytes, needle: bytes, period: int) -> Iterable[tuple[int, int]]:
    """Every occurrence of `needle` in `data`, overlapping ones merged into one span."""
    start = data.find(needle)
    span_start, span_end = -1, -1
    while start != -1:
        end = start + len(needle)
        if start <= span_end:
            span_end = end
        else:
            if span_end >= 0:
                yield span_start, span_end
            span_start, span_end = start, end
        start = data.find(needle, start + period)
    if span_end >= 0:
        yield span_start, span_end


class _View:
    """A rewritten copy of some text (line breaks removed, escapes decoded) that maps its
    offsets back to the text it came from. `specials` holds, per rewritten piece, its
    offset here, its span in the source and its length here; between pieces the two
    texts are the same."""

    def __init__(self, source: bytes, pattern: LinearPattern, rewrite: Callable[[bytes], bytes]):
        out: list[bytes] = []
        self.view_at: list[int] = []
        self.specials: list[tuple[int, int, int]] = []  # (source start, source end, length)
        position = 0
        length = 0
        for match in pattern.finditer(source):
            start, end = match.span()
            replacement = rewrite(source[start:end])
            out.append(source[position:start])
            length += start - position
            out.append(replacement)
            self.view_at.append(length)
            self.specials.append((start, end, len(replacement)))
            length += len(replacement)
            position = end
        out.append(source[position:])
        self.data = b"".join(out)
        self.changed = bool(self.specials)

    def source_start(self, offset: int) -> int:
        index = bisect.bisect_right(self.view_at, offset) - 1
        if index < 0:
            return offset
        at = self.view_at[index]
        start, end, length = self.specials[index]
        return start if offset < at + length else end + (offset - at - length)

    def source_end(self, offset: int) -> int:
        index = bisect.bisect_left(self.view_at, offset) - 1
        if index < 0:
            return offset
        at = self.view_at[index]
        _start, end, length = self.specials[index]
        return end if offset <= at + length else end + (offset - at - length)


#: Line breaks with the indentation after them, and their JSON/C escapes (`\n`, `\r\n`).
_BREAKS = compile_linear(r"(?:(?:\r\n|\r|\n)[ \t]*|\\r\\n|\\n|\\r)+")
#: Escapes tools use for values in URLs, JSON, JavaScript, Python, C and HTML.
_ESCAPES = compile_linear(
    r"%[0-9A-Fa-f]{2}"
    r"|\\u[dD][89abAB][0-9A-Fa-f]{2}\\u[dD][c-fC-F][0-9A-Fa-f]{2}"
    r"|\\u[0-9A-Fa-f]{4}|\\x[0-9A-Fa-f]{2}|\\[\\/\"'bfnrt]"
    r"|&#[0-9]{1,7};|&#[xX][0-9A-Fa-f]{1,6};|&(?:amp|lt|gt|quot|apos);"
)
_SIMPLE_ESCAPES = {
    b"\\\\": b"\\",
    b"\\/": b"/",
    b'\\"': b'"',
    b"\\'": b"'",
    b"\\b": b"\b",
    b"\\f": b"\f",
    b"\\n": b"\n",
    b"\\r": b"\r",
    b"\\t": b"\t",
    b"&amp;": b"&",
    b"&lt;": b"<",
    b"&gt;": b">",
    b"&quot;": b'"',
    b"&apos;": b"'",
}


def _unescape(piece: bytes) -> bytes:
    simple = _SIMPLE_ESCAPES.get(piece)
    if simple is not None:
        return simple
    try:
        if piece.startswith(b"%") or piece.startswith(b"\\x"):
            return bytes([int(piece[-2:], 16)])
        if piece.startswith(b"\\u"):
            return (
                piece.decode("unicode_escape")
                .encode("utf-16", "surrogatepass")
                .decode("utf-16")
                .encode("utf-8")
            )
        if piece.startswith((b"&#x", b"&#X")):
            return chr(int(piece[3:-1], 16)).encode("utf-8")
        if piece.startswith(b"&#"):
            return chr(int(piece[2:-1])).encode("utf-8")
    except (ValueError, UnicodeError, OverflowError):
        pass
    return piece  # not a character (a lone surrogate, beyond U+10FFFF): kept as written


def _drop(_piece: bytes) -> bytes:
    return b""


_ESCAPE_HINTS = (b"%", b"\\", b"&#", b"&a", b"&l", b"&g", b"&q")


def views(data: bytes) -> list[tuple[bytes, Callable[[int, int], tuple[int, int]]]]:
    """The text and its rewritten views, each with a map of a span back to the text."""

    def same(start: int, end: int) -> tuple[int, int]:
        return start, end

    views: list[tuple[bytes, Callable[[int, int], tuple[int, int]]]] = [(data, same)]
    unescaped: _View | None = None
    if any(hint in data for hint in _ESCAPE_HINTS):
        unescaped = _View(data, _ESCAPES, _unescape)
        if unescaped.changed:
            u = unescaped
            views.append((u.data, lambda s, e: (u.source_start(s), u.source_end(e))))
        else:
            unescaped = None
    if b"\n" in data or b"\r" in data or b"\\n" in data or b"\\r" in data:
        joined = _View(data, _BREAKS, _drop)
        if joined.changed:
            j = joined
            views.append((j.data, lambda s, e: (j.source_start(s), j.source_end(e))))
    if unescaped is not None and (b"\n" in unescaped.data or b"\r" in unescaped.data):
        both = _View(unescaped.data, _BREAKS, _drop)
        if both.changed:
            u2, b2 = unescaped, both
            views.append(
                (
                    b2.data,
                    lambda s, e: (
                        u2.source_start(b2.source_start(s)),
                        u2.source_end(b2.source_end(e)),
                    ),
                )
            )
    return views
