"""One shared asynchronous API client; the errors callers branch on are `kube.errors`."""

from __future__ import annotations

import json
import os
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
from kubernetes_asyncio import client, config
from kubernetes_asyncio.client.exceptions import ApiException

from tooladapter import GROUP, VERSION
from tooladapter.kube.errors import (
    AlreadyExists,
    Conflict,
    NotFound,
    Refused,
    api_errors,
    is_transient,
)
from tooladapter.kube.metering import meter


def watch_options(seconds: int) -> dict[str, Any]:
    """A streamed watch request of `seconds` (server side): the raw answer, read no longer
    than the server may hold it open, plus a margin."""
    return {
        "watch": True,
        "timeout_seconds": seconds,
        "_preload_content": False,
        "_request_timeout": aiohttp.ClientTimeout(
            total=None, sock_connect=30, sock_read=seconds + 30
        ),
    }


async def json_body(resp: Any) -> Any:
    """The parsed JSON of a `_preload_content=False` answer; ApiException unless 2xx
    (inside `api_errors`, the `KubeError` it stands for).

    For hot paths that need a few fields: skips building the client's model objects."""
    raw = await resp.read()
    if not 200 <= resp.status <= 299:
        failed = ApiException(status=resp.status, reason=resp.reason)
        failed.body = raw.decode("utf-8", errors="replace")
        raise failed
    return json.loads(raw)


def _proxy_or_netrc_configured() -> bool:
    """Whether aiohttp's trust_env could matter: a proxy variable, NETRC or ~/.netrc."""
    names = {"http_proxy", "https_proxy", "ws_proxy", "wss_proxy", "all_proxy", "netrc"}
    if any(key.lower() in names for key in os.environ):
        return True
    try:
        return (Path.home() / ".netrc").exists()
    except RuntimeError:  # no resolvable home directory: aiohttp finds no netrc either
        return False


@dataclass
class Kube:
    """Typed API groups over one connection pool."""

    api: client.ApiClient

    @classmethod
    async def connect(cls) -> Kube:
        if os.environ.get("KUBERNETES_SERVICE_HOST") and not os.environ.get("KUBECONFIG"):
            config.load_incluster_config()
        else:
            await config.load_kube_config(config_file=os.environ.get("KUBECONFIG"))
        api = client.ApiClient()
        # Enough parallel connections for many concurrent invocations.
        api.rest_client.pool_manager.connector._limit = 100
        if not _proxy_or_netrc_configured():
            # kubernetes_asyncio sets trust_env, so aiohttp scans the proxy variables and reads
            # ~/.netrc in a worker thread on every request; with neither configured that can
            # change nothing, and it was the operator's largest avoidable cost per API call.
            api.rest_client.pool_manager._trust_env = False
        meter(api)
        return cls(api=api)

    async def close(self) -> None:
        await self.api.close()

    @property
    def custom(self) -> client.CustomObjectsApi:
        return client.CustomObjectsApi(self.api)

    @property
    def core(self) -> client.CoreV1Api:
        return client.CoreV1Api(self.api)

    @property
    def batch(self) -> client.BatchV1Api:
        return client.BatchV1Api(self.api)

    @property
    def networking(self) -> client.NetworkingV1Api:
        return client.NetworkingV1Api(self.api)

    @property
    def authorization(self) -> client.AuthorizationV1Api:
        return client.AuthorizationV1Api(self.api)

    @property
    def authentication(self) -> client.AuthenticationV1Api:
        return client.AuthenticationV1Api(self.api)

    @property
    def node(self) -> client.NodeV1Api:
        return client.NodeV1Api(self.api)

    @property
    def coordination(self) -> client.CoordinationV1Api:
        return client.CoordinationV1Api(self.api)

    # ------------------------------------------------------------------ namespaces

    async def _namespace_metadata(self, name: str) -> dict[str, Any]:
        with api_errors():
            body = await json_body(await self.core.read_namespace(name, _preload_content=False))
        meta: dict[str, Any] = body.get("metadata") or {}
        return meta

    async def namespace_labels(self, name: str) -> dict[str, str]:
        """The namespace's labels (environment class, freeze); `NotFound` when absent."""
        labels = (await self._namespace_metadata(name)).get("labels") or {}
        return {str(k): str(v) for k, v in labels.items()}

    async def namespace_incarnation(self, name: str) -> tuple[str, str, bool]:
        """The namespace's uid, `creationTimestamp` and whether its deletion has begun;
        `NotFound` when absent."""
        meta = await self._namespace_metadata(name)
        return (
            str(meta.get("uid") or ""),
            str(meta.get("creationTimestamp") or ""),
            bool(meta.get("deletionTimestamp")),
        )

    # ------------------------------------------------------------------ custom resources

    async def get_custom(self, plural: str, namespace: str, name: str) -> dict[str, Any]:
        with api_errors():
            obj: dict[str, Any] = await self.custom.get_namespaced_custom_object(
                GROUP, VERSION, namespace, plural, name
            )
        return obj

    async def _list_page(
        self, plural: str, namespace: str | None, params: dict[str, Any]
    ) -> dict[str, Any]:
        with api_errors():
            if namespace is None:
                page: dict[str, Any] = await self.custom.list_cluster_custom_object(
                    GROUP, VERSION, plural, **params
                )
            else:
                page = await self.custom.list_namespaced_custom_object(
                    GROUP, VERSION, namespace, plural, **params
                )
        return page

    async def list_custom(
        self, plural: str, namespace: str | None = None, *, field_selector: str | None = None
    ) -> list[dict[str, Any]]:
        extra = {"field_selector": field_selector} if field_selector else {}
        items: list[dict[str, Any]] = (await self._list_page(plural, namespace, extra)).get(
            "items", []
        )
        return items

    async def iter_custom(
        self, plural: str, namespace: str | None = None, *, page_size: int = 500
    ) -> AsyncIterator[dict[str, Any]]:
        """Every object of a kind, read page by page: memory stays bounded by one page
        however many objects are stored (a single LIST of every finished invocation made
        the operator's resident memory grow with the stored count)."""
        token = ""
        while True:
            params: dict[str, Any] = {"limit": page_size}
            if token:
                params["_continue"] = token
            result = await self._list_page(plural, namespace, params)
            for item in result.get("items", []):
                yield item
            token = (result.get("metadata") or {}).get("continue") or ""
            if not token:
                return

    async def _merge_patch(self, method: Any, *args: Any) -> dict[str, Any]:
        with api_errors():
            obj: dict[str, Any] = await method(
                GROUP, VERSION, *args, _content_type="application/merge-patch+json"
            )
        return obj

    async def patch_status(
        self,
        plural: str,
        namespace: str,
        name: str,
        status: dict[str, Any],
        *,
        resource_version: str | None = None,
    ) -> dict[str, Any]:
        """JSON merge patch of the status subresource (lists are replaced whole).

        With `resource_version` the patch applies only to that version of the object (the
        API server answers 409, raised as `Conflict`, when anyone wrote it since)."""
        body: dict[str, Any] = {"status": status}
        if resource_version is not None:
            body["metadata"] = {"resourceVersion": resource_version}
        return await self._merge_patch(
            self.custom.patch_namespaced_custom_object_status, namespace, plural, name, body
        )

    async def patch_metadata(
        self,
        plural: str,
        namespace: str,
        name: str,
        metadata: dict[str, Any],
        *,
        resource_version: str | None = None,
    ) -> dict[str, Any]:
        """JSON merge patch of the object's metadata (finalizers are replaced whole), only
        onto `resource_version` when given (`Conflict` otherwise)."""
        patch = dict(metadata)
        if resource_version is not None:
            patch["resourceVersion"] = resource_version
        return await self._merge_patch(
            self.custom.patch_namespaced_custom_object,
            namespace,
            plural,
            name,
            {"metadata": patch},
        )

    async def delete_custom(
        self,
        plural: str,
        namespace: str,
        name: str,
        *,
        preconditions: dict[str, str] | None = None,
    ) -> bool:
        """Delete; with `preconditions` (uid, resourceVersion) only the object as read. False
        when it is gone or (preconditions) changed meanwhile."""
        extra: dict[str, Any] = {}
        if preconditions:
            extra["body"] = {"preconditions": preconditions}
        try:
            with api_errors():
                await self.custom.delete_namespaced_custom_object(
                    GROUP, VERSION, namespace, plural, name, **extra
                )
        except NotFound:
            return False
        except (Conflict, AlreadyExists):
            if preconditions:
                return False
            raise
        return True


__all__ = [
    "AlreadyExists",
    "Conflict",
    "Kube",
    "NotFound",
    "Refused",
    "is_transient",
    "json_body",
]
