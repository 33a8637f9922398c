"""`/ui/uncertain`: calls whose effect nobody could confirm, and what happened.

Each shows its receipt, the execution record and sandbox lease the operator kept (command
line, Job, NetworkPolicy, holder, attempts), its stages, and, for people RBAC lets patch
`toolinvocations/status`, a form recording whether the effect happened and the evidence.
The record is the same status patch `tooladapter confirm` makes, with the person's token
(admission requires `confirmedBy` to be them); the operator writes a new receipt.
"""

from __future__ import annotations

from aiohttp import web

from tooladapter.enums import Resource
from tooladapter.gateway import params
from tooladapter.gateway.ui import web as ui
from tooladapter.gateway.ui.data import allowed_in, invocations, namespaces_of, with_receipts
from tooladapter.review.page import uncertain_calls
from tooladapter.review.texts import Undecidable, confirmation_patch


@ui.page
async def uncertain(request: web.Request, person: ui.Person) -> web.StreamResponse:
    listing = await invocations(person)
    calls = uncertain_calls(listing.items)
    confirmable = await allowed_in(
        request,
        person,
        namespaces_of(listing.items),
        verb="patch",
        resource=Resource.INVOCATIONS,
        subresource="status",
    )
    return ui.render_view(
        request,
        "uncertain",
        person=person,
        calls=await with_receipts(request, calls),
        confirmable=confirmable,
        refused=listing.refused,
        notice="Your confirmation was recorded; the operator writes a new receipt."
        if request.query.get("confirmed")
        else None,
    )


@ui.page
async def confirm(request: web.Request, person: ui.Person) -> web.StreamResponse:
    namespace, name = params.namespace(request), params.object_name(request)
    form = await ui.checked_form(request, person)
    happened = {"yes": True, "no": False}.get(form.get("happened", ""))
    if happened is None:
        raise ui.ActionRefused("Say whether the effect happened.", 422)
    api = person.caller.api
    invocation = await api.get(Resource.INVOCATIONS, namespace, name)
    if (invocation.get("status") or {}).get("effectConfirmation"):
        raise ui.ActionRefused(f"The effect of {name} was already confirmed.", 409)
    try:
        patch = confirmation_patch(
            invocation,
            happened=happened,
            confirmed_by=person.username,
            evidence=form.get("evidence", ""),
        )
    except Undecidable as exc:
        raise ui.undecidable(exc) from None
    await api.merge_patch_status(Resource.INVOCATIONS, namespace, name, patch)
    return ui.redirect(f"{ui.PREFIX}/uncertain?confirmed={name}")


def add_routes(app: web.Application) -> None:
    app.router.add_get(f"{ui.PREFIX}/uncertain", uncertain, allow_head=False)
    app.router.add_post(f"{ui.PREFIX}/uncertain/{{namespace}}/{{name}}", confirm)
