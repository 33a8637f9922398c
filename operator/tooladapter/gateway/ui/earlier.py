"""The approved calls of the receipt index that the reviewers' page compares waiting calls
with: for each waiting call's (namespace, caller, tool), the latest approved call the
index names (artifacts/index), so "changes since the last approved call" survives the
retention that deleted its invocation.

Read only for namespaces whose invocations the person could list (the listing they came
from), and blocking (the store): call `earlier_calls` off the event loop."""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from typing import Any

from ...artifacts import ArtifactStore, ArtifactStoreError
from ...artifacts.index import calls_prefix
from ...enums import InvocationState
from ...pipeline.receipt_index import previous_call

logger = logging.getLogger("tooladapter.gateway")


def _waiting_keys(items: Sequence[dict[str, Any]]) -> set[tuple[str, str, str]]:
    keys = set()
    for item in items:
        status, spec = item.get("status") or {}, item.get("spec") or {}
        if status.get("state") != InvocationState.AWAITING_APPROVAL:
            continue
        namespace = (item.get("metadata") or {}).get("namespace")
        caller = (spec.get("caller") or {}).get("name")
        tool = (spec.get("tool") or {}).get("id")
        if namespace and caller and tool:
            keys.add((str(namespace), str(caller), str(tool)))
    return keys


def _latest(store: ArtifactStore, namespace: str, caller: str, tool: str) -> dict[str, Any] | None:
    try:
        keys = store.list(calls_prefix(namespace, caller, tool))
    except KeyError:
        return None  # a tool id the key layout does not take: never indexed
    # Newest first (keys sort by end time); the first readable one counts.
    for key in reversed(keys):
        try:
            entry = json.loads(store.get_key(key))
            arguments = json.loads(store.get(str(entry["argumentsRef"])))
        except (KeyError, ValueError, TypeError):
            continue
        if not isinstance(entry, dict) or not isinstance(arguments, dict):
            continue
        found = previous_call(entry, arguments, namespace=namespace, caller=caller, tool=tool)
        if found is not None:
            return found
    return None


def earlier_calls(store: ArtifactStore, items: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """The index's latest approved call for each waiting call's caller and tool. A store
    that cannot answer leaves the comparison to the stored invocations (logged)."""
    found = []
    for namespace, caller, tool in sorted(_waiting_keys(items)):
        try:
            latest = _latest(store, namespace, caller, tool)
        except ArtifactStoreError as exc:
            logger.warning("the receipt index of %s is unavailable: %s", namespace, exc)
            continue
        if latest is not None:
            found.append(latest)
    return found
