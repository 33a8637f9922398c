"""A request whose last byte was written is sent (issue 37), end to end: a server on the
node's address that reads a whole approved http request and resets the connection sees it
once, and the call ends Uncertain even with a retryPolicy of three attempts.

Once broke: such a call ended Failed ("nothing was sent") and the server saw the request
again, from aiohttp's own resend of an idempotent method and from the retryPolicy."""

from __future__ import annotations

import socket
import struct
import threading
from collections.abc import Iterator
from contextlib import contextmanager

from kubernetes import client

from tests.integration.objects import Agent, approve, descriptor, pretty, status_of
from tooladapter.devtools import Namespace
from tooladapter.devtools.host import node_ip


class ResettingServer:
    """Reads each request whole (headers and its Content-Length body), counts it, then
    resets the connection (SO_LINGER 0: an RST, no answer)."""

    def __init__(self, host: str) -> None:
        self.listener = socket.create_server((host, 0))
        self.host = host
        self.port = int(self.listener.getsockname()[1])
        self.requests: list[bytes] = []
        self.lock = threading.Lock()

    def serve(self) -> None:
        while True:
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return  # closed
            with conn:
                conn.settimeout(10)
                data = b""
                try:
                    while b"\r\n\r\n" not in data:
                        chunk = conn.recv(65536)
                        if not chunk:
                            break
                        data += chunk
                    head, _, body = data.partition(b"\r\n\r\n")
                    length = 0
                    for line in head.split(b"\r\n"):
                        if line.lower().startswith(b"content-length:"):
                            length = int(line.split(b":", 1)[1])
                    while len(body) < length:
                        chunk = conn.recv(65536)
                        if not chunk:
                            break
                        body += chunk
                except OSError:
                    continue
                with self.lock:
                    self.requests.append(head)
                conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))


@contextmanager
def resetting_server(host: str) -> Iterator[ResettingServer]:
    server = ResettingServer(host)
    thread = threading.Thread(target=server.serve, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.listener.close()
        thread.join(5)


def test_an_approved_request_read_whole_then_reset_is_seen_once_and_ends_uncertain(
    api: client.ApiClient, ns: Namespace, agent: Agent
) -> None:
    with resetting_server(node_ip()) as server:
        address = f"{server.host}:{server.port}"
        descriptor(
            api,
            ns.name,
            "pay",
            kind="http",
            side_effect_class="external",
            inputSchema={"type": "object", "properties": {"id": {"type": "string"}}},
            http={
                # PUT: aiohttp would resend an idempotent method on a reset by itself.
                "method": "PUT",
                "url": f"http://{address}/pay/{{id}}",
                "body": '{"amount": 5}',
                "allowedHosts": [address],
            },
            retryPolicy={"maxAttempts": 3, "backoffSeconds": 0},
        )
        agent.grant(["pay"], ["external"])
        reviewer = Agent.create(api, ns.name, "reviewer-1", role="tooladapter-reviewer")
        name = agent.invoke("pay", {"id": "a"})
        agent.wait(name, states={"AwaitingApproval"})
        approve(reviewer, name)

        status = status_of(agent.wait(name, timeout=60))

        assert (status["state"], status["failureClass"]) == (
            "Uncertain",
            "effect-unconfirmed",
        ), pretty(status)
        assert "sent, then the connection failed" in status["message"], pretty(status)
        assert status["execution"].get("attempts", 1) == 1, pretty(status)
        assert not [s for s in status["stages"] if s["outcome"] == "retry"], pretty(status)
        assert len(server.requests) == 1, server.requests
        assert server.requests[0].startswith(b"PUT /pay/a HTTP/1.1")
