"""In-memory views of the objects every invocation consults, fed by watch events.

Descriptors, policies, namespaces and approvals are read on every call; asking the API
server each time would multiply its load. The catalog is primed by one LIST of each kind
before any invocation is processed (so a cold operator never evaluates a call against an
empty policy set, which would fail open), then kept current by kopf's watch events.

Each descriptor, policy and approval is parsed into its pydantic model once, when the watch
delivers it; a spec that does not parse is kept with its error, so a call that needs it can
fail closed naming the bad field instead of silently skipping it.
"""

from __future__ import annotations

import asyncio
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from pydantic import BaseModel, ValidationError

from tooladapter.enums import Resource
from tooladapter.kube.client import Kube
from tooladapter.model import (
    McpServerSpec,
    ToolApprovalSpec,
    ToolDescriptorSpec,
    ToolPolicySpec,
    describe_errors,
)

Body = dict[str, Any]
M = TypeVar("M", bound=BaseModel)


def thaw(body: Mapping[str, Any]) -> Body:
    """A plain, mutable deep copy of a kopf body, made without recursion: an invocation's
    arguments can nest as deep as the API server accepts (10,000 levels) when admission
    did not bound them, and copying must not fail before validation denies the call."""
    root: Body = {}
    stack: list[tuple[Mapping[str, Any] | list[Any] | tuple[Any, ...], Any]] = [(body, root)]
    while stack:
        source, target = stack.pop()
        items = source.items() if isinstance(source, Mapping) else enumerate(source)
        for key, value in items:
            if isinstance(value, Mapping):
                copy: Any = {}
            elif isinstance(value, list | tuple):
                copy = [None] * len(value)
            else:
                target[key] = value
                continue
            target[key] = copy
            stack.append((value, copy))
    return root


@dataclass(frozen=True)
class Entry(Generic[M]):
    """One watched object: its body as the API server sent it, and its spec parsed once."""

    body: Body
    spec: M | None
    #: Why the spec did not parse (None when it did).
    error: str | None
    #: Values derived from this version of the spec, computed once for every call that
    #: uses it (a descriptor's digest: RFC 8785 in pure Python, per call otherwise).
    derived: dict[str, str] = field(default_factory=dict, compare=False)

    @property
    def name(self) -> str:
        return str(self.body["metadata"]["name"])

    @property
    def status(self) -> Body:
        return self.body.get("status") or {}

    @classmethod
    def parse(cls, model: type[M], body: Body) -> Entry[M]:
        try:
            return cls(body, model.model_validate(body.get("spec") or {}), None)
        except ValidationError as exc:
            return cls(body, None, describe_errors(exc))


class Store(Generic[M]):
    """Entries of one kind, by namespace and name."""

    def __init__(self, model: type[M]) -> None:
        self.model = model
        self.items: dict[str, dict[str, Entry[M]]] = defaultdict(dict)

    def put(self, body: Body) -> Entry[M]:
        entry = Entry.parse(self.model, body)
        meta = body["metadata"]
        self.items[meta["namespace"]][meta["name"]] = entry
        return entry

    def drop(self, namespace: str, name: str) -> None:
        self.items[namespace].pop(name, None)

    def get(self, namespace: str, name: str) -> Entry[M] | None:
        return self.items.get(namespace, {}).get(name)

    def in_namespace(self, namespace: str) -> list[Entry[M]]:
        return list(self.items.get(namespace, {}).values())


class Catalog:
    def __init__(self) -> None:
        self.descriptors: Store[ToolDescriptorSpec] = Store(ToolDescriptorSpec)
        self.policies: Store[ToolPolicySpec] = Store(ToolPolicySpec)
        self.approvals: Store[ToolApprovalSpec] = Store(ToolApprovalSpec)
        self.servers: Store[McpServerSpec] = Store(McpServerSpec)
        self.namespaces: dict[str, dict[str, str]] = {}
        #: Each namespace's uid: its incarnation, which the store keys its records by.
        self.namespace_uids: dict[str, str] = {}
        self.ready = asyncio.Event()
        self._changed: dict[tuple[str, str], asyncio.Event] = {}
        self._stores: dict[Resource, Store[Any]] = {
            Resource.DESCRIPTORS: self.descriptors,
            Resource.POLICIES: self.policies,
            Resource.APPROVALS: self.approvals,
            Resource.MCP_SERVERS: self.servers,
        }

    async def prime(self, kube: Kube) -> None:
        for resource, store in self._stores.items():
            for item in await kube.list_custom(resource):
                store.put(item)
        namespaces = await kube.core.list_namespace()
        for ns in namespaces.items:
            self.namespaces[ns.metadata.name] = dict(ns.metadata.labels or {})
            if ns.metadata.uid:
                self.namespace_uids[ns.metadata.name] = str(ns.metadata.uid)
        self.ready.set()

    # ------------------------------------------------------------------ updates

    def update(self, resource: Resource, event_type: str | None, body: Body) -> None:
        meta = body["metadata"]
        store = self._stores[resource]
        if event_type == "DELETED":
            store.drop(meta["namespace"], meta["name"])
        else:
            store.put(body)
        self.notify(meta["namespace"], meta["name"])
        if resource == Resource.APPROVALS:
            invocation = (body.get("spec") or {}).get("invocation")
            if invocation:
                self.notify(meta["namespace"], approval_key(invocation))
        if resource == Resource.DESCRIPTORS and (body.get("spec") or {}).get("retired"):
            # Calls of the namespace waiting for an approval, or Executing, look whether it is
            # their version: the first are Denied `retired`, the second interrupted (Cancel).
            for namespace, key in list(self._changed):
                if namespace == meta["namespace"] and key.startswith(_RETIREMENT_PREFIXES):
                    self._changed[(namespace, key)].set()

    def wrote(self, resource: Resource, before: Body, after: Body) -> None:
        """Hold `after`, what a write of ours onto `before` returned, if this catalog still
        holds `before`: not when an event since brought a newer version or the deletion."""
        meta = before["metadata"]
        current = self._stores[resource].get(meta["namespace"], meta["name"])
        if current is None:
            return
        if current.body["metadata"].get("resourceVersion") != meta.get("resourceVersion"):
            return
        self.update(resource, "MODIFIED", after)

    def update_namespace(self, event_type: str | None, body: Body) -> None:
        name = body["metadata"]["name"]
        uid = body["metadata"].get("uid")
        if event_type == "DELETED":
            self.namespaces.pop(name, None)
            if self.namespace_uids.get(name) == uid:
                self.namespace_uids.pop(name, None)
        else:
            self.namespaces[name] = dict(body["metadata"].get("labels") or {})
            if uid:
                self.namespace_uids[name] = str(uid)

    def fresh_view(
        self,
        namespace: str,
        *,
        labels: Mapping[str, str],
        descriptors: Iterable[Body],
        policies: Iterable[Body],
    ) -> Catalog:
        """This catalog with `namespace`'s descriptors, policies and labels as just read
        from the API server (the watch may not have delivered a change made a moment ago);
        approvals and MCP servers are this catalog's own."""
        view = Catalog()
        for body in descriptors:
            view.descriptors.put(body)
        for body in policies:
            view.policies.put(body)
        view.namespaces[namespace] = dict(labels)
        view.namespace_uids = self.namespace_uids
        view.approvals, view.servers = self.approvals, self.servers
        view._stores.update(
            {Resource.APPROVALS: self.approvals, Resource.MCP_SERVERS: self.servers}
        )
        view._changed = self._changed
        view.ready.set()
        return view

    # ------------------------------------------------------------------ change signals

    def changed(self, namespace: str, key: str) -> asyncio.Event:
        """An event set whenever an object keyed (namespace, key) changes; re-armed by callers."""
        return self._changed.setdefault((namespace, key), asyncio.Event())

    def forget(self, namespace: str, key: str) -> None:
        """Drop a signal nobody waits for any more (one per gated call would pile up)."""
        self._changed.pop((namespace, key), None)

    def notify(self, namespace: str, key: str) -> None:
        event = self._changed.get((namespace, key))
        if event is not None:
            event.set()

    # ------------------------------------------------------------------ queries

    def find_descriptor(
        self, namespace: str, tool_id: str, version: str
    ) -> Entry[ToolDescriptorSpec] | None:
        for entry in self.descriptors.in_namespace(namespace):
            spec = entry.body.get("spec") or {}
            if spec.get("toolId") == tool_id and spec.get("version") == version:
                return entry
        return None

    def list_descriptors(self, namespace: str) -> list[Body]:
        return [entry.body for entry in self.descriptors.in_namespace(namespace)]

    def approvals_for(self, namespace: str, invocation: str) -> list[Entry[ToolApprovalSpec]]:
        return [
            entry
            for entry in self.approvals.in_namespace(namespace)
            if (entry.body.get("spec") or {}).get("invocation") == invocation
        ]

    def namespace_labels(self, namespace: str) -> dict[str, str]:
        return dict(self.namespaces.get(namespace) or {})

    def namespace_uid(self, namespace: str) -> str | None:
        """The uid of the namespace's current incarnation, as the watch last saw it."""
        return self.namespace_uids.get(namespace)

    def server(self, namespace: str, name: str) -> Body | None:
        entry = self.servers.get(namespace, name)
        return entry.body if entry else None

    def discovered_tool(self, namespace: str, server: str, tool: str) -> Body | None:
        """The MCP tool as the server's last discovery listed it."""
        body = self.server(namespace, server)
        for info in ((body or {}).get("status") or {}).get("tools") or []:
            if info.get("name") == tool:
                return dict(info)
        return None


def invocation_key(name: str) -> str:
    """The change-signal key of an invocation (set on each of its watch events)."""
    return f"invocation:{name}"


def approval_key(invocation: str) -> str:
    """The change-signal key of the approvals naming `invocation`."""
    return f"approval:{invocation}"


def retirement_key(invocation: str) -> str:
    """The change-signal key an Executing `invocation` waits on: set when a descriptor of
    its namespace is retired (its flow then looks whether it is its version)."""
    return f"retirement:{invocation}"


#: Signals a retired descriptor sets in its namespace (`Catalog.update`).
_RETIREMENT_PREFIXES = ("approval:", "retirement:")
