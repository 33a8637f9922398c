"""Problem documents (RFC 9457, `application/problem+json`) of the gateway's HTTP API.

Every error the gateway answers is one of these: a stable `type` URI per kind of problem,
the HTTP `status`, a short `title` and a `detail` that says what to do. Details are bounded
and pass the sanitizer's message redaction: an API server's message may quote a value.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Any, Final

from tooladapter.pipeline.sanitize.redaction import bounded_message

PROBLEM_MEDIA_TYPE: Final = "application/problem+json"
TYPE_BASE: Final = "https://tooladapter.dev/problems/"
MAX_DETAIL_CHARS: Final = 1024


class ProblemKind(StrEnum):
    """Each kind has one status and title; `type` is `TYPE_BASE` + the value."""

    UNAUTHENTICATED = "unauthenticated"
    FORBIDDEN = "forbidden"
    NOT_FOUND = "not-found"
    METHOD_NOT_ALLOWED = "method-not-allowed"
    BAD_REQUEST = "bad-request"
    CONFLICT = "conflict"
    INVALID = "invalid"
    TOO_LARGE = "too-large"
    #: A fair-doors cap (per caller, namespace or client address) is full: 429 with
    #: `Retry-After` (`gateway.doors`).
    TOO_MANY = "too-many-requests"
    UPSTREAM = "upstream-unavailable"
    INTERNAL = "internal"

    @property
    def status(self) -> int:
        return _STATUS[self]

    @property
    def summary(self) -> str:
        """The problem document's `title` (`str.title` is taken)."""
        return _TITLE[self]


_STATUS: Final = {
    ProblemKind.UNAUTHENTICATED: 401,
    ProblemKind.FORBIDDEN: 403,
    ProblemKind.NOT_FOUND: 404,
    ProblemKind.METHOD_NOT_ALLOWED: 405,
    ProblemKind.BAD_REQUEST: 400,
    ProblemKind.CONFLICT: 409,
    ProblemKind.INVALID: 422,
    ProblemKind.TOO_LARGE: 413,
    ProblemKind.TOO_MANY: 429,
    ProblemKind.UPSTREAM: 503,
    ProblemKind.INTERNAL: 500,
}

_TITLE: Final = {
    ProblemKind.UNAUTHENTICATED: "A valid Kubernetes bearer token is required",
    ProblemKind.FORBIDDEN: "The caller may not do this",
    ProblemKind.NOT_FOUND: "Not found",
    ProblemKind.METHOD_NOT_ALLOWED: "Method not allowed",
    ProblemKind.BAD_REQUEST: "Bad request",
    ProblemKind.CONFLICT: "Conflicts with the object's current state",
    ProblemKind.INVALID: "Invalid request",
    ProblemKind.TOO_LARGE: "Request body too large",
    ProblemKind.TOO_MANY: "Too many requests at once; retry after Retry-After seconds",
    ProblemKind.UPSTREAM: "The Kubernetes API server is unavailable",
    ProblemKind.INTERNAL: "Internal error",
}


def problem(kind: ProblemKind, detail: str, **extensions: Any) -> dict[str, Any]:
    """The problem document of `kind` with a bounded, redacted `detail`."""
    return {
        "type": TYPE_BASE + kind.value,
        "title": kind.summary,
        "status": kind.status,
        "detail": bounded_message(detail, max_chars=MAX_DETAIL_CHARS),
        **extensions,
    }


def kind_for_api_status(status: int) -> ProblemKind:
    """The problem a caller gets when the API server refused its own request."""
    return {
        400: ProblemKind.BAD_REQUEST,
        401: ProblemKind.UNAUTHENTICATED,
        403: ProblemKind.FORBIDDEN,
        404: ProblemKind.NOT_FOUND,
        405: ProblemKind.METHOD_NOT_ALLOWED,
        409: ProblemKind.CONFLICT,
        413: ProblemKind.TOO_LARGE,
        422: ProblemKind.INVALID,
    }.get(
        status,
        ProblemKind.UPSTREAM if status in (0, 429) or status >= 500 else ProblemKind.INVALID,
    )


def kind_for_http_status(status: int) -> ProblemKind:
    """The problem of an HTTP error the web framework raised (no route, wrong method)."""
    if status >= 500:
        return ProblemKind.INTERNAL
    return kind_for_api_status(status)
