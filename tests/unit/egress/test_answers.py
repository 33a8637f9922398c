"""The proxy's refusals say why on the wire: status line and body, printable and bounded."""

from __future__ import annotations

from tooladapter.egress.core.answers import MAX_REASON, refusal, wire_reason


def test_a_refusal_carries_its_reason_in_the_status_line_and_the_body() -> None:
    answer = refusal(502, "github.com did not resolve")
    head, _, body = answer.partition(b"\r\n\r\n")
    lines = head.split(b"\r\n")
    assert lines[0] == b"HTTP/1.1 502 Bad Gateway: github.com did not resolve"
    assert b"Connection: close" in lines
    assert body == b"tooladapter egress proxy: 502 Bad Gateway: github.com did not resolve\n"
    assert f"Content-Length: {len(body)}".encode() in lines


def test_without_a_reason_the_status_line_is_the_plain_one() -> None:
    assert refusal(400).startswith(b"HTTP/1.1 400 Bad Request\r\n")


def test_a_head_request_gets_the_length_but_no_body() -> None:
    answer = refusal(403, "x:443 is not on the allow-list", head_only=True)
    head, _, body = answer.partition(b"\r\n\r\n")
    assert body == b"" and b"Content-Length: " in head


def test_extra_headers_go_before_the_framing() -> None:
    answer = refusal(
        407, "no Proxy-Authorization", extra=b'Proxy-Authenticate: Basic realm="t"\r\n'
    )
    assert b'\r\nProxy-Authenticate: Basic realm="t"\r\n' in answer


def test_a_reason_cannot_end_the_status_line_or_carry_other_than_printable_ascii() -> None:
    reason = "evil\r\nSet-Cookie: a=b\x00\u202e\u00e9"
    shown = wire_reason(reason)
    assert shown == "evil??Set-Cookie: a=b???"
    answer = refusal(403, reason)
    status_line = answer.split(b"\r\n", 1)[0]
    assert b"Set-Cookie" in status_line  # inside the one line, never a header of its own
    assert answer.count(b"\r\n\r\n") == 1


def test_a_long_reason_is_cut() -> None:
    shown = wire_reason("a" * 1000)
    assert len(shown) == MAX_REASON and shown.endswith("...")
