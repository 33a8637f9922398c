"""Which incarnation of a namespace the gateway serves: its uid and creation time, read
with the operator's own client (callers may not be allowed to read Namespaces) and cached
briefly (`TTL`), so every door (REST, the CLI through it, the page) keys and checks a
namespace's records by its uid (artifacts/index, `receipt_index.of_incarnation`).

The cache bounds how stale an answer can be: a namespace deleted and created again is
recognised at most `TTL` after the new one exists (its deletion takes longer than that in
practice, and an answer for a namespace whose deletion has begun is never cached).
"""

from __future__ import annotations

import time
from typing import Final

from aiohttp import web

from tooladapter.gateway.context import deps_of
from tooladapter.gateway.errors import ProblemError
from tooladapter.gateway.views.problems import ProblemKind
from tooladapter.kube.client import Kube, NotFound
from tooladapter.receipts.core.index import Incarnation

#: Seconds an answer is reused.
TTL: Final = 2.0
#: Namespaces remembered at once (the oldest answer is dropped beyond it).
MAX_CACHED: Final = 1024


class Incarnations:
    """A namespace's current incarnation (None: no such namespace), cached `TTL`."""

    def __init__(self, kube: Kube, *, ttl: float = TTL) -> None:
        self.kube = kube
        self._ttl = ttl
        self._held: dict[str, tuple[float, Incarnation | None]] = {}

    async def of(self, namespace: str) -> Incarnation | None:
        now = time.monotonic()
        held = self._held.get(namespace)
        if held is not None and held[0] > now:
            return held[1]
        try:
            uid, created, deleting = await self.kube.namespace_incarnation(namespace)
        except NotFound:
            found: Incarnation | None = None
            deleting = False
        else:
            found = Incarnation(namespace, uid, created) if uid and created else None
        self._held.pop(namespace, None)
        if not deleting:
            if len(self._held) >= MAX_CACHED:
                self._held.pop(next(iter(self._held)))
            self._held[namespace] = (now + self._ttl, found)
        return found


#: One cache per operator client (a gateway has one; `Kube` is not hashable).
_BY_CLIENT: dict[int, Incarnations] = {}


def incarnations(kube: Kube) -> Incarnations:
    """The cache of the gateway that `kube` serves."""
    held = _BY_CLIENT.get(id(kube))
    if held is None or held.kube is not kube:
        held = _BY_CLIENT[id(kube)] = Incarnations(kube)
    return held


async def incarnation_of(request: web.Request, namespace: str) -> Incarnation:
    """The namespace's current incarnation; 404 when there is no such namespace (its
    records, if any, are a platform admin's to read from the store)."""
    try:
        found = await incarnations(deps_of(request).kube).of(namespace)
    except Exception as exc:  # fail closed: without the uid, no record is told apart
        raise ProblemError(
            ProblemKind.UPSTREAM, f"reading namespace {namespace} failed ({type(exc).__name__})"
        ) from exc
    if found is None:
        raise ProblemError(ProblemKind.NOT_FOUND, f"no namespace {namespace}")
    return found
