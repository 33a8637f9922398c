"""Issue 28: a reflected injected credential never leaks through framing or encoding."""

from __future__ import annotations

import base64
import gzip
import json
import random
import urllib.parse
import zlib

import pytest

from tooladapter.egress.core.response import BadResponse, EncodedMasker, ResponseFilter

SECRET = 's3cr3t/Val ue+x="q"-0123456789abcdef'
RAW = SECRET.encode()


def dechunk(body: bytes) -> bytes:
    out = b""
    while True:
        size_line, _, body = body.partition(b"\r\n")
        size = int(size_line, 16)
        if size == 0:
            assert body == b"\r\n"
            return out
        out, body = out + body[:size], body[size + 2 :]


def run(raw: bytes, *, pieces: int = 1, seed: int = 0, method: str = "GET") -> bytes:
    """`raw` fed in random pieces (every byte alone when `pieces` is 0)."""
    filt = ResponseFilter(RAW, method=method)
    if pieces == 0:
        parts = [raw[i : i + 1] for i in range(len(raw))]
    else:
        rng = random.Random(seed)
        cuts = sorted(rng.sample(range(1, len(raw)), min(pieces - 1, len(raw) - 1)))
        parts = [raw[a:b] for a, b in zip([0, *cuts], [*cuts, len(raw)], strict=True)]
    return b"".join(filt.feed(p) for p in parts) + filt.flush()


def chunked(body: bytes, sizes: list[int]) -> bytes:
    out = b""
    for size in sizes:
        part, body = body[:size], body[size:]
        out += f"{len(part):x};ext=1\r\n".encode() + part + b"\r\n"
    if body:
        out += f"{len(body):x}\r\n".encode() + body + b"\r\n"
    return out + b"0\r\nX-Trailer: " + RAW + b"\r\n\r\n"


def answer(body: bytes, *headers: str) -> bytes:
    return ("HTTP/1.1 200 OK\r\n" + "".join(h + "\r\n" for h in headers) + "\r\n").encode() + body


def leaks(out: bytes) -> list[str]:
    """Which forms of the value are in `out`."""
    forms = {
        "raw": RAW,
        "json": json.dumps(SECRET)[1:-1].replace("/", "\\/").encode(),
        "url": urllib.parse.quote(SECRET, safe="").encode(),
        "b64": base64.b64encode(RAW)[4:-4],
        "raw-middle": RAW[3:-3],
    }
    return [name for name, form in forms.items() if form in out]


@pytest.mark.parametrize("split", [1, 5, 17, len(RAW) - 1])
@pytest.mark.parametrize("pieces", [0, 1, 3, 40])
def test_a_chunk_boundary_splitting_the_value_does_not_carry_it(split: int, pieces: int) -> None:
    body = b'{"echo": "Bearer ' + RAW + b'"}'
    raw = answer(chunked(body, [len(b'{"echo": "Bearer ') + split]), "Transfer-Encoding: chunked")
    out = run(raw, pieces=pieces, seed=split)
    head, _, framed = out.partition(b"\r\n\r\n")
    assert leaks(out) == []
    assert b"Transfer-Encoding: chunked" in head and b"Connection: close" in head
    assert dechunk(framed) == b'{"echo": "Bearer ' + b"*" * len(RAW) + b'"}'


@pytest.mark.parametrize(
    "form",
    [
        json.dumps(SECRET)[1:-1].replace("/", "\\/"),  # `\/` and `\"`
        "".join(f"\\u{ord(c):04x}" for c in SECRET),  # every character \u00xx
        "".join(f"\\u{ord(c):04X}" if i % 2 else c for i, c in enumerate(SECRET)),  # mixed
        urllib.parse.quote(SECRET, safe=""),
        urllib.parse.quote_plus(SECRET),
        "".join(f"%{b:02x}" for b in RAW),  # lower-case hex, every byte
    ],
)
def test_escaped_and_url_encoded_reflections_are_masked(form: str) -> None:
    body = b"prefix " + form.encode() + b" suffix"
    for pieces in (1, 7, 0):
        out = run(answer(body, f"Content-Length: {len(body)}"), pieces=pieces)
        framed = out.partition(b"\r\n\r\n")[2]
        assert dechunk(framed) == b"prefix " + b"*" * len(form) + b" suffix", form


@pytest.mark.parametrize("lead", [b"", b"a", b"ab", b"Bearer ", b"user:"])
def test_base64_reflections_are_masked_at_every_alignment(lead: bytes) -> None:
    for encode in (base64.b64encode, base64.urlsafe_b64encode):
        encoded = encode(lead + RAW + b"tail")
        body = b'{"token": "' + encoded + b'"}'
        out = run(answer(body, f"Content-Length: {len(body)}"), pieces=5)
        decoded_back = dechunk(out.partition(b"\r\n\r\n")[2])
        assert leaks(decoded_back) == []
        # Only the edges (what other bytes share a base64 group with) may stay.
        assert decoded_back.count(b"*") >= len(RAW) * 4 // 3 - 8


@pytest.mark.parametrize(
    "coding,compress",
    [
        ("gzip", gzip.compress),
        ("x-gzip", gzip.compress),
        ("deflate", zlib.compress),
        ("deflate", lambda b: zlib.compress(b)[2:-4]),  # raw deflate, as some servers send
    ],
)
def test_a_compressed_body_is_decoded_then_masked(coding: str, compress: object) -> None:
    plain = b"headers: Authorization: Bearer " + RAW + b"\n" * 50
    body = compress(plain)  # type: ignore[operator]
    for framing in (
        (chunked(body, [3, 9]), "Transfer-Encoding: chunked"),
        (body, f"Content-Length: {len(body)}"),
    ):
        out = run(answer(framing[0], f"Content-Encoding: {coding}", framing[1]), pieces=6)
        head, _, framed = out.partition(b"\r\n\r\n")
        assert b"Content-Encoding" not in head
        assert dechunk(framed) == plain.replace(RAW, b"*" * len(RAW))


@pytest.mark.parametrize("coding", ["br", "zstd", "compress", "gzip, br"])
def test_an_encoding_the_proxy_cannot_decode_is_a_502_before_anything_passes(coding: str) -> None:
    filt = ResponseFilter(RAW, method="GET")
    with pytest.raises(BadResponse, match="cannot decode") as caught:
        filt.feed(answer(b"xx" + RAW, f"Content-Encoding: {coding}", "Content-Length: 40"))
    assert not filt.started
    refusal = filt.refusal(str(caught.value))
    assert refusal.startswith(b"HTTP/1.1 502 ") and RAW not in refusal


def test_a_reflection_in_a_header_is_masked() -> None:
    out = run(answer(b"ok", "X-Echo: Bearer " + SECRET, "Content-Length: 2"), pieces=0)
    assert leaks(out) == [] and b"X-Echo: Bearer " + b"*" * len(RAW) in out


def test_an_answer_cut_short_stays_cut_short() -> None:
    filt = ResponseFilter(RAW, method="GET")
    out = filt.feed(answer(b"5\r\nhello\r\n", "Transfer-Encoding: chunked"))
    with pytest.raises(BadResponse, match="inside the response body"):
        filt.flush()
    assert filt.started and not out.endswith(b"0\r\n\r\n")
    assert filt.refusal("cut") == b""
    filt = ResponseFilter(RAW, method="GET")
    filt.feed(answer(gzip.compress(b"x" * 1000)[:20], "Content-Encoding: gzip"))
    with pytest.raises(BadResponse, match="truncated gzip"):
        filt.flush()
    with pytest.raises(BadResponse, match="before a whole response head"):
        ResponseFilter(RAW, method="GET").flush()


def test_no_body_answers_and_interim_answers_and_http_1_0_clients() -> None:
    out = run(answer(b"", "Content-Length: 99"), method="HEAD")
    assert out.endswith(b"Connection: close\r\n\r\n") and b"Content-Length" not in out
    interim = b"HTTP/1.1 100 Continue\r\n\r\n" + answer(b"abc", "Content-Length: 3")
    out = run(interim, pieces=0)
    assert out.startswith(b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\n")
    assert out.endswith(b"3\r\nabc\r\n0\r\n\r\n")
    # No length: until the close. An HTTP/1.0 client gets the body unframed.
    filt = ResponseFilter(RAW, method="GET", client_version="HTTP/1.0")
    out = filt.feed(answer(b"a" + RAW[:9])) + filt.feed(RAW[9:] + b"b") + filt.flush()
    assert out.endswith(b"\r\n\r\na" + b"*" * len(RAW) + b"b")
    assert b"Transfer-Encoding" not in out
    # Bytes after a complete answer are dropped.
    assert run(answer(b"ab", "Content-Length: 2") + RAW).endswith(b"2\r\nab\r\n0\r\n\r\n")


@pytest.mark.parametrize(
    "raw",
    [
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip, chunked\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\nContent-Length: 4\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nX: a\nY: b\r\n\r\n",
        b"HTTP/1.1 101 Switching Protocols\r\n\r\n",
        b"HTTP/2 200\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
    ],
)
def test_malformed_answers_are_refused(raw: bytes) -> None:
    filt = ResponseFilter(RAW, method="GET")
    with pytest.raises(BadResponse):
        filt.feed(raw)
        filt.flush()


def test_the_masker_holds_back_no_more_than_it_must() -> None:
    masker = EncodedMasker(b"abcdef")
    first = masker.feed(b"x" * 100)
    assert first == b"x" * (100 - (6 * 6 - 1))  # at most six characters of \u00xx each
    rest = masker.feed(b"abc") + masker.feed(b"def") + masker.flush()
    assert first + rest == b"x" * 100 + b"*" * 6
    assert EncodedMasker(b"").feed(b"abc") == b"abc"
