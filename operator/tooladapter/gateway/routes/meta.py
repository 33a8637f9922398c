"""`/healthz` and `/openapi.json`: unauthenticated."""

from __future__ import annotations

from typing import Any, Final

from aiohttp import web

from tooladapter.gateway.openapi import ok, ref

OPENAPI: Final = web.AppKey("tooladapter.openapi", dict)

PATHS: Final[dict[str, Any]] = {
    "/healthz": {
        "get": {
            "operationId": "health",
            "summary": "The gateway answers (it does not ask the API server).",
            "security": [],
            "responses": ok(ref("Health"), "Serving"),
        }
    },
    "/openapi.json": {
        "get": {
            "operationId": "openapi",
            "summary": "This document.",
            "security": [],
            "responses": ok({"type": "object"}, "The OpenAPI 3.1 document"),
        }
    },
}


async def health(request: web.Request) -> web.Response:
    return web.json_response({"status": "ok"})


async def openapi(request: web.Request) -> web.Response:
    return web.json_response(request.app[OPENAPI])


def add_routes(app: web.Application) -> None:
    app.router.add_get("/healthz", health, allow_head=False)
    app.router.add_get("/openapi.json", openapi, allow_head=False)
