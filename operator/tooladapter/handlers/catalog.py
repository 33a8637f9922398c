"""In-memory views of the objects every invocation consults, fed by watch events.

Descriptors, policies, namespaces and approvals are read on every call; asking the API
server each time would multiply its load. The catalog is primed by one LIST of each kind
before any invocation is processed (so a cold operator never evaluates a call against an
empty policy set, which would fail open), then kept current by kopf's watch events.
A miss on a descriptor falls back to the API server, because a tool published a moment
ago may not have reached us yet.
"""

from __future__ import annotations

import asyncio
from collections import defaultdict
from collections.abc import Callable, Mapping
from typing import Any

from ..kube.client import Kube

Body = dict[str, Any]


def thaw(body: Mapping[str, Any]) -> Body:
    """A plain, mutable deep copy of a kopf body."""
    return {k: _thaw(v) for k, v in body.items()}


def _thaw(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {k: _thaw(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_thaw(v) for v in value]
    return value


class Catalog:
    def __init__(self) -> None:
        self.descriptors: dict[str, dict[str, Body]] = defaultdict(dict)
        self.policies: dict[str, dict[str, Body]] = defaultdict(dict)
        self.approvals: dict[str, dict[str, Body]] = defaultdict(dict)
        self.servers: dict[str, dict[str, Body]] = defaultdict(dict)
        self.namespaces: dict[str, Body] = {}
        self.ready = asyncio.Event()
        self._changed: dict[tuple[str, str], asyncio.Event] = {}

    async def prime(self, kube: Kube) -> None:
        for plural, store in (
            ("tooldescriptors", self.descriptors),
            ("toolpolicies", self.policies),
            ("toolapprovals", self.approvals),
            ("mcpservers", self.servers),
        ):
            for item in await kube.list_custom(plural):
                meta = item["metadata"]
                store[meta["namespace"]][meta["name"]] = item
        namespaces = await kube.core.list_namespace()
        for ns in namespaces.items:
            self.namespaces[ns.metadata.name] = {
                "metadata": {"name": ns.metadata.name, "labels": dict(ns.metadata.labels or {})}
            }
        self.ready.set()

    # ------------------------------------------------------------------ updates

    def update(self, store: dict[str, dict[str, Body]], event_type: str | None, body: Body) -> None:
        meta = body["metadata"]
        if event_type == "DELETED":
            store[meta["namespace"]].pop(meta["name"], None)
        else:
            store[meta["namespace"]][meta["name"]] = body
        self.notify(meta["namespace"], meta["name"])

    def update_namespace(self, event_type: str | None, body: Body) -> None:
        name = body["metadata"]["name"]
        if event_type == "DELETED":
            self.namespaces.pop(name, None)
        else:
            self.namespaces[name] = {
                "metadata": {"name": name, "labels": dict(body["metadata"].get("labels") or {})}
            }

    # ------------------------------------------------------------------ change signals

    def changed(self, namespace: str, key: str) -> asyncio.Event:
        """An event set whenever an object keyed (namespace, key) changes; re-armed by callers."""
        return self._changed.setdefault((namespace, key), asyncio.Event())

    def notify(self, namespace: str, key: str) -> None:
        event = self._changed.get((namespace, key))
        if event is not None:
            event.set()

    def forget(self, namespace: str, key: str) -> None:
        self._changed.pop((namespace, key), None)

    # ------------------------------------------------------------------ queries

    def find_descriptor(self, namespace: str, tool_id: str, version: str) -> Body | None:
        for body in self.descriptors.get(namespace, {}).values():
            spec = body.get("spec") or {}
            if spec.get("toolId") == tool_id and spec.get("version") == version:
                return body
        return None

    def list_descriptors(self, namespace: str) -> list[Body]:
        return list(self.descriptors.get(namespace, {}).values())

    def approvals_for(self, namespace: str, invocation: str) -> list[Body]:
        return [
            body
            for body in self.approvals.get(namespace, {}).values()
            if (body.get("spec") or {}).get("invocation") == invocation
        ]

    def namespace_labels(self, namespace: str) -> dict[str, str]:
        return dict((self.namespaces.get(namespace) or {}).get("metadata", {}).get("labels") or {})

    def select(
        self,
        store: dict[str, dict[str, Body]],
        namespace: str,
        predicate: Callable[[Body], bool] | None = None,
    ) -> list[Body]:
        items = list(store.get(namespace, {}).values())
        return [b for b in items if predicate is None or predicate(b)]
