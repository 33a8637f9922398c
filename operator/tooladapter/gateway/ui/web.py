"""What every page of the reviewers' page shares: templates, headers, the signed-in
person, the CSRF check, and errors as HTML pages instead of problem documents."""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final
from urllib.parse import urlsplit

import jinja2
from aiohttp import web

from tooladapter.gateway.auth import authenticate, identify, too_many
from tooladapter.gateway.bodies import form_body
from tooladapter.gateway.context import DEPS, Caller, deps_of
from tooladapter.gateway.doors import Busy
from tooladapter.gateway.errors import ProblemError
from tooladapter.gateway.ui.session import Sealer, Session
from tooladapter.gateway.views.problems import ProblemKind, kind_for_api_status
from tooladapter.kube.callers import CallerApiError
from tooladapter.mcp.core.approvals import call_ref
from tooladapter.pipeline.sanitize.redaction import bounded_message
from tooladapter.review.texts import Refusal, Undecidable

HERE: Final = Path(__file__).parent
PREFIX: Final = "/ui"
SESSION_COOKIE: Final = "tooladapter_session"
LOGIN_COOKIE: Final = "tooladapter_signin"

SEALER: Final = web.AppKey("tooladapter.ui.sealer", Sealer)
TEMPLATES: Final = web.AppKey("tooladapter.ui.templates", jinja2.Environment)

#: Nothing but this origin's own files; no inline script or style, no framing.
_HEADERS: Final = {
    "Content-Security-Policy": (
        "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; "
        "connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
    ),
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "same-origin",
    "X-Frame-Options": "DENY",
    "Cache-Control": "no-store",
}


def templates() -> jinja2.Environment:
    return jinja2.Environment(
        loader=jinja2.FileSystemLoader(HERE / "templates"),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )


def secure_headers(response: web.StreamResponse) -> web.StreamResponse:
    response.headers.update(_HEADERS)
    return response


def render(
    request: web.Request, template: str, *, status: int = 200, **context: Any
) -> web.Response:
    values = {
        "notice": None,
        "view": "",
        "refused": [],
        "admission_alert": admission_alert(request),
        **context,
    }
    html = request.app[TEMPLATES].get_template(template).render(prefix=PREFIX, **values)
    response = web.Response(text=html, status=status, content_type="text/html")
    secure_headers(response)
    return response


def admission_alert(request: web.Request) -> str | None:
    """What the page says while calls are refused because identity is not verified."""
    deps = request.app.get(DEPS)
    # Not compared yet (a standby, or start-up): nothing known to say.
    if deps is None or not deps.admission.problems:
        return None
    broken = "; ".join(p.text() for p in deps.admission.problems)
    return (
        f"Identity is not verified ({broken}): every tool call is refused "
        "(admission-missing) until the admission policies are restored as shipped, "
        "and calls made meanwhile stay refused."
    )


def render_view(request: web.Request, view: str, **context: Any) -> web.Response:
    """A page of the navigation: `<view>.html`, or `<view>_live.html` (the part the page
    refreshes in place) when the request asks for the fragment."""
    template = f"{view}_live.html" if request.query.get("fragment") else f"{view}.html"
    return render(request, template, view=view, **context)


def redirect(location: str) -> web.Response:
    """303: the browser follows with a GET (a reload does not post the form again)."""
    response = web.Response(status=303, headers={"Location": location})
    secure_headers(response)
    return response


def uses_tls(request: web.Request) -> bool:
    settings = deps_of(request).settings
    return request.secure or settings.gateway.tls_cert is not None or settings.page.behind_tls_proxy


def cookie_name(secure: bool, name: str) -> str:
    """`__Host-` prefixed when Secure: the browser then takes it only from this exact host,
    over TLS, for path `/`, never set by a sibling domain."""
    return f"__Host-{name}" if secure else name


def cookie_path(secure: bool) -> str:
    return "/" if secure else PREFIX


def read_cookie(request: web.Request, name: str) -> str | None:
    return request.cookies.get(cookie_name(uses_tls(request), name))


def set_cookie(
    request: web.Request, response: web.StreamResponse, name: str, value: str, max_age: int
) -> None:
    secure = uses_tls(request)
    response.set_cookie(
        cookie_name(secure, name),
        value,
        max_age=max_age,
        path=cookie_path(secure),
        httponly=True,
        secure=secure,
        samesite="Strict",
    )


def clear_cookie(request: web.Request, response: web.StreamResponse, name: str) -> None:
    secure = uses_tls(request)
    response.del_cookie(
        cookie_name(secure, name), path=cookie_path(secure), secure=secure, samesite="Strict"
    )


@dataclass(frozen=True)
class Person:
    """The signed-in person of one request: the session, the reviewed caller (with a
    client that speaks with their own token) and the CSRF token of their forms."""

    session: Session
    caller: Caller
    csrf: str

    @property
    def username(self) -> str:
        return self.caller.identity.username


class SignedOut(Exception):
    """No valid session: pages redirect to the sign-in, actions are refused."""


async def person_of(request: web.Request) -> Person:
    sealer = request.app[SEALER]
    session = sealer.open(read_cookie(request, SESSION_COOKIE))
    if session is None:
        raise SignedOut
    try:
        identity = await identify(request, session.token)
    except ProblemError as exc:
        if exc.kind is ProblemKind.UNAUTHENTICATED:
            raise SignedOut from None
        raise
    caller = authenticate(request, identity, session.token)
    return Person(session=session, caller=caller, csrf=sealer.csrf(session))


def same_origin(request: web.Request) -> bool:
    """Whether a write comes from this origin, as far as the browser says (`Origin`,
    `Sec-Fetch-Site`); the CSRF token is the check that does not rely on headers."""
    site = request.headers.get("Sec-Fetch-Site")
    if site is not None and site not in ("same-origin", "none"):
        return False
    origin = request.headers.get("Origin")
    if origin is None:
        return True
    if origin == "null":  # an opaque origin: only the fetch metadata can vouch for it
        return site == "same-origin"
    return urlsplit(origin).netloc == request.host


class ActionRefused(Exception):
    """An action refused before the API server was asked, shown as a page with `status`
    (403 by default: a failed CSRF check, a decision that cannot bind)."""

    def __init__(self, detail: str, status: int = 403) -> None:
        super().__init__(detail)
        self.detail = detail
        self.status = status


async def checked_form(request: web.Request, person: Person) -> dict[str, str]:
    """The posted form of a signed-in person, after the CSRF and origin checks."""
    form = await form_body(request)  # within the deadline of every body (bodies.py)
    if not same_origin(request) or not request.app[SEALER].csrf_ok(
        person.session, str(form.get("csrf") or "")
    ):
        raise ActionRefused(
            "This form was not sent from the reviewers' page (the CSRF check failed). "
            "Reload the page and try again."
        )
    return {k: str(v) for k, v in form.items() if isinstance(v, str)}


_REFUSAL_STATUS: Final = {
    Refusal.OWN_CALL: 403,
    Refusal.CHANGED: 409,
    Refusal.NO_EVIDENCE: 422,
    Refusal.EVIDENCE_TOO_LONG: 422,
}


def undecidable(exc: Undecidable) -> ActionRefused:
    """A decision the pure rules refuse (not waiting, own call, no evidence, ...)."""
    return ActionRefused(exc.message, _REFUSAL_STATUS.get(exc.refusal, 409))


Page = Callable[[web.Request, Person], Awaitable[web.StreamResponse]]


def page(handler: Page) -> Callable[[web.Request], Awaitable[web.StreamResponse]]:
    """A handler for signed-in people, its failures shown as HTML pages with the status
    the API server (or the check) gave.

    Every page request holds one of the person's request slots (fair doors, the same caps
    as the REST and MCP doors: a bearer token and its cookie count as one caller) and one
    of the namespace's: the route's `{namespace}`, else each namespace of the session.
    Beyond them: 429 with `Retry-After`, before the API server is asked. The person's slot
    is taken before a form is read, the namespaces' once it arrived."""

    @functools.wraps(handler)
    async def wrapped(request: web.Request) -> web.StreamResponse:
        try:
            person = await person_of(request)
        except SignedOut:
            if request.method == "GET":
                # The call an MCP client's link opened survives the sign-in.
                ref = call_ref(request.query.get("call"))
                carried = f"?call={ref[0]}/{ref[1]}" if ref else ""
                return redirect(f"{PREFIX}/login{carried}")
            return render(
                request,
                "error.html",
                status=401,
                title="Signed out",
                detail="Your session ended; sign in again.",
                person=None,
            )
        doors = deps_of(request).doors
        route_namespace = request.match_info.get("namespace")
        scopes = [route_namespace] if route_namespace else list(person.session.namespaces)

        def busy(exc: Busy) -> web.StreamResponse:
            refused = too_many(exc)  # counted like every 429 of the doors
            response = render(
                request,
                "error.html",
                status=429,
                title=ProblemKind.TOO_MANY.summary,
                detail=refused.detail,
                person=person,
            )
            response.headers["Retry-After"] = str(exc.retry_after)
            return response

        async def in_namespaces(request: web.Request, person: Person) -> web.StreamResponse:
            # A form arrives (within its deadline) on the person's slot alone: anyone may
            # name a namespace in the route or the session, and sending slowly would
            # otherwise hold that namespace's slots from its own callers.
            if request.body_exists:
                await form_body(request)
            try:
                also = doors.take_namespace_requests(scopes)
            except Busy as exc:
                return busy(exc)
            try:
                return await handler(request, person)
            finally:
                doors.give(also)

        try:
            held = doors.take_requests(person.username, [])
        except Busy as exc:
            return busy(exc)
        try:
            return await _answer(request, person, in_namespaces)
        finally:
            doors.give(held)

    return wrapped


async def _answer(request: web.Request, person: Person, handler: Page) -> web.StreamResponse:
    """`handler`'s page, or its failure as an HTML page."""
    try:
        return await handler(request, person)
    except ActionRefused as exc:
        return render(
            request,
            "error.html",
            status=exc.status,
            title="Refused",
            detail=exc.detail,
            person=person,
        )
    except CallerApiError as exc:
        kind = kind_for_api_status(exc.status)
        return render(
            request,
            "error.html",
            status=kind.status,
            title=kind.summary,
            detail=bounded_message(f"The API server answered: {exc.message}"),
            person=person,
        )
    except ProblemError as exc:
        return render(
            request,
            "error.html",
            status=exc.kind.status,
            title=exc.kind.summary,
            detail=exc.detail,
            person=person,
        )
