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
import json
from typing import Any, Final

from aiohttp import web

from ...enums import Resource
from ...kube.callers import CallerApiError
from ...pipeline.problems import ProblemKind
from ...pipeline.receipt_index import of_incarnation
from .. import params
from ..context import caller_of, deps_of
from ..errors import ProblemError, from_api
from ..incarnations import incarnation_of
from ..openapi import NAMESPACE, SECURITY, SHA256, ok, problems, ref

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
    }
}


async def get_receipt(request: web.Request) -> web.Response:
    namespace, digest = params.namespace(request), params.sha256_hex(request)
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
    incarnation = await incarnation_of(request, namespace)
    ref_ = f"sha256:{digest}"
    not_here = ProblemError(ProblemKind.NOT_FOUND, f"no receipt {ref_} in {namespace}")
    try:
        data = await asyncio.to_thread(deps.store.get, ref_)
    except KeyError:
        raise not_here from None
    try:
        receipt = json.loads(data)
    except ValueError:
        raise not_here from None  # a result, not a receipt
    if not isinstance(receipt, dict) or not of_incarnation(receipt, incarnation):
        raise not_here
    if receipt.get("schema") != "tool-invocation-v1":
        raise not_here
    return web.Response(body=data, content_type="application/json", headers={"ETag": f'"{ref_}"'})


def add_routes(app: web.Application) -> None:
    app.router.add_get("/namespaces/{namespace}/receipts/{sha256}", get_receipt, allow_head=False)
