"""What a signed-in person may see and do, read with their own token.

Invocations are listed in the namespaces the person chose at sign-in (or, with none
chosen, cluster-wide, which RBAC allows only with a ClusterRoleBinding); a namespace
the API server refuses is reported, not fatal. Whether to offer a form (approve, confirm)
is a SubjectAccessReview for the person; the write itself still goes with their token,
so RBAC and admission decide, whatever the page offered.
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass, field
from typing import Any, Final

from aiohttp import web

from tooladapter.artifacts import ArtifactStore, ArtifactStoreError, CorruptArtifact
from tooladapter.enums import Resource
from tooladapter.gateway.context import deps_of
from tooladapter.gateway.params import NAME_PATTERN, NAMESPACE_PATTERN
from tooladapter.gateway.ui.web import Person
from tooladapter.kube.callers import CallerApiError
from tooladapter.pipeline.linear_regex import compile_internal
from tooladapter.receipts.core.check import Match, Verdict, verify
from tooladapter.receipts.core.signing import (
    KeySet,
    SignatureStatus,
    parse_stored,
    stored_signature,
)
from tooladapter.receipts.service.keys import receipt_keys

#: Namespaces one session may look at (each is a list and a watch).
MAX_NAMESPACES: Final = 20
_NAMESPACE = compile_internal(NAMESPACE_PATTERN)
_NAME = compile_internal(NAME_PATTERN)


def is_namespace(text: str) -> bool:
    return _NAMESPACE.search(text) is not None


def is_name(text: str) -> bool:
    return len(text) <= 253 and _NAME.search(text) is not None


def parse_namespaces(text: str) -> tuple[str, ...] | None:
    """Comma- or space-separated namespace names; None when one is not a name or there
    are too many."""
    names = tuple(dict.fromkeys(p for p in text.replace(",", " ").split() if p))
    if len(names) > MAX_NAMESPACES or not all(is_namespace(n) for n in names):
        return None
    return names


@dataclass
class Listing:
    """Invocations the person may list, and the namespaces where they may not."""

    items: list[dict[str, Any]] = field(default_factory=list)
    refused: list[str] = field(default_factory=list)


async def invocations(person: Person) -> Listing:
    api = person.caller.api
    listing = Listing()
    if not person.session.namespaces:
        try:
            listing.items = await api.list_cluster(Resource.INVOCATIONS)
        except CallerApiError as exc:
            if exc.status not in (401, 403):
                raise
            listing.refused.append("all namespaces")
        return listing

    async def one(namespace: str) -> list[dict[str, Any]] | None:
        try:
            return await api.list(Resource.INVOCATIONS, namespace)
        except CallerApiError as exc:
            if exc.status not in (401, 403):
                raise
            return None

    found = await asyncio.gather(*(one(n) for n in person.session.namespaces))
    for namespace, items in zip(person.session.namespaces, found, strict=True):
        if items is None:
            listing.refused.append(namespace)
        else:
            listing.items.extend(items)
    return listing


async def descriptors_in(person: Person, namespaces: list[str]) -> dict[str, list[dict[str, Any]]]:
    """The ToolDescriptors of each namespace, read with the person's own token (what the
    page shows of a waiting call's credentials: `review.carried`); a namespace the API
    server refuses is left out, and its calls say their credentials are unknown."""
    api = person.caller.api

    async def one(namespace: str) -> list[dict[str, Any]] | None:
        try:
            return await api.list(Resource.DESCRIPTORS, namespace)
        except CallerApiError as exc:
            if exc.status not in (401, 403):
                raise
            return None

    found = await asyncio.gather(*(one(n) for n in namespaces))
    return {n: items for n, items in zip(namespaces, found, strict=True) if items is not None}


def namespaces_of(items: list[dict[str, Any]]) -> list[str]:
    return sorted({str((i.get("metadata") or {}).get("namespace") or "") for i in items})


async def allowed_in(
    request: web.Request,
    person: Person,
    namespaces: list[str],
    *,
    verb: str,
    resource: str,
    subresource: str | None = None,
) -> set[str]:
    """The namespaces where RBAC lets the person do this (one review each, cached)."""
    reviews = deps_of(request).reviews

    async def one(namespace: str) -> bool:
        return await reviews.allowed(
            person.caller.identity,
            namespace=namespace,
            verb=verb,
            resource=resource,
            subresource=subresource,
        )

    verdicts = await asyncio.gather(*(one(n) for n in namespaces))
    return {n for n, ok in zip(namespaces, verdicts, strict=True) if ok}


@dataclass(frozen=True)
class StoredReceipt:
    """A receipt's bytes from the artifact store, parsed, and their check."""

    ref: str
    receipt: dict[str, Any]
    pretty: str
    verdict: Verdict
    #: Its signature checked against the published keys (`signing.SignatureStatus`).
    signature: SignatureStatus = SignatureStatus.UNSIGNED
    keyid: str | None = None

    @property
    def sequence(self) -> int | None:
        chain = self.receipt.get("chain")
        return chain.get("sequence") if isinstance(chain, dict) else None


def _stored(
    store: ArtifactStore, ref: str, namespace: str, keys: KeySet | None = None
) -> StoredReceipt | None:
    try:
        data = store.get(ref)
    except CorruptArtifact:
        # The store holds other bytes under this name: a mismatch, whatever they say.
        refused = "(other bytes: the artifact store refused them)"
        return StoredReceipt(ref, {}, refused, Verdict(ref, refused, Match.NONE))
    except (KeyError, ValueError, ArtifactStoreError):
        return None
    parsed = parse_stored(data)
    if parsed is None:
        return None
    receipt, opened = parsed
    # Only the namespace's own receipts, as the gateway's receipts route serves them.
    if receipt.get("tenantId") != namespace:
        return None
    signature, keyid = stored_signature(receipt, opened, keys or KeySet())
    return StoredReceipt(
        ref=ref,
        receipt=receipt,
        pretty=json.dumps(receipt, indent=2, sort_keys=True, ensure_ascii=False),
        verdict=verify(data, ref),
        signature=signature,
        keyid=keyid,
    )


async def with_receipts(
    request: web.Request, calls: list[dict[str, Any]]
) -> list[tuple[dict[str, Any], StoredReceipt | None]]:
    """Each listed call with its stored receipt (`stored_receipt`), read concurrently."""
    receipts = await asyncio.gather(
        *(stored_receipt(request, c["receiptRef"], c["namespace"]) for c in calls)
    )
    return list(zip(calls, receipts, strict=True))


async def stored_receipt(
    request: web.Request, ref: str | None, namespace: str
) -> StoredReceipt | None:
    """The receipt `ref` of a call the person listed (so may read) in `namespace`, with
    its sha256 recomputed over the stored bytes; None when the store lacks it or cannot be
    reached."""
    if not ref:
        return None
    deps = deps_of(request)
    try:
        keys: KeySet | None = await receipt_keys(deps.kube, deps.settings).keys()
    except Exception:
        keys = None  # every signature then reads as unknown-key: never as valid
    return await asyncio.to_thread(_stored, deps.store, ref, namespace, keys)
