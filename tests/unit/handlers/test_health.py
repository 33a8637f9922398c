"""The health endpoints answer in every role: a standby is alive and ready, a starting
leader alive but not ready."""

from __future__ import annotations

import aiohttp

from tooladapter.devtools import free_port
from tooladapter.enums import OperatorRole
from tooladapter.handlers.health import Health


async def _get(port: int, path: str) -> tuple[int, dict[str, str]]:
    async with (
        aiohttp.ClientSession() as session,
        session.get(f"http://127.0.0.1:{port}{path}") as response,
    ):
        return response.status, await response.json()


async def test_a_standby_is_alive_and_ready_a_starting_leader_only_alive() -> None:
    health = Health()
    port = free_port()
    await health.serve(port)
    try:
        assert await _get(port, "/healthz") == (200, {"role": "starting"})
        assert await _get(port, "/readyz") == (503, {"role": "starting"})
        health.role = OperatorRole.STANDBY
        assert await _get(port, "/healthz") == (200, {"role": "standby"})
        assert await _get(port, "/readyz") == (200, {"role": "standby"})
        health.role = OperatorRole.STARTING  # it took the Lease and primes its caches
        assert (await _get(port, "/readyz"))[0] == 503
        health.role = OperatorRole.LEADING
        assert await _get(port, "/readyz") == (200, {"role": "leading"})
    finally:
        await health.close()
    assert health.runner is None


async def test_port_zero_serves_nothing() -> None:
    health = Health()
    await health.serve(0)
    assert health.runner is None
    await health.close()
