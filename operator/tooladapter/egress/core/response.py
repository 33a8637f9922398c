"""What of an injected credential comes back: the answer is de-framed, decoded, masked.

An upstream that reflects the request (an echo endpoint, an error page quoting the
headers) hands the sandbox the credential the proxy injected. Masking the raw bytes is
not enough: a chunk boundary can split the value (`5\\r\\nsecre\\r\\n3\\r\\nt...`), a
compressed body hides it, and a JSON, URL or base64 encoding of it is the value all the
same. So for a request the proxy injected a credential into, the answer is parsed
(status line, headers, `Content-Length`, `Transfer-Encoding: chunked` or the connection's
end), its body taken out of its framing and decoded (`gzip`, `deflate`; any other
`Content-Encoding` is refused: 502 before anything reaches the sandbox), and the value is
masked in every form `EncodedMasker` knows, across every read and chunk boundary. The
body is framed again for the sandbox: chunked to an HTTP/1.1 client (so a truncated
answer stays visibly truncated), or ended by the connection's close for HTTP/1.0; the
head is masked too. An answer cut short upstream is cut short (no last chunk) downstream.

Nothing here does I/O.
"""

from __future__ import annotations

import base64
import re
import zlib
from typing import Final

#: A response head (status line and headers) larger than this is refused.
MAX_RESPONSE_HEAD: Final = 65_536
#: Decoded body bytes at most per response (a compression bomb ends here).
MAX_DECODED: Final = 1 << 30
#: Base64 forms are matched only for stretches of the value this long (bytes): shorter
#: ones are too likely in unrelated base64 text.
MIN_BASE64_BYTES: Final = 6

#: Headers of the upstream's framing and hop, replaced by the proxy's own.
_DROPPED: Final = frozenset(
    {
        "connection",
        "content-encoding",
        "content-length",
        "keep-alive",
        "proxy-authenticate",
        "proxy-connection",
        "trailer",
        "transfer-encoding",
        "upgrade",
    }
)
#: Bytes no line of a head may hold (CR and LF only as the line ends; a value's tab is fine).
_CONTROL: Final = re.compile(rb"[\x00-\x08\x0a-\x1f\x7f]")
#: JSON's two-character escapes (as regexes).
_JSON_SHORT: Final = {
    '"': rb'\\"',
    "\\": rb"\\\\",
    "/": rb"\\/",
    "\b": rb"\\b",
    "\f": rb"\\f",
    "\n": rb"\\n",
    "\r": rb"\\r",
    "\t": rb"\\t",
}


class BadResponse(ValueError):
    """An answer the proxy will not pass on (unparsable, undecodable, or cut short)."""


def _hex(value: int, width: int = 2) -> bytes:
    """A case-insensitive regex for `value` in hex."""
    out = b""
    for ch in f"{value:0{width}x}":
        out += f"[{ch}{ch.upper()}]".encode() if ch.isalpha() else ch.encode()
    return out


def _char_forms(ch: str) -> bytes:
    """A regex for one character of the value: itself, URL-encoded (`%hh` per UTF-8 byte,
    `+` for a space), or JSON-escaped (`\\uXXXX`, surrogate pairs, `\\/`, `\\"` ...)."""
    raw = ch.encode()
    forms = [re.escape(raw), b"".join(b"%" + _hex(b) for b in raw)]
    if ch == " ":
        forms.append(rb"\+")
    code = ord(ch)
    if code < 0x10000:
        forms.append(rb"\\u" + _hex(code, 4))
    else:
        high = 0xD800 + ((code - 0x10000) >> 10)
        low = 0xDC00 + ((code - 0x10000) & 0x3FF)
        forms.append(rb"\\u" + _hex(high, 4) + rb"\\u" + _hex(low, 4))
    if ch in _JSON_SHORT:
        forms.append(_JSON_SHORT[ch])
    return b"(?:" + b"|".join(forms) + b")"


#: A line break base64 text may hold between any two of its characters (MIME and PEM wrap
#: at 76 or 64 columns, `base64` at 76, others at any width): CRLF or LF, raw or as JSON
#: escapes. Every alternative starts with CR, LF or a backslash, none of them a base64
#: character, so the pattern stays a chain of bounded choices (no nested repetition).
_LINE_BREAK: Final = rb"(?:\r?\n|\\r\\n|\\n)?"
#: The longest `_LINE_BREAK` (`\\r\\n`, JSON-escaped), in bytes.
_LONGEST_BREAK: Final = 4


def _base64_encodings(secret: bytes) -> list[bytes]:
    """The value's base64 at each of the three alignments, standard and URL-safe: the
    characters only its bytes decide."""
    out: list[bytes] = []
    for shift in range(3):
        part = secret[shift:]
        part = part[: len(part) // 3 * 3]
        if len(part) >= MIN_BASE64_BYTES:
            out.extend({base64.b64encode(part), base64.urlsafe_b64encode(part)})
    return out


def _base64_forms(secret: bytes) -> list[bytes]:
    """Regexes for the value inside base64 text (`_base64_encodings`; `/` also
    JSON-escaped), with a line break (`_LINE_BREAK`) allowed between any two characters."""
    out: list[bytes] = []
    for encoded in _base64_encodings(secret):
        chars = [rb"(?:/|\\/)" if c == ord("/") else re.escape(bytes([c])) for c in encoded]
        out.append(_LINE_BREAK.join(chars))
    return out


def _base64_longest(secret: bytes) -> int:
    """The most bytes a form of `_base64_forms` can match: every `/` escaped, the longest
    line break between every two characters."""
    return max(
        (len(e) + e.count(b"/") + (len(e) - 1) * _LONGEST_BREAK for e in _base64_encodings(secret)),
        default=0,
    )


class EncodedMasker:
    """Replaces the value with as many `*` as the matched text, in raw, JSON-escaped,
    URL-encoded, hex and base64 forms, whatever the read boundaries: the longest form's length
    less one byte is held back until more arrives (or the end).

    `also`: more texts masked the same way, e.g. the header built from the value: a
    `Basic base64(user:value)` header, base64-encoded again by the server, holds no form
    of the value itself."""

    def __init__(self, secret: bytes, *also: bytes) -> None:
        self.secret = secret
        self._held = b""
        self._pattern: re.Pattern[bytes] | None = None
        self._longest = 0
        forms: list[bytes] = []
        for value in (secret, *also):
            if value:
                forms.extend(self._forms(value))
        if forms:
            self._pattern = re.compile(b"|".join(forms))

    def _forms(self, secret: bytes) -> list[bytes]:
        """The regexes of one value's forms; `_longest` grows to the longest of them."""
        longest = 0
        text = secret.decode("utf-8", errors="surrogateescape")
        chars = []
        for ch in text:
            if 0xDC80 <= ord(ch) <= 0xDCFF:  # a byte that is no UTF-8: itself only
                chars.append(re.escape(bytes([ord(ch) - 0xDC00])))
                longest += 1
            else:
                chars.append(_char_forms(ch))
                # `%hh` per UTF-8 byte, or `\uXXXX` (a surrogate pair above the BMP).
                longest += max(3 * len(ch.encode()), 12 if ord(ch) > 0xFFFF else 6)
        # Held back across reads: the longest raw, escaped or (line-wrapped) base64 form.
        self._longest = max(self._longest, longest, _base64_longest(secret))
        # Hex, as the result's sanitizer knows it (`pipeline.sanitize.secret_forms`): the
        # sandbox, where the agent's command runs, must not get a form the result would hide.
        hexes = [re.escape(secret.hex().encode()), re.escape(secret.hex().upper().encode())]
        return [b"".join(chars), *_base64_forms(secret), *hexes]

    def _masked(self, text: bytes) -> bytes:
        assert self._pattern is not None
        return self._pattern.sub(lambda m: b"*" * len(m.group(0)), text)

    def mask_all(self, text: bytes) -> bytes:
        """`text` masked as one whole (a response head)."""
        return self._masked(text) if self._pattern is not None else text

    def feed(self, data: bytes) -> bytes:
        if self._pattern is None:
            return data
        text = self._masked(self._held + data)
        cut = max(0, len(text) - (self._longest - 1))
        self._held = text[cut:]
        return text[:cut]

    def flush(self) -> bytes:
        held, self._held = self._held, b""
        return held


class _Decoder:
    """`gzip` (members one after another) or `deflate` (zlib-wrapped, or raw as some
    servers send it), bounded by `MAX_DECODED`."""

    def __init__(self, coding: str) -> None:
        self.coding = coding
        self._inner: zlib._Decompress | None = None
        self._start = b""
        self._total = 0

    def _open(self, first: bytes) -> zlib._Decompress:
        if self.coding == "gzip":
            return zlib.decompressobj(16 + zlib.MAX_WBITS)
        wrapped = len(first) >= 2 and first[0] & 0x0F == 8 and (first[0] << 8 | first[1]) % 31 == 0
        return zlib.decompressobj(zlib.MAX_WBITS if wrapped else -zlib.MAX_WBITS)

    def feed(self, data: bytes) -> bytes:
        if self._inner is None:
            self._start += data
            if len(self._start) < 2:
                return b""
            data, self._start = self._start, b""
            self._inner = self._open(data)
        out = b""
        try:
            while data:
                out += self._inner.decompress(data)
                data = self._inner.unused_data if self._inner.eof else b""
                if data and self.coding == "gzip":
                    self._inner = zlib.decompressobj(16 + zlib.MAX_WBITS)
                elif data:
                    break  # bytes after a deflate stream: ignored
        except zlib.error as exc:
            raise BadResponse(f"undecodable {self.coding} body: {exc}") from None
        self._total += len(out)
        if self._total > MAX_DECODED:
            raise BadResponse(f"decoded body larger than {MAX_DECODED} bytes")
        return out

    def finish(self) -> bytes:
        if self._inner is None:
            if self._start:
                raise BadResponse(f"truncated {self.coding} body")
            return b""
        if not self._inner.eof:
            raise BadResponse(f"truncated {self.coding} body")
        return self._inner.flush()


class _Dechunk:
    """The data of a chunked body fed in pieces; `done` once its last chunk and trailers
    (dropped) have passed."""

    def __init__(self) -> None:
        self._line = bytearray()
        self._state = "size"  # size | data | data-crlf | trailer | done
        self._left = 0

    @property
    def done(self) -> bool:
        return self._state == "done"

    def feed(self, data: bytes) -> bytes:
        out = bytearray()
        at = 0
        while at < len(data) and self._state != "done":
            if self._state == "data":
                take = min(self._left, len(data) - at)
                out += data[at : at + take]
                self._left -= take
                at += take
                if self._left == 0:
                    self._state = "data-crlf"
                continue
            end = data.find(b"\n", at)
            piece = data[at : end + 1 if end >= 0 else len(data)]
            at += len(piece)
            self._line += piece
            if len(self._line) > 4096:
                raise BadResponse("chunk or trailer line too long")
            if end < 0:
                continue
            if not self._line.endswith(b"\r\n"):
                raise BadResponse("a chunk line not ended by CRLF")
            line = bytes(self._line[:-2])
            self._line.clear()
            if self._state == "data-crlf":
                if line:
                    raise BadResponse("chunk data longer than its size")
                self._state = "size"
            elif self._state == "size":
                size_text = line.split(b";", 1)[0].strip()
                if not size_text or len(size_text) > 15:
                    raise BadResponse("malformed chunk size")
                try:
                    size = int(size_text, 16)
                except ValueError:
                    raise BadResponse("malformed chunk size") from None
                self._left = size
                self._state = "data" if size else "trailer"
            elif not line:  # the empty line after the trailers
                self._state = "done"
        return bytes(out)


class ResponseFilter:
    """The answer to one forwarded request, as the sandbox gets it: `feed` the upstream's
    bytes, `flush` at its end; both return what to send down, and raise `BadResponse` for
    an answer that must not pass (`refusal` says what to send then)."""

    def __init__(
        self,
        secret: bytes,
        *,
        method: str,
        client_version: str = "HTTP/1.1",
        also: tuple[bytes, ...] = (),
    ) -> None:
        self.masker = EncodedMasker(secret, *also)
        self.method = method.upper()
        self.chunked_down = client_version.upper() != "HTTP/1.0"
        #: Whether anything reached the sandbox (a 502 can no longer be answered).
        self.started = False
        self._state = "head"  # head | body | done
        self._buffer = b""
        self._left: int | None = None  # Content-Length left; None: chunked or until close
        self._dechunk: _Dechunk | None = None
        self._decoder: _Decoder | None = None

    # ------------------------------------------------------------------ head

    def _head(self, raw: bytes) -> bytes:
        lines = raw[:-4].split(b"\r\n")
        if any(_CONTROL.search(line) for line in lines):
            raise BadResponse("a control character inside a line of the response head")
        match = re.fullmatch(rb"HTTP/1\.[01] ([1-9][0-9]{2})(?: .*)?", lines[0])
        if match is None:
            raise BadResponse("malformed status line")
        status = int(match.group(1))
        headers: list[tuple[str, str]] = []
        for line in lines[1:]:
            name, sep, value = line.decode("latin-1").partition(":")
            if not sep or not name or name != name.strip() or " " in name or "\t" in name:
                raise BadResponse("malformed response header line")
            headers.append((name, value.strip()))
        if status == 101:
            raise BadResponse("a protocol switch (the proxy asked for none)")
        if 100 <= status < 200:
            self._state = "head"
            return self.masker.mask_all(raw)
        body = not (self.method == "HEAD" or status in (204, 304))
        self._frame(headers, body)
        kept = [(n, v) for n, v in headers if n.lower() not in _DROPPED]
        out = [lines[0].decode("latin-1"), *(f"{n}: {v}" for n, v in kept)]
        if body and self.chunked_down:
            out.append("Transfer-Encoding: chunked")
        out.append("Connection: close")
        if not body:
            self._state = "done"
        return self.masker.mask_all(("\r\n".join(out) + "\r\n\r\n").encode("latin-1"))

    def _frame(self, headers: list[tuple[str, str]], body: bool) -> None:
        def values(name: str) -> list[str]:
            return [
                item.strip().lower()
                for n, v in headers
                if n.lower() == name
                for item in v.split(",")
                if item.strip()
            ]

        codings = [c for c in values("content-encoding") if c != "identity"]
        if len(codings) > 1 or (codings and codings[0] not in ("gzip", "x-gzip", "deflate")):
            raise BadResponse(
                f"Content-Encoding {', '.join(codings)}: the proxy cannot decode it to mask "
                "the injected credential"
            )
        if not body:
            return
        transfer = values("transfer-encoding")
        lengths = {v for v in values("content-length")}
        if transfer:
            if transfer != ["chunked"]:
                raise BadResponse(f"Transfer-Encoding {', '.join(transfer)} is not forwarded")
            self._dechunk = _Dechunk()
        elif lengths:
            if len(lengths) != 1:
                raise BadResponse("several different Content-Length values")
            (text,) = lengths
            if not text.isdigit() or len(text) > 18:
                raise BadResponse(f"malformed Content-Length {text[:32]!r}")
            self._left = int(text)
        if codings:
            self._decoder = _Decoder("deflate" if codings[0] == "deflate" else "gzip")
        self._state = "body"

    # ------------------------------------------------------------------ body

    def _down(self, data: bytes) -> bytes:
        """Decoded, masked body bytes framed for the sandbox."""
        if self._decoder is not None:
            data = self._decoder.feed(data)
        data = self.masker.feed(data)
        return self._chunk(data)

    def _chunk(self, data: bytes) -> bytes:
        if not data or not self.chunked_down:
            return data
        return f"{len(data):x}\r\n".encode() + data + b"\r\n"

    def _end(self) -> bytes:
        rest = self._decoder.finish() if self._decoder is not None else b""
        rest = self.masker.feed(rest) + self.masker.flush()
        self._state = "done"
        return self._chunk(rest) + (b"0\r\n\r\n" if self.chunked_down else b"")

    def _body(self, data: bytes) -> bytes:
        if self._dechunk is not None:
            out = self._down(self._dechunk.feed(data))
            return out + self._end() if self._dechunk.done else out
        if self._left is not None:
            take = data[: self._left]
            self._left -= len(take)
            out = self._down(take)
            return out + self._end() if self._left == 0 else out
        return self._down(data)

    # ------------------------------------------------------------------ entry

    def feed(self, data: bytes) -> bytes:
        out = b""
        while data and self._state != "done":
            if self._state == "head":
                self._buffer += data
                end = self._buffer.find(b"\r\n\r\n")
                if end < 0:
                    if len(self._buffer) > MAX_RESPONSE_HEAD:
                        raise BadResponse("response head too large")
                    break
                raw, data = self._buffer[: end + 4], self._buffer[end + 4 :]
                self._buffer = b""
                out += self._head(raw)
                if self._state == "body" and self._left == 0:
                    out += self._end()
            else:
                out += self._body(data)
                data = b""
        if out:
            self.started = True
        return out

    def flush(self) -> bytes:
        """The upstream has ended: the rest, or BadResponse when the answer is cut short."""
        if self._state == "head":
            raise BadResponse("the upstream closed before a whole response head")
        if self._state == "body":
            if self._dechunk is not None or self._left is not None:
                raise BadResponse("the upstream closed inside the response body")
            out = self._end()
            self.started = self.started or bool(out)
            return out
        return b""

    def refusal(self, reason: str) -> bytes:
        """What the sandbox gets for a refused answer: a 502 if nothing reached it yet
        (else nothing: the connection is closed, the body visibly cut short)."""
        if self.started:
            return b""
        text = self.masker.mask_all(f"egress proxy: {reason}\n".encode())
        return (
            b"HTTP/1.1 502 Bad Gateway\r\nContent-Type: text/plain\r\n"
            + f"Content-Length: {len(text)}\r\nConnection: close\r\n\r\n".encode()
            + text
        )


__all__ = ["BadResponse", "EncodedMasker", "ResponseFilter"]
