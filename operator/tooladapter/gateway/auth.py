"""Who is calling: the bearer token, reviewed by the API server (TokenReview).

Accepted reviews are remembered briefly (`REVIEW_TTL_SECONDS`, at most `REVIEW_ENTRIES`,
keyed by the token's sha256, never the token itself): an agent calling often costs one
review per interval, and a revoked or expired token stops working within it. Rejections
are remembered too, more briefly (`TOOLADAPTER_GATEWAY_REJECTED_TOKEN_SECONDS`, by the same
hash), so a client repeating a bad token costs one review per interval; and failed
authentications are limited per client address (`doors.FailureLimiter`): beyond the limit
429 with `Retry-After`, before any review. A token beyond `MAX_TOKEN_BYTES` is 401 without a
review. So what anyone who can reach the gateway can make it ask the API server is bounded
by the limit, whatever tokens it makes up.
"""

from __future__ import annotations

import asyncio
import hashlib
import time
from collections import OrderedDict
from typing import Final

from aiohttp import web

from tooladapter.gateway.bodies import read_body
from tooladapter.gateway.context import Caller, deps_of, set_caller
from tooladapter.gateway.doors import Busy, FailureLimiter, client_address
from tooladapter.gateway.errors import Handler, ProblemError
from tooladapter.gateway.views.problems import ProblemKind
from tooladapter.kube.callers import CallerApiError, CallerIdentity
from tooladapter.metrics import GATEWAY_REFUSED
from tooladapter.settings import Settings
from tooladapter.timeutil import unexpired

REVIEW_TTL_SECONDS: Final = 10.0
REVIEW_ENTRIES: Final = 1024
#: A bearer token longer than this is refused (401) without a review.
MAX_TOKEN_BYTES: Final = 16_384
#: Routes anyone may read (liveness, the API description).
PUBLIC_PATHS: Final = frozenset({"/healthz", "/openapi.json", "/receipt-keys"})
#: Routes under this prefix sign people in with a session cookie and review its token
#: themselves (`gateway.ui`, with `identify` below).
COOKIE_PREFIX: Final = "/ui"


class ReviewCache:
    """Accepted TokenReviews by token hash, bounded in size and age (oldest out first)."""

    def __init__(
        self,
        ttl_seconds: float = REVIEW_TTL_SECONDS,
        max_entries: int = REVIEW_ENTRIES,
        rejected_seconds: float = REVIEW_TTL_SECONDS,
    ) -> None:
        self.ttl_seconds = ttl_seconds
        self.max_entries = max_entries
        self.rejected_seconds = rejected_seconds
        self.entries: OrderedDict[str, tuple[CallerIdentity, float]] = OrderedDict()
        #: Rejected tokens by hash: expiry only (bounded like `entries`).
        self.rejected: OrderedDict[str, float] = OrderedDict()
        #: Reviews under way by token hash: concurrent requests with one token share one
        #: review (and one take of the failure limit) instead of one each.
        self.pending: dict[str, asyncio.Future[CallerIdentity]] = {}

    def was_rejected(self, token: str) -> bool:
        return unexpired(self.rejected, self.key(token))

    def reject(self, token: str) -> None:
        if self.rejected_seconds <= 0:
            return
        key = self.key(token)
        self.rejected[key] = time.monotonic() + self.rejected_seconds
        self.rejected.move_to_end(key)
        while len(self.rejected) > self.max_entries:
            self.rejected.popitem(last=False)

    @staticmethod
    def key(token: str) -> str:
        return hashlib.sha256(token.encode()).hexdigest()

    def get(self, token: str) -> CallerIdentity | None:
        key = self.key(token)
        hit = self.entries.get(key)
        if hit is None:
            return None
        if hit[1] <= time.monotonic():
            del self.entries[key]
            return None
        return hit[0]

    def put(self, token: str, identity: CallerIdentity) -> None:
        key = self.key(token)
        self.entries[key] = (identity, time.monotonic() + self.ttl_seconds)
        self.entries.move_to_end(key)
        while len(self.entries) > self.max_entries:
            self.entries.popitem(last=False)


REVIEWS: Final = web.AppKey("tooladapter.review-cache", ReviewCache)
FAILURES: Final = web.AppKey("tooladapter.auth-failures", FailureLimiter)


def install(app: web.Application, settings: Settings) -> None:
    """The review cache and the failed-authentication limit (the caps: `Deps.doors`)."""
    app[REVIEWS] = ReviewCache(rejected_seconds=settings.gateway.rejected_token_seconds)
    app[FAILURES] = FailureLimiter(
        burst=settings.gateway.auth_failures_burst,
        per_minute=float(settings.gateway.auth_failures_per_minute),
    )


def too_many(exc: Busy) -> ProblemError:
    """The 429 of a full cap, counted by cap (`tooladapter_gateway_refused`)."""
    GATEWAY_REFUSED.labels(exc.cap).inc()
    return ProblemError(ProblemKind.TOO_MANY, str(exc), retryAfter=exc.retry_after)


def address_of(request: web.Request) -> str:
    """The client's address (the forwarded one only behind a trusted proxy)."""
    return client_address(
        request.remote or "-",
        request.headers.get("X-Forwarded-For"),
        deps_of(request).settings.gateway.trusted_proxies,
    )


def bearer_token(request: web.Request) -> str | None:
    header = request.headers.get("Authorization", "")
    scheme, _, token = header.partition(" ")
    token = token.strip()
    if scheme.lower() != "bearer" or not token or len(token) > MAX_TOKEN_BYTES:
        return None
    return token


async def identify(request: web.Request, token: str) -> CallerIdentity:
    """The token's identity, from the cache or a TokenReview; `ProblemError` (401 or 502)
    when the API server does not accept it or cannot be asked.

    Requests arriving with one token while its review is under way wait for that review
    (a client opening many requests at once under a slow API server costs one review, and
    spends nothing of its address's failed-authentication limit while it waits)."""
    cache = request.app[REVIEWS]
    identity = cache.get(token)
    if identity is not None:
        return identity
    key = cache.key(token)
    review = cache.pending.get(key)
    if review is None:
        review = asyncio.ensure_future(_review(request, token))
        cache.pending[key] = review
        review.add_done_callback(lambda done: _settle(cache, key, done))
    # Shielded: a waiter that goes away (its client disconnected) does not cancel the
    # review the others wait for.
    return await asyncio.shield(review)


def _settle(cache: ReviewCache, key: str, done: asyncio.Future[CallerIdentity]) -> None:
    cache.pending.pop(key, None)
    if not done.cancelled():
        done.exception()  # retrieved: every waiter may have gone


async def _review(request: web.Request, token: str) -> CallerIdentity:
    cache = request.app[REVIEWS]
    failures = request.app[FAILURES]
    address = address_of(request)
    if wait := failures.take(address):
        busy = Busy("too many failed authentications from this address", wait, "auth-failures")
        raise too_many(busy)
    identity = None
    if not cache.was_rejected(token):
        try:
            identity = await deps_of(request).reviews.identify(token)
        except CallerApiError as exc:
            failures.succeeded(address)  # not the token's fault
            raise ProblemError(
                ProblemKind.UPSTREAM, f"the token could not be reviewed: {exc.message}"
            ) from exc
    if identity is None:
        cache.reject(token)
        raise ProblemError(
            ProblemKind.UNAUTHENTICATED,
            "the API server did not accept the bearer token (expired, revoked, or not "
            "for this audience)",
        )
    failures.succeeded(address)
    cache.put(token, identity)
    return identity


def authenticate(request: web.Request, identity: CallerIdentity, token: str) -> Caller:
    """Make `identity` the request's caller, with a client that speaks with its token."""
    caller = Caller(identity=identity, api=deps_of(request).pool.as_caller(token))
    set_caller(request, caller)
    return caller


@web.middleware
async def authentication_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    # Unknown routes answer 404 (or 405) before any review: the route table is public.
    if (
        request.path in PUBLIC_PATHS
        or request.path == COOKIE_PREFIX
        or request.path.startswith(COOKIE_PREFIX + "/")
        or request.match_info.http_exception is not None
    ):
        return await handler(request)
    token = bearer_token(request)
    if token is None:
        raise ProblemError(
            ProblemKind.UNAUTHENTICATED,
            "send `Authorization: Bearer <token>` with a Kubernetes token of the caller "
            "(e.g. `kubectl create token <serviceaccount>`)",
        )
    identity = await identify(request, token)
    authenticate(request, identity, token)
    doors = deps_of(request).doors
    try:
        held = doors.take_request(identity.username, None)
    except Busy as exc:
        raise too_many(exc) from None
    try:
        # The body arrives (within its deadline) on the caller's slot alone: any caller of
        # any tenant may name a namespace in the URL, and sending slowly would otherwise
        # hold that namespace's slots from its own callers.
        if request.body_exists:
            await read_body(request)
        try:
            also = doors.take_namespace_requests([request.match_info.get("namespace")])
        except Busy as exc:
            raise too_many(exc) from None
        try:
            return await handler(request)
        finally:
            doors.give(also)
    finally:
        doors.give(held)
