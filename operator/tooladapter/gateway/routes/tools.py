"""`GET /namespaces/{namespace}/tools[/{toolId}]`: the tools the caller may invoke."""

from __future__ import annotations

from typing import Any, Final

from aiohttp import web

from tooladapter.gateway import params
from tooladapter.gateway.context import caller_of, deps_of
from tooladapter.gateway.errors import ProblemError
from tooladapter.gateway.openapi import NAMESPACE, SECURITY, TOOL_ID, ok, path_param, problems, ref
from tooladapter.gateway.tools import invocable
from tooladapter.gateway.views.problems import ProblemKind
from tooladapter.gateway.views.tools import tool_detail, tool_summary

PATHS: Final[dict[str, Any]] = {
    "/namespaces/{namespace}/tools": {
        "get": {
            "operationId": "listTools",
            "summary": "Active, healthy tools of the namespace the caller may invoke, each at "
            "its highest version, with side-effect and risk class, kind, server and health.",
            "security": SECURITY,
            "parameters": [NAMESPACE],
            "responses": {**ok(ref("ToolList"), "The tools"), **problems()},
        }
    },
    "/namespaces/{namespace}/tools/{toolId}": {
        "get": {
            "operationId": "getTool",
            "summary": "One tool (its highest callable version, or `version`) with schemas, "
            "authorization, secret dependencies, limits and audit requirements.",
            "security": SECURITY,
            "parameters": [
                NAMESPACE,
                TOOL_ID,
                {
                    **path_param("version", {"type": "string", "maxLength": 64}, "A version."),
                    "in": "query",
                    "required": False,
                },
            ],
            "responses": {**ok(ref("ToolDetail"), "The tool"), **problems()},
        }
    },
}


async def list_tools(request: web.Request) -> web.Response:
    namespace = params.namespace(request)
    tools = await invocable(deps_of(request), caller_of(request), namespace)
    items = [tool_summary(versions[0], versions) for versions in tools.values()]
    return web.json_response({"namespace": namespace, "items": items})


async def get_tool(request: web.Request) -> web.Response:
    namespace = params.namespace(request)
    tool_id = params.tool_id(request)
    versions = (await invocable(deps_of(request), caller_of(request), namespace)).get(tool_id)
    if not versions:
        raise ProblemError(
            ProblemKind.NOT_FOUND,
            f"no callable tool {tool_id!r} in {namespace} that the caller may invoke",
        )
    wanted = request.query.get("version")
    entry = versions[0]
    if wanted is not None:
        match = [v for v in versions if v.spec.version == wanted]
        if not match:
            raise ProblemError(
                ProblemKind.NOT_FOUND,
                f"tool {tool_id!r} has no callable version {wanted!r} (callable: "
                f"{', '.join(v.spec.version for v in versions)})",
            )
        entry = match[0]
    # The limits a call of it gets now: the settings in force (reloadable) apply.
    limits = deps_of(request).in_force().limits
    return web.json_response(
        tool_detail(
            entry,
            versions,
            max_result_bytes=limits.max_result_bytes,
            default_timeout_seconds=limits.default_timeout_seconds,
        )
    )


def add_routes(app: web.Application) -> None:
    app.router.add_get("/namespaces/{namespace}/tools", list_tools, allow_head=False)
    app.router.add_get("/namespaces/{namespace}/tools/{toolId}", get_tool, allow_head=False)
