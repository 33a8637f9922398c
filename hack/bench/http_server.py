"""The http tool's server on the node's address, as its own process
(`python -m bench http-server HOST PORT`)."""

from __future__ import annotations

import asyncio

from aiohttp import web


async def http_server(host: str, port: int) -> None:
    async def greet(request: web.Request) -> web.Response:
        return web.json_response({"path": request.path, "greeting": "hello from the node"})

    app = web.Application()
    app.router.add_get("/{tail:.*}", greet)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, host, port).start()
    print(f"http server on {host}:{port}", flush=True)
    await asyncio.Event().wait()
