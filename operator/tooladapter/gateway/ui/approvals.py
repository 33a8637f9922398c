"""`/ui/approvals`: the calls waiting for a decision, and the decision.

Each waiting call shows what the command line's `approvals` shows (tool and version,
caller, classes, the reasons it is gated, the request hash and descriptor digest an
approval binds to, the credentials it will carry and where, declared by its descriptor
and read with the person's token, the change since the same caller's last approved
call, found in the receipt index when retention deleted it), its arguments shown whole.
Approve and Reject create the ToolApproval with the person's own token, built as
`tooladapter approve` builds it, so admission checks that the reviewer is the person.
"""

from __future__ import annotations

from typing import Any, Final

from aiohttp import web

from tooladapter.enums import ApprovalDecision, InvocationState, Resource
from tooladapter.gateway import params
from tooladapter.gateway.ui.data import allowed_in, descriptors_in, invocations, namespaces_of
from tooladapter.gateway.ui.earlier import earlier_for
from tooladapter.gateway.ui.web import (
    PREFIX,
    ActionRefused,
    Person,
    checked_form,
    page,
    redirect,
    render_view,
    undecidable,
)
from tooladapter.mcp.core.approvals import call_notice, call_ref
from tooladapter.review.page import pending_for_page, recent_decisions
from tooladapter.review.texts import Undecidable, approval_body
from tooladapter.timeutil import in_seconds

#: The expiries a reviewer picks from (seconds, label); the first is the default.
EXPIRIES: Final = ((3600, "1 hour"), (900, "15 minutes"), (4 * 3600, "4 hours"), (86400, "1 day"))
MAX_COMMENT: Final = 1024


@page
async def approvals(request: web.Request, person: Person) -> web.StreamResponse:
    listing = await invocations(person)
    earlier = await earlier_for(request, listing.items)
    waiting = [
        i
        for i in listing.items
        if (i.get("status") or {}).get("state") == InvocationState.AWAITING_APPROVAL
    ]
    # Only where a call waits: the credentials it will carry, from its descriptor.
    descriptors = await descriptors_in(person, namespaces_of(waiting)) if waiting else {}
    pending = pending_for_page(listing.items, earlier, descriptors)
    reviewable = await allowed_in(
        request,
        person,
        namespaces_of(listing.items),
        verb="create",
        resource=Resource.APPROVALS,
    )
    return render_view(
        request,
        "approvals",
        person=person,
        pending=pending,
        decided=recent_decisions(listing.items),
        reviewable=reviewable,
        refused=listing.refused,
        expiries=EXPIRIES,
        notice=_notice(request) or _at_call(request, person, listing.items),
        marked=_marked(request),
    )


def _marked(request: web.Request) -> str | None:
    ref = call_ref(request.query.get("call"))
    return f"{ref[0]}/{ref[1]}" if ref else None


def _at_call(request: web.Request, person: Person, items: list[dict[str, Any]]) -> str | None:
    """The page opened at one call (the link an MCP client got): say where it stands."""
    ref = call_ref(request.query.get("call"))
    if ref is None:
        return None
    waiting = next(
        (
            obj
            for obj in items
            if (obj.get("metadata") or {}).get("namespace") == ref[0]
            and (obj.get("metadata") or {}).get("name") == ref[1]
            and (obj.get("status") or {}).get("state") == InvocationState.AWAITING_APPROVAL
        ),
        None,
    )
    return call_notice(ref, waiting, person.username)


def _notice(request: web.Request) -> str | None:
    name, decision = request.query.get("decided", ""), request.query.get("decision", "")
    if name and decision in (ApprovalDecision.APPROVED, ApprovalDecision.REJECTED):
        verb = "approval" if decision == ApprovalDecision.APPROVED else "rejection"
        return f"Your {verb} of {name[:253]} was created; the operator binds it to the call."
    return None


@page
async def decide(request: web.Request, person: Person) -> web.StreamResponse:
    namespace, name = params.namespace(request), params.object_name(request)
    form = await checked_form(request, person)
    try:
        decision = ApprovalDecision(form.get("decision", ""))
    except ValueError:
        raise ActionRefused("The decision must be Approved or Rejected.", 422) from None
    seconds = {str(s): s for s, _ in EXPIRIES}.get(form.get("expires", ""))
    if seconds is None:
        raise ActionRefused("Pick one of the offered expiries.", 422)
    comment = form.get("comment", "").strip()[:MAX_COMMENT]
    api = person.caller.api
    invocation = await api.get(Resource.INVOCATIONS, namespace, name)
    # The page showed this exact request: a call replaced meanwhile is not decided blindly.
    shown = form.get("requestHash", "")
    if shown != ((invocation.get("status") or {}).get("requestHash") or ""):
        raise ActionRefused(
            f"{name} changed since the page showed it; reload and review it again.", 409
        )
    try:
        body = approval_body(
            invocation,
            decision=decision,
            reviewer=person.username,
            reviewer_groups=list(person.caller.identity.groups),
            comment=comment,
            expires_at=in_seconds(seconds) if decision is ApprovalDecision.APPROVED else None,
        )
    except Undecidable as exc:
        raise undecidable(exc) from None
    await api.create(Resource.APPROVALS, namespace, body)
    return redirect(f"{PREFIX}/approvals?decided={name}&decision={decision.value}")


def add_routes(app: web.Application) -> None:
    app.router.add_get(f"{PREFIX}/approvals", approvals, allow_head=False)
    app.router.add_post(f"{PREFIX}/approvals/{{namespace}}/{{name}}", decide)
