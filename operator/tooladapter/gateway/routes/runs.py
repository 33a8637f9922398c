"""`GET /namespaces/{namespace}/runs/{runId}/tool-receipts`: the calls of one run.

The invocations are listed with the caller's token, selected by `spec.runId` on the API
server when the CRD offers that field selector (otherwise here), and each row carries
the stored receipt when this replica's artifact store has it. Calls whose invocations
retention has deleted come from the store's run index (artifacts/index), which is read
only after the listing succeeded: whoever may not list a namespace's invocations does not
see its index either.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any, Final

from aiohttp import web

from ...artifacts import ArtifactStore, ArtifactStoreError
from ...artifacts.index import ref_of_key, run_prefix
from ...enums import Resource
from ...kube.callers import CallerApiError
from ...pipeline.linear_regex import compile_internal
from ...pipeline.problems import ProblemKind
from ...pipeline.receipt_index import merged_rows, stored_refs
from ...pipeline.toolview import receipt_row
from .. import params
from ..context import caller_of, deps_of
from ..errors import ProblemError, from_api
from ..openapi import NAMESPACE, RUN_ID, SECURITY, ok, problems, ref

#: Run ids a field selector can carry verbatim (no `,`, `=`, `!` or spaces).
_SELECTABLE = compile_internal(r"^[A-Za-z0-9._:/-]{1,128}$")

PATHS: Final[dict[str, Any]] = {
    "/namespaces/{namespace}/runs/{runId}/tool-receipts": {
        "get": {
            "operationId": "listRunToolReceipts",
            "summary": "Tool receipts of a run: tool, version, effective class, decision, "
            "approval, outcome, hashes, and the receipt itself.",
            "security": SECURITY,
            "parameters": [NAMESPACE, RUN_ID],
            "responses": {**ok(ref("RunReceipts"), "The run's calls"), **problems()},
        }
    }
}


async def _invocations_of(
    request: web.Request, namespace: str, run_id: str
) -> list[dict[str, Any]]:
    api = caller_of(request).api
    what = f"listing the tool invocations of run {run_id!r} in {namespace}"
    items: list[dict[str, Any]] | None = None
    if _SELECTABLE.search(run_id) is not None:
        try:
            items = await api.list(
                Resource.INVOCATIONS, namespace, field_selector=f"spec.runId={run_id}"
            )
        except CallerApiError as exc:
            if exc.status != 400:  # 400: this CRD version cannot select by spec.runId
                raise from_api(exc, what) from exc
    if items is None:
        try:
            items = await api.list(Resource.INVOCATIONS, namespace)
        except CallerApiError as exc:
            raise from_api(exc, what) from exc
    chosen = [i for i in items if (i.get("spec") or {}).get("runId") == run_id]
    return sorted(chosen, key=lambda i: (i.get("metadata") or {}).get("creationTimestamp") or "")


def _read_receipt(store: Any, ref_: str | None, namespace: str) -> dict[str, Any] | None:
    if not ref_:
        return None
    try:
        receipt = json.loads(store.get(ref_))
    except (KeyError, ValueError):
        return None
    if not isinstance(receipt, dict) or receipt.get("tenantId") != namespace:
        return None
    return receipt


def _indexed(
    store: ArtifactStore, namespace: str, run_id: str, known: set[str]
) -> list[tuple[str, dict[str, Any]]]:
    """The run's receipts the index names and no stored invocation shows (read checked)."""
    found: list[tuple[str, dict[str, Any]]] = []
    for key in store.list(run_prefix(namespace, run_id)):
        try:
            ref_ = ref_of_key(key)
        except KeyError:
            continue
        if ref_ in known:
            continue
        receipt = _read_receipt(store, ref_, namespace)
        if receipt is not None:
            found.append((ref_, receipt))
    return found


async def list_run_receipts(request: web.Request) -> web.Response:
    namespace, run_id = params.namespace(request), params.run_id(request)
    items = await _invocations_of(request, namespace, run_id)
    store = deps_of(request).store

    def rows() -> list[dict[str, Any]]:
        stored = [
            receipt_row(
                i, _read_receipt(store, (i.get("status") or {}).get("receiptRef"), namespace)
            )
            for i in items
        ]
        try:
            indexed = _indexed(store, namespace, run_id, stored_refs(items))
        except ArtifactStoreError as exc:
            # Fail closed: without the index the answer may lack deleted calls.
            raise ProblemError(
                ProblemKind.UPSTREAM, f"the artifact store's run index is unavailable ({exc})"
            ) from exc
        return merged_rows(stored, items, indexed, namespace, run_id)

    return web.json_response(
        {"namespace": namespace, "runId": run_id, "items": await asyncio.to_thread(rows)}
    )


def add_routes(app: web.Application) -> None:
    app.router.add_get(
        "/namespaces/{namespace}/runs/{runId}/tool-receipts", list_run_receipts, allow_head=False
    )
