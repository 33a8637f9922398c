"""A lean async client of the API server: raw JSON, one connection pool per identity."""

from __future__ import annotations

import asyncio
import json
import ssl
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import aiohttp
from kubernetes import config


@dataclass(frozen=True)
class Endpoint:
    host: str
    ca: str | None
    cert: str | None
    key: str | None
    verify: bool

    @classmethod
    def from_kubeconfig(cls, path: str) -> Endpoint:
        cfg = config.new_client_from_config(config_file=path).configuration
        return cls(cfg.host, cfg.ssl_ca_cert, cfg.cert_file, cfg.key_file, bool(cfg.verify_ssl))

    def ssl_context(self, *, client_cert: bool) -> ssl.SSLContext:
        ctx = ssl.create_default_context(cafile=self.ca)
        if not self.verify:
            ctx.check_hostname = False
            ctx.verify_mode = ssl.CERT_NONE
        if client_cert and self.cert and self.key:
            ctx.load_cert_chain(self.cert, self.key)
        return ctx


class Api:
    """A lean async client: raw JSON over one aiohttp connection pool per identity."""

    def __init__(self, ep: Endpoint, token: str | None = None, limit: int = 64) -> None:
        headers = {"Accept": "application/json"}
        if token:
            headers["Authorization"] = f"Bearer {token}"
        self.base = ep.host.rstrip("/")
        self.session = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(ssl=ep.ssl_context(client_cert=not token), limit=limit),
            headers=headers,
            timeout=aiohttp.ClientTimeout(total=60),
        )

    async def close(self) -> None:
        await self.session.close()

    async def call(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        params: dict[str, str] | None = None,
        content_type: str = "application/json",
        timeout: float | None = None,
    ) -> tuple[int, Any]:
        data = None if body is None else json.dumps(body).encode()
        headers = {"Content-Type": content_type} if data is not None else None
        async with self.session.request(
            method,
            self.base + path,
            data=data,
            params=params,
            headers=headers,
            timeout=aiohttp.ClientTimeout(total=timeout) if timeout else None,
        ) as resp:
            raw = await resp.read()
        try:
            return resp.status, json.loads(raw) if raw else None
        except ValueError:
            return resp.status, raw.decode(errors="replace")

    async def raw(
        self, path: str, params: dict[str, str] | None = None, timeout: float | None = None
    ) -> tuple[int, bytes]:
        async with self.session.get(
            self.base + path,
            params=params,
            timeout=aiohttp.ClientTimeout(total=timeout) if timeout else None,
        ) as resp:
            return resp.status, await resp.read()

    async def text(self, path: str, params: dict[str, str] | None = None) -> tuple[int, str]:
        async with self.session.get(self.base + path, params=params) as resp:
            return resp.status, await resp.text()

    async def watch(
        self,
        path: str,
        handle: Callable[[str, dict[str, Any], float], None],
        *,
        params: dict[str, str] | None = None,
        ready: asyncio.Event | None = None,
    ) -> None:
        """Watch `path` forever from the current resourceVersion; `handle(type, obj, t)`."""
        rv: str | None = None
        while True:
            if rv is None:
                status, listing = await self.call(
                    "GET", path, params={"limit": "1", **(params or {})}
                )
                if status != 200:
                    await asyncio.sleep(0.5)
                    continue
                rv = listing["metadata"]["resourceVersion"]
            query = {
                "watch": "1",
                "resourceVersion": rv,
                "allowWatchBookmarks": "true",
                "timeoutSeconds": "290",
                **(params or {}),
            }
            try:
                async with self.session.get(
                    self.base + path,
                    params=query,
                    timeout=aiohttp.ClientTimeout(total=None, sock_connect=30, sock_read=320),
                ) as resp:
                    if resp.status != 200:
                        rv = None
                        await asyncio.sleep(0.5)
                        continue
                    if ready is not None:
                        ready.set()
                    buf = b""
                    async for chunk in resp.content.iter_any():
                        now = time.time()
                        buf += chunk
                        while (i := buf.find(b"\n")) >= 0:
                            line, buf = buf[:i], buf[i + 1 :]
                            if not line.strip():
                                continue
                            event = json.loads(line)
                            kind, obj = event.get("type"), event.get("object") or {}
                            if kind == "ERROR":
                                rv = None  # 410 Gone and friends: list again
                                break
                            rv = obj.get("metadata", {}).get("resourceVersion", rv)
                            if kind != "BOOKMARK":
                                handle(kind, obj, now)
                        if rv is None:
                            break
            except (aiohttp.ClientError, TimeoutError):
                await asyncio.sleep(0.2)


def ns_path(group: str, version: str, namespace: str, plural: str) -> str:
    prefix = "/api/v1" if group == "" else f"/apis/{group}/{version}"
    return f"{prefix}/namespaces/{namespace}/{plural}"
