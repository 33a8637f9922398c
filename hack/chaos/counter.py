"""The counting server: every GET or POST to /<tool>/<key> is one execution of that key.

It runs in the chaos process (a thread per request) on the node's address, where the
operator (http tools) and sandbox pods (wget, allowed by the tool's egress) reach it. It
answers after a random delay of up to `delay` seconds so that operator kills also land
while a request is in flight.
"""

from __future__ import annotations

import contextlib
import http.server
import random
import threading
import time
from collections import Counter
from typing import Any


class CountingServer:
    def __init__(self, host: str, port: int, delay: float) -> None:
        self.counts: Counter[str] = Counter()
        self.first_seen: dict[str, float] = {}
        self.lock = threading.Lock()
        counter = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def handle_hit(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                if length:
                    self.rfile.read(length)
                with counter.lock:
                    counter.counts[self.path] += 1
                    counter.first_seen.setdefault(self.path, time.time())
                if delay > 0:
                    time.sleep(random.uniform(0, delay))
                body = b'{"counted": true}'
                # The caller may be gone (an operator killed mid-request): nothing to say.
                with contextlib.suppress(OSError):
                    self.send_response(200)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(body)))
                    self.end_headers()
                    self.wfile.write(body)

            do_GET = handle_hit
            do_POST = handle_hit

            def log_message(self, *args: Any) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer((host, port), Handler)
        self.server.daemon_threads = True
        self.address = f"{host}:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def start(self) -> None:
        self.thread.start()

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    def count(self, path: str) -> int:
        with self.lock:
            return self.counts[path]

    def snapshot(self) -> dict[str, int]:
        with self.lock:
            return dict(self.counts)
