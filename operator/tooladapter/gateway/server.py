"""The gateway's aiohttp application, its listener and its life cycle.

Started by the operator's start-up before leadership is decided, so a standby serves it
too; it holds no state beyond short caches. A taken port fails the start-up with one line
naming the address and the setting.
"""

from __future__ import annotations

import asyncio
import errno
import logging
import socket
import ssl
from typing import Final

from aiohttp import web

from tooladapter.artifacts import open_store
from tooladapter.gateway.auth import authentication_middleware, install
from tooladapter.gateway.context import DEPS, Deps
from tooladapter.gateway.doors import Doors, caps_of
from tooladapter.gateway.errors import problems_middleware
from tooladapter.gateway.guard import Limits, guarded
from tooladapter.gateway.mcp_endpoint import MAX_BODY_BYTES, MCP_ENDPOINT, McpEndpoint
from tooladapter.gateway.openapi import document
from tooladapter.gateway.routes import MODULES
from tooladapter.gateway.routes.meta import OPENAPI
from tooladapter.gateway.ui import add_routes as add_ui_routes
from tooladapter.kube.auth import AllowCache
from tooladapter.kube.callers import CallerPool, Reviews, bound_time
from tooladapter.kube.client import Kube
from tooladapter.kube.session_key import ensure_session_key
from tooladapter.settings import Settings
from tooladapter.settings.live import LiveSettings

logger = logging.getLogger("tooladapter.gateway")

#: Seconds in-flight requests get to finish on shutdown (a followed call is cancelled;
#: its invocation goes on and can be read later).
SHUTDOWN_GRACE: Final = 5.0
#: A connection without a request in progress is closed after this long: an idle one,
#: and one whose head has not arrived whole (aiohttp's default is an hour).
KEEPALIVE_SECONDS: Final = 30.0


class GatewayPortTaken(RuntimeError):
    """The gateway's address is in use by another process."""

    def __init__(self, host: str, port: int) -> None:
        super().__init__(
            f"gateway: {host}:{port} is already in use by another process; free it or set "
            "TOOLADAPTER_GATEWAY_PORT (0 disables the gateway)"
        )


def check_port(settings: Settings) -> None:
    """Raise `GatewayPortTaken` when the gateway's address cannot be bound now (checked by
    the launcher before kopf starts, so a taken port is one line, not a retried handler)."""
    if settings.gateway.port == 0:
        return
    family = socket.AF_INET6 if ":" in settings.gateway.host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((settings.gateway.host, settings.gateway.port))
        except OSError as exc:
            if exc.errno == errno.EADDRINUSE:
                raise GatewayPortTaken(settings.gateway.host, settings.gateway.port) from None
            raise


def build_app(deps: Deps, mcp: McpEndpoint) -> web.Application:
    app = web.Application(
        middlewares=[problems_middleware, authentication_middleware],
        client_max_size=MAX_BODY_BYTES,
    )
    app[DEPS] = deps
    install(app, deps.settings)
    app[MCP_ENDPOINT] = mcp
    app[OPENAPI] = document(module.PATHS for module in MODULES)
    for module in MODULES:
        module.add_routes(app)
    add_ui_routes(app)
    return app


async def _ui_session_key(kube: Kube, settings: Settings) -> bytes | None:
    """The page's session key from its Secret, made there on first start (the chart)."""
    if settings.page.session_secret is None:
        return None
    namespace, _, name = settings.page.session_secret.partition("/")
    return await ensure_session_key(kube, namespace, name)


def _shared_key(deps: Deps) -> bytes | None:
    """The key all replicas share (the page's session key, from its Secret or file): what
    the MCP endpoint derives its request-state and session-token keys from."""
    if deps.ui_session_key is not None:
        return deps.ui_session_key
    path = deps.settings.page.session_key_file
    return path.read_bytes().strip() if path is not None else None


def tls_context(settings: Settings) -> ssl.SSLContext | None:
    if settings.gateway.tls_cert is None or settings.gateway.tls_key is None:
        return None
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.load_cert_chain(settings.gateway.tls_cert, settings.gateway.tls_key)
    return context


class Gateway:
    """One running gateway: `await Gateway.start(settings)`, later `await gateway.stop()`."""

    def __init__(self, deps: Deps, kube: Kube | None) -> None:
        self.deps = deps
        self.kube = kube
        self.mcp = McpEndpoint(
            shared_key=_shared_key(deps),
            # A person answers the page's link within the hour a reviewer's approval lasts.
            state_ttl_seconds=max(3600, 2 * deps.settings.gateway.approval_wait_seconds),
        )
        self.runner: web.AppRunner | None = None
        self.listener: asyncio.Server | None = None
        self.limits = Limits()
        self.port: int | None = None

    @classmethod
    async def start(cls, settings: Settings, live: LiveSettings | None = None) -> Gateway | None:
        """Serve on `gateway_host:gateway_port`; None when the port is 0 (disabled).
        `live`: the settings in force, shared with the runtime (reloaded values)."""
        if settings.gateway.port == 0:
            return None
        kube = await Kube.connect()
        # Every API request the gateway makes ends in time (the caller pools' too).
        bound_time(kube.api, settings.gateway.api_timeout_seconds)
        deps = Deps(
            reviews=Reviews(
                kube,
                settings.gateway.audiences,
                AllowCache(settings.authz_cache_seconds),
                timeout_seconds=settings.gateway.api_timeout_seconds,
            ),
            pool=CallerPool.from_default(
                settings.gateway.connections,
                settings.gateway.stream_connections,
                settings.gateway.api_timeout_seconds,
            ),
            # The configured backend: with s3 every replica reads every receipt.
            store=await asyncio.to_thread(open_store, settings),
            settings=settings,
            kube=kube,
            doors=Doors(caps_of(settings)),
            ui_session_key=await _ui_session_key(kube, settings),
            live=live,
        )
        gateway = cls(deps, kube)
        try:
            await gateway.serve()
        except BaseException:
            await gateway.stop()
            raise
        return gateway

    async def serve(self) -> None:
        settings = self.deps.settings
        await self.mcp.start()
        self.runner = web.AppRunner(
            build_app(self.deps, self.mcp),
            handler_cancellation=True,
            access_log=None,
            shutdown_timeout=SHUTDOWN_GRACE,
            keepalive_timeout=KEEPALIVE_SECONDS,
        )
        await self.runner.setup()
        server = self.runner.server
        assert server is not None
        context = tls_context(settings)
        # The listener is ours rather than a TCPSite's, so every connection passes the
        # guard (`guard.py`) before aiohttp sees it.
        try:
            self.listener = await asyncio.get_running_loop().create_server(
                guarded(server, self.limits),
                settings.gateway.host,
                settings.gateway.port,
                ssl=context,
                reuse_address=True,
            )
        except OSError as exc:
            if exc.errno == errno.EADDRINUSE:
                raise GatewayPortTaken(settings.gateway.host, settings.gateway.port) from None
            raise
        sockets = self.listener.sockets
        self.port = sockets[0].getsockname()[1] if sockets else settings.gateway.port
        scheme = "https" if context is not None else "http"
        logger.info(
            "gateway serving on %s://%s:%s (MCP at /namespaces/{namespace}/mcp)",
            scheme,
            settings.gateway.host,
            self.port,
        )

    async def stop(self) -> None:
        self.mcp.stopping()  # calls cut off by the shutdown are not their clients' cancels
        if self.listener is not None:
            self.listener.close()
            self.listener = None
        if self.runner is not None:
            await self.runner.cleanup()
            self.runner = None
        await self.mcp.stop()
        await self.deps.pool.close()
        if self.kube is not None:
            await self.kube.close()
            self.kube = None
