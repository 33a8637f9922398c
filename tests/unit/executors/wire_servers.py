"""Tiny HTTP/1.1 servers on 127.0.0.1 that break a connection at a chosen moment, over real
sockets, and count what reached them: requests read whole, and connections.

- `Behaviour.RESET_AFTER_READING`: reads the whole request, then resets the connection
  (SO_LINGER 0: an RST, not a clean close).
- `Behaviour.CLOSE_BEFORE_READING`: resets each connection as soon as it is accepted,
  reading nothing.
- `Behaviour.HANG_AFTER_READING`: reads the whole request and never answers (the client's
  deadline passes).

With `cut_over`, a request whose Content-Length exceeds it is reset right after its headers,
its body unread (`WireServer.cut`): the client's write of the body fails partway.

`serving(answer)` decides per request: `answer` returns the whole HTTP response to write,
or None to break the connection as the behaviour says. `mcp_answer` is a minimal MCP server
of the handshake era (initialize, tools/list) whose tools/call the behaviour breaks.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import socket
import struct
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from enum import Enum
from typing import Any


class Behaviour(Enum):
    RESET_AFTER_READING = "reset-after-reading"
    CLOSE_BEFORE_READING = "close-before-reading"
    HANG_AFTER_READING = "hang-after-reading"


@dataclass(frozen=True)
class Request:
    method: str
    path: str
    headers: dict[str, str]
    body: bytes

    def json(self) -> dict[str, Any]:
        data = json.loads(self.body or b"{}")
        return data if isinstance(data, dict) else {}


Answer = Callable[[Request], Awaitable[bytes | None]]


@dataclass
class WireServer:
    behaviour: Behaviour
    answer: Answer
    port: int = 0
    connections: int = 0
    #: Every request read whole, in order.
    requests: list[Request] = field(default_factory=list)
    #: Requests the behaviour broke (read whole, never answered).
    broken: list[Request] = field(default_factory=list)
    #: Reset after their headers, over `cut_over` bytes (headers only, no body).
    cut_over: int | None = None
    cut: list[Request] = field(default_factory=list)
    stop: asyncio.Event = field(default_factory=asyncio.Event)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            if self.behaviour is Behaviour.CLOSE_BEFORE_READING:
                return reset(writer)
            while (request := await read_head(reader)) is not None:
                size = int(request.headers.get("content-length", "0"))
                if self.cut_over is not None and size > self.cut_over:
                    self.cut.append(request)
                    return reset(writer)
                request = dataclasses.replace(request, body=await reader.readexactly(size))
                self.requests.append(request)
                reply = await self.answer(request)
                if reply is not None:
                    writer.write(reply)
                    await writer.drain()
                    continue
                self.broken.append(request)
                if self.behaviour is Behaviour.HANG_AFTER_READING:
                    await self.stop.wait()
                return reset(writer)
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        writer.close()


def reset(writer: asyncio.StreamWriter) -> None:
    """Close with an RST: SO_LINGER on with a zero timeout."""
    sock = writer.get_extra_info("socket")
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    writer.transport.abort()


async def read_head(reader: asyncio.StreamReader) -> Request | None:
    """A request's line and headers (its body is still to read); None at a clean end."""
    try:
        head = await reader.readuntil(b"\r\n\r\n")
    except asyncio.IncompleteReadError:
        return None
    lines = head.decode("latin-1").split("\r\n")
    method, path, _ = lines[0].split(" ", 2)
    headers = {}
    for line in lines[1:]:
        if ":" in line:
            name, value = line.split(":", 1)
            headers[name.strip().lower()] = value.strip()
    return Request(method, path, headers, b"")


def response(status: int, body: bytes = b"", content_type: str = "application/json") -> bytes:
    head = f"HTTP/1.1 {status} X\r\nContent-Type: {content_type}\r\n"
    return (head + f"Content-Length: {len(body)}\r\n\r\n").encode() + body


async def never_answer(_request: Request) -> bytes | None:
    return None


@asynccontextmanager
async def serving(
    behaviour: Behaviour, answer: Answer = never_answer, *, cut_over: int | None = None
) -> AsyncIterator[WireServer]:
    wire = WireServer(behaviour, answer, cut_over=cut_over)
    tasks: set[asyncio.Task[None]] = set()

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        tasks.add(task)
        await wire.handle(reader, writer)

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    wire.port = server.sockets[0].getsockname()[1]
    try:
        yield wire
    finally:
        wire.stop.set()
        server.close()
        await server.wait_closed()
        await asyncio.wait_for(asyncio.gather(*tasks, return_exceptions=True), 5)


#: The handshake-era revision the MCP answer speaks.
MCP_VERSION = "2025-06-18"
MCP_TOOL = {"name": "echo", "inputSchema": {"type": "object"}}


async def mcp_answer(request: Request) -> bytes | None:
    """A minimal MCP server over streamable HTTP (JSON answers, no session): the client's
    2026 `server/discover` probe is refused as a handshake-era server refuses it, so it
    falls back to `initialize`; tools/call returns None (the behaviour breaks it)."""
    if request.method != "POST":
        return response(405)
    version = request.headers.get("mcp-protocol-version")
    message = request.json()
    ident, method = message.get("id"), message.get("method")
    if version is not None and version != MCP_VERSION:
        error = {"code": -32600, "message": f"Bad Request: Unsupported protocol version: {version}"}
        return response(400, json.dumps({"jsonrpc": "2.0", "id": None, "error": error}).encode())
    if ident is None:
        return response(202)  # a notification
    if method == "initialize":
        result: dict[str, Any] = {
            "protocolVersion": MCP_VERSION,
            "capabilities": {"tools": {}},
            "serverInfo": {"name": "wire", "version": "1"},
        }
    elif method == "tools/list":
        result = {"tools": [MCP_TOOL]}
    elif method == "tools/call":
        return None
    else:
        error = {"code": -32601, "message": "Method not found"}
        return response(200, json.dumps({"jsonrpc": "2.0", "id": ident, "error": error}).encode())
    return response(200, json.dumps({"jsonrpc": "2.0", "id": ident, "result": result}).encode())
