"""One recording HTTP server for the integration tests: http tools and sandbox pods call it,
the tests count what reached it (each path is one call's effect)."""

from __future__ import annotations

import http.server
import json
import threading
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager


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
def recording_server(host: str, port: int = 0) -> Iterator[Recorder]:
    """Answers every GET and POST with JSON naming the path, and records the path."""
    recorder = Recorder(host, port)

    class Handler(http.server.BaseHTTPRequestHandler):
        def answer(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            if length:
                self.rfile.read(length)
            recorder.record(self.path, {k.lower(): v for k, v in self.headers.items()})
            body = json.dumps(
                {"path": self.path, "greeting": "hello from the node", "ok": True}
            ).encode()
            self.send_response(200)
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
