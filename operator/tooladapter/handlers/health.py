"""Liveness and readiness of the operator process, in every role.

kopf's own `--liveness` endpoint starts only once the start-up handlers have returned, and
a standby waits inside one (`leadership.lead`) for as long as another replica leads: probed
there, Kubernetes would restart every standby, and a rolling update would never see its
new (standby) pods ready. This endpoint is up from the first moment of start-up:

- `/healthz` answers 200 whenever the event loop does (a stalled leader is caught by the
  leadership watchdog, which exits the process);
- `/readyz` answers 200 for a standby (it can take over) and a leader that has started, 503
  while the process connects or a new leader primes its caches.

Both bodies name the role: `{"role": "standby"}`.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from aiohttp import web

from tooladapter.enums import OperatorRole

logger = logging.getLogger("tooladapter")

_READY = frozenset({OperatorRole.STANDBY, OperatorRole.LEADING})


@dataclass
class Health:
    """The role this process reports, and the server that reports it."""

    role: OperatorRole = OperatorRole.STARTING
    runner: web.AppRunner | None = None

    @property
    def ready(self) -> bool:
        return self.role in _READY

    async def _healthz(self, _: web.Request) -> web.Response:
        return web.json_response({"role": str(self.role)})

    async def _readyz(self, _: web.Request) -> web.Response:
        return web.json_response({"role": str(self.role)}, status=200 if self.ready else 503)

    def app(self) -> web.Application:
        app = web.Application()
        app.add_routes([web.get("/healthz", self._healthz), web.get("/readyz", self._readyz)])
        return app

    async def serve(self, port: int) -> None:
        """Listen on every address at `port` (0: not at all)."""
        if not port or self.runner is not None:
            return
        runner = web.AppRunner(self.app(), handle_signals=False, access_log=None)
        await runner.setup()
        await web.TCPSite(runner, host=None, port=port).start()
        self.runner = runner
        logger.info("health endpoints /healthz and /readyz on port %d", port)

    async def close(self) -> None:
        if self.runner is not None:
            runner, self.runner = self.runner, None
            await runner.cleanup()
