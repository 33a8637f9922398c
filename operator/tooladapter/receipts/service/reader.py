"""Receipts read back from the artifact store: one by its reference, and a chain's links.

Blocking (store I/O): the gateway calls these on a thread, the CLI as it likes. Who may
read what is the caller's business (the gateway's SubjectAccessReviews); what is read here
is only what the store holds for the namespace incarnation asked about.

A receipt is a signed receipt its chain holds: bytes under a reference are served as one
only when they are a signed envelope and the link at the sequence they claim names that
reference (`artifacts.chain`). Anything else in the store (a result, which lives in a key
space of its own anyway; a receipt rewritten under a new hash; one a losing writer left
unlinked) is no receipt, whatever it says of itself.
"""

from __future__ import annotations

from typing import Any

from tooladapter.artifacts import ArtifactStore
from tooladapter.artifacts.chain import StoredLinks, linked_ref, read_link
from tooladapter.receipts.core.chain import Expected, Head, Report, verify
from tooladapter.receipts.core.index import Incarnation, of_incarnation
from tooladapter.receipts.core.signing import KeySet, parse_stored, receipt_of


def chained(store: ArtifactStore, ref: str, data: bytes) -> dict[str, Any] | None:
    """The receipt in `data` (stored under `ref`) when it is signed and its chain holds it:
    the link at the sequence it claims names `ref`. None otherwise: unsigned, outside any
    chain, or not the receipt its place holds. The signature itself is the auditor's to
    check (`receipts verify`, with the public keys)."""
    parsed = parse_stored(data)
    if parsed is None or parsed[1] is None:
        return None  # not a signed envelope: never a receipt
    receipt = parsed[0]
    place = receipt.get("chain")
    if not isinstance(place, dict):
        return None
    namespace, uid, sequence = (
        place.get("namespace"),
        place.get("incarnation"),
        place.get("sequence"),
    )
    if not (isinstance(namespace, str) and isinstance(uid, str)):
        return None
    if not isinstance(sequence, int) or isinstance(sequence, bool) or sequence < 1:
        return None
    try:
        held = linked_ref(store, namespace, uid, sequence)
    except KeyError:
        return None  # a namespace or uid the key layout does not take
    return receipt if held == ref else None


def stored_receipt(
    store: ArtifactStore, ref: str, incarnation: Incarnation
) -> tuple[bytes, dict[str, Any]] | None:
    """The stored bytes of receipt `ref` and the receipt in them, when it is a signed
    receipt its chain holds, of the namespace incarnation `incarnation` (None: absent, not
    a receipt of a chain, or another's)."""
    try:
        data = store.get(ref)
    except KeyError:
        return None
    receipt = chained(store, ref, data)
    if receipt is None or not of_incarnation(receipt, incarnation):
        return None
    place = receipt.get("chain") or {}
    if place.get("namespace") != incarnation.name or place.get("incarnation") != incarnation.uid:
        return None  # held by another namespace's chain, whatever its tenant says
    return data, receipt


def chain_began(store: ArtifactStore, namespace: str, uid: str) -> str | None:
    """When the chain's first link was signed (None: no first receipt to read)."""
    try:
        first = read_link(store, namespace, uid, 1)
    except KeyError:
        return None
    receipt = receipt_of(first.data) if first.data is not None else None
    signed = ((receipt or {}).get("chain") or {}).get("signedAt")
    return str(signed) if signed else None


def verify_chain(
    store: ArtifactStore,
    *,
    namespace: str,
    uid: str,
    keys: KeySet,
    head: Head | None,
    since: int,
    expected: list[Expected],
) -> Report:
    """The chain of the namespace incarnation `uid` checked link by link from `since`."""
    return verify(
        StoredLinks(store, namespace, uid, since),
        namespace=namespace,
        incarnation=uid,
        keys=keys,
        head=head,
        since=since,
        expected=expected,
    )
