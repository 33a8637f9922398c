"""`GET /namespaces/{namespace}/receipts/{sha256}`: a receipt by its hash.

Receipts live in the artifact store, not the API server, so the gateway asks: only a
caller RBAC allows to `get` and `list` toolinvocations in the namespace may read its
receipts (SubjectAccessReviews), and only a receipt of that namespace's current
incarnation is served (`receipt_index.of_incarnation`: its `tenantUid`, or for a receipt
written before uids were recorded, its `tenantId` and time); any other answers 404, as an
absent one does: a namespace deleted and created again never reads the previous one's.
The bytes are the stored ones, so `sha256(body)` is the name asked for.
"""

from __future__ import annotations

import asyncio
from typing import Any, Final

from aiohttp import web

from tooladapter.enums import Resource
from tooladapter.gateway import params
from tooladapter.gateway.context import caller_of, deps_of
from tooladapter.gateway.errors import ProblemError, from_api
from tooladapter.gateway.incarnations import incarnation_of
from tooladapter.gateway.openapi import NAMESPACE, SECURITY, SHA256, ok, problems, ref
from tooladapter.gateway.views.problems import ProblemKind
from tooladapter.kube.callers import CallerApiError
from tooladapter.receipts.service.keys import receipt_keys
from tooladapter.receipts.service.reader import stored_receipt

PATHS: Final[dict[str, Any]] = {
    "/namespaces/{namespace}/receipts/{sha256}": {
        "get": {
            "operationId": "getReceipt",
            "summary": "A tool-invocation-v1 receipt of the namespace by its sha256, for "
            "callers allowed to get and list its toolinvocations.",
            "security": SECURITY,
            "parameters": [NAMESPACE, SHA256],
            "responses": {**ok(ref("Receipt"), "The receipt, byte for byte"), **problems()},
        }
    },
    "/receipt-keys": {
        "get": {
            "operationId": "getReceiptKeys",
            "summary": "The public Ed25519 keys receipts are signed with, and their validity "
            "periods (public: what an auditor verifies receipts with).",
            "security": [],
            "responses": ok({"type": "object"}, "The key set ({keys: [...]})"),
        }
    },
    "/namespaces/{namespace}/receipt-chain": {
        "get": {
            "operationId": "getReceiptChainHead",
            "summary": "The published head (sequence, reference) of the namespace's receipt "
            "chain, for callers allowed to get and list its toolinvocations.",
            "security": SECURITY,
            "parameters": [NAMESPACE],
            "responses": {**ok({"type": "object"}, "The chain's published head"), **problems()},
        }
    },
}


async def get_receipt_keys(request: web.Request) -> web.Response:
    deps = deps_of(request)
    try:
        keys = await receipt_keys(deps.kube, deps.settings).keys()
    except Exception as exc:  # fail closed: no key set rather than a partial one
        raise ProblemError(
            ProblemKind.UPSTREAM, f"reading the receipt keys failed ({type(exc).__name__})"
        ) from exc
    return web.json_response(keys.wire(), headers={"Cache-Control": "max-age=10"})


async def _may_read_receipts(request: web.Request, namespace: str) -> None:
    deps, caller = deps_of(request), caller_of(request)
    try:
        verdicts = await asyncio.gather(
            *(
                deps.reviews.allowed(
                    caller.identity,
                    namespace=namespace,
                    verb=verb,
                    resource=Resource.INVOCATIONS,
                )
                for verb in ("get", "list")
            )
        )
    except CallerApiError as exc:
        raise from_api(exc, "reviewing the caller's access") from exc
    if not all(verdicts):
        raise ProblemError(
            ProblemKind.FORBIDDEN,
            f"reading receipts of {namespace} takes get and list on toolinvocations there",
        )


async def get_chain_head(request: web.Request) -> web.Response:
    namespace = params.namespace(request)
    await _may_read_receipts(request, namespace)
    incarnation = await incarnation_of(request, namespace)
    deps = deps_of(request)
    try:
        head = await receipt_keys(deps.kube, deps.settings).head(namespace, incarnation.uid)
    except Exception as exc:
        raise ProblemError(
            ProblemKind.UPSTREAM, f"reading the chain heads failed ({type(exc).__name__})"
        ) from exc
    return web.json_response(
        {
            "namespace": namespace,
            "incarnation": incarnation.uid,
            "head": {"sequence": head.sequence, "ref": head.ref} if head else None,
        }
    )


async def get_receipt(request: web.Request) -> web.Response:
    namespace, digest = params.namespace(request), params.sha256_hex(request)
    deps = deps_of(request)
    await _may_read_receipts(request, namespace)
    incarnation = await incarnation_of(request, namespace)
    ref_ = f"sha256:{digest}"
    found = await asyncio.to_thread(stored_receipt, deps.store, ref_, incarnation)
    if found is None or found[1].get("schema") != "tool-invocation-v1":
        raise ProblemError(ProblemKind.NOT_FOUND, f"no receipt {ref_} in {namespace}")
    data = found[0]
    return web.Response(body=data, content_type="application/json", headers={"ETag": f'"{ref_}"'})


def add_routes(app: web.Application) -> None:
    app.router.add_get("/receipt-keys", get_receipt_keys, allow_head=False)
    app.router.add_get("/namespaces/{namespace}/receipt-chain", get_chain_head, allow_head=False)
    app.router.add_get("/namespaces/{namespace}/receipts/{sha256}", get_receipt, allow_head=False)
