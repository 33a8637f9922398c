"""`POST /namespaces/{namespace}/tools/{toolId}/dry-run`: preview a call, create nothing.

The answer is the `InvocationPreview` a `spec.dryRun` ToolInvocation gets as
`status.preview` (the same code computes both, `previewing.dry_run`); the body takes what
a tools/call takes: arguments, and its `_meta` options without their prefix.
"""

from __future__ import annotations

from typing import Any, Final

from aiohttp import web

from tooladapter.gateway import params
from tooladapter.gateway.bodies import json_body
from tooladapter.gateway.context import caller_of, deps_of
from tooladapter.gateway.errors import ProblemError
from tooladapter.gateway.openapi import NAMESPACE, SECURITY, TOOL_ID, ok, problems, ref
from tooladapter.gateway.previews import preview_call
from tooladapter.gateway.views.problems import ProblemKind
from tooladapter.gateway.views.tools import BadCallOptions, CallOptions, ToolCall, call_options

#: The body's keys: the arguments and the options of a tools/call.
KEYS: Final = frozenset(
    {"arguments", "version", "runId", "attemptId", "idempotencyKey", "fencingToken"}
)

PATHS: Final[dict[str, Any]] = {
    "/namespaces/{namespace}/tools/{toolId}/dry-run": {
        "post": {
            "operationId": "dryRunTool",
            "summary": "What calling the tool now would meet (validation, tenant policy, "
            "side-effect class, the caller's permission, approval, sandbox), evaluated "
            "without creating or executing anything: the status.preview of a "
            "spec.dryRun invocation.",
            "security": SECURITY,
            "parameters": [NAMESPACE, TOOL_ID],
            "requestBody": {
                "required": True,
                "content": {"application/json": {"schema": ref("DryRunRequest")}},
            },
            "responses": {
                **ok(ref("InvocationPreview"), "The preview (any verdict)"),
                **problems(400, 413, 422),
            },
        }
    },
}


async def _request(request: web.Request) -> tuple[dict[str, Any], CallOptions]:
    body = await json_body(request)
    if not isinstance(body, dict):
        raise ProblemError(ProblemKind.INVALID, "the body is a JSON object")
    unknown = sorted(set(body) - KEYS)
    if unknown:
        raise ProblemError(
            ProblemKind.INVALID,
            f"unknown keys {', '.join(unknown)}; the body takes {', '.join(sorted(KEYS))}",
        )
    arguments = body.get("arguments", {})
    if not isinstance(arguments, dict):
        raise ProblemError(ProblemKind.INVALID, "arguments must be a JSON object")
    try:
        options = call_options(body, prefix="", where="body")
    except BadCallOptions as exc:
        raise ProblemError(ProblemKind.INVALID, str(exc)) from exc
    return arguments, options


async def dry_run(request: web.Request) -> web.Response:
    namespace, tool_id = params.namespace(request), params.tool_id(request)
    arguments, options = await _request(request)
    call = ToolCall(namespace, tool_id, arguments, options)
    shown = await preview_call(deps_of(request), caller_of(request), call)
    # The same shape the preview has in a dry-run invocation's status (empty defaults omitted).
    return web.json_response(shown.sparse_wire())


def add_routes(app: web.Application) -> None:
    app.router.add_post("/namespaces/{namespace}/tools/{toolId}/dry-run", dry_run)
