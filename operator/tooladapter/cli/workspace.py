"""`workspace release`: release an attempt's workspace now (its pod and volume deleted),
through the gateway (`DELETE /namespaces/{ns}/attempts/{attemptId}/workspace`), asked with
your own bearer token: your own workspace, or with --caller another caller's (an admin's
grant: verb release on workspaces)."""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import quote

import aiohttp
import click

from tooladapter.cli.context import Settings, common_options, run_async
from tooladapter.cli.exitcodes import CliError, ExitCode


def release_url(gateway: str, namespace: str, attempt_id: str, caller: str | None) -> str:
    ns, attempt = quote(namespace, safe=""), quote(attempt_id, safe="")
    url = f"{gateway.rstrip('/')}/namespaces/{ns}/attempts/{attempt}/workspace"
    return f"{url}?caller={quote(caller, safe='')}" if caller else url


async def _release(
    settings: Settings, *, gateway: str, attempt_id: str, caller: str | None
) -> ExitCode:
    async with settings.connect() as api:
        token = await api.bearer_token()
        namespace = api.namespace
    if token is None:
        raise CliError(
            "the gateway needs a bearer token, and your kubeconfig user has none",
            ExitCode.FORBIDDEN,
        )
    url = release_url(gateway, namespace, attempt_id, caller)
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
    required=True,
    help="The tooladapter gateway ($TOOLADAPTER_GATEWAY_URL).",
)
@click.pass_obj
def release(settings: Settings, attempt_id: str, caller: str | None, gateway: str) -> ExitCode:
    """Release the workspace of attempt ATTEMPT_ID now: its pod and volume are deleted (a
    call of the attempt running at that moment loses its sandbox)."""
    return run_async(_release(settings, gateway=gateway, attempt_id=attempt_id, caller=caller))
