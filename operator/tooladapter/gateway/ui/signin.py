"""`/ui/login` and `/ui/logout`: sign in with a Kubernetes bearer token.

Any token the API server accepts works: a ServiceAccount token, or the cluster's OIDC ID
token when the API server is configured for OIDC. The gateway reviews it (TokenReview,
the API's own authentication) and seals it into the session cookie; nothing else
remembers it.
"""

from __future__ import annotations

import math
import time
from typing import Final

from aiohttp import web

from tooladapter.gateway.auth import identify
from tooladapter.gateway.bodies import form_body
from tooladapter.gateway.context import deps_of
from tooladapter.gateway.errors import ProblemError
from tooladapter.gateway.ui.data import MAX_NAMESPACES, parse_namespaces
from tooladapter.gateway.ui.session import MAX_TOKEN_CHARS, nonce, nonces_match
from tooladapter.gateway.ui.web import (
    LOGIN_COOKIE,
    PREFIX,
    SEALER,
    SESSION_COOKIE,
    Person,
    checked_form,
    clear_cookie,
    page,
    read_cookie,
    redirect,
    render,
    set_cookie,
)
from tooladapter.gateway.views.problems import ProblemKind
from tooladapter.mcp.core.approvals import call_ref

#: How long a sign-in form stays usable.
FORM_SECONDS: Final = 1800
_SA_PREFIX: Final = "system:serviceaccount:"


def _form(
    request: web.Request,
    *,
    status: int = 200,
    error: str | None = None,
    call: tuple[str, str] | None = None,
) -> web.Response:
    value = nonce()
    response = render(
        request,
        "login.html",
        status=status,
        person=None,
        view="login",
        nonce=value,
        error=error,
        max_namespaces=MAX_NAMESPACES,
        call=f"{call[0]}/{call[1]}" if call else None,
    )
    set_cookie(request, response, LOGIN_COOKIE, value, FORM_SECONDS)
    return response


async def login_form(request: web.Request) -> web.StreamResponse:
    return _form(request, call=call_ref(request.query.get("call")))


async def login(request: web.Request) -> web.StreamResponse:
    try:
        form = await form_body(request)  # within the deadline of every body
    except ProblemError as exc:
        return _form(request, status=exc.kind.status, error=exc.detail)
    if not nonces_match(read_cookie(request, LOGIN_COOKIE), str(form.get("nonce") or "")):
        return _form(request, status=403, error="The sign-in form expired; try again.")
    token = str(form.get("token") or "").strip()
    if not token or len(token) > MAX_TOKEN_CHARS:
        return _form(
            request,
            status=422,
            error=f"Paste a Kubernetes bearer token (at most {MAX_TOKEN_CHARS} characters).",
        )
    namespaces = parse_namespaces(str(form.get("namespaces") or ""))
    if namespaces is None:
        return _form(
            request,
            status=422,
            error=f"Namespaces are names separated by commas or spaces (at most {MAX_NAMESPACES}).",
        )
    try:
        identity = await identify(request, token)
    except ProblemError as exc:
        status = 401 if exc.kind is ProblemKind.UNAUTHENTICATED else exc.kind.status
        return _form(request, status=status, error=exc.detail)
    if not namespaces and identity.username.startswith(_SA_PREFIX):
        # A ServiceAccount's own namespace, unless the person chose others.
        namespaces = (identity.username.removeprefix(_SA_PREFIX).split(":")[0],)
    seconds = deps_of(request).settings.page.session_seconds
    session = request.app[SEALER].new(token, namespaces, seconds)
    call = call_ref(form.get("call"))
    response = redirect(f"{PREFIX}/approvals" + (f"?call={call[0]}/{call[1]}" if call else ""))
    set_cookie(
        request,
        response,
        SESSION_COOKIE,
        request.app[SEALER].seal(session),
        math.ceil(session.expires - time.time()),
    )
    clear_cookie(request, response, LOGIN_COOKIE)
    return response


@page
async def logout(request: web.Request, person: Person) -> web.StreamResponse:
    await checked_form(request, person)
    response = redirect(f"{PREFIX}/login")
    clear_cookie(request, response, SESSION_COOKIE)
    return response


async def home(request: web.Request) -> web.StreamResponse:
    return redirect(f"{PREFIX}/approvals")


def add_routes(app: web.Application) -> None:
    app.router.add_get(PREFIX, home, allow_head=False)
    app.router.add_get(f"{PREFIX}/", home, allow_head=False)
    app.router.add_get(f"{PREFIX}/login", login_form, allow_head=False)
    app.router.add_post(f"{PREFIX}/login", login)
    app.router.add_post(f"{PREFIX}/logout", logout)
