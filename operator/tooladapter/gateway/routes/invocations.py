"""`/namespaces/{namespace}/tool-invocations/{name}`: read a call (by name, else by uid), its
whole result, interrupt it, confirm its effect.

All act with the caller's token. The result is read from the artifact store (status holds
it inline only when small, `TOOLADAPTER_INLINE_RESULT_BYTES`), and only after the call
itself was read with the caller's token: whoever may `get` the ToolInvocation may read its
result, no one else (the API server decides; any refusal or error refuses).

A confirmation is the same status patch a person makes with kubectl
(`status.effectConfirmation`, `confirmedBy` = the caller), so the admission policy decides
who may confirm, and the operator records it on a new receipt. An interrupt is the same
`spec.interrupt` patch (`kube.interrupts`): the interrupt admission policy decides who may
(the call's own caller, or `update` on `toolinvocations/interrupt`).

Reading by uid (the reference's GetToolInvocation takes an id): a name is tried first; a
uid-shaped value that names nothing, or names an invocation whose uid it is not, is looked
up among the namespace's invocations with the operator's own client, and the invocation
with that uid, when there is one, is then read with the caller's token, so the caller's
rights are exactly those of a read by name, and an invocation named after another's uid
never stands in for it (`resolve_invocation`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any, Final

from aiohttp import web

from tooladapter.artifacts import CorruptArtifact, Space
from tooladapter.enums import TERMINAL_STATES, InterruptStanding, InvocationState, Resource
from tooladapter.gateway import params
from tooladapter.gateway.bodies import json_body
from tooladapter.gateway.context import caller_of, deps_of
from tooladapter.gateway.errors import ProblemError, from_api
from tooladapter.gateway.openapi import (
    NAMESPACE,
    OBJECT_NAME,
    OBJECT_NAME_OR_UID,
    SECURITY,
    ok,
    problems,
    ref,
)
from tooladapter.gateway.params import is_uid
from tooladapter.gateway.views.problems import ProblemKind, kind_for_api_status
from tooladapter.gateway.views.tools import invocation_view
from tooladapter.kube.callers import CallerApiError
from tooladapter.kube.client import Kube
from tooladapter.kube.errors import KubeError
from tooladapter.kube.interrupts import interrupt
from tooladapter.pipeline.hashing import SHA256_PREFIX

MAX_EVIDENCE: Final = 4096

PATHS: Final[dict[str, Any]] = {
    "/namespaces/{namespace}/tool-invocations/{name}": {
        "get": {
            "operationId": "getToolInvocation",
            "summary": "One invocation with its pipeline stages, sandbox lease and receipt, "
            "by name, else by uid (metadata.uid); read with the caller's rights either way.",
            "security": SECURITY,
            "parameters": [NAMESPACE, OBJECT_NAME_OR_UID],
            "responses": {**ok(ref("Invocation"), "The invocation"), **problems()},
        }
    },
    "/namespaces/{namespace}/tool-invocations/{name}/interrupt": {
        "post": {
            "operationId": "interruptToolInvocation",
            "summary": "Interrupt a call that has not ended (spec.interrupt, written as the "
            "caller: its own caller, or people with update on toolinvocations/interrupt). "
            "It settles Cancelled when nothing outside its sandbox can have happened, else "
            "Observed or Uncertain; follow it with GET. No body.",
            "security": SECURITY,
            "parameters": [NAMESPACE, OBJECT_NAME],
            "responses": {
                **ok(
                    ref("Invocation"),
                    "The interrupt is recorded (or was already); the call settles next",
                    202,
                ),
                **problems(409),
            },
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


async def _name_of_uid(kube: Kube, namespace: str, uid: str) -> str | None:
    """The name of the invocation whose uid is `uid`, from the operator's own listing (no
    field selector reaches metadata.uid); None when there is none."""
    try:
        async for obj in kube.iter_custom(Resource.INVOCATIONS, namespace):
            meta = obj.get("metadata") or {}
            if meta.get("uid") == uid:
                return str(meta.get("name") or "") or None
    except KubeError as exc:
        raise ProblemError(
            ProblemKind.UPSTREAM, f"looking up uid {uid}: the API server did not answer"
        ) from exc
    return None


#: Reads an invocation by name as the caller; finds the name of a uid (None: none has it).
ReadAs = Callable[[str], Awaitable[dict[str, Any]]]
NameOfUid = Callable[[str], Awaitable[str | None]]


async def resolve_invocation(key: str, read: ReadAs, name_of_uid: NameOfUid) -> dict[str, Any]:
    """The invocation `key` names: by name, else by uid, read as the caller (`read`).

    A uid-shaped key that is also some invocation's name is answered with the invocation
    whose uid it is, when there is one: anyone who may create invocations may name one
    after another call's uid (the namespace's uids are on every listing), and a reader who
    asked for that call by its uid must not be handed the impostor's object and result."""
    try:
        named = await read(key)
    except CallerApiError as exc:
        if exc.status != 404 or not is_uid(key):
            raise
        found = await name_of_uid(key)
        if found is None:
            raise
        return await read(found)
    if not is_uid(key) or (named.get("metadata") or {}).get("uid") == key:
        return named
    found = await name_of_uid(key)
    return named if found is None or found == key else await read(found)


async def get_invocation(request: web.Request) -> web.Response:
    namespace, key = params.namespace(request), params.object_name(request)
    caller = caller_of(request)
    kube = deps_of(request).kube
    by_uid = False

    async def read(name: str) -> dict[str, Any]:
        nonlocal by_uid
        by_uid = name != key
        return await caller.api.get(Resource.INVOCATIONS, namespace, name)

    async def name_of_uid(uid: str) -> str | None:
        return await _name_of_uid(kube, namespace, uid)

    try:
        obj = await resolve_invocation(key, read, name_of_uid)
    except CallerApiError as exc:
        if by_uid and exc.status in (403, 404):
            # The caller's own read decides; a refusal does not name the invocation.
            raise ProblemError(
                kind_for_api_status(exc.status),
                f"the tool invocation with uid {key} in {namespace}: "
                + ("the caller may not read it" if exc.status == 403 else "not found"),
            ) from exc
        if by_uid:
            raise from_api(exc, f"reading the tool invocation with uid {key}") from exc
        detail = f" (no name nor uid {key})" if is_uid(key) else ""
        raise from_api(exc, f"reading tool invocation {namespace}/{key}{detail}") from exc
    return web.json_response(invocation_view(obj))


async def interrupt_invocation(request: web.Request) -> web.Response:
    namespace, name = params.namespace(request), params.object_name(request)
    try:
        done = await interrupt(caller_of(request).api.objects, namespace, name)
    except CallerApiError as exc:
        raise from_api(exc, f"interrupting tool invocation {namespace}/{name}") from exc
    if done.standing is InterruptStanding.ENDED:
        state = (done.obj.get("status") or {}).get("state")
        raise ProblemError(
            ProblemKind.CONFLICT, f"{name} already ended ({state}): there is nothing to interrupt"
        )
    return web.json_response(invocation_view(done.obj), status=202)


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
        "/namespaces/{namespace}/tool-invocations/{name}/interrupt", interrupt_invocation
    )
    app.router.add_post(
        "/namespaces/{namespace}/tool-invocations/{name}/confirm-effect", confirm_effect
    )
