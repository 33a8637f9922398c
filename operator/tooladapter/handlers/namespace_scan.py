"""A namespace created while kopf starts (or while its namespace watch re-lists) is served.

kopf (1.45) lists the namespaces once, then starts a watch that lists them again and
ignores that second listing's objects (its type-None events), as it does for CRDs. A
namespace created between the two listings, or during a watch gap that ends in a re-list,
is never added to the served set: its descriptors are never activated and its calls wait
until the operator restarts (seen in CI: a tenant namespace created a moment after start).
Revising the namespaces from the listing events as well is idempotent (a set of names), so
the fix is to let them through; deletions still come as DELETED events.
"""

from __future__ import annotations

import functools
from typing import Any

from kopf._core.reactor import observation

_original = observation.process_discovered_namespace_event


@functools.wraps(_original)
async def process_namespace_event(*, raw_event: Any, **kwargs: Any) -> None:
    if raw_event.get("type") is None:
        # The listing's object as if it had just been added (an ADDED event's revision).
        raw_event = {**raw_event, "type": "ADDED"}
    await _original(raw_event=raw_event, **kwargs)


def install() -> None:
    """Make kopf's namespace observer use `process_namespace_event` (it looks the processor
    up by module global each time it starts its watch)."""
    observation.process_discovered_namespace_event = process_namespace_event
