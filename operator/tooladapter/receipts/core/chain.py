"""The receipt chain of a namespace incarnation, and its verification. Pure.

Every signed receipt carries `chain` = {namespace, incarnation (the namespace's uid),
sequence, previous, signedAt}: its place in the chain of its namespace incarnation, and
the reference (sha256 of the stored bytes) of the receipt before it. Sequence 1 has
`previous: null` and says where the chain begins.

The store holds each link under a write-once key per sequence number
(`artifacts/chain`), so two writers never both claim one number; a link names its receipt
by reference, and the receipt is stored once, under that reference, where every reader
fetches it. `verify` walks the links in order and reads each receipt as readers get it, and
names the first break: a sequence number missing (removed, from the middle or the end), a
receipt its link names missing from the store, or other bytes under its name, a signature
that does not verify (rewritten), a link that names another previous receipt, a chain
shorter than a head published earlier, or an invocation whose status names a receipt other
than the one its chain holds at the sequence that status records.
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
class Linked:
    """One link read back (`artifacts.chain.read_link`): the reference it names (None: the
    link names none) and the bytes the store serves under that reference (None: absent, or
    other bytes, which `corrupt` says)."""

    ref: str | None
    data: bytes | None
    corrupt: bool = False


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
    """No receipt under this sequence number (removed; or the head says the chain is
    longer), or the store no longer serves the receipt the link names (removed)."""
    REWRITTEN = "rewritten"
    """The store serves other bytes under the reference the link names (rewritten in
    place)."""
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
    """An invocation's status names a receipt the chain does not hold at the sequence the
    status records (re-pointed), or the receipt there is another invocation's."""
    UNREADABLE = "unreadable"
    """The bytes are not a receipt, or the link names no receipt."""


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
    (and the sequence number its status summary records, when it does). `own`: the
    invocation's own receipt, which must be the one the chain holds at `sequence`; else
    another call's (a duplicate's `receiptRef`, its first call's), which the chain must
    hold somewhere."""

    invocation: str
    ref: str
    sequence: int | None = None
    own: bool = True


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
    entries: Mapping[int, Linked | bytes],
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

    `entries` maps sequence numbers to the links stored under them, each with the receipt
    it names as the store serves it (`Linked`; plain bytes: a receipt held inline, its
    reference their hash). From sequence 1 the first link must have no previous; from a
    later `since` its previous is taken on trust (the auditor verified up to there before)."""
    report = Report(namespace, incarnation)
    expected = list(expected)
    end = max(
        [max(entries, default=0), head.sequence if head else 0]
        + [e.sequence or 0 for e in expected]
    )
    previous: str | None = None
    trusted = since > 1  # the previous of the first link checked is taken on trust
    refs: dict[str, int] = {}
    held: dict[int, str] = {}
    callers: dict[int, str | None] = {}
    for seq in range(max(since, 1), end + 1):
        entry = entries.get(seq)
        if entry is None:
            report.breaks.append(Break(seq, BreakKind.MISSING, "no receipt under this number"))
            previous, trusted = None, True
            continue
        linked = Linked(sha256_ref(entry), entry) if isinstance(entry, bytes) else entry
        report.checked += 1
        if report.first is None:
            report.first = seq
        if linked.ref is None:
            report.breaks.append(Break(seq, BreakKind.UNREADABLE, "the link names no receipt"))
            previous, trusted = None, True
            continue
        ref = linked.ref
        refs[ref] = seq
        held[seq] = ref
        report.last = Head(seq, ref)
        unserved = _unserved(linked, seq)
        if unserved is not None:
            # The link says which receipt stands here: the next one's `previous` is still
            # checked against it.
            report.breaks.append(unserved)
            previous, trusted = ref, False
            continue
        data = linked.data
        assert data is not None
        callers[seq] = (_receipt(data) or {}).get("invocationName")
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
    if head is not None and head.sequence >= max(since, 1) and head.ref is not None:
        found = held.get(head.sequence)
        if found is not None and found != head.ref:
            report.breaks.append(
                Break(
                    head.sequence,
                    BreakKind.HEAD,
                    f"the head names {head.ref}, the store holds {found}",
                )
            )
    for item in expected:
        problem = _expected_break(item, since=since, refs=refs, held=held, callers=callers)
        if problem is not None:
            report.breaks.append(problem)
    return report


def _unserved(linked: Linked, seq: int) -> Break | None:
    """The break of a link whose receipt the store does not serve as the link names it."""
    if linked.corrupt:
        return Break(
            seq,
            BreakKind.REWRITTEN,
            f"the store serves other bytes under {linked.ref}, the receipt this link names",
        )
    if linked.data is None:
        return Break(
            seq,
            BreakKind.MISSING,
            f"the link names receipt {linked.ref}, which the store does not serve (removed)",
        )
    if sha256_ref(linked.data) != linked.ref:
        return Break(
            seq,
            BreakKind.REWRITTEN,
            f"the bytes served as {linked.ref} hash to {sha256_ref(linked.data)}",
        )
    return None


def _expected_break(
    item: Expected,
    *,
    since: int,
    refs: Mapping[str, int],
    held: Mapping[int, str],
    callers: Mapping[int, str | None],
) -> Break | None:
    """Whether an invocation's status names the receipt its chain holds for it: at the
    sequence the status records, its own; anywhere, another call's."""
    if item.sequence is not None and item.sequence < since:
        return None  # before the part checked: taken on trust, as the links there are
    if item.own and item.sequence is not None:
        there = held.get(item.sequence)
        if there is None:
            # The number itself is missing (reported as such) or names nothing.
            return Break(
                item.sequence,
                BreakKind.NOT_IN_CHAIN,
                f"toolinvocation {item.invocation} names receipt {item.ref} at this sequence, "
                "where the chain holds none",
            )
        if there != item.ref:
            return Break(
                item.sequence,
                BreakKind.NOT_IN_CHAIN,
                f"toolinvocation {item.invocation} names receipt {item.ref}, but the chain "
                f"holds {there} at this sequence",
            )
        caller = callers.get(item.sequence)
        if item.sequence in callers and caller != item.invocation:
            return Break(
                item.sequence,
                BreakKind.NOT_IN_CHAIN,
                f"toolinvocation {item.invocation} names receipt {item.ref}, which is the "
                f"receipt of {caller}",
            )
        return None
    if item.ref in refs or (not item.own and since > 1):
        # Another call's receipt may lie before the part checked.
        return None
    return Break(
        item.sequence,
        BreakKind.NOT_IN_CHAIN,
        f"toolinvocation {item.invocation} names receipt {item.ref}, which the chain does not hold",
    )


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
