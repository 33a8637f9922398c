"""One recording HTTP server for the integration tests: http tools and sandbox pods call it,
the tests count what reached it (each path is one call's effect)."""

from __future__ import annotations

import contextlib
import http.server
import json
import socket
import ssl
import threading
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any


class Recorder:
    def __init__(self, host: str, port: int) -> None:
        self.host = host
        self.port = port
        self.hits: Counter[str] = Counter()
        self.paths: list[str] = []
        #: The headers of each request, in order (names lower-cased).
        self.headers: list[dict[str, str]] = []
        self.lock = threading.Lock()

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def total(self) -> int:
        return sum(self.hits.values())

    def record(self, path: str, headers: dict[str, str] | None = None) -> None:
        with self.lock:
            self.hits[path] += 1
            self.paths.append(path)
            self.headers.append(headers or {})


@contextmanager
def recording_server(
    host: str,
    port: int = 0,
    *,
    status: int = 200,
    hold_first: threading.Event | None = None,
) -> Iterator[Recorder]:
    """Answers every GET and POST with JSON naming the path (status `status`), and records
    the path. `hold_first`: the first request is recorded, then held unanswered until the
    event is set (at most 60 s): its caller sees a request sent and no answer."""
    recorder = Recorder(host, port)

    class Handler(http.server.BaseHTTPRequestHandler):
        def answer(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            if length:
                self.rfile.read(length)
            recorder.record(self.path, {k.lower(): v for k, v in self.headers.items()})
            if hold_first is not None and recorder.total == 1:
                hold_first.wait(60)
                return
            body = json.dumps(
                {"path": self.path, "greeting": "hello from the node", "ok": status < 400}
            ).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        do_GET = do_POST = answer

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer((host, port), Handler)
    recorder.port = server.server_address[1]
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield recorder
    finally:
        server.shutdown()
        server.server_close()


def private_hello(head: bytes) -> bytes:
    return b"HTTP/1.1 200 OK\r\nContent-Length: 13\r\n\r\nprivate hello"


@contextmanager
def tls_server(
    host: str, certs: Any, answer: Callable[[bytes], bytes] = private_hello
) -> Iterator[tuple[int, list[bytes]]]:
    """A TLS upstream (certificate from `devtools.tls`) that keeps every request head it got
    and answers each with `answer(head)`."""
    heads: list[bytes] = []
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(certs.cert, certs.key)
    listener = socket.create_server((host, 0))
    port = listener.getsockname()[1]
    stop = threading.Event()

    def serve() -> None:
        listener.settimeout(0.5)
        while not stop.is_set():
            try:
                conn, _ = listener.accept()
            except OSError:
                continue
            with contextlib.suppress(OSError, ssl.SSLError):
                with context.wrap_socket(conn, server_side=True) as tls:
                    tls.settimeout(10)
                    data = b""
                    while b"\r\n\r\n" not in data:
                        chunk = tls.recv(4096)
                        if not chunk:
                            break
                        data += chunk
                    heads.append(data)
                    tls.sendall(answer(data))

    threading.Thread(target=serve, daemon=True).start()
    try:
        yield port, heads
    finally:
        stop.set()
        listener.close()
