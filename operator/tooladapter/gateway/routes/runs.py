"""`GET /namespaces/{namespace}/runs/{runId}/tool-receipts`: the calls of one run.

The invocations are listed with the caller's token, selected by `spec.runId` on the API
server when the CRD offers that field selector (otherwise here), and each row carries
the stored receipt when this replica's artifact store has it. Calls whose invocations
retention has deleted come from the store's run index (artifacts/index), which is read
only after the listing succeeded: whoever may not list a namespace's invocations does not
see its index either.

Each row names its caller (`caller`; `?caller=` keeps one caller's rows): a `runId` is a
label any caller in the namespace may put on its calls, not a capability, so a run's rows
may be other agents' calls. Only the namespace's current incarnation's records are read:
the index under its uid, the legacy (name-keyed) index for receipts
`receipt_index.of_incarnation` attributes to it, and stored receipts checked alike.
"""

from __future__ import annotations

import asyncio
from typing import Any, Final

from aiohttp import web

from tooladapter.artifacts import ArtifactStore, ArtifactStoreError
from tooladapter.artifacts.index import ref_of_key, run_prefix
from tooladapter.enums import Resource
from tooladapter.gateway import params
from tooladapter.gateway.context import caller_of, deps_of
from tooladapter.gateway.errors import ProblemError, from_api
from tooladapter.gateway.incarnations import incarnation_of
from tooladapter.gateway.openapi import NAMESPACE, RUN_ID, SECURITY, ok, problems, ref
from tooladapter.gateway.views.problems import ProblemKind
from tooladapter.gateway.views.tools import receipt_row
from tooladapter.kube.callers import CallerApiError
from tooladapter.pipeline.linear_regex import compile_internal
from tooladapter.receipts.core.index import (
    Incarnation,
    merged_rows,
    stored_refs,
    with_caller,
)
from tooladapter.receipts.service.reader import stored_receipt

#: Run ids a field selector can carry verbatim (no `,`, `=`, `!` or spaces).
_SELECTABLE = compile_internal(r"^[A-Za-z0-9._:/-]{1,128}$")

CALLER: Final = {
    "name": "caller",
    "in": "query",
    "required": False,
    "description": "Only the calls of this caller (`spec.caller.name`, exactly).",
    "schema": {"type": "string", "maxLength": 512},
}
MAX_CALLER: Final = 512

PATHS: Final[dict[str, Any]] = {
    "/namespaces/{namespace}/runs/{runId}/tool-receipts": {
        "get": {
            "operationId": "listRunToolReceipts",
            "summary": "Tool receipts of a run: tool, version, effective class, decision, "
            "approval, outcome, hashes, and the receipt itself.",
            "security": SECURITY,
            "parameters": [NAMESPACE, RUN_ID, CALLER],
            "responses": {**ok(ref("RunReceipts"), "The run's calls"), **problems(422)},
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


def _read_receipt(store: Any, ref_: str | None, incarnation: Incarnation) -> dict[str, Any] | None:
    if not ref_:
        return None
    try:
        found = stored_receipt(store, ref_, incarnation)
    except ValueError:
        return None
    return found[1] if found is not None else None


def _indexed(
    store: ArtifactStore, incarnation: Incarnation, run_id: str, known: set[str]
) -> list[tuple[str, dict[str, Any]]]:
    """The run's receipts the index names and no stored invocation shows (read checked):
    the incarnation's entries, then the legacy name-keyed ones that belong to it."""
    found: list[tuple[str, dict[str, Any]]] = []
    namespace = incarnation.name
    keys = store.list(run_prefix(namespace, run_id, incarnation.uid))
    keys += store.list(run_prefix(namespace, run_id))
    for key in keys:
        try:
            ref_ = ref_of_key(key)
        except KeyError:
            continue
        if ref_ in known:
            continue
        receipt = _read_receipt(store, ref_, incarnation)
        if receipt is not None:
            found.append((ref_, receipt))
            known.add(ref_)
    return found


async def list_run_receipts(request: web.Request) -> web.Response:
    namespace, run_id = params.namespace(request), params.run_id(request)
    caller = request.query.get("caller") or None
    if caller is not None and len(caller) > MAX_CALLER:
        raise ProblemError(ProblemKind.INVALID, f"a caller has at most {MAX_CALLER} characters")
    items = await _invocations_of(request, namespace, run_id)
    incarnation = await incarnation_of(request, namespace)
    store = deps_of(request).store

    def rows() -> list[dict[str, Any]]:
        stored = [
            receipt_row(
                i, _read_receipt(store, (i.get("status") or {}).get("receiptRef"), incarnation)
            )
            for i in items
        ]
        try:
            indexed = _indexed(store, incarnation, run_id, stored_refs(items))
        except ArtifactStoreError as exc:
            # Fail closed: without the index the answer may lack deleted calls.
            raise ProblemError(
                ProblemKind.UPSTREAM, f"the artifact store's run index is unavailable ({exc})"
            ) from exc
        return with_caller(merged_rows(stored, items, indexed, namespace, run_id), caller)

    return web.json_response(
        {"namespace": namespace, "runId": run_id, "items": await asyncio.to_thread(rows)}
    )


def add_routes(app: web.Application) -> None:
    app.router.add_get(
        "/namespaces/{namespace}/runs/{runId}/tool-receipts", list_run_receipts, allow_head=False
    )
