"""`/ui/runs`: every call of a run on a timeline, with its receipt, verified on request.

The runs offered are those of the calls the person may list. A run's calls are shown in
creation order, each stage placed on the call's own time axis. "Verify" recomputes the
sha256 of the receipt's stored bytes and compares it with the `receiptRef` the call's
status names (as `tooladapter receipt verify` does), and says which form matched.

Each receipt's signature is checked against the published keys, and the namespace's
receipt chain head (as the operator last published it) is shown above the run.

Each call names its caller, and `caller=` keeps one caller's calls: a run id is a label
any caller in the namespace may put on its calls, not a capability.
"""

from __future__ import annotations

from typing import Any

from aiohttp import web

from tooladapter.gateway.context import deps_of
from tooladapter.gateway.incarnations import incarnations
from tooladapter.gateway.ui.data import invocations, is_namespace, with_receipts
from tooladapter.gateway.ui.web import PREFIX, ActionRefused, Person, page, render_view
from tooladapter.receipts.core.chain import Head
from tooladapter.receipts.service.keys import receipt_keys
from tooladapter.review.page import run_calls, run_ids

MAX_RUN_ID = 128
MAX_CALLER = 512


@page
async def runs(request: web.Request, person: Person) -> web.StreamResponse:
    namespace = request.query.get("namespace", "")
    run_id = request.query.get("run", "")
    verify_ref = request.query.get("verify", "")
    caller = request.query.get("caller", "")
    if len(caller) > MAX_CALLER:
        raise ActionRefused(f"A caller has at most {MAX_CALLER} characters.", 422)
    if namespace and not is_namespace(namespace):
        raise ActionRefused(f"{namespace[:64]!r} is not a namespace name.", 422)
    if len(run_id) > MAX_RUN_ID:
        raise ActionRefused(f"A run id has at most {MAX_RUN_ID} characters.", 422)
    listing = await invocations(person)
    by_namespace: dict[str, list[dict[str, Any]]] = {}
    for obj in listing.items:
        ns = str((obj.get("metadata") or {}).get("namespace") or "")
        by_namespace.setdefault(ns, []).append(obj)
    runs_by_namespace = {ns: run_ids(objs) for ns, objs in sorted(by_namespace.items())}
    calls = []
    head = None
    if namespace and run_id:
        calls = run_calls(by_namespace.get(namespace, []), run_id)
        calls = [c for c in calls if not caller or c.get("caller") == caller]
        if by_namespace.get(namespace):
            # Whoever may list the namespace's calls sees its receipt chain's head.
            head = await chain_head(request, namespace)
    return render_view(
        request,
        "runs",
        person=person,
        runs=runs_by_namespace,
        namespace=namespace,
        run_id=run_id,
        caller=caller,
        verify_ref=verify_ref,
        calls=await with_receipts(request, calls),
        refused=listing.refused,
        chain_head=head,
    )


async def chain_head(request: web.Request, namespace: str) -> Head | None:
    """The namespace's receipt chain head as published (None: none yet, or unreadable)."""
    deps = deps_of(request)
    try:
        found = await incarnations(deps.kube).of(namespace)
        if found is None:
            return None
        return await receipt_keys(deps.kube, deps.settings).head(namespace, found.uid)
    except Exception:
        return None


def add_routes(app: web.Application) -> None:
    app.router.add_get(f"{PREFIX}/runs", runs, allow_head=False)
