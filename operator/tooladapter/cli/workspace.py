"""`workspace release`: release an attempt's workspace now (its pod and volume deleted).

Your own workspace, or with --caller another caller's. The rights are the gateway's
(`gateway/routes/workspaces.py`), asked of the API server either way: releasing your own
takes what making the attempt's calls takes (`create` on toolinvocations), naming another
caller takes verb `release` on the virtual resource `workspaces`.

With `--gateway` (or $TOOLADAPTER_GATEWAY_URL) the gateway asks and deletes
(`DELETE /namespaces/{ns}/attempts/{attemptId}/workspace`, with your own bearer token): the
operator deletes the pods, so no pod rights are needed. Without it, the command asks the same
question with a SelfSubjectAccessReview (refused: nothing is deleted) and then deletes the
workspace's pods, found by the hash of namespace, caller and attemptId
(`sandbox.warm.workspace_key`), as the kubeconfig's user: that also takes `list` and
`delete` on pods in the namespace, which a person running agents usually holds (`edit`)
and an agent's ServiceAccount does not (it uses the gateway).
"""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import quote

import aiohttp
import click

from tooladapter.cli.context import Settings, common_options, run_async
from tooladapter.cli.exitcodes import CliError, ExitCode
from tooladapter.enums import Resource
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
    "deletes the pods. Without it, they are deleted as you (list and delete on pods).",
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
