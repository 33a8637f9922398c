"""Path parameters, checked before anything reaches the API server."""

from __future__ import annotations

from typing import Final

from aiohttp import web

from tooladapter.gateway.errors import ProblemError
from tooladapter.gateway.views.problems import ProblemKind
from tooladapter.gateway.views.tools import is_tool_id
from tooladapter.pipeline.linear_regex import LinearPattern, compile_internal

NAMESPACE_PATTERN: Final = r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$"
NAME_PATTERN: Final = r"^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$"
SHA256_PATTERN: Final = r"^[0-9a-f]{64}$"
#: A Kubernetes uid as the API server writes it (RFC 4122 text form, lowercase).
UID_PATTERN: Final = r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$"
RUN_ID_MAX: Final = 128

_NAMESPACE = compile_internal(NAMESPACE_PATTERN)
_NAME = compile_internal(NAME_PATTERN)
_SHA256 = compile_internal(SHA256_PATTERN)
_UID = compile_internal(UID_PATTERN)


def _matched(request: web.Request, key: str, pattern: LinearPattern, what: str) -> str:
    value = request.match_info.get(key, "")
    if not value or pattern.search(value) is None:
        raise ProblemError(ProblemKind.NOT_FOUND, f"{value!r} is not a valid {what}")
    return value


def namespace(request: web.Request) -> str:
    return _matched(request, "namespace", _NAMESPACE, "namespace name")


def object_name(request: web.Request) -> str:
    return _matched(request, "name", _NAME, "object name")


def is_uid(value: str) -> bool:
    """`value` has the form of an object's uid (and may be looked up as one)."""
    return _UID.search(value) is not None


def sha256_hex(request: web.Request) -> str:
    return _matched(request, "sha256", _SHA256, "sha256 (64 lowercase hex digits)")


def tool_id(request: web.Request) -> str:
    value = request.match_info.get("toolId", "")
    if not is_tool_id(value):
        raise ProblemError(ProblemKind.NOT_FOUND, f"{value!r} is not a valid tool id")
    return value


def run_id(request: web.Request) -> str:
    value = request.match_info.get("runId", "")
    if not 1 <= len(value) <= RUN_ID_MAX:
        raise ProblemError(ProblemKind.NOT_FOUND, f"a run id has 1-{RUN_ID_MAX} characters")
    return value
