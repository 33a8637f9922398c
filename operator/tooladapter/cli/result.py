"""`result NAME`: a call's whole result, as the person or agent who may read the call.

Status holds a result inline only when it is small (`TOOLADAPTER_INLINE_RESULT_BYTES`); the
whole sanitized result is always in the artifact store under `status.resultRef`. The call
is read first with your kubeconfig (reading the result takes what reading the call takes);
a result that is not inline comes from the gateway (`--gateway`: it serves it to whoever may
`get` the call, with your own bearer token) or a local store (`--artifact-dir`, where `make
run` keeps it), and its bytes are checked against `resultRef` before they are printed.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import click

from tooladapter.artifacts import CorruptArtifact, LocalArtifactStore, Space
from tooladapter.cli import views
from tooladapter.cli.complete import ended_invocations
from tooladapter.cli.context import Settings, common_options, run_async
from tooladapter.cli.exitcodes import CliError, ExitCode
from tooladapter.cli.gateway import fetch_result
from tooladapter.enums import TERMINAL_STATES, Resource
from tooladapter.pipeline.hashing import SHA256_PREFIX, sha256_ref
from tooladapter.review.shown import visible


async def _stored(
    settings: Settings, name: str, gateway: str | None, artifact_dir: str | None
) -> tuple[dict[str, Any], str, str | None]:
    """(the call as the user reads it, its result text, where it came from)."""
    async with settings.connect() as api:
        obj = await api.get(Resource.INVOCATIONS, name)
        status = obj.get("status") or {}
        ref = status.get("resultRef")
        state = status.get("state")
        if not isinstance(ref, str) or not ref.startswith(SHA256_PREFIX):
            ended = state in TERMINAL_STATES  # a StrEnum set: the plain string matches
            raise CliError(
                f"{name} has no result: it ended {state}"
                if ended
                else f"{name} has no result yet: it is {state or 'not evaluated yet'}",
                ExitCode.NOT_FOUND if ended else ExitCode.PENDING,
            )
        if views.result_inline(status):
            return obj, views.result_text(obj), None
        if gateway:
            data = await fetch_result(gateway, api.namespace, name, await api.bearer_token())
            source = gateway
        elif artifact_dir:
            try:
                data = LocalArtifactStore(Path(artifact_dir)).get(ref, Space.RESULTS)
            except KeyError:
                raise CliError(f"no result {ref} in {artifact_dir}", ExitCode.NOT_FOUND) from None
            except CorruptArtifact:
                raise CliError(f"{artifact_dir} holds other bytes as {ref}") from None
            source = artifact_dir
        else:
            raise CliError(
                f"the result of {name} is too large to be inline in its status (it is stored "
                f"as {ref}): give --gateway URL ($TOOLADAPTER_GATEWAY_URL) or --artifact-dir",
                ExitCode.USAGE,
            )
    if sha256_ref(data) != ref:
        raise CliError(f"{source} answered other bytes than {ref}", ExitCode.MISMATCH)
    return obj, data.decode("utf-8", errors="replace"), source


async def _result(
    settings: Settings, name: str, gateway: str | None, artifact_dir: str | None
) -> ExitCode:
    obj, text, source = await _stored(settings, name, gateway, artifact_dir)
    status = obj.get("status") or {}
    if settings.structured:
        settings.emit(
            {
                "name": name,
                "namespace": (obj.get("metadata") or {}).get("namespace"),
                "state": status.get("state"),
                "resultRef": status.get("resultRef"),
                "inline": views.result_inline(status),
                "source": source or "status",
                "truncated": bool((status.get("result") or {}).get("truncated")),
                "content": text,
            }
        )
        return ExitCode.OK
    if text and sys.stdout.isatty():
        # On a terminal, what a terminal would act on is marked; piped, byte for byte.
        text = visible(text, keep=frozenset("\t\n"))
    if text:
        click.echo(text, nl=not text.endswith("\n"))
    return ExitCode.OK


@click.command("result")
@common_options
@click.argument("name", metavar="NAME", shell_complete=ended_invocations)
@click.option(
    "--gateway",
    envvar="TOOLADAPTER_GATEWAY_URL",
    metavar="URL",
    help="The tooladapter gateway to read a result too large to inline from "
    "($TOOLADAPTER_GATEWAY_URL).",
)
@click.option(
    "--artifact-dir",
    envvar="TOOLADAPTER_ARTIFACT_DIR",
    type=click.Path(file_okay=False),
    help="A local artifact store to read it from ($TOOLADAPTER_ARTIFACT_DIR, as for the operator).",
)
@click.pass_obj
def result(
    settings: Settings, name: str, gateway: str | None, artifact_dir: str | None
) -> ExitCode:
    """Print the whole result of invocation NAME: inline from its status when small, else
    from the artifact store (through --gateway or --artifact-dir), checked against its
    status.resultRef. Reading it takes what reading the call takes (get on the
    ToolInvocation). Piped, the text is byte for byte; -o json wraps it with its reference."""
    return run_async(_result(settings, name, gateway, artifact_dir))
