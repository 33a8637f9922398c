"""Clients of the gateway for the integration tests: the `mcp` SDK's own streamable HTTP
client, and plain HTTP for the REST API (bounded timeouts, never a sleep)."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any, cast

import httpx2
from kubernetes import client
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp_types import RequestParamsMeta

from tests.integration.objects import Agent
from tooladapter.devtools import token_for


def request_meta(fields: dict[str, Any]) -> RequestParamsMeta:
    """A call's `_meta` as the SDK types it: an open TypedDict (PEP 728 `extra_items`), whose
    extra keys mypy does not yet accept in a literal; the dict is passed on as it is."""
    return cast(RequestParamsMeta, fields)


def token_of(agent: Agent) -> str:
    """A fresh token of the agent's ServiceAccount (the gateway reviews it)."""
    return token_for(agent.admin, agent.namespace, agent.name)


@asynccontextmanager
async def mcp_client(
    url: str, token: str | None, *, timeout: float = 120, mode: str = "auto"
) -> AsyncIterator[Client]:
    """The SDK's client; `mode`: "auto" (the newest era both speak), "legacy" (the
    initialize handshake) or a protocol version."""
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    http = httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(timeout), trust_env=False)
    async with (
        http,
        Client(
            streamable_http_client(url, http_client=http),
            mode=mode,
            cache=None,
            read_timeout_seconds=timeout,
        ) as session,
    ):
        yield session


def http_json(
    method: str,
    url: str,
    token: str | None = None,
    body: Any = None,
    *,
    timeout: float = 60,
) -> tuple[int, str, Any]:
    """(status, content type, parsed JSON body) of one request."""
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(url, data=data, method=method)
    if token:
        request.add_header("Authorization", f"Bearer {token}")
    if data is not None:
        request.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            raw = response.read()
            return response.status, response.headers.get("Content-Type", ""), json.loads(raw)
    except urllib.error.HTTPError as exc:
        raw = exc.read()
        return exc.code, exc.headers.get("Content-Type", ""), json.loads(raw) if raw else None


def mcp_url(base: str, namespace: str) -> str:
    return f"{base}/namespaces/{namespace}/mcp"


def unbound_sa(api: client.ApiClient, namespace: str, name: str) -> str:
    """A token of a ServiceAccount with no tooladapter role at all."""
    return token_for(api, namespace, name)
