"""`receipts --run`, `receipt get`, `receipt verify`: the evidence of what was called.

A receipt's bytes live in the artifact store, addressed by their sha256; the invocation's
status carries the reference and a summary. `receipt get` reads the bytes from the gateway
(`--gateway`, $TOOLADAPTER_GATEWAY_URL) or from a local store (`--artifact-dir`, where
`make run` keeps them), else shows the summary from the invocation's status.
`receipts --run` asks the gateway when given one: its answer includes the calls whose
invocations retention deleted (the artifact store's run index).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import click

from ..artifacts import LocalArtifactStore
from ..enums import Resource
from ..kube.user import UserApi
from ..pipeline.receipt_check import Match, parse_receipt, ref_from_filename, verify
from . import views
from .context import Settings, common_options, run_async
from .exitcodes import CliError, ExitCode
from .gateway import fetch_receipt, fetch_run_receipts
from .parsing import looks_like_ref, parse_ref
from .render import Output, document, table


async def _receipts(
    settings: Settings, run_id: str, gateway: str | None, caller: str | None = None
) -> ExitCode:
    async with settings.connect() as api:
        if gateway:
            found = await fetch_run_receipts(
                gateway, api.namespace, run_id, await api.bearer_token(), caller
            )
            rows = [views.gateway_receipt_row(row) for row in found]
        else:
            rows = views.run_receipts(
                await api.list_where(Resource.INVOCATIONS, "spec.runId", run_id)
            )
        # A run id is a label any caller may use: the caller column tells whose call it is.
        rows = [r for r in rows if not caller or r.get("caller") == caller]
    if settings.structured:
        settings.emit(rows)
    elif rows:
        click.echo(
            table(
                [
                    "invocation",
                    "caller",
                    "tool",
                    "version",
                    "outcome",
                    "class",
                    "approval",
                    "receipt",
                ],
                [
                    [
                        r["name"],
                        r["caller"] or "-",
                        r["tool"],
                        r["version"],
                        r["outcome"],
                        r["effectiveClass"],
                        r["approval"],
                        r["receiptRef"] or "(not yet)",
                    ]
                    for r in rows
                ],
                max_width=80,
            )
        )
    if not rows:
        whose = f" by {caller}" if caller else ""
        click.echo(
            f"No invocations of run {run_id!r}{whose} in namespace {api.namespace}.", err=True
        )
        return ExitCode.NOT_FOUND
    return ExitCode.OK


@click.command("receipts")
@common_options
@click.option("--run", "run_id", required=True, metavar="RUN_ID", help="spec.runId of the calls.")
@click.option(
    "--gateway",
    envvar="TOOLADAPTER_GATEWAY_URL",
    metavar="URL",
    help="Ask the tooladapter gateway ($TOOLADAPTER_GATEWAY_URL): its answer includes calls "
    "whose invocations retention deleted.",
)
@click.option(
    "--caller",
    metavar="NAME",
    help="Only the calls of this caller (spec.caller.name, e.g. "
    "system:serviceaccount:NS:AGENT). A run id is a label any caller in the namespace may "
    "put on its calls, not a capability.",
)
@click.pass_obj
def receipts(
    settings: Settings, run_id: str, gateway: str | None, caller: str | None = None
) -> ExitCode:
    """The receipts of a run: every invocation with that spec.runId, whoever called it
    (the caller column), its state, class, approval and receipt reference (-o json: with
    each receipt's summary, or with the receipt itself from --gateway)."""
    return run_async(_receipts(settings, run_id, gateway, caller))


def source_options(func: Any) -> Any:
    func = click.option(
        "--artifact-dir",
        envvar="TOOLADAPTER_ARTIFACT_DIR",
        type=click.Path(file_okay=False),
        help="A local artifact store to read receipts from ($TOOLADAPTER_ARTIFACT_DIR, as "
        "for the operator).",
    )(func)
    return click.option(
        "--gateway",
        envvar="TOOLADAPTER_GATEWAY_URL",
        metavar="URL",
        help="The tooladapter gateway to read receipts from ($TOOLADAPTER_GATEWAY_URL).",
    )(func)


async def _bytes_of(
    api: UserApi, ref: str, gateway: str | None, artifact_dir: str | None
) -> tuple[bytes, str] | None:
    """The receipt's bytes and where they came from; None when no source is configured."""
    if gateway:
        return await fetch_receipt(gateway, api.namespace, ref, await api.bearer_token()), gateway
    if artifact_dir:
        try:
            return LocalArtifactStore(Path(artifact_dir)).get(ref), artifact_dir
        except KeyError:
            raise CliError(f"no receipt {ref} in {artifact_dir}", ExitCode.NOT_FOUND) from None
    return None


@click.group("receipt")
@common_options
def receipt() -> None:
    """Read and verify one receipt by its reference."""


async def _get(
    settings: Settings, ref: str, gateway: str | None, artifact_dir: str | None
) -> ExitCode:
    async with settings.connect() as api:
        found = await _bytes_of(api, ref, gateway, artifact_dir)
        if found is None:
            holder = views.holding_ref(await api.list_all(Resource.INVOCATIONS), ref)
            if holder is None:
                raise CliError(
                    f"no invocation in namespace {api.namespace} carries receipt {ref}",
                    ExitCode.NOT_FOUND,
                )
            row = views.receipt_row(holder)
            click.echo(
                "the receipt's bytes are in the artifact store; this is the invocation's summary "
                "(--gateway or --artifact-dir read the receipt itself)",
                err=True,
            )
            click.echo(
                document(row, Output.YAML if settings.output is Output.YAML else Output.JSON)
            )
            return ExitCode.OK
    data, source = found
    verdict = verify(data, ref)
    parsed = parse_receipt(data)
    if settings.output is Output.YAML and parsed is not None:
        click.echo(document(parsed, Output.YAML))
    elif parsed is not None:
        click.echo(json.dumps(parsed, indent=2, ensure_ascii=False))
    else:
        click.echo(data.decode("utf-8", errors="replace"))
    if not verdict.ok:
        click.echo(
            f"MISMATCH: the bytes from {source} hash to {verdict.actual}, not {ref}", err=True
        )
        return ExitCode.MISMATCH
    return ExitCode.OK


@receipt.command("get")
@common_options
@click.argument("ref", metavar="REF")
@source_options
@click.pass_obj
def get(settings: Settings, ref: str, gateway: str | None, artifact_dir: str | None) -> ExitCode:
    """Print the receipt REF (sha256:<hex>); its bytes are checked against REF (exit 10
    when they do not match)."""
    return run_async(_get(settings, parse_ref(ref), gateway, artifact_dir))


async def _expected_of_file(api: UserApi, data: bytes, path: str) -> tuple[str, str]:
    """The reference a receipt file should hash to, and where that came from: the file's
    store name, else the status of the invocation the receipt names."""
    named = ref_from_filename(path)
    if named:
        return named, "its file name"
    parsed = parse_receipt(data) or {}
    name = parsed.get("invocationName")
    if not name:
        raise CliError(
            f"{path} names no invocation (invocationName): give the reference with --ref",
            ExitCode.USAGE,
        )
    obj = await api.get(Resource.INVOCATIONS, str(name))
    status = obj.get("status") or {}
    refs = [r for r in (status.get("receiptRef"), status.get("auditRef")) if r]
    if not refs:
        raise CliError(f"toolinvocation {name} has no receipt yet", ExitCode.NOT_FOUND)
    actual = verify(data, refs[0])
    chosen = refs[0] if actual.ok or len(refs) == 1 else refs[1]
    return chosen, f"toolinvocation {api.namespace}/{name}"


async def _verify(
    settings: Settings,
    target: str,
    file_bytes: bytes | None,
    expected_ref: str | None,
    gateway: str | None,
    artifact_dir: str | None,
) -> ExitCode:
    async with settings.connect() as api:
        if file_bytes is not None:
            data = file_bytes
            source = target
            if expected_ref:
                expected, against = expected_ref, "--ref"
            else:
                expected, against = await _expected_of_file(api, data, target)
        elif looks_like_ref(target):
            expected, against = parse_ref(target), "the reference given"
            found = await _bytes_of(api, expected, gateway, artifact_dir)
            if found is None:
                raise CliError(
                    "to verify a reference, read its bytes from --gateway or --artifact-dir "
                    "(or give a receipt FILE)",
                    ExitCode.USAGE,
                )
            data, source = found
        else:
            raise CliError(f"{target!r} is neither a file nor a receipt reference", ExitCode.USAGE)
    verdict = verify(data, expected)
    if settings.structured:
        settings.emit({**verdict.wire(), "source": source, "against": against})
    elif verdict.ok:
        how = "" if verdict.match is Match.BYTES else " (after RFC 8785 canonicalisation)"
        click.echo(f"verified: {source} hashes to {expected}{how}, as {against} says")
    else:
        click.echo(
            f"MISMATCH: {source} hashes to {verdict.actual}, but {against} says {expected}",
            err=True,
        )
    return ExitCode.OK if verdict.ok else ExitCode.MISMATCH


@receipt.command("verify")
@common_options
@click.argument("target", metavar="REF|FILE")
@click.option("--ref", "expected_ref", help="With a FILE: the reference it must hash to.")
@source_options
@click.pass_obj
def verify_command(
    settings: Settings,
    target: str,
    expected_ref: str | None,
    gateway: str | None,
    artifact_dir: str | None,
) -> ExitCode:
    """Recompute the sha256 of a receipt and check it against its reference.

    REF: the bytes are read from --gateway or --artifact-dir. FILE: checked against --ref,
    else its artifact-store file name, else the receiptRef of the invocation it names.
    Exit 0 when it matches, 10 when it does not."""
    file_bytes = Path(target).read_bytes() if os.path.isfile(target) else None
    return run_async(
        _verify(
            settings,
            target,
            file_bytes,
            parse_ref(expected_ref) if expected_ref else None,
            gateway,
            artifact_dir,
        )
    )
