"""The receipt chain of a namespace incarnation, and its verification. Pure.

Every signed receipt carries `chain` = {namespace, incarnation (the namespace's uid),
sequence, previous, signedAt}: its place in the chain of its namespace incarnation, and
the reference (sha256 of the stored bytes) of the receipt before it. Sequence 1 has
`previous: null` and says where the chain begins.

The store holds each link under a write-once key per sequence number
(`artifacts/chain`), so two writers never both claim one number; `verify` walks the links
in order and names the first break: a sequence number missing (removed, from the middle or
the end), a signature that does not verify (rewritten), a link that names another previous
receipt, or a chain shorter than a head published earlier.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from tooladapter.pipeline.hashing import sha256_ref
from tooladapter.receipts.core.signing import (
    KeySet,
    SignatureStatus,
    parse_stored,
    signature_status,
)


@dataclass(frozen=True)
class Head:
    """The newest link of a chain: its sequence number and reference (0, None: empty)."""

    sequence: int = 0
    ref: str | None = None

    def wire(self) -> str:
        return f"{self.sequence}:{self.ref or ''}"

    @classmethod
    def parse(cls, text: str) -> Head:
        """`SEQ:sha256:<hex>` (as published); ValueError when malformed."""
        seq, _, ref = text.strip().partition(":")
        sequence = int(seq)
        if sequence < 0 or (sequence and not ref.startswith("sha256:")) or len(ref) > 71:
            raise ValueError(f"not a chain head (SEQ:sha256:HEX): {text!r}")
        return cls(sequence, ref or None)


def link(
    *, namespace: str, incarnation: str, sequence: int, previous: str | None, signed_at: str
) -> dict[str, Any]:
    """A receipt's `chain` field."""
    return {
        "namespace": namespace,
        "incarnation": incarnation,
        "sequence": sequence,
        "previous": previous,
        "signedAt": signed_at,
    }


class BreakKind(StrEnum):
    MISSING = "missing"
    """No receipt under this sequence number (removed; or the head says the chain is longer)."""
    SIGNATURE = "signature"
    """The receipt is not validly signed by a key of the key set (rewritten, forged,
    unsigned, or signed by a key outside its validity period)."""
    SEQUENCE = "sequence"
    """The receipt under this number names another number, namespace or incarnation."""
    LINK = "link"
    """The receipt names another previous receipt than the one stored before it."""
    HEAD = "head"
    """The receipt at the head's sequence number is not the one the head names."""
    NOT_IN_CHAIN = "not-in-chain"
    """An invocation's status names a receipt the chain does not hold."""
    UNREADABLE = "unreadable"
    """The bytes are not a receipt."""


@dataclass(frozen=True)
class Break:
    sequence: int | None
    kind: BreakKind
    detail: str

    def wire(self) -> dict[str, Any]:
        return {"sequence": self.sequence, "kind": self.kind.value, "detail": self.detail}

    def __str__(self) -> str:
        at = f"sequence {self.sequence}" if self.sequence is not None else "outside the chain"
        return f"{at}: {self.kind.value}: {self.detail}"


@dataclass(frozen=True)
class Expected:
    """A receipt the cluster says exists: an invocation's status `receiptRef`/`auditRef`
    (and the sequence number its status summary records, when it does)."""

    invocation: str
    ref: str
    sequence: int | None = None


@dataclass
class Report:
    namespace: str
    incarnation: str
    checked: int = 0
    first: int | None = None
    last: Head = field(default_factory=Head)
    breaks: list[Break] = field(default_factory=list)
    keys_used: set[str] = field(default_factory=set)

    @property
    def ok(self) -> bool:
        return not self.breaks

    @property
    def first_break(self) -> Break | None:
        ordered = sorted(self.breaks, key=lambda b: (b.sequence is None, b.sequence or 0))
        return ordered[0] if ordered else None

    def wire(self) -> dict[str, Any]:
        first = self.first_break
        return {
            "namespace": self.namespace,
            "incarnation": self.incarnation,
            "verified": self.ok,
            "checked": self.checked,
            "begins": self.first,
            "head": {"sequence": self.last.sequence, "ref": self.last.ref},
            "keys": sorted(self.keys_used),
            "firstBreak": first.wire() if first else None,
            "breaks": [b.wire() for b in self.breaks],
        }


def verify(
    entries: Mapping[int, bytes],
    *,
    namespace: str,
    incarnation: str,
    keys: KeySet,
    head: Head | None = None,
    since: int = 1,
    expected: Iterable[Expected] = (),
) -> Report:
    """Check the links `since`..the end (the newest stored, or the head's, or the highest
    an invocation's status names, whichever is further) of one chain.

    `entries` maps sequence numbers to the bytes stored under them. From sequence 1 the
    first link must have no previous; from a later `since` its previous is taken on trust
    (the auditor verified up to there before)."""
    report = Report(namespace, incarnation)
    expected = list(expected)
    end = max(
        [max(entries, default=0), head.sequence if head else 0]
        + [e.sequence or 0 for e in expected]
    )
    previous: str | None = None
    trusted = since > 1  # the previous of the first link checked is taken on trust
    refs: dict[str, int] = {}
    for seq in range(max(since, 1), end + 1):
        data = entries.get(seq)
        if data is None:
            report.breaks.append(Break(seq, BreakKind.MISSING, "no receipt under this number"))
            previous, trusted = None, True
            continue
        report.checked += 1
        if report.first is None:
            report.first = seq
        ref = sha256_ref(data)
        refs[ref] = seq
        problem = _check_link(data, seq, namespace, incarnation, keys, report)
        if problem is None:
            chain = (_receipt(data) or {}).get("chain") or {}
            named = chain.get("previous")
            if seq == 1 and named is not None:
                problem = Break(seq, BreakKind.LINK, f"the first link names a previous {named}")
            elif seq > 1 and not trusted and named != previous:
                problem = Break(
                    seq,
                    BreakKind.LINK,
                    f"names previous {named}, but sequence {seq - 1} is {previous}",
                )
        if problem is not None:
            report.breaks.append(problem)
        previous, trusted = ref, False
        report.last = Head(seq, ref)
    if head is not None and head.sequence >= max(since, 1) and head.ref is not None:
        held = entries.get(head.sequence)
        if held is not None and sha256_ref(held) != head.ref:
            report.breaks.append(
                Break(
                    head.sequence,
                    BreakKind.HEAD,
                    f"the head names {head.ref}, the store holds {sha256_ref(held)}",
                )
            )
    for item in expected:
        if item.ref in refs:
            continue
        if item.sequence is not None and item.sequence < since:
            continue
        report.breaks.append(
            Break(
                item.sequence,
                BreakKind.NOT_IN_CHAIN,
                f"toolinvocation {item.invocation} names receipt {item.ref}, which the chain "
                "does not hold",
            )
        )
    # A missing number that the head or a status names is also reported as such once.
    return report


def _receipt(data: bytes) -> dict[str, Any] | None:
    parsed = parse_stored(data)
    return parsed[0] if parsed is not None else None


def _check_link(
    data: bytes, seq: int, namespace: str, incarnation: str, keys: KeySet, report: Report
) -> Break | None:
    parsed = parse_stored(data)
    if parsed is None:
        return Break(seq, BreakKind.UNREADABLE, "the stored bytes are not a receipt")
    receipt, opened = parsed
    status, keyid = signature_status(opened, keys)
    if status is not SignatureStatus.VALID:
        who = f" (key {keyid})" if keyid else ""
        return Break(seq, BreakKind.SIGNATURE, f"signature {status.value}{who}")
    if keyid:
        report.keys_used.add(keyid)
    chain = receipt.get("chain") or {}
    if (
        chain.get("sequence") != seq
        or chain.get("incarnation") != incarnation
        or chain.get("namespace") != namespace
        or receipt.get("tenantId") != namespace
        or receipt.get("tenantUid") != incarnation
    ):
        return Break(
            seq,
            BreakKind.SEQUENCE,
            f"the receipt says sequence {chain.get('sequence')} of "
            f"{chain.get('namespace')}/{chain.get('incarnation')}",
        )
    return None
