"""Receipts read back from the artifact store: one by its reference, and a chain's links.

Blocking (store I/O): the gateway calls these on a thread, the CLI as it likes. Who may
read what is the caller's business (the gateway's SubjectAccessReviews); what is read here
is only what the store holds for the namespace incarnation asked about.
"""

from __future__ import annotations

from typing import Any

from tooladapter.artifacts import ArtifactStore
from tooladapter.artifacts.chain import StoredLinks, chain_key
from tooladapter.receipts.core.chain import Expected, Head, Report, verify
from tooladapter.receipts.core.index import Incarnation, of_incarnation
from tooladapter.receipts.core.signing import KeySet, receipt_of


def stored_receipt(
    store: ArtifactStore, ref: str, incarnation: Incarnation
) -> tuple[bytes, dict[str, Any]] | None:
    """The stored bytes of receipt `ref` and the receipt in them, when it is one of the
    namespace incarnation `incarnation` (None: absent, not a receipt, or another's)."""
    try:
        data = store.get(ref)
    except KeyError:
        return None
    receipt = receipt_of(data)  # None: a result, not a receipt
    if not isinstance(receipt, dict) or not of_incarnation(receipt, incarnation):
        return None
    return data, receipt


def chain_began(store: ArtifactStore, namespace: str, uid: str) -> str | None:
    """When the chain's first link was signed (None: no first link to read)."""
    try:
        receipt = receipt_of(store.get_key(chain_key(namespace, uid, 1)))
    except KeyError:
        return None
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
