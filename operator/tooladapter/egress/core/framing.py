"""Where a forwarded request ends, and what of a credential comes back: pure byte rules.

The proxy forwards exactly one request per plain-HTTP connection. Relaying the client's
bytes raw after the head would let a sandbox pipeline a second request behind the first
(with another `Host`, and without the head checks or the injected credential), or smuggle
one past a server that frames the body differently (RFC 9112 6.3, 11.2). So the body is
framed here, strictly: a `Content-Length` (one value), or `Transfer-Encoding: chunked`
alone; both together, any other coding, or a malformed length is refused. Once the body
has ended, nothing more of the client's goes upstream.

An upstream that reflects request headers (an echo endpoint) would hand the sandbox the
credential the proxy injected, and the sandbox's command could then transform it past
every exact-value redaction. `Masker` replaces the value in the response stream with as
many `*` (the response's framing keeps its length), across read boundaries.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from tooladapter.egress.core.rules import BadRequest, RequestHead

#: A chunk-size line (with extensions) or a trailer line longer than this is refused.
MAX_CHUNK_LINE: Final = 4096
#: At most this many trailer lines.
MAX_TRAILERS: Final = 64


@dataclass(frozen=True)
class Framing:
    """How the request body ends: after `length` bytes, or at the last chunk."""

    length: int = 0
    chunked: bool = False


def body_framing(head: RequestHead) -> Framing:
    """The request body's framing; BadRequest for anything ambiguous."""
    lengths = {v.strip() for k, v in head.headers if k.lower() == "content-length"}
    codings = [v for k, v in head.headers if k.lower() == "transfer-encoding"]
    if codings:
        if lengths:
            raise BadRequest("Transfer-Encoding with Content-Length (a smuggling attempt)")
        if len(codings) != 1 or codings[0].strip().lower() != "chunked":
            raise BadRequest("only Transfer-Encoding: chunked is forwarded")
        return Framing(chunked=True)
    if not lengths:
        return Framing()
    if len(lengths) != 1:
        raise BadRequest("several different Content-Length values")
    (text,) = lengths
    if not text.isdigit() or len(text) > 18:
        raise BadRequest(f"malformed Content-Length {text[:32]!r}")
    return Framing(length=int(text))


class ChunkedEnd:
    """Follows a chunked body fed in pieces; `feed` answers how many of the bytes fed
    belong to the body, or None while it goes on."""

    def __init__(self) -> None:
        self._line = bytearray()
        self._state = "size"  # size | data | data-crlf | trailer
        self._left = 0
        self._trailers = 0

    def _line_done(self, byte: int) -> bool:
        if len(self._line) >= MAX_CHUNK_LINE:
            raise BadRequest("chunk line too long")
        self._line.append(byte)
        return self._line.endswith(b"\r\n")

    def feed(self, data: bytes) -> int | None:
        at = 0
        while at < len(data):
            if self._state == "data":
                take = min(self._left, len(data) - at)
                self._left -= take
                at += take
                if self._left == 0:
                    self._state = "data-crlf"
                continue
            done = self._line_done(data[at])
            at += 1
            if not done:
                continue
            line = bytes(self._line[:-2])
            self._line.clear()
            if self._state == "data-crlf":
                if line:
                    raise BadRequest("chunk data longer than its size")
                self._state = "size"
            elif self._state == "size":
                size_text = line.split(b";", 1)[0].strip()
                try:
                    size = int(size_text, 16)
                except ValueError:
                    raise BadRequest("malformed chunk size") from None
                if not size_text or size < 0 or len(size_text) > 15:
                    raise BadRequest("malformed chunk size")
                if size == 0:
                    self._state = "trailer"
                else:
                    self._left = size
                    self._state = "data"
            else:  # a trailer line; the empty one ends the body
                if not line:
                    return at
                self._trailers += 1
                if self._trailers > MAX_TRAILERS:
                    raise BadRequest("too many trailer lines")
        return None


class Masker:
    """Replaces `secret` in a byte stream with as many `*`, whatever the read boundaries:
    the last `len(secret) - 1` bytes are held back until more arrive (or the end)."""

    def __init__(self, secret: bytes) -> None:
        self.secret = secret
        self.mask = b"*" * len(secret)
        self._held = b""

    def feed(self, data: bytes) -> bytes:
        if not self.secret:
            return data
        text = (self._held + data).replace(self.secret, self.mask)
        cut = max(0, len(text) - (len(self.secret) - 1))
        self._held = text[cut:]
        return text[:cut]

    def flush(self) -> bytes:
        held, self._held = self._held, b""
        return held
