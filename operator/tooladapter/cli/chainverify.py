"""`receipts verify`: a namespace's receipt chain checked end to end, offline if need be.

Where each input comes from, in order:

- the receipts: `--store` (a directory: the file store, or a copy of the bucket made with
  `aws s3 sync`/`mc mirror`/`rclone copy`; or `s3://bucket/prefix`, read with the
  environment's AWS credentials), else $TOOLADAPTER_ARTIFACT_DIR;
- the public keys: `--keys FILE` (what `GET /receipt-keys` or the ConfigMap
  `tooladapter-receipt-keys` holds), else the gateway's `/receipt-keys` (`--gateway`),
  else the ConfigMap from the cluster;
- the namespace's incarnation: `--uid`, else the cluster's namespace, else every
  incarnation the store holds a chain of;
- the head: `--head SEQ:DIGEST` (a head recorded earlier: the strongest check of the end),
  and, unless `--offline`, the published head (ConfigMap `tooladapter-receipt-heads`,
  when readable) and the sequence number every invocation's status names.

Each receipt is read as every reader fetches it (the link names it; the store serves it by
that name), and each invocation's `receiptRef`/`auditRef` must be the receipt its chain
holds at the sequence its status records. The first break decides the exit code
(docs/reference/exit-codes.md): 12 a signature, 13 a missing (link or served receipt),
misplaced or mislinked receipt, 10 a status or head naming a receipt the chain does not
hold at that place, or other bytes served under a receipt's name.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import replace
from datetime import datetime
from pathlib import Path
from typing import Any

import click

from tooladapter.artifacts import ArtifactStore, LocalArtifactStore
from tooladapter.artifacts.chain import incarnations
from tooladapter.cli.exitcodes import CliError, ExitCode
from tooladapter.kube.receipt_keys import parse_heads
from tooladapter.receipts.core.chain import Break, BreakKind, Expected, Head, Report
from tooladapter.receipts.core.keyring import PUBLIC_DATA_KEY, parse_public
from tooladapter.receipts.core.signing import KeySet
from tooladapter.settings.artifacts import ArtifactSettings
from tooladapter.timeutil import parse_time

#: The objects an installation publishes (settings.receipt_*_config_map's defaults).
KEYS_CONFIG_MAP = "tooladapter-system/tooladapter-receipt-keys"
HEADS_CONFIG_MAP = "tooladapter-system/tooladapter-receipt-heads"

_CODES = {
    BreakKind.SIGNATURE: ExitCode.BAD_SIGNATURE,
    BreakKind.MISSING: ExitCode.CHAIN_BROKEN,
    BreakKind.REWRITTEN: ExitCode.MISMATCH,
    BreakKind.SEQUENCE: ExitCode.CHAIN_BROKEN,
    BreakKind.LINK: ExitCode.CHAIN_BROKEN,
    BreakKind.UNREADABLE: ExitCode.CHAIN_BROKEN,
    BreakKind.HEAD: ExitCode.MISMATCH,
    BreakKind.NOT_IN_CHAIN: ExitCode.MISMATCH,
}


def exit_code_of(found: Break | None) -> ExitCode:
    return ExitCode.OK if found is None else _CODES[found.kind]


def open_read_only(location: str) -> ArtifactStore:
    """A store to read: a directory, or `s3://bucket/prefix` (never written: no probe)."""
    if location.startswith("s3://"):
        # Imported here: boto3 costs the other commands nothing.
        from tooladapter.artifacts.s3 import S3ArtifactStore, S3Location

        try:
            # The operator's reader of TOOLADAPTER_S3_* (endpoint, region, addressing).
            configured = S3Location.of(ArtifactSettings.from_env())
        except ValueError as exc:
            raise CliError(f"--store {location}: {exc}", ExitCode.USAGE) from None
        bucket, _, prefix = location.removeprefix("s3://").partition("/")
        return S3ArtifactStore.open(replace(configured, bucket=bucket, prefix=prefix))
    path = Path(location)
    if not path.is_dir():
        raise CliError(f"--store {location}: no such directory", ExitCode.USAGE)
    return LocalArtifactStore(path)


def keys_from_file(path: str) -> KeySet:
    try:
        text = Path(path).read_text()
        value = json.loads(text)
        # The ConfigMap itself (kubectl get -o json) or its keys.json.
        if isinstance(value, dict) and "data" in value and "keys" not in value:
            text = (value.get("data") or {}).get(PUBLIC_DATA_KEY) or "{}"
        keys = parse_public(text)
    except (OSError, ValueError) as exc:
        raise CliError(f"--keys {path}: {exc}", ExitCode.USAGE) from None
    if not keys.keys:
        raise CliError(f"--keys {path}: no Ed25519 key in it", ExitCode.USAGE)
    return keys


def expected_of(items: Iterable[dict[str, Any]], chain_began: str | None) -> list[Expected]:
    """The receipts the namespace's invocations name in their status. A call's own receipt
    (`auditRef`, and `receiptRef` unless it is a duplicate) must be the one its chain holds
    at the sequence number its summary records: what `receiptRef` names is what every
    reader fetches, so a receiptRef moved to other bytes is a break, even when the chain is
    whole. A duplicate's receiptRef is its first call's receipt: the chain must hold it
    somewhere. One whose summary names no sequence must still be in the chain when the
    invocation was created after the chain began (`chain_began`, the first link's signing
    time; None: the chain's beginning is not checked): only calls older than the chain
    have receipts outside it."""
    found = []
    began = _time(chain_began)
    for item in items:
        status = item.get("status") or {}
        meta = item.get("metadata") or {}
        name = str(meta.get("name") or "?")
        summary = status.get("receipt") or {}
        sequence = summary.get("sequence")
        audit, served = _ref(status.get("auditRef")), _ref(status.get("receiptRef"))
        duplicate = bool(status.get("duplicateOf"))
        own = [r for r in dict.fromkeys([audit, None if duplicate else served]) if r]
        if not own and served:
            own = [served]  # a duplicate without an auditRef: its receiptRef is all it has
        others = [served] if duplicate and served and served not in own else []
        if isinstance(sequence, int) and not isinstance(sequence, bool) and sequence > 0:
            found += [Expected(name, ref, sequence) for ref in own]
        else:
            created = _time(meta.get("creationTimestamp"))
            if began is None or created is None or created < began:
                continue
            found += [Expected(name, ref, None) for ref in own]
        found += [Expected(name, ref, None, own=False) for ref in others]
    return found


def _ref(value: Any) -> str | None:
    return value if isinstance(value, str) and value.startswith("sha256:") else None


def _time(text: Any) -> datetime | None:
    try:
        return parse_time(str(text)) if text else None
    except ValueError:
        return None


def furthest(*heads: Head | None) -> Head | None:
    known = [h for h in heads if h is not None]
    return max(known, key=lambda h: h.sequence) if known else None


def heads_for(data: dict[str, str] | None, namespace: str, uid: str) -> Head | None:
    return parse_heads(data).get((namespace, uid))


def say(report: Report) -> None:
    where = f"{report.namespace} (incarnation {report.incarnation})"
    first = report.first_break
    if first is None:
        begins = f"from sequence {report.first}" if report.first else "(empty)"
        click.echo(
            f"verified: {report.checked} receipt(s) of {where} {begins} to "
            f"{report.last.sequence} ({report.last.ref}); signatures by "
            f"{', '.join(sorted(report.keys_used)) or 'no key'}"
        )
        return
    click.echo(f"BROKEN: {where}: first break at {first}", err=True)
    for other in report.breaks:
        if other is not first:
            click.echo(f"  also: {other}", err=True)


def incarnations_of(store: ArtifactStore, namespace: str) -> list[str]:
    found = incarnations(store, namespace)
    if not found:
        raise CliError(
            f"no receipt chain of namespace {namespace} in the store", ExitCode.NOT_FOUND
        )
    return found
