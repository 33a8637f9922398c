"""One shared asynchronous API client and the typed errors callers branch on."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

from kubernetes_asyncio import client, config
from kubernetes_asyncio.client.exceptions import ApiException

from .. import GROUP, VERSION


class NotFound(LookupError):
    pass


class AlreadyExists(RuntimeError):
    pass


class Conflict(RuntimeError):
    pass


def translate(exc: ApiException) -> Exception:
    """Map API status codes to the few errors the operator distinguishes."""
    if exc.status == 404:
        return NotFound(exc.reason)
    if exc.status == 409:
        reason = ""
        try:
            import json

            reason = json.loads(exc.body or "{}").get("reason", "")
        except ValueError:
            pass
        return AlreadyExists(exc.reason) if reason == "AlreadyExists" else Conflict(exc.reason)
    return exc


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
    def coordination(self) -> client.CoordinationV1Api:
        return client.CoordinationV1Api(self.api)

    # ------------------------------------------------------------------ custom resources

    async def get_custom(self, plural: str, namespace: str, name: str) -> dict[str, Any]:
        try:
            obj: dict[str, Any] = await self.custom.get_namespaced_custom_object(
                GROUP, VERSION, namespace, plural, name
            )
        except ApiException as exc:
            raise translate(exc) from exc
        return obj

    async def list_custom(self, plural: str, namespace: str | None = None) -> list[dict[str, Any]]:
        try:
            if namespace is None:
                result = await self.custom.list_cluster_custom_object(GROUP, VERSION, plural)
            else:
                result = await self.custom.list_namespaced_custom_object(
                    GROUP, VERSION, namespace, plural
                )
        except ApiException as exc:
            raise translate(exc) from exc
        items: list[dict[str, Any]] = result.get("items", [])
        return items

    async def patch_status(
        self, plural: str, namespace: str, name: str, status: dict[str, Any]
    ) -> dict[str, Any]:
        """JSON merge patch of the status subresource (lists are replaced whole)."""
        try:
            obj: dict[str, Any] = await self.custom.patch_namespaced_custom_object_status(
                GROUP,
                VERSION,
                namespace,
                plural,
                name,
                {"status": status},
                _content_type="application/merge-patch+json",
            )
        except ApiException as exc:
            raise translate(exc) from exc
        return obj

    async def delete_custom(self, plural: str, namespace: str, name: str) -> None:
        try:
            await self.custom.delete_namespaced_custom_object(
                GROUP, VERSION, namespace, plural, name
            )
        except ApiException as exc:
            if exc.status != 404:
                raise translate(exc) from exc
