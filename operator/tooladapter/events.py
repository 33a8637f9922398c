"""Posting the domain events (reference: ToolInvoked, ToolInvocationDenied, ...).

The flow posts through an `EventSink` on the runtime; the kopf handlers install the sink
that queues them on kopf's poster (`handlers.kopf_events`), the unit suite one that records
them. Messages never carry arguments, results or credentials, and are bounded.
"""

from __future__ import annotations

from typing import Any, Protocol

from tooladapter import API_VERSION

#: Kubernetes truncates an Event's message; ours are bounded before they leave.
MAX_MESSAGE = 1024


def object_ref(kind: str, meta: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": API_VERSION,
        "kind": kind,
        "metadata": {"name": meta["name"], "namespace": meta["namespace"], "uid": meta.get("uid")},
    }


def namespace_ref(meta: dict[str, Any]) -> dict[str, Any]:
    """A Namespace as an event's object; the event is posted in that namespace."""
    return {
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {"name": meta["name"], "namespace": meta["name"], "uid": meta.get("uid")},
    }


class EventSink(Protocol):
    def post(
        self, obj: dict[str, Any], *, reason: str, message: str, warning: bool = False
    ) -> None: ...


class NoEvents:
    """A sink that drops events: the status and receipt still hold everything."""

    def post(
        self, obj: dict[str, Any], *, reason: str, message: str, warning: bool = False
    ) -> None:
        return None
