"""Serve one aiohttp request with an ASGI application, in-process.

The MCP SDK's streamable HTTP transport is an ASGI application; the gateway is aiohttp.
Rather than a second server (and port) this adapter hands each request to the ASGI app:
the body (already bounded by aiohttp's `client_max_size`) as one `http.request` message,
response messages written straight to an aiohttp `StreamResponse`, so server-sent events
(progress notifications) stream as they are produced. A client that goes away cancels the
aiohttp handler (the gateway runs with handler cancellation), which cancels the ASGI app;
`http.disconnect` is also delivered once the app has answered.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

from aiohttp import web

from tooladapter.gateway.bodies import read_body

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
AsgiApp = Callable[[Scope, Receive, Send], Awaitable[None]]


def scope_of(request: web.Request, body_state: dict[str, Any]) -> Scope:
    peer = request.transport.get_extra_info("peername") if request.transport else None
    sock = request.transport.get_extra_info("sockname") if request.transport else None
    return {
        "type": "http",
        "asgi": {"version": "3.0", "spec_version": "2.3"},
        "http_version": f"{request.version.major}.{request.version.minor}",
        "method": request.method,
        "scheme": request.scheme,
        "path": request.path,
        "raw_path": request.raw_path.split("?", 1)[0].encode("latin-1", errors="replace"),
        "query_string": request.query_string.encode("latin-1", errors="replace"),
        "root_path": "",
        "headers": [(k.lower(), v) for k, v in request.raw_headers],
        "client": tuple(peer[:2]) if isinstance(peer, tuple) else None,
        "server": tuple(sock[:2]) if isinstance(sock, tuple) else None,
        "state": body_state,
    }


async def serve_asgi(
    app: AsgiApp, request: web.Request, state: dict[str, Any]
) -> web.StreamResponse:
    """Run `app` for `request`; `state` becomes the ASGI scope's `state` (what the app's
    request objects expose as `request.state`)."""
    body = await read_body(request)
    answered = asyncio.Event()
    delivered = False
    response: web.StreamResponse | None = None

    async def receive() -> Message:
        nonlocal delivered
        if not delivered:
            delivered = True
            return {"type": "http.request", "body": body, "more_body": False}
        await answered.wait()
        return {"type": "http.disconnect"}

    async def send(message: Message) -> None:
        nonlocal response
        if message["type"] == "http.response.start":
            response = web.StreamResponse(status=int(message["status"]))
            for key, value in message.get("headers") or []:
                name = key.decode("latin-1")
                if name.lower() in ("content-length", "transfer-encoding", "connection"):
                    continue  # aiohttp frames the body itself
                response.headers.add(name, value.decode("latin-1"))
            await response.prepare(request)
        elif message["type"] == "http.response.body":
            if response is None:
                raise RuntimeError("ASGI app sent a body before starting the response")
            chunk = message.get("body") or b""
            if chunk:
                await response.write(chunk)
            if not message.get("more_body"):
                await response.write_eof()
                answered.set()

    try:
        await app(scope_of(request, state), receive, send)
    finally:
        answered.set()
    if response is None:
        raise RuntimeError("ASGI app returned without a response")
    return response
