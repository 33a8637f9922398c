"""`workspace release`: release an attempt's workspace now (its pod and volume deleted).

Your own workspace, or with --caller another caller's. The rights are the gateway's
(`gateway/routes/workspaces.py`), asked of the API server either way: releasing your own
takes what making the attempt's calls takes (`create` on toolinvocations), naming another
caller takes verb `release` on the virtual resource `workspaces`.

With `--gateway` (or $TOOLADAPTER_GATEWAY_URL) the gateway asks and deletes
(`DELETE /namespaces/{ns}/attempts/{attemptId}/workspace`, with your own bearer token): the
operator deletes the pods, so no pod rights are needed. Without it, the command asks the same
question with a SelfSubjectAccessReview (refused: nothing is deleted), then:

- holding `list` and `delete` on pods (a person with `edit`), it deletes the workspace's
  pods, found by the hash of namespace, caller and attemptId (`sandbox.warm.workspace_key`);
- else (an agent's ServiceAccount), it sets `spec.releaseWorkspace` on the attempt's newest
  call (admission lets only its caller, or a holder of `release` on `workspaces`, do so)
  and the operator releases the workspace once that call has ended, recording when in
  `status.workspaceReleasedAt` (`handlers/workspace_release.py`).
"""

from __future__ import annotations

import asyncio
import json
from typing import Any
from urllib.parse import quote

import aiohttp
import click

from tooladapter.cli.context import Settings, common_options, run_async
from tooladapter.cli.exitcodes import CliError, ExitCode
from tooladapter.enums import InvocationState, Resource
from tooladapter.kube.errors import UserApiError
from tooladapter.kube.user import UserApi

#: The longest attemptId (the CRD's and the gateway's bound).
MAX_ATTEMPT_ID = 128


def release_url(gateway: str, namespace: str, attempt_id: str, caller: str | None) -> str:
    ns, attempt = quote(namespace, safe=""), quote(attempt_id, safe="")
    url = f"{gateway.rstrip('/')}/namespaces/{ns}/attempts/{attempt}/workspace"
    return f"{url}?caller={quote(caller, safe='')}" if caller else url


async def _through_gateway(
    api: UserApi, *, gateway: str, attempt_id: str, caller: str | None
) -> dict[str, Any]:
    token = await api.bearer_token()
    if token is None:
        raise CliError(
            "the gateway needs a bearer token, and your kubeconfig user has none: leave out "
            "--gateway to release it as yourself",
            ExitCode.FORBIDDEN,
        )
    url = release_url(gateway, api.namespace, attempt_id, caller)
    try:
        async with (
            aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=30)) as session,
            session.delete(url, headers={"Authorization": f"Bearer {token}"}) as resp,
        ):
            status = resp.status
            body = await resp.content.read(65536)
    except aiohttp.ClientError as err:
        raise CliError(f"gateway {gateway}: {err}") from err
    try:
        answer: dict[str, Any] = json.loads(body) if body else {}
    except ValueError:
        answer = {}
    if status == 404:
        raise CliError(str(answer.get("detail") or "no such workspace"), ExitCode.NOT_FOUND)
    if status in (401, 403):
        raise CliError(str(answer.get("detail") or f"refused ({status})"), ExitCode.FORBIDDEN)
    if not 200 <= status <= 299:
        raise CliError(f"gateway {gateway} answered {status}: {answer.get('detail') or ''}")
    return answer


def _pod_rights(err: UserApiError, namespace: str) -> CliError:
    return CliError(
        f"without --gateway the workspace's pods are deleted as you, and the API server "
        f"refused it ({err.message}): give --gateway URL ($TOOLADAPTER_GATEWAY_URL), where "
        f"the operator deletes them, or get list and delete on pods in {namespace}",
        ExitCode.FORBIDDEN,
    )


async def _as_user(api: UserApi, *, attempt_id: str, caller: str | None) -> dict[str, Any]:
    """What the gateway's release does, as the kubeconfig's user (see the module)."""
    me = (await api.whoami()).username
    owner = caller or me
    what = f"releasing the workspace of attempt {attempt_id!r} in {api.namespace}"
    if owner != me:
        allowed = await api.can_i("release", "workspaces")
        why = "naming another caller's workspace takes verb release on workspaces"
    else:
        allowed = await api.can_i("create", str(Resource.INVOCATIONS))
        why = "releasing a workspace takes what its calls take: create on toolinvocations"
    if not allowed:
        raise CliError(f"{what}: {why}", ExitCode.FORBIDDEN)
    # Imported here: the sandbox builders (and the TLS they import) cost the other
    # commands nothing.
    from tooladapter.sandbox.warm import LABEL_WORKSPACE, workspace_key

    if not (
        await api.can_i("list", "pods", group="") and await api.can_i("delete", "pods", group="")
    ):
        return await _through_a_call(api, attempt_id=attempt_id, owner=owner)
    key = workspace_key(api.namespace, owner, attempt_id)
    released: list[str] = []
    try:
        for name in await api.pod_names(f"{LABEL_WORKSPACE}={key}"):
            if await api.delete_pod(name):
                released.append(name)
    except UserApiError as err:
        if err.status == 403:
            raise _pod_rights(err, api.namespace) from err
        raise
    if not released:
        raise CliError(
            f"no workspace of attempt {attempt_id!r} of {owner} in {api.namespace} (released "
            "already, idle, or never made)",
            ExitCode.NOT_FOUND,
        )
    return {
        "namespace": api.namespace,
        "attemptId": attempt_id,
        "caller": owner,
        "released": released,
    }


#: How long the command waits for the operator to record the release of an ended call.
RECORD_WAIT_SECONDS = 60.0


def release_patch(call: dict[str, Any]) -> list[dict[str, Any]]:
    """The JSON Patch asking the operator to release the workspace of `call`'s attempt,
    applied only to the call as read (its uid)."""
    return [
        {"op": "test", "path": "/metadata/uid", "value": call["metadata"]["uid"]},
        {"op": "add", "path": "/spec/releaseWorkspace", "value": True},
    ]


def newest_call(calls: list[dict[str, Any]], attempt_id: str) -> dict[str, Any] | None:
    """The attempt's newest call among `calls` (one caller's), if any (dry runs aside)."""
    mine = [
        c
        for c in calls
        if (c.get("spec") or {}).get("attemptId") == attempt_id
        and not (c.get("spec") or {}).get("dryRun")  # a dry run releases nothing
    ]
    return max(mine, key=lambda c: c["metadata"].get("creationTimestamp") or "", default=None)


async def _through_a_call(api: UserApi, *, attempt_id: str, owner: str) -> dict[str, Any]:
    """Release through `spec.releaseWorkspace` on the attempt's newest call (see the
    module): no pod rights needed, the operator deletes the pods."""
    calls = await api.list_where(str(Resource.INVOCATIONS), "spec.caller.name", owner)
    call = newest_call(calls, attempt_id)
    if call is None:
        raise CliError(
            f"no call of attempt {attempt_id!r} of {owner} in {api.namespace}: nothing to release",
            ExitCode.NOT_FOUND,
        )
    name = call["metadata"]["name"]
    recorded = (call.get("status") or {}).get("workspaceReleasedAt")
    if recorded:
        raise CliError(
            f"the workspace of attempt {attempt_id!r} of {owner} was released at {recorded} "
            f"(call {name}) and no call of the attempt made one since",
            ExitCode.NOT_FOUND,
        )
    try:
        call = await api.json_patch(str(Resource.INVOCATIONS), name, release_patch(call))
    except UserApiError as err:
        if err.status == 403:
            raise CliError(err.message, ExitCode.FORBIDDEN) from err
        raise
    answer: dict[str, Any] = {
        "namespace": api.namespace,
        "attemptId": attempt_id,
        "caller": owner,
        "throughCall": name,
    }
    state = str((call.get("status") or {}).get("state") or "")
    if not (state and InvocationState(state).terminal):
        answer["releasedAt"] = None  # once the call ends
        return answer
    try:
        async with asyncio.timeout(RECORD_WAIT_SECONDS):
            async for obj in api.follow(str(Resource.INVOCATIONS), name):
                released_at = (obj.get("status") or {}).get("workspaceReleasedAt")
                if released_at:
                    answer["releasedAt"] = released_at
                    return answer
    except TimeoutError:
        pass
    raise CliError(
        f"asked the operator to release the workspace of attempt {attempt_id!r} through call "
        f"{name}, and it has not recorded it in {RECORD_WAIT_SECONDS:.0f} s: is it running?"
    )


async def _release(
    settings: Settings, *, gateway: str | None, attempt_id: str, caller: str | None
) -> ExitCode:
    if not 1 <= len(attempt_id) <= MAX_ATTEMPT_ID:
        raise CliError(f"an attemptId has 1-{MAX_ATTEMPT_ID} characters", ExitCode.USAGE)
    async with settings.connect() as api:
        if gateway:
            answer = await _through_gateway(
                api, gateway=gateway, attempt_id=attempt_id, caller=caller
            )
        else:
            answer = await _as_user(api, attempt_id=attempt_id, caller=caller)
        namespace = api.namespace
    if settings.structured:
        settings.emit(answer)
    elif "throughCall" in answer and answer.get("releasedAt") is None:
        click.echo(
            f"the workspace of attempt {attempt_id} of {answer.get('caller')} in {namespace} "
            f"is released once call {answer['throughCall']} ends"
        )
    elif "throughCall" in answer:
        click.echo(
            f"released the workspace of attempt {attempt_id} of {answer.get('caller')} in "
            f"{namespace} at {answer['releasedAt']} (through call {answer['throughCall']})"
        )
    else:
        click.echo(
            f"released the workspace of attempt {attempt_id} of {answer.get('caller')} in "
            f"{namespace}: {', '.join(answer.get('released') or [])}"
        )
    return ExitCode.OK


@click.group("workspace")
def workspace() -> None:
    """Attempts' workspaces (sandbox.workspace: attempt)."""


@workspace.command("release")
@common_options
@click.argument("attempt_id", metavar="ATTEMPT_ID")
@click.option(
    "--caller",
    default=None,
    help="Another caller's workspace (needs verb release on workspaces; default: yours).",
)
@click.option(
    "--gateway",
    envvar="TOOLADAPTER_GATEWAY_URL",
    default=None,
    help="Release through the tooladapter gateway ($TOOLADAPTER_GATEWAY_URL): the operator "
    "deletes the pods. Without it, they are deleted as you (list and delete on pods), or, "
    "without pod rights, the operator releases them at spec.releaseWorkspace on the "
    "attempt's newest call.",
)
@click.pass_obj
def release(
    settings: Settings, attempt_id: str, caller: str | None, gateway: str | None
) -> ExitCode:
    """Release the workspace of attempt ATTEMPT_ID now: its pod and volume are deleted (a
    call of the attempt running at that moment loses its sandbox). Yours, or with --caller
    another caller's; the rights are the gateway's either way (create on toolinvocations;
    release on workspaces for another caller's), asked of the API server before anything is
    deleted."""
    return run_async(_release(settings, gateway=gateway, attempt_id=attempt_id, caller=caller))
