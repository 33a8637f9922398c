"""Every error as a problem document (`application/problem+json`), never a bare 500 page."""

from __future__ import annotations

import json
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import web

from tooladapter.gateway.views.problems import (
    PROBLEM_MEDIA_TYPE,
    ProblemKind,
    kind_for_api_status,
    kind_for_http_status,
    problem,
)
from tooladapter.kube.callers import CallerApiError

logger = logging.getLogger("tooladapter.gateway")

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


class ProblemError(Exception):
    """Raised by a handler to answer with a problem document."""

    def __init__(self, kind: ProblemKind, detail: str, **extensions: Any) -> None:
        super().__init__(detail)
        self.kind = kind
        self.detail = detail
        self.extensions = extensions


def from_api(exc: CallerApiError, what: str) -> ProblemError:
    """The API server's answer to the caller's own request, as the caller's problem."""
    kind = kind_for_api_status(exc.status)
    if kind == ProblemKind.UPSTREAM:
        return ProblemError(kind, f"{what}: the API server did not answer ({exc.message})")
    return ProblemError(kind, f"{what}: {exc.message}")


def problem_response(
    kind: ProblemKind, detail: str, headers: dict[str, str] | None = None, **extensions: Any
) -> web.Response:
    return web.Response(
        status=kind.status,
        body=json.dumps(problem(kind, detail, **extensions)).encode(),
        content_type=PROBLEM_MEDIA_TYPE,
        headers=headers,
    )


@web.middleware
async def problems_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    try:
        return await handler(request)
    except ProblemError as exc:
        headers = (
            {"WWW-Authenticate": 'Bearer realm="tooladapter"'}
            if exc.kind == ProblemKind.UNAUTHENTICATED
            else None
        )
        if exc.kind == ProblemKind.TOO_MANY:
            headers = {"Retry-After": str(exc.extensions.get("retryAfter") or 1)}
        return problem_response(exc.kind, exc.detail, headers, **exc.extensions)
    except CallerApiError as exc:
        mapped = from_api(exc, "the API server refused the request")
        return problem_response(mapped.kind, mapped.detail)
    except web.HTTPException as exc:
        if exc.status < 400:
            raise
        kind = kind_for_http_status(exc.status)
        headers = {"Allow": exc.headers["Allow"]} if "Allow" in exc.headers else None
        return problem_response(kind, exc.reason or kind.summary, headers)
    except Exception:
        logger.exception("gateway: %s %s failed", request.method, request.path)
        return problem_response(ProblemKind.INTERNAL, "an internal error; see the operator log")
