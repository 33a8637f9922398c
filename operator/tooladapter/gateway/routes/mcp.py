"""`/namespaces/{namespace}/mcp`: the MCP endpoint (see `gateway.mcp_endpoint`)."""

from __future__ import annotations

from typing import Any, Final

from aiohttp import web

from tooladapter.gateway import params
from tooladapter.gateway.mcp_endpoint import handle_mcp
from tooladapter.gateway.openapi import NAMESPACE, SECURITY, problems

PATHS: Final[dict[str, Any]] = {
    "/namespaces/{namespace}/mcp": {
        "post": {
            "operationId": "mcp",
            "summary": "MCP over streamable HTTP (stateless): tools/list and tools/call for "
            "the tools the caller may invoke in the namespace. JSON-RPC in, JSON or "
            "server-sent events out (progress notifications, then the result).",
            "security": SECURITY,
            "parameters": [NAMESPACE],
            "requestBody": {
                "required": True,
                "content": {"application/json": {"schema": {"type": "object"}}},
            },
            "responses": {
                "200": {
                    "description": "The JSON-RPC response (or an event stream ending with it)",
                    "content": {
                        "application/json": {"schema": {"type": "object"}},
                        "text/event-stream": {"schema": {"type": "string"}},
                    },
                },
                "202": {"description": "A notification, accepted"},
                **problems(),
            },
        }
    }
}


async def mcp(request: web.Request) -> web.StreamResponse:
    params.namespace(request)
    return await handle_mcp(request)


def add_routes(app: web.Application) -> None:
    # GET (a standalone event stream) and DELETE (end a session) are refused (405) by the
    # endpoint: it keeps no session and has no stream to open.
    for method in ("POST", "GET", "DELETE"):
        app.router.add_route(method, "/namespaces/{namespace}/mcp", mcp)
