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

from tooladapter.artifacts import ArtifactStore, CorruptArtifact, LocalArtifactStore
from tooladapter.cli import views
from tooladapter.cli.chainverify import (
    HEADS_CONFIG_MAP,
    KEYS_CONFIG_MAP,
    exit_code_of,
    expected_of,
    furthest,
    heads_for,
    incarnations_of,
    keys_from_file,
    open_read_only,
    say,
)
from tooladapter.cli.context import Settings, awaited, common_options, run_async
from tooladapter.cli.exitcodes import CliError, ExitCode
from tooladapter.cli.gateway import (
    fetch_chain_head,
    fetch_receipt,
    fetch_receipt_keys,
    fetch_run_receipts,
)
from tooladapter.cli.parsing import looks_like_ref, parse_ref
from tooladapter.cli.render import Output, document, table
from tooladapter.enums import Resource
from tooladapter.kube.receipt_keys import head_key
from tooladapter.kube.user import UserApi
from tooladapter.receipts.core.chain import Head
from tooladapter.receipts.core.check import Match, parse_receipt, ref_from_filename, verify
from tooladapter.receipts.core.keyring import parse_public
from tooladapter.receipts.core.signing import (
    KeySet,
    SignatureStatus,
    parse_stored,
    signature_of_stored,
)
from tooladapter.receipts.service.keys import read_chain_heads, read_keys
from tooladapter.receipts.service.reader import chain_began, chained, verify_chain


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


@click.group("receipts", invoke_without_command=True)
@common_options
@click.option("--run", "run_id", metavar="RUN_ID", help="spec.runId of the calls.")
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
@click.pass_context
def receipts(
    ctx: click.Context, run_id: str | None, gateway: str | None, caller: str | None = None
) -> ExitCode | None:
    """The receipts of a run (--run): every invocation with that spec.runId, whoever called
    it (the caller column), its state, class, approval and receipt reference (-o json: with
    each receipt's summary, or with the receipt itself from --gateway). `receipts verify`
    checks the namespace's whole receipt chain."""
    if ctx.invoked_subcommand is not None:
        if run_id:
            raise click.UsageError("--run lists a run's receipts: not with a command")
        return None
    if not run_id:
        raise click.UsageError("give --run RUN_ID, or a command (verify)")
    return run_async(_receipts(ctx.ensure_object(Settings), run_id, gateway, caller))


async def _chain_inputs(
    settings: Settings,
    store: ArtifactStore,
    *,
    keys_file: str | None,
    uid: str | None,
    offline: bool,
    gateway: str | None,
) -> tuple[str, KeySet, list[str], list[dict[str, Any]], dict[str, str] | None]:
    """The namespace, keys, incarnations, invocations and published heads to check with."""
    keys = keys_from_file(keys_file) if keys_file else None
    if offline:
        if not settings.namespace:
            raise CliError("--offline needs -n NAMESPACE", ExitCode.USAGE)
        if keys is None:
            raise CliError("--offline needs --keys FILE", ExitCode.USAGE)
        return settings.namespace, keys, [uid] if uid else [], [], None
    async with settings.connect() as api:
        namespace = api.namespace
        if keys is None and gateway:
            keys = parse_public(await fetch_receipt_keys(gateway))
        if keys is None:
            try:
                keys = await read_keys(api.kube, KEYS_CONFIG_MAP)
            except Exception as exc:
                raise CliError(
                    f"reading the public keys (ConfigMap {KEYS_CONFIG_MAP}) failed "
                    f"({type(exc).__name__}): give --keys FILE or --gateway URL",
                ) from None
        uids = [uid] if uid else []
        heads: dict[str, str] | None = None
        if gateway:
            # Who may list the namespace's invocations may read its incarnation and head.
            found_head = await fetch_chain_head(gateway, namespace, await api.bearer_token())
            incarnation = str(found_head.get("incarnation") or "")
            head = found_head.get("head") or {}
            if incarnation and not uids:
                uids = [incarnation]
            if incarnation and head.get("ref"):
                heads = {
                    head_key(namespace, incarnation): Head(
                        int(head["sequence"]), str(head["ref"])
                    ).wire()
                }
        if not uids:
            try:
                found, _, _ = await api.kube.namespace_incarnation(namespace)
                uids = [found] if found else []
            except Exception:
                uids = []  # not allowed to read Namespaces: every incarnation in the store
        items = await api.list_all(Resource.INVOCATIONS)
        if heads is None:
            try:
                published = await read_chain_heads(api.kube, HEADS_CONFIG_MAP)
                heads = {head_key(ns, u): head.wire() for (ns, u), head in published.items()}
            except Exception:
                heads = None  # not readable by this user: --head and the statuses decide
    return namespace, keys, uids, items, heads


@receipts.command("verify")
@common_options
@click.option(
    "--store",
    "location",
    envvar="TOOLADAPTER_ARTIFACT_DIR",
    required=True,
    metavar="DIR|s3://BUCKET/PREFIX",
    help="The artifact store: a directory (the file store, or a copy of the bucket) or "
    "s3://bucket/prefix (read with the environment's AWS credentials; endpoint "
    "$TOOLADAPTER_S3_ENDPOINT, $TOOLADAPTER_S3_REGION, $TOOLADAPTER_S3_PATH_STYLE). Default "
    "$TOOLADAPTER_ARTIFACT_DIR.",
)
@click.option(
    "--keys",
    "keys_file",
    type=click.Path(dir_okay=False),
    help="The public keys (JSON from GET /receipt-keys, or the ConfigMap "
    "tooladapter-receipt-keys as kubectl prints it with -o json). Default: --gateway's, "
    "else the cluster's ConfigMap.",
)
@click.option(
    "--head",
    "head_text",
    metavar="SEQ:DIGEST",
    help="A head recorded earlier (SEQ:sha256:<hex>, as published): the chain must reach "
    "it and hold that receipt there.",
)
@click.option(
    "--since",
    type=click.IntRange(min=1),
    default=1,
    show_default=True,
    help="Check from this sequence number on (its link to the one before is trusted).",
)
@click.option("--uid", metavar="UID", help="The namespace incarnation (its uid) to check.")
@click.option(
    "--offline",
    is_flag=True,
    help="Ask no cluster: needs -n and --keys (and --head to check the end).",
)
@click.option(
    "--gateway",
    envvar="TOOLADAPTER_GATEWAY_URL",
    metavar="URL",
    help="The gateway: its /receipt-keys gives the public keys, and the namespace's "
    "incarnation and published head come from it ($TOOLADAPTER_GATEWAY_URL).",
)
@click.pass_obj
@awaited
async def verify_chain_command(
    settings: Settings,
    location: str,
    keys_file: str | None,
    head_text: str | None,
    since: int,
    uid: str | None,
    offline: bool,
    gateway: str | None,
) -> ExitCode:
    """Verify a namespace's receipt chain: every receipt as the store serves it (the one
    copy receiptRef, the gateway and `receipt get` read), its signature, hash and sequence
    step, and its end against the head (--head; unless --offline also the published head,
    and that each invocation's receiptRef is the receipt its chain holds at the sequence
    its status names). Names the first break: exit 12 a signature, 13 a receipt missing
    or out of place, 10 a receipt other than the one a status or head names, or rewritten
    bytes; 0 when the whole chain verifies."""
    try:
        given = Head.parse(head_text) if head_text else None
    except ValueError as exc:
        raise CliError(f"--head: {exc}", ExitCode.USAGE) from None
    store = open_read_only(location)
    namespace, keys, uids, items, heads = await _chain_inputs(
        settings, store, keys_file=keys_file, uid=uid, offline=offline, gateway=gateway
    )
    current = uids[0] if len(uids) == 1 else None
    if not uids:
        uids = incarnations_of(store, namespace)
        current = None
    if given is not None and len(uids) > 1:
        raise CliError(
            f"namespace {namespace} has chains of {len(uids)} incarnations in the store "
            f"({', '.join(uids)}): name one with --uid",
            ExitCode.USAGE,
        )
    reports = []
    for incarnation in uids:
        published = heads_for(heads, namespace, incarnation)
        mine = items if incarnation == current else []
        reports.append(
            verify_chain(
                store,
                namespace=namespace,
                uid=incarnation,
                keys=keys,
                head=furthest(given, published),
                since=since,
                expected=expected_of(mine, chain_began(store, namespace, incarnation)),
            )
        )
    if settings.structured:
        settings.emit([r.wire() for r in reports])
    else:
        for report in reports:
            say(report)
    firsts = [r.first_break for r in reports if r.first_break is not None]
    return exit_code_of(firsts[0] if firsts else None)


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
        store = LocalArtifactStore(Path(artifact_dir))
        try:
            data = store.get(ref)
        except KeyError:
            raise CliError(f"no receipt {ref} in {artifact_dir}", ExitCode.NOT_FOUND) from None
        except CorruptArtifact:
            # Other bytes under the name: shown, and the hash check says MISMATCH.
            return store.path_of(ref).read_bytes(), artifact_dir
        if chained(store, ref, data) is None:
            # Only a signed receipt its chain holds is a receipt: not a result, not a
            # rewrite under a new name, not one a losing writer left unlinked.
            raise CliError(f"{ref} in {artifact_dir} is no receipt of a chain", ExitCode.NOT_FOUND)
        return data, artifact_dir
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
    keys_file: str | None = None,
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
        parsed = parse_stored(data)
        keys = None
        if parsed is not None and parsed[1] is not None:
            # Unsigned, it is no receipt whatever the keys say: none are read for it.
            keys = await _keys_for_one(api, keys_file, gateway)
    verdict = verify(data, expected)
    signature, keyid = signature_of_stored(parsed, keys or KeySet())
    chain = (parsed[0].get("chain") if parsed is not None else None) or {}
    if settings.structured:
        settings.emit(
            {
                **verdict.wire(),
                "source": source,
                "against": against,
                "signature": signature.value,
                "keyid": keyid,
                "sequence": chain.get("sequence"),
            }
        )
    elif verdict.ok:
        how = "" if verdict.match is Match.BYTES else " (after RFC 8785 canonicalisation)"
        click.echo(f"verified: {source} hashes to {expected}{how}, as {against} says")
    else:
        click.echo(
            f"MISMATCH: {source} hashes to {verdict.actual}, but {against} says {expected}",
            err=True,
        )
    if not settings.structured:
        if signature is SignatureStatus.VALID:
            at = f", sequence {chain.get('sequence')} of its chain" if chain else ""
            click.echo(f"signature: valid, by {keyid}{at}")
        elif signature is SignatureStatus.UNSIGNED:
            click.echo(
                "BAD SIGNATURE: none, and every receipt is signed: a rewrite or a forgery",
                err=True,
            )
        else:
            who = f" (key {keyid})" if keyid else ""
            click.echo(f"BAD SIGNATURE: {signature.value}{who}", err=True)
    if not verdict.ok:
        return ExitCode.MISMATCH
    if signature is not SignatureStatus.VALID:
        return ExitCode.BAD_SIGNATURE
    return ExitCode.OK


async def _keys_for_one(api: UserApi, keys_file: str | None, gateway: str | None) -> KeySet:
    """The public keys to judge one signed receipt by: --keys, the gateway's, else the
    cluster's ConfigMap (readable by every authenticated user). None found is an error (a
    signature is never reported as checked when it was not)."""
    if keys_file:
        return keys_from_file(keys_file)
    if gateway:
        return parse_public(await fetch_receipt_keys(gateway))
    try:
        return await read_keys(api.kube, KEYS_CONFIG_MAP)
    except Exception as exc:
        raise CliError(
            f"the receipt is signed, and the public keys (ConfigMap {KEYS_CONFIG_MAP}) could "
            f"not be read ({type(exc).__name__}): give --keys FILE or --gateway URL"
        ) from None


@receipt.command("verify")
@common_options
@click.argument("target", metavar="REF|FILE")
@click.option("--ref", "expected_ref", help="With a FILE: the reference it must hash to.")
@click.option(
    "--keys",
    "keys_file",
    type=click.Path(dir_okay=False),
    help="The public receipt keys (JSON of GET /receipt-keys); default: --gateway's, else "
    "the cluster's ConfigMap tooladapter-receipt-keys.",
)
@source_options
@click.pass_obj
def verify_command(
    settings: Settings,
    target: str,
    expected_ref: str | None,
    keys_file: str | None,
    gateway: str | None,
    artifact_dir: str | None,
) -> ExitCode:
    """Recompute the sha256 of a receipt, check it against its reference, and check its
    signature against the public receipt keys.

    REF: the bytes are read from --gateway or --artifact-dir. FILE: checked against --ref,
    else its artifact-store file name, else the receiptRef of the invocation it names.
    Exit 0 when both hold, 10 when the hash does not match, 12 when the signature does not
    verify or is missing (every receipt is signed: an unsigned one is a rewrite)."""
    file_bytes = Path(target).read_bytes() if os.path.isfile(target) else None
    return run_async(
        _verify(
            settings,
            target,
            file_bytes,
            parse_ref(expected_ref) if expected_ref else None,
            gateway,
            artifact_dir,
            keys_file,
        )
    )
