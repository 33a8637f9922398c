"""`/namespaces/{namespace}/tool-invocations/{name}`: read a call, its whole result, confirm
its effect.

All act with the caller's token. The result is read from the artifact store (status holds
it inline only when small, `TOOLADAPTER_INLINE_RESULT_BYTES`), and only after the call
itself was read with the caller's token: whoever may `get` the ToolInvocation may read its
result, no one else (the API server decides; any refusal or error refuses).

A confirmation is the same status patch a person makes with kubectl
(`status.effectConfirmation`, `confirmedBy` = the caller), so the admission policy decides
who may confirm, and the operator records it on a new receipt.
"""

from __future__ import annotations

import asyncio
from typing import Any, Final

from aiohttp import web

from tooladapter.artifacts import CorruptArtifact, Space
from tooladapter.enums import TERMINAL_STATES, InvocationState, Resource
from tooladapter.gateway import params
from tooladapter.gateway.bodies import json_body
from tooladapter.gateway.context import caller_of, deps_of
from tooladapter.gateway.errors import ProblemError, from_api
from tooladapter.gateway.openapi import NAMESPACE, OBJECT_NAME, SECURITY, ok, problems, ref
from tooladapter.gateway.views.problems import ProblemKind
from tooladapter.gateway.views.tools import invocation_view
from tooladapter.kube.callers import CallerApiError
from tooladapter.pipeline.hashing import SHA256_PREFIX

MAX_EVIDENCE: Final = 4096

PATHS: Final[dict[str, Any]] = {
    "/namespaces/{namespace}/tool-invocations/{name}": {
        "get": {
            "operationId": "getToolInvocation",
            "summary": "One invocation with its pipeline stages, sandbox lease and receipt.",
            "security": SECURITY,
            "parameters": [NAMESPACE, OBJECT_NAME],
            "responses": {**ok(ref("Invocation"), "The invocation"), **problems()},
        }
    },
    "/namespaces/{namespace}/tool-invocations/{name}/result": {
        "get": {
            "operationId": "getToolInvocationResult",
            "summary": "The whole sanitized result of an ended invocation, from the artifact "
            "store, for callers allowed to get the invocation (status.result holds it inline "
            "only when small).",
            "security": SECURITY,
            "parameters": [NAMESPACE, OBJECT_NAME],
            "responses": {
                "200": {
                    "description": "The result's text, byte for byte as stored: its sha256 is "
                    "the invocation's status.resultRef (also the ETag)",
                    "content": {"text/plain": {"schema": {"type": "string"}}},
                },
                **problems(409),
            },
        }
    },
    "/namespaces/{namespace}/tool-invocations/{name}/confirm-effect": {
        "post": {
            "operationId": "confirmToolEffect",
            "summary": "Confirm whether an Uncertain invocation's effect happened (people "
            "with tooladapter-operations); the operator writes a new receipt.",
            "security": SECURITY,
            "parameters": [NAMESPACE, OBJECT_NAME],
            "requestBody": {
                "required": True,
                "content": {"application/json": {"schema": ref("EffectConfirmation")}},
            },
            "responses": {
                **ok(ref("Invocation"), "Recorded on the invocation; the receipt follows", 202),
                **problems(400, 409, 413, 422),
            },
        }
    },
}


async def get_invocation(request: web.Request) -> web.Response:
    namespace, name = params.namespace(request), params.object_name(request)
    try:
        obj = await caller_of(request).api.get(Resource.INVOCATIONS, namespace, name)
    except CallerApiError as exc:
        raise from_api(exc, f"reading tool invocation {namespace}/{name}") from exc
    return web.json_response(invocation_view(obj))


async def get_result(request: web.Request) -> web.Response:
    namespace, name = params.namespace(request), params.object_name(request)
    try:
        # As the caller: reading the result takes what reading the call takes.
        obj = await caller_of(request).api.get(Resource.INVOCATIONS, namespace, name)
    except CallerApiError as exc:
        raise from_api(exc, f"reading tool invocation {namespace}/{name}") from exc
    status = obj.get("status") or {}
    ref = status.get("resultRef")
    if not isinstance(ref, str) or not ref.startswith(SHA256_PREFIX):
        state = status.get("state") or "not started"
        ended = state in TERMINAL_STATES  # a StrEnum set: the plain string matches
        raise ProblemError(
            ProblemKind.NOT_FOUND if ended else ProblemKind.CONFLICT,
            f"{name} has no result: it ended {state}"
            if ended
            else f"{name} has no result yet: it is {state}",
        )
    try:
        data = await asyncio.to_thread(deps_of(request).store.get, ref, Space.RESULTS)
    except KeyError:
        raise ProblemError(
            ProblemKind.NOT_FOUND,
            f"the result of {name} ({ref}) is no longer in the artifact store (retention)",
        ) from None
    except CorruptArtifact:
        raise ProblemError(
            ProblemKind.INTERNAL, f"the stored result of {name} does not match {ref}"
        ) from None
    return web.Response(
        body=data, content_type="text/plain", charset="utf-8", headers={"ETag": f'"{ref}"'}
    )


async def _confirmation(request: web.Request) -> tuple[bool, str]:
    body = await json_body(request)
    if not isinstance(body, dict) or set(body) != {"effectHappened", "evidence"}:
        raise ProblemError(
            ProblemKind.INVALID, 'the body is {"effectHappened": bool, "evidence": string}'
        )
    happened, evidence = body["effectHappened"], body["evidence"]
    if not isinstance(happened, bool):
        raise ProblemError(ProblemKind.INVALID, "effectHappened must be true or false")
    if not isinstance(evidence, str) or not 1 <= len(evidence) <= MAX_EVIDENCE:
        raise ProblemError(
            ProblemKind.INVALID, f"evidence must be a string of 1-{MAX_EVIDENCE} characters"
        )
    return happened, evidence


async def confirm_effect(request: web.Request) -> web.Response:
    namespace, name = params.namespace(request), params.object_name(request)
    happened, evidence = await _confirmation(request)
    caller = caller_of(request)
    what = f"confirming the effect of {namespace}/{name}"
    try:
        obj = await caller.api.get(Resource.INVOCATIONS, namespace, name)
    except CallerApiError as exc:
        raise from_api(exc, what) from exc
    status = obj.get("status") or {}
    if status.get("state") != InvocationState.UNCERTAIN:
        raise ProblemError(
            ProblemKind.CONFLICT,
            f"only an Uncertain invocation's effect can be confirmed; {name} is "
            f"{status.get('state') or 'not started'}",
        )
    if status.get("duplicateOf"):
        first = status["duplicateOf"]
        raise ProblemError(
            ProblemKind.CONFLICT,
            f"{name} ran nothing: it is a duplicate of {first}; confirm {first} (its "
            "confirmation is copied onto its duplicates)",
        )
    if status.get("effectConfirmation"):
        raise ProblemError(ProblemKind.CONFLICT, f"the effect of {name} was already confirmed")
    confirmation = {
        "effectHappened": happened,
        "confirmedBy": caller.identity.username,
        "evidence": evidence,
    }
    try:
        patched = await caller.api.merge_patch_status(
            Resource.INVOCATIONS, namespace, name, {"effectConfirmation": confirmation}
        )
    except CallerApiError as exc:
        raise from_api(exc, what) from exc
    return web.json_response(invocation_view(patched), status=202)


def add_routes(app: web.Application) -> None:
    app.router.add_get(
        "/namespaces/{namespace}/tool-invocations/{name}", get_invocation, allow_head=False
    )
    app.router.add_get(
        "/namespaces/{namespace}/tool-invocations/{name}/result", get_result, allow_head=False
    )
    app.router.add_post(
        "/namespaces/{namespace}/tool-invocations/{name}/confirm-effect", confirm_effect
    )
