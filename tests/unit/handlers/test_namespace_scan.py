"""kopf's namespace watch listing is not ignored: a namespace created between kopf's first
listing and its watch is served (handlers.namespace_scan)."""

from __future__ import annotations

import asyncio
from typing import Any

from kopf._cogs.structs import references
from kopf._core.reactor import observation

from tooladapter.handlers import namespace_scan


def served_after(event_type: str | None, name: str) -> set[str | None]:
    insights = references.Insights()
    event: Any = {"type": event_type, "object": {"metadata": {"name": name}}}
    asyncio.run(
        namespace_scan.process_namespace_event(
            raw_event=event, namespaces=["tenant-*"], insights=insights
        )
    )
    return set(insights.namespaces)


def test_kopf_alone_ignores_a_namespace_seen_only_in_the_watch_listing() -> None:
    # The bug this module works around: once kopf serves it, this fails and the shim can go.
    insights = references.Insights()
    event: Any = {"type": None, "object": {"metadata": {"name": "tenant-a"}}}
    asyncio.run(
        namespace_scan._original(raw_event=event, namespaces=["tenant-*"], insights=insights)
    )
    assert insights.namespaces == set()


def test_a_namespace_in_the_watch_listing_is_served() -> None:
    assert served_after(None, "tenant-a") == {"tenant-a"}


def test_only_matching_namespaces_are_served() -> None:
    assert served_after(None, "other") == set()
    assert served_after("ADDED", "tenant-b") == {"tenant-b"}


def test_install_replaces_the_processor_kopfs_observer_looks_up() -> None:
    before = observation.process_discovered_namespace_event
    try:
        namespace_scan.install()
        patched = observation.process_discovered_namespace_event
        assert patched is namespace_scan.process_namespace_event
    finally:
        observation.process_discovered_namespace_event = before
