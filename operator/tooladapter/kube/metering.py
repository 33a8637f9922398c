"""Every request the operator sends the API server, counted by verb and resource.

The API server's own `apiserver_request_total` counts every client of a shared cluster; this
counts only the operator's, so what one governed call costs is attributed to where it comes
from (`make bench` reads both). Label values come from the request's path, where only
resource names stand (an object's name is dropped): bounded by the kinds the operator uses.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable
from typing import Any
from urllib.parse import urlsplit

from kubernetes_asyncio import client

from tooladapter.metrics import API_REQUESTS

#: Subresources a namespace's own path may end with (`/api/v1/namespaces/NAME/status`).
_NAMESPACE_SUBRESOURCES = frozenset({"status", "finalize"})


def request_kind(method: str, url: str, query: Iterable[tuple[str, Any]] | None) -> tuple[str, str]:
    """(verb, resource[/subresource]) of one request: LIST and WATCH as the API server's
    metrics name them, GET for one object."""
    parts = [p for p in urlsplit(url).path.split("/") if p]
    # /api/v1/... or /apis/GROUP/VERSION/...
    rest = parts[2:] if parts[:1] == ["api"] else parts[3:] if parts[:1] == ["apis"] else []
    if rest[:1] == ["namespaces"] and len(rest) >= 3 and rest[2] not in _NAMESPACE_SUBRESOURCES:
        rest = rest[2:]  # a namespaced path: the resource follows the namespace's name
    resource = rest[0] if rest else "other"
    named = len(rest) != 1  # a collection is LIST; a path outside the APIs (/version) GET
    if len(rest) >= 3:
        resource += "/" + rest[2]
    verb = method.upper()
    if verb == "GET":
        watch = any(k == "watch" and str(v).lower() in ("true", "1") for k, v in query or ())
        verb = "WATCH" if watch else "GET" if named else "LIST"
    return verb, resource


def meter(api: client.ApiClient) -> None:
    """Count every request `api` sends from now on (`tooladapter_api_requests_total`)."""
    rest = api.rest_client
    send: Callable[..., Awaitable[Any]] = rest.request

    async def counted(method: str, url: str, query_params: Any = None, *a: Any, **kw: Any) -> Any:
        API_REQUESTS.labels(*request_kind(method, url, query_params)).inc()
        return await send(method, url, query_params, *a, **kw)

    rest.request = counted
