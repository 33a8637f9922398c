"""The approved calls of the receipt index that the reviewers' page compares waiting calls
with: for each waiting call's (namespace, caller, tool), the latest approved call the
index names (artifacts/index), so "changes since the last approved call" survives the
retention that deleted its invocation.

Read only for namespaces whose invocations the person could list (the listing they came
from), and only their current incarnation's (issue 28): the index under the namespace's
uid first, then the legacy name-keyed entries whose receipt `of_incarnation` attributes to
it. `earlier_for` resolves the incarnations and reads the store off the event loop."""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Mapping, Sequence
from typing import Any

from aiohttp import web

from tooladapter.artifacts import ArtifactStore, ArtifactStoreError, Space
from tooladapter.artifacts.index import calls_prefix
from tooladapter.enums import InvocationState
from tooladapter.gateway.context import deps_of
from tooladapter.gateway.incarnations import incarnations
from tooladapter.receipts.core.index import Incarnation, of_incarnation, previous_call
from tooladapter.receipts.core.signing import receipt_of

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


def _legacy_belongs(store: ArtifactStore, entry: dict[str, Any], at: Incarnation) -> bool:
    """Whether a name-keyed entry's receipt belongs to the incarnation `at`."""
    try:
        receipt = receipt_of(store.get(str(entry["receiptRef"])))
    except (KeyError, ValueError, TypeError):
        return False
    return isinstance(receipt, dict) and of_incarnation(receipt, at)


def _latest(store: ArtifactStore, at: Incarnation, caller: str, tool: str) -> dict[str, Any] | None:
    namespace = at.name
    try:
        current = store.list(calls_prefix(namespace, caller, tool, at.uid))
        legacy = store.list(calls_prefix(namespace, caller, tool))
    except KeyError:
        return None  # a tool id the key layout does not take: never indexed
    # Newest first (keys sort by end time; the incarnation's entries are all newer than
    # the legacy ones); the first readable one counts.
    candidates = [(k, False) for k in reversed(current)] + [(k, True) for k in reversed(legacy)]
    for key, is_legacy in candidates:
        try:
            entry = json.loads(store.get_key(key))
            arguments = json.loads(store.get(str(entry["argumentsRef"]), Space.RESULTS))
        except (KeyError, ValueError, TypeError):
            continue
        if not isinstance(entry, dict) or not isinstance(arguments, dict):
            continue
        if is_legacy and not _legacy_belongs(store, entry, at):
            continue
        found = previous_call(entry, arguments, namespace=namespace, caller=caller, tool=tool)
        if found is not None:
            return found
    return None


async def earlier_for(
    request: web.Request, items: Sequence[dict[str, Any]]
) -> list[dict[str, Any]]:
    """`earlier_calls` for the listed calls, their namespaces' incarnations resolved; a
    namespace whose incarnation cannot be read gets no earlier calls (logged)."""
    deps = deps_of(request)
    cache = incarnations(deps.kube)
    at: dict[str, Incarnation] = {}
    for namespace in sorted({ns for ns, _, _ in _waiting_keys(items)}):
        try:
            found = await cache.of(namespace)
        except Exception as exc:  # fail closed: no comparison rather than another's
            logger.warning("namespace %s could not be read: %s", namespace, exc)
            continue
        if found is not None:
            at[namespace] = found
    return await asyncio.to_thread(earlier_calls, deps.store, items, at)


def earlier_calls(
    store: ArtifactStore,
    items: Sequence[dict[str, Any]],
    incarnations: Mapping[str, Incarnation],
) -> list[dict[str, Any]]:
    """The index's latest approved call for each waiting call's caller and tool, in its
    namespace's incarnation (none for a namespace `incarnations` lacks). A store that
    cannot answer leaves the comparison to the stored invocations (logged)."""
    found = []
    for namespace, caller, tool in sorted(_waiting_keys(items)):
        at = incarnations.get(namespace)
        if at is None:
            continue
        try:
            latest = _latest(store, at, caller, tool)
        except ArtifactStoreError as exc:
            logger.warning("the receipt index of %s is unavailable: %s", namespace, exc)
            continue
        if latest is not None:
            found.append(latest)
    return found
