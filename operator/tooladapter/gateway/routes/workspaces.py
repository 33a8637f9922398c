"""`DELETE /namespaces/{namespace}/attempts/{attemptId}/workspace`: release an attempt's
workspace now (its pod and its volume deleted), before its idle time.

The workspace is the authenticated caller's own (`caller` = who the token says), unless
`?caller=` names another caller: that takes verb `release` on the virtual resource
`workspaces` of tooladapter.dev in the namespace (an admin's grant, as
`tooladapter-operations` holds). Releasing one's own takes what making the attempt's calls
takes: `create` on toolinvocations in the namespace. Callers cannot delete pods, so the
deletion is the operator's (its own client), of that one workspace's pods only, found by the
hash of namespace, caller and attemptId (`pipeline.warm.workspace_key`).

A call of the attempt running at that moment loses its sandbox: it settles as any call
whose answer was lost (Failed for contained classes, Uncertain otherwise), and says that
the workspace may have changed.
"""

from __future__ import annotations

from typing import Any, Final

from aiohttp import web

from tooladapter.enums import Resource
from tooladapter.gateway import params
from tooladapter.gateway.context import caller_of, deps_of
from tooladapter.gateway.errors import ProblemError, from_api
from tooladapter.gateway.openapi import NAMESPACE, SECURITY, ok, problems
from tooladapter.gateway.views.problems import ProblemKind
from tooladapter.kube.callers import CallerApiError
from tooladapter.kube.warm import WarmKube
from tooladapter.sandbox.warm import LABEL_WORKSPACE, workspace_key

MAX_ATTEMPT_ID: Final = 128
MAX_CALLER: Final = 256

ATTEMPT_ID: Final[dict[str, Any]] = {
    "name": "attemptId",
    "in": "path",
    "required": True,
    "schema": {"type": "string", "minLength": 1, "maxLength": MAX_ATTEMPT_ID},
    "description": "The calls' spec.attemptId.",
}
CALLER: Final[dict[str, Any]] = {
    "name": "caller",
    "in": "query",
    "required": False,
    "schema": {"type": "string", "maxLength": MAX_CALLER},
    "description": "Another caller's workspace (needs verb release on workspaces).",
}

PATHS: Final[dict[str, Any]] = {
    "/namespaces/{namespace}/attempts/{attemptId}/workspace": {
        "delete": {
            "operationId": "releaseAttemptWorkspace",
            "summary": "Release an attempt's workspace now: its pod and volume are deleted "
            "(the caller's own; an admin may name another caller).",
            "security": SECURITY,
            "parameters": [NAMESPACE, ATTEMPT_ID, CALLER],
            "responses": {
                **ok(
                    {
                        "type": "object",
                        "properties": {
                            "namespace": {"type": "string"},
                            "attemptId": {"type": "string"},
                            "caller": {"type": "string"},
                            "released": {"type": "array", "items": {"type": "string"}},
                        },
                    },
                    "Released (`released` names the workspace pods deleted)",
                ),
                **problems(404, 422),
            },
        }
    }
}


async def release_workspace(request: web.Request) -> web.Response:
    namespace = params.namespace(request)
    attempt_id = request.match_info["attemptId"]
    if not 1 <= len(attempt_id) <= MAX_ATTEMPT_ID:
        raise ProblemError(ProblemKind.INVALID, f"an attemptId has 1-{MAX_ATTEMPT_ID} characters")
    caller = caller_of(request)
    deps = deps_of(request)
    named = request.query.get("caller") or None
    if named is not None and len(named) > MAX_CALLER:
        raise ProblemError(ProblemKind.INVALID, f"a caller has at most {MAX_CALLER} characters")
    owner = named or caller.identity.username
    what = f"releasing the workspace of attempt {attempt_id!r} in {namespace}"
    try:
        if named is not None and named != caller.identity.username:
            allowed = await deps.reviews.allowed(
                caller.identity, namespace=namespace, verb="release", resource="workspaces"
            )
            why = "naming another caller's workspace takes verb release on workspaces"
        else:
            allowed = await deps.reviews.allowed(
                caller.identity,
                namespace=namespace,
                verb="create",
                resource=str(Resource.INVOCATIONS),
            )
            why = "releasing a workspace takes what its calls take: create on toolinvocations"
    except CallerApiError as exc:
        raise from_api(exc, what) from exc
    if not allowed:
        raise ProblemError(ProblemKind.FORBIDDEN, f"{what}: {why}")
    key = workspace_key(namespace, owner, attempt_id)
    kube = WarmKube(deps.kube)
    released: list[str] = []
    for pod in await kube.list_pods(namespace, f"{LABEL_WORKSPACE}={key}"):
        if await kube.delete_pod(namespace, pod["metadata"]["name"]):
            released.append(pod["metadata"]["name"])
    if not released:
        raise ProblemError(
            ProblemKind.NOT_FOUND,
            f"no workspace of attempt {attempt_id!r} of {owner} in {namespace} (released "
            "already, idle, or never made)",
        )
    return web.json_response(
        {"namespace": namespace, "attemptId": attempt_id, "caller": owner, "released": released}
    )


def add_routes(app: web.Application) -> None:
    app.router.add_delete(
        "/namespaces/{namespace}/attempts/{attemptId}/workspace", release_workspace
    )
