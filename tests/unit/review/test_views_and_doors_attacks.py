"""Attack pass 6 (issue 28), pure parts: review views, fair doors, CIDR bounds, the
egress proxy's answer filter. Hits are strict xfails with the correct behaviour."""

from __future__ import annotations

import base64
import gzip
import json

import pytest

from tooladapter.cli.render import fields
from tooladapter.egress.core.cidr_bounds import CidrBounds, exceptions_for
from tooladapter.egress.core.response import BadResponse, ResponseFilter
from tooladapter.gateway.doors import Busy, Caps, Doors, FailureLimiter, client_address
from tooladapter.review.shown import MARKER, shown, visible, visible_value, warnings_of

SECRET = b"s3cr3t-Token-0123456789abcdefXYZ"
ESC = "\x1b"


# ------------------------------------------------------------------ review views


def _no_terminal_controls(text: str) -> bool:
    return not any((ord(c) < 0x20 and c not in "\t\n") or 0x7F <= ord(c) < 0xA0 for c in text)


def test_a_warning_never_carries_a_raw_control_character_of_a_key() -> None:
    key = f"{ESC}]0;owned{chr(7)}{ESC}[2K{ESC}[1A\u202eq"
    rows = warnings_of({key: "x\u200by"})
    assert rows
    assert all(_no_terminal_controls(r) and "\u202e" not in r for r in rows), rows


def test_arguments_shown_mark_every_escape_and_bidi_in_keys_and_values() -> None:
    arguments = {f"k{ESC}[31m": [{"v": f"a{ESC}[2Jb\u202ec\u2066d"}], "n": {"\u200b": 1}}
    view = shown(arguments)
    for text in (view.pretty, view.canonical):
        assert ESC not in text and "\u202e" not in text and "\u2066" not in text
        assert "\u200b" not in text
        assert "\u27e8U+001B\u27e9" in text and "\u27e8U+202E\u27e9" in text


def test_text_that_looks_like_a_marker_never_looks_like_one() -> None:
    raw = "\u27e8U+202E\u27e9"
    assert visible(raw) != visible("\u202e")
    assert not any(m.group(0) == raw for m in MARKER.finditer(visible(raw + "x")))
    # Two keys that differ only by a marker-looking spelling stay two keys.
    both = visible_value({"\u202e": 1, raw: 2})
    assert len(both) == 2 and sorted(both.values()) == [1, 2]


def test_very_long_and_deep_arguments_are_shown_whole() -> None:
    tail = "https://evil.example/x"
    long_value = "a" * 200_000 + tail
    deep: object = {"cmd": long_value}
    for _ in range(300):
        deep = [deep]
    view = shown(deep)
    assert tail in view.canonical and view.canonical.count("a" * 1000) >= 1
    assert len(view.canonical) > 200_000


def test_cli_fields_never_pass_a_terminal_escape() -> None:
    out = fields([("Run", f"{ESC}]52;c;cm0gLXJmIH4={chr(7)}{ESC}[8mhidden")])
    assert _no_terminal_controls(out), repr(out)


# ------------------------------------------------------------------ fair doors


def test_forwarded_for_is_ignored_without_a_trusted_proxy() -> None:
    assert client_address("10.1.2.3", "1.1.1.1, 2.2.2.2", ()) == "10.1.2.3"
    # Behind a trusted proxy, a client's own left-hand entries prove nothing.
    trusted = ("10.0.0.0/8",)
    assert client_address("10.0.0.5", "6.6.6.6, 7.7.7.7", trusted) == "7.7.7.7"
    assert client_address("10.0.0.5", "6.6.6.6, 7.7.7.7, 10.0.0.9", trusted) == "7.7.7.7"
    # A trusted peer forwarding garbage: the garbage is one bounded key, not a bypass.
    assert len(client_address("10.0.0.5", "x" * 1000, trusted)) <= 64


def test_failed_authentications_cannot_be_spent_around_the_limit() -> None:
    limiter = FailureLimiter(burst=5, per_minute=6.0)
    now = 1000.0
    waits = [limiter.take("9.9.9.9", now) for _ in range(20)]
    assert waits[:5] == [0] * 5 and all(w >= 1 for w in waits[5:])
    # A success gives back only the one try it spent.
    limiter.succeeded("9.9.9.9", now)
    assert limiter.take("9.9.9.9", now) == 0 and limiter.take("9.9.9.9", now) >= 1


def test_one_caller_cannot_take_more_than_its_caps_across_namespaces() -> None:
    doors = Doors(Caps(caller_requests=3, namespace_requests=5, caller_streams=2))
    for i in range(3):
        doors.take_request("a", f"ns-{i}")
    with pytest.raises(Busy):
        doors.take_request("a", "ns-9")
    doors.take_stream("a", ["ns-1"])
    doors.take_stream("a", [None])
    with pytest.raises(Busy):
        doors.take_stream("a", ["ns-2"])
    # A refused take holds nothing.
    assert doors.requests[("namespace", "ns-9")] == 0


# ------------------------------------------------------------------ CIDR bounds


@pytest.mark.parametrize("cidr", ["::ffff:0.0.0.0/96", "64:ff9b::/96", "::ffff:169.254.169.0/120"])
def test_an_ipv6_block_that_maps_ipv4_is_bounded_as_ipv4(cidr: str) -> None:
    refused = CidrBounds().problem(cidr) is not None
    excepted = any("169.254" in e or "a9fe" in e.lower() for e in exceptions_for(cidr))
    assert refused or excepted


def test_a_slash_25_around_metadata_excepts_it() -> None:
    assert CidrBounds().problem("169.254.169.128/25") is None
    assert "169.254.169.254/32" in exceptions_for("169.254.169.128/25")
    assert CidrBounds().problem("10.0.0.0/23") is not None
    assert CidrBounds().problem("fd00::/63") is not None
    assert CidrBounds(mode="forbid").problem("fd00::1") is not None


# ------------------------------------------------------------------ egress answer filter


def _through(response: bytes, *, pieces: int = 1, version: str = "HTTP/1.1") -> bytes:
    f = ResponseFilter(SECRET, method="GET", client_version=version)
    out = b""
    step = max(1, len(response) // pieces)
    for i in range(0, len(response), step):
        out += f.feed(response[i : i + step])
    return out + f.flush()


def _leaks(out: bytes) -> bool:
    return SECRET in out or SECRET[:12] in out


def test_secret_in_trailers_chunk_extensions_and_1xx_never_passes() -> None:
    body = b"hello"
    response = (
        b"HTTP/1.1 103 Early Hints\r\nLink: </" + SECRET + b">\r\n\r\n"
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nX-Echo: " + SECRET + b"\r\n\r\n"
        b"5;ext=" + SECRET + b"\r\n" + body + b"\r\n"
        b"0\r\nX-Trailer: " + SECRET + b"\r\n\r\n"
    )
    for pieces in (1, 7, len(response)):
        assert not _leaks(_through(response, pieces=pieces))


def test_secret_split_over_gzip_members_and_bytes_never_passes() -> None:
    payload = json.dumps({"headers": {"Authorization": "Bearer " + SECRET.decode()}}).encode()
    body = gzip.compress(payload[:40]) + gzip.compress(payload[40:])
    response = (
        b"HTTP/1.1 200 OK\r\nContent-Encoding: GZIP\r\n"
        + f"Content-Length: {len(body)}\r\n\r\n".encode()
        + body
    )
    for pieces in (1, len(response)):
        out = _through(response, pieces=pieces)
        assert not _leaks(out) and b"Authorization" in out


def test_http_1_0_client_and_pipelined_second_answer() -> None:
    response = (
        b"HTTP/1.0 200 OK\r\nContent-Length: 5\r\n\r\nhello"
        b"HTTP/1.1 200 OK\r\nContent-Length: 32\r\n\r\n" + SECRET
    )
    out = _through(response, version="HTTP/1.0")
    assert not _leaks(out) and b"hello" in out


def test_unknown_codings_are_refused() -> None:
    for coding in (b"br", b"gzip, br", b"compress", b"zstd"):
        response = b"HTTP/1.1 200 OK\r\nContent-Encoding: " + coding + b"\r\n\r\nxx"
        with pytest.raises(BadResponse):
            _through(response)
    with pytest.raises(BadResponse):
        _through(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip, chunked\r\n\r\n")


def test_line_wrapped_base64_reflection_is_masked() -> None:
    reflected = b"GET / HTTP/1.1\r\nAuthorization: Bearer " + SECRET + b"\r\n\r\n"
    encoded = base64.b64encode(reflected)
    wrapped = b"\n".join(encoded[i : i + 16] for i in range(0, len(encoded), 16))
    response = b"HTTP/1.1 200 OK\r\n" + f"Content-Length: {len(wrapped)}\r\n\r\n".encode() + wrapped
    out = _through(response)
    body = out.split(b"\r\n\r\n", 1)[1]
    # De-chunk what the sandbox gets, then undo the line wrapping as the sandbox would.
    text = b""
    while body:
        size_line, _, rest = body.partition(b"\r\n")
        size = int(size_line, 16)
        if size == 0:
            break
        text += rest[:size]
        body = rest[size + 2 :]
    assert SECRET not in base64.b64decode(text.replace(b"\n", b""))
