"""One shared asynchronous API client and the typed errors callers branch on."""

from __future__ import annotations

import json
import os
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kubernetes_asyncio import client, config
from kubernetes_asyncio.client.exceptions import ApiException

from tooladapter import GROUP, VERSION


class NotFound(LookupError):
    pass


class AlreadyExists(RuntimeError):
    pass


class Conflict(RuntimeError):
    pass


class Refused(RuntimeError):
    """The API server refused a write for good: a ResourceQuota, a LimitRange, an admission
    webhook or policy, an invalid object. Retrying the same write cannot help."""


#: Status codes of a refusal that a retry of the same request cannot change.
REFUSAL_CODES = frozenset({400, 403, 422})


def is_transient(exc: BaseException) -> bool:
    """Whether retrying the request that raised `exc` may succeed: the API server was
    unreachable, overloaded (429) or failing (5xx), or a write conflicted."""
    if isinstance(exc, Conflict | OSError | TimeoutError):
        return True
    if isinstance(exc, ApiException):
        return exc.status in (0, 408, 409, 429) or (exc.status or 0) >= 500
    # aiohttp's connection errors, without importing aiohttp here.
    return type(exc).__module__.startswith("aiohttp")


def refusal(exc: ApiException) -> Refused:
    """A `Refused` carrying the API server's own message (it names the quota or policy)."""
    message = exc.reason or ""
    try:
        message = json.loads(exc.body or "{}").get("message") or message
    except ValueError:
        pass
    return Refused(f"{exc.status}: {message}"[:1024])


def translate(exc: ApiException) -> Exception:
    """Map API status codes to the few errors the operator distinguishes."""
    if exc.status == 404:
        return NotFound(exc.reason)
    if exc.status == 409:
        reason = ""
        try:
            reason = json.loads(exc.body or "{}").get("reason", "")
        except ValueError:
            pass
        return AlreadyExists(exc.reason) if reason == "AlreadyExists" else Conflict(exc.reason)
    return exc


async def json_body(resp: Any) -> Any:
    """The parsed JSON of a `_preload_content=False` answer; ApiException unless 2xx.

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

    async def namespace_labels(self, name: str) -> dict[str, str]:
        """The namespace's labels (environment class, freeze); `NotFound` when absent."""
        try:
            resp = await self.core.read_namespace(name, _preload_content=False)
            body = await json_body(resp)
        except ApiException as exc:
            raise translate(exc) from exc
        labels = (body.get("metadata") or {}).get("labels") or {}
        return {str(k): str(v) for k, v in labels.items()}

    async def namespace_incarnation(self, name: str) -> tuple[str, str, bool]:
        """The namespace's uid, `creationTimestamp` and whether its deletion has begun;
        `NotFound` when absent."""
        try:
            resp = await self.core.read_namespace(name, _preload_content=False)
            body = await json_body(resp)
        except ApiException as exc:
            raise translate(exc) from exc
        meta = body.get("metadata") or {}
        return (
            str(meta.get("uid") or ""),
            str(meta.get("creationTimestamp") or ""),
            bool(meta.get("deletionTimestamp")),
        )

    # ------------------------------------------------------------------ custom resources

    async def get_custom(self, plural: str, namespace: str, name: str) -> dict[str, Any]:
        try:
            obj: dict[str, Any] = await self.custom.get_namespaced_custom_object(
                GROUP, VERSION, namespace, plural, name
            )
        except ApiException as exc:
            raise translate(exc) from exc
        return obj

    async def list_custom(
        self, plural: str, namespace: str | None = None, *, field_selector: str | None = None
    ) -> list[dict[str, Any]]:
        extra = {"field_selector": field_selector} if field_selector else {}
        try:
            if namespace is None:
                result = await self.custom.list_cluster_custom_object(
                    GROUP, VERSION, plural, **extra
                )
            else:
                result = await self.custom.list_namespaced_custom_object(
                    GROUP, VERSION, namespace, plural, **extra
                )
        except ApiException as exc:
            raise translate(exc) from exc
        items: list[dict[str, Any]] = result.get("items", [])
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
            try:
                if namespace is None:
                    result = await self.custom.list_cluster_custom_object(
                        GROUP, VERSION, plural, **params
                    )
                else:
                    result = await self.custom.list_namespaced_custom_object(
                        GROUP, VERSION, namespace, plural, **params
                    )
            except ApiException as exc:
                raise translate(exc) from exc
            for item in result.get("items", []):
                yield item
            token = (result.get("metadata") or {}).get("continue") or ""
            if not token:
                return

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
        try:
            obj: dict[str, Any] = await self.custom.patch_namespaced_custom_object_status(
                GROUP,
                VERSION,
                namespace,
                plural,
                name,
                body,
                _content_type="application/merge-patch+json",
            )
        except ApiException as exc:
            raise translate(exc) from exc
        return obj

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
        try:
            obj: dict[str, Any] = await self.custom.patch_namespaced_custom_object(
                GROUP,
                VERSION,
                namespace,
                plural,
                name,
                {"metadata": patch},
                _content_type="application/merge-patch+json",
            )
        except ApiException as exc:
            raise translate(exc) from exc
        return obj

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
            await self.custom.delete_namespaced_custom_object(
                GROUP, VERSION, namespace, plural, name, **extra
            )
        except ApiException as exc:
            if exc.status == 404 or (preconditions and exc.status == 409):
                return False
            raise translate(exc) from exc
        return True
