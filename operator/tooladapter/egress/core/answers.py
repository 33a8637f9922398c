"""The proxy's own answers: a refusal says why in its status line and a short body.

Clients show the status line to whoever runs them (`curl -v`, `git` with
`GIT_CURL_VERBOSE=1`, wget's error line), and a plain-HTTP client prints the body (`curl`
without `-f`): `HTTP/1.1 502 Bad Gateway: github.com did not resolve` tells an agent what
"CONNECT tunnel failed, response 502" does not. The reason names what the sandbox asked for
(a host it sent) and what the proxy found (an address, an error): nothing it was not
entitled to know. It goes on the wire, so it is cut to printable ASCII (RFC 9112's
reason-phrase: no CR, LF or other control byte can end a line or start another) and bounded.
"""

from __future__ import annotations

from typing import Final

#: The reason phrase's text for each status the proxy answers.
STATUS_TEXT: Final = {
    400: "Bad Request",
    403: "Forbidden",
    407: "Proxy Authentication Required",
    421: "Misdirected Request",
    429: "Too Many Requests",
    502: "Bad Gateway",
}

#: The longest reason carried (status line and body): enough for a host and why.
MAX_REASON: Final = 240

#: Who is answering: the body's first words, so no one takes it for the upstream's.
SPEAKER: Final = "tooladapter egress proxy"


def wire_reason(reason: str) -> str:
    """`reason` as a status line may carry it: printable ASCII only (anything else becomes
    `?`), one line, at most `MAX_REASON` characters."""
    cleaned = "".join(c if " " <= c <= "~" else "?" for c in reason).strip()
    if len(cleaned) > MAX_REASON:
        cleaned = cleaned[: MAX_REASON - 3] + "..."
    return cleaned


def refusal(status: int, reason: str = "", *, extra: bytes = b"", head_only: bool = False) -> bytes:
    """The whole answer of a refusal: status line with the reason after the status text,
    `extra` header lines, and a one-line text/plain body naming the proxy as the speaker
    (its length only, for a HEAD request: `head_only`). The connection closes after it."""
    text = STATUS_TEXT.get(status, "Error")
    why = wire_reason(reason)
    line = f"HTTP/1.1 {status} {text}: {why}" if why else f"HTTP/1.1 {status} {text}"
    body = f"{SPEAKER}: {status} {text}{f': {why}' if why else ''}\n".encode("ascii")
    return (
        f"{line}\r\n".encode("ascii")
        + extra
        + b"Content-Type: text/plain; charset=us-ascii\r\n"
        + f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n".encode("ascii")
        + (b"" if head_only else body)
    )


__all__ = ["MAX_REASON", "SPEAKER", "STATUS_TEXT", "refusal", "wire_reason"]
