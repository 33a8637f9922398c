"""Who is calling: the bearer token, reviewed by the API server (TokenReview).

Accepted reviews are remembered briefly (`REVIEW_TTL_SECONDS`, at most `REVIEW_ENTRIES`,
keyed by the token's sha256, never the token itself): an agent calling often costs one
review per interval, and a revoked or expired token stops working within it. Rejections
are never remembered, so a token that has just become valid works at once.
"""

from __future__ import annotations

import hashlib
import time
from collections import OrderedDict
from typing import Final

from aiohttp import web

from ..kube.callers import CallerApiError, CallerIdentity
from ..pipeline.problems import ProblemKind
from .context import Caller, deps_of, set_caller
from .errors import Handler, ProblemError

REVIEW_TTL_SECONDS: Final = 10.0
REVIEW_ENTRIES: Final = 1024
#: Routes anyone may read (liveness, the API description).
PUBLIC_PATHS: Final = frozenset({"/healthz", "/openapi.json"})
#: Routes under this prefix sign people in with a session cookie and review its token
#: themselves (`gateway.ui`, with `identify` below).
COOKIE_PREFIX: Final = "/ui"


class ReviewCache:
    """Accepted TokenReviews by token hash, bounded in size and age (oldest out first)."""

    def __init__(
        self, ttl_seconds: float = REVIEW_TTL_SECONDS, max_entries: int = REVIEW_ENTRIES
    ) -> None:
        self.ttl_seconds = ttl_seconds
        self.max_entries = max_entries
        self.entries: OrderedDict[str, tuple[CallerIdentity, float]] = OrderedDict()

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


def bearer_token(request: web.Request) -> str | None:
    header = request.headers.get("Authorization", "")
    scheme, _, token = header.partition(" ")
    token = token.strip()
    if scheme.lower() != "bearer" or not token or len(token) > 16_384:
        return None
    return token


async def identify(request: web.Request, token: str) -> CallerIdentity:
    """The token's identity, from the cache or a TokenReview; `ProblemError` (401 or 502)
    when the API server does not accept it or cannot be asked."""
    cache = request.app[REVIEWS]
    identity = cache.get(token)
    if identity is None:
        try:
            identity = await deps_of(request).reviews.identify(token)
        except CallerApiError as exc:
            raise ProblemError(
                ProblemKind.UPSTREAM, f"the token could not be reviewed: {exc.message}"
            ) from exc
        if identity is None:
            raise ProblemError(
                ProblemKind.UNAUTHENTICATED,
                "the API server did not accept the bearer token (expired, revoked, or not "
                "for this audience)",
            )
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
    authenticate(request, await identify(request, token), token)
    return await handler(request)
