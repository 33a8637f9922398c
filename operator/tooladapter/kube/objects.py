"""tooladapter objects read and written through one connection pool, as whoever its
requests speak for: the layer under the command line's kubeconfig user (`user.UserApi`)
and the gateway's caller-token client (`callers.AsCaller`).

Answers are parsed straight from JSON (custom objects are plain dicts anyway), and every
refusal becomes the client's own error class (`errors.UserApiError`, `errors.CallerApiError`),
so neither client repeats the paging, watching or error mapping.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator
from typing import Any

from kubernetes_asyncio import client, watch
from kubernetes_asyncio.client.exceptions import ApiException

from tooladapter import GROUP, VERSION
from tooladapter.dicts import put_given
from tooladapter.kube.client import json_body
from tooladapter.kube.errors import UserApiError

Objects = list[dict[str, Any]]
#: A JSON Patch: its operations in order.
PatchOps = list[dict[str, Any]]


class CustomObjects:
    """GROUP/VERSION objects; `headers` go with every request (a caller's bearer token)."""

    def __init__(
        self,
        api: client.ApiClient,
        *,
        error: type[UserApiError],
        page_size: int,
        headers: dict[str, str] | None = None,
    ) -> None:
        self.custom = client.CustomObjectsApi(api)
        self.error = error
        self.page_size = page_size
        self._extra: dict[str, Any] = {"_preload_content": False}
        if headers:
            self._extra["_headers"] = headers

    async def _call(self, method: Any, *args: Any, **params: Any) -> dict[str, Any]:
        """`method` on GROUP/VERSION objects: `args` follow the group and version."""
        try:
            answer: dict[str, Any] = await json_body(
                await method(GROUP, VERSION, *args, **self._extra, **params)
            )
        except ApiException as exc:
            raise self.error.of(exc) from exc
        except TimeoutError as exc:  # the client's total timeout (`callers.bound_time`)
            raise self.error(0, "the API server did not answer in time") from exc
        return answer

    def _collection(self, namespace: str | None) -> tuple[Any, tuple[str, ...]]:
        """The list call of a kind in `namespace` (None: every namespace), and its
        arguments after the group and version."""
        if namespace is None:
            return self.custom.list_cluster_custom_object, ()
        return self.custom.list_namespaced_custom_object, (namespace,)

    async def get(self, plural: str, namespace: str, name: str) -> dict[str, Any]:
        return await self._call(self.custom.get_namespaced_custom_object, namespace, plural, name)

    async def list(
        self,
        plural: str,
        namespace: str | None,
        *,
        field_selector: str | None = None,
        label_selector: str | None = None,
    ) -> Objects:
        """Every object of a kind in `namespace` (None: every namespace), page by page."""
        list_call, where = self._collection(namespace)
        items: Objects = []
        token = ""
        while True:
            params = put_given(
                {"limit": self.page_size},
                _continue=token,
                field_selector=field_selector,
                label_selector=label_selector,
            )
            page = await self._call(list_call, *where, plural, **params)
            items.extend(page.get("items") or [])
            token = (page.get("metadata") or {}).get("continue") or ""
            if not token:
                return items

    async def create(
        self, plural: str, namespace: str, body: dict[str, Any], **params: Any
    ) -> dict[str, Any]:
        return await self._call(
            self.custom.create_namespaced_custom_object, namespace, plural, body, **params
        )

    async def merge_patch(
        self, plural: str, namespace: str, name: str, patch: dict[str, Any]
    ) -> dict[str, Any]:
        """A JSON merge patch of the object itself (spec, metadata); admission decides."""
        return await self._call(
            self.custom.patch_namespaced_custom_object,
            namespace,
            plural,
            name,
            patch,
            _content_type="application/merge-patch+json",
        )

    async def json_patch(
        self, plural: str, namespace: str, name: str, ops: PatchOps
    ) -> dict[str, Any]:
        """A JSON Patch (RFC 6902) of the object itself: its `test` operations make the
        write conditional on what they test, without a resourceVersion."""
        return await self._call(
            self.custom.patch_namespaced_custom_object,
            namespace,
            plural,
            name,
            ops,
            _content_type="application/json-patch+json",
        )

    async def merge_patch_status(
        self, plural: str, namespace: str, name: str, status: dict[str, Any]
    ) -> dict[str, Any]:
        return await self._call(
            self.custom.patch_namespaced_custom_object_status,
            namespace,
            plural,
            name,
            {"status": status},
            _content_type="application/merge-patch+json",
        )

    async def collection_version(self, plural: str, namespace: str | None) -> str:
        """The current resourceVersion of a kind's collection in `namespace` (None: every
        namespace): where a watch of changes from now on starts."""
        list_call, where = self._collection(namespace)
        head = await self._call(list_call, *where, plural, limit=1)
        return str((head.get("metadata") or {}).get("resourceVersion") or "")

    async def watch(
        self,
        plural: str,
        namespace: str | None,
        resource_version: str,
        *,
        timeout_seconds: int,
        field_selector: str | None = None,
    ) -> AsyncGenerator[tuple[str, dict[str, Any]], None]:
        """(event type, object) of every change after `resource_version`, until the watch
        request ends (at most `timeout_seconds`). An error event or a refused request
        raises `error` (410: the version is too old, read again)."""
        list_call, where = self._collection(namespace)
        params: dict[str, Any] = {}
        if field_selector:
            params["field_selector"] = field_selector
        if "_headers" in self._extra:
            params["_headers"] = self._extra["_headers"]
        stream = watch.Watch()
        try:
            async for event in stream.stream(
                list_call,
                GROUP,
                VERSION,
                *where,
                plural,
                resource_version=resource_version,
                timeout_seconds=timeout_seconds,
                allow_watch_bookmarks=False,
                **params,
            ):
                kind = str(event.get("type") or "")
                obj = event.get("raw_object") or event.get("object")
                if kind == "ERROR":
                    code = int((obj or {}).get("code") or 0) if isinstance(obj, dict) else 0
                    raise self.error(code, str((obj or {}).get("message") or "watch error"))
                if isinstance(obj, dict):
                    yield kind, obj
        except ApiException as exc:
            raise self.error.of(exc) from exc
        except TimeoutError as exc:
            raise self.error(0, "the watch did not end in time") from exc
        finally:
            stream.stop()
            await stream.close()
