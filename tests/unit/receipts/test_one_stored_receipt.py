"""One stored receipt, one truth (issue 37): a receipt is stored once, by its hash, and its
chain link names it; `receipts verify` checks the copy every reader fetches and that every
call's `receiptRef` is the receipt its chain holds at its status's sequence; results live in
a key space of their own and are never served or verified as receipts.

Calls run through the flow over the fake cluster and the file store; verification is what
`receipts verify` composes (`expected_of`, `chain_began`, `verify_chain`, `exit_code_of`)."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from tests.unit.fake_cluster import (
    NAMESPACE,
    Harness,
    ScriptedExecutor,
    descriptor,
    invocation,
    make_runtime,
    namespace_uid,
)
from tooladapter.artifacts import LocalArtifactStore, Space, content_ref
from tooladapter.artifacts.chain import chain_key
from tooladapter.cli.chainverify import exit_code_of, expected_of
from tooladapter.cli.exitcodes import CliError, ExitCode
from tooladapter.cli.receipts import _bytes_of
from tooladapter.enums import ToolKind
from tooladapter.executors import Outcome
from tooladapter.pipeline.hashing import canonical_json
from tooladapter.receipts.core.chain import BreakKind, Report
from tooladapter.receipts.core.index import Incarnation
from tooladapter.receipts.core.signing import KeySet, PublicKey, Signer, receipt_of, seal
from tooladapter.receipts.service.reader import chain_began, stored_receipt, verify_chain

UID = namespace_uid(NAMESPACE)
HERE = Incarnation(NAMESPACE, UID, "2020-01-01T00:00:00Z")

pytestmark = pytest.mark.timeout(20)


def harness(tmp_path: Path, output: bytes = b'{"ok": true}') -> Harness:
    executor = ScriptedExecutor(Outcome.observed(output))
    h = make_runtime(store=LocalArtifactStore(tmp_path), executors={ToolKind.NATIVE: executor})
    h.publish(descriptor("lister"))
    h.cluster.grant(tools=["lister"], classes=["read"])
    return h


async def ended(h: Harness, *names: str) -> list[dict[str, Any]]:
    """The calls run to their ends, as the API server then holds them (copies: what an
    attacker with status rights then changes)."""
    return [copy.deepcopy(await h.run(h.submit(invocation(name)))) for name in names]


def keys_of(h: Harness) -> KeySet:
    signer = h.rt.chains.signer()
    return KeySet.of([PublicKey(signer.keyid, signer.private.public_key(), "2020-01-01T00:00:00Z")])


def audited(h: Harness, items: list[dict[str, Any]]) -> tuple[Report, ExitCode]:
    store = h.store
    report = verify_chain(
        store,
        namespace=NAMESPACE,
        uid=UID,
        keys=keys_of(h),
        head=None,
        since=1,
        expected=expected_of(items, chain_began(store, NAMESPACE, UID)),
    )
    return report, exit_code_of(report.first_break)


def file_store(h: Harness) -> LocalArtifactStore:
    assert isinstance(h.store, LocalArtifactStore)
    return h.store


async def test_a_receipt_is_stored_once_and_its_link_names_it(tmp_path: Path) -> None:
    h = harness(tmp_path)
    items = await ended(h, "call-1", "call-2")
    store = file_store(h)
    refs = [item["status"]["receiptRef"] for item in items]
    for sequence, ref in enumerate(refs, start=1):
        assert store.get_key(chain_key(NAMESPACE, UID, sequence)) == ref.encode()
    receipts = sorted(p.name for p in (tmp_path / "sha256").rglob("*") if p.is_file())
    assert receipts == sorted(ref.removeprefix("sha256:") for ref in refs)  # once each
    report, code = audited(h, items)
    assert report.ok and report.checked == 2 and code is ExitCode.OK


async def test_a_receipt_rewritten_under_its_own_new_hash_with_receipt_ref_moved_fails(
    tmp_path: Path,
) -> None:
    h = harness(tmp_path)
    items = await ended(h, "call-1", "call-2", "call-3")
    store = file_store(h)
    target = items[1]["status"]
    original = target["receiptRef"]
    # The held-out attack: the receipt rewritten (its outcome changed, signed by a key of
    # the attacker's), stored under its own new hash, the original removed, and the call's
    # receiptRef moved to the forgery. auditRef is left as it was.
    body = receipt_of(store.get(original))
    assert body is not None
    body["state"] = "Failed"
    forged = store.put(seal(body, Signer.of(Ed25519PrivateKey.generate())))
    store.path_of(original).unlink()
    target["receiptRef"] = forged

    report, code = audited(h, items)
    assert code is not ExitCode.OK
    kinds = {(b.sequence, b.kind) for b in report.breaks}
    assert (2, BreakKind.MISSING) in kinds  # the receipt the chain holds is gone
    assert (2, BreakKind.NOT_IN_CHAIN) in kinds  # receiptRef names another
    assert code is ExitCode.CHAIN_BROKEN
    # And the forgery is not served as a receipt: no link names it.
    assert stored_receipt(store, forged, HERE) is None


async def test_a_receipt_ref_moved_alone_is_a_mismatch(tmp_path: Path) -> None:
    h = harness(tmp_path)
    items = await ended(h, "call-1", "call-2")
    store = file_store(h)
    status = items[0]["status"]
    body = receipt_of(store.get(status["receiptRef"]))
    assert body is not None
    body["state"] = "Failed"
    status["receiptRef"] = store.put(seal(body, Signer.of(Ed25519PrivateKey.generate())))
    report, code = audited(h, items)
    assert [(b.sequence, b.kind) for b in report.breaks] == [(1, BreakKind.NOT_IN_CHAIN)]
    assert code is ExitCode.MISMATCH
    # auditRef and receiptRef both moved: still the receipt the chain does not hold there.
    status["auditRef"] = status["receiptRef"]
    assert audited(h, items)[1] is ExitCode.MISMATCH
    # Moved to another call's genuine receipt, sequence and all: not this call's receipt.
    other = items[1]["status"]
    status["auditRef"] = status["receiptRef"] = other["receiptRef"]
    status["receipt"]["sequence"] = other["receipt"]["sequence"]
    report, code = audited(h, items)
    assert code is ExitCode.MISMATCH and "receipt of call-2" in str(report.first_break)


async def test_a_removed_newest_receipt_fails_verify(tmp_path: Path) -> None:
    h = harness(tmp_path)
    items = await ended(h, "call-1", "call-2", "call-3")
    store = file_store(h)
    newest = items[-1]["status"]["receiptRef"]
    store.path_of(newest).unlink()  # the one copy every reader fetches
    # Even without a published head or a status: the link still names it.
    report, code = audited(h, [])
    assert [(b.sequence, b.kind) for b in report.breaks] == [(3, BreakKind.MISSING)]
    assert code is ExitCode.CHAIN_BROKEN
    assert audited(h, items)[1] is ExitCode.CHAIN_BROKEN
    assert stored_receipt(store, newest, HERE) is None


async def test_a_receipt_rewritten_in_place_is_named(tmp_path: Path) -> None:
    h = harness(tmp_path)
    items = await ended(h, "call-1", "call-2")
    store = file_store(h)
    ref = items[0]["status"]["receiptRef"]
    store.path_of(ref).write_bytes(store.path_of(ref).read_bytes() + b" ")  # same name
    report, code = audited(h, items)
    assert report.first_break is not None
    assert (report.first_break.sequence, report.first_break.kind) == (1, BreakKind.REWRITTEN)
    assert code is ExitCode.MISMATCH


def receipt_shaped(*, sequence: int) -> bytes:
    """Output a tool can print: a receipt of this namespace's chain, as unsigned JSON."""
    return canonical_json(
        {
            "schema": "tool-invocation-v1",
            "invocationName": "call-1",
            "tenantId": NAMESPACE,
            "tenantUid": UID,
            "state": "Observed",
            "writtenAt": "2026-12-03T12:00:00Z",
            "chain": {"namespace": NAMESPACE, "incarnation": UID, "sequence": sequence},
        }
    )


async def test_a_result_shaped_like_a_receipt_is_not_served_and_does_not_verify(
    tmp_path: Path,
) -> None:
    output = receipt_shaped(sequence=1)
    h = harness(tmp_path, output=output)
    (item,) = await ended(h, "call-1")
    store = file_store(h)
    status = item["status"]
    result_ref = status["resultRef"]
    assert result_ref == content_ref(output)
    # Stored in the results' key space, never among the receipts.
    assert store.get(result_ref, Space.RESULTS) == output
    assert store.path_of(result_ref, Space.RESULTS).is_relative_to(tmp_path / "results")
    with pytest.raises(KeyError):
        store.get(result_ref)
    # Not served as a receipt (the receipts route's and the page's reader), ...
    assert stored_receipt(store, result_ref, HERE) is None
    # ... not by `receipt get` / `receipt verify` from the store, ...
    with pytest.raises(CliError) as refused:
        await _bytes_of(None, result_ref, None, str(tmp_path))  # type: ignore[arg-type]
    assert refused.value.code is ExitCode.NOT_FOUND
    # ... and a status naming it as a receipt fails `receipts verify`.
    status["receiptRef"] = status["auditRef"] = result_ref
    assert audited(h, [item])[1] is ExitCode.MISMATCH


async def test_unsigned_or_unlinked_bytes_in_the_receipts_space_are_no_receipt(
    tmp_path: Path,
) -> None:
    h = harness(tmp_path)
    (item,) = await ended(h, "call-1")
    store = file_store(h)
    real = item["status"]["receiptRef"]
    assert stored_receipt(store, real, HERE) is not None  # the chain's own: served
    # Written straight into the receipts' space (an older layout, or a hand with write
    # access): unsigned, so no receipt even where the link at its sequence...
    unsigned = store.put(receipt_shaped(sequence=1))
    assert stored_receipt(store, unsigned, HERE) is None
    # ... and validly signed but named by no link (a writer that lost its number).
    body = receipt_of(store.get(real))
    assert body is not None
    body["state"] = "Failed"
    unlinked = store.put(seal(body, h.rt.chains.signer()))
    assert stored_receipt(store, unlinked, HERE) is None
    with pytest.raises(CliError) as refused:
        await _bytes_of(None, unlinked, None, str(tmp_path))  # type: ignore[arg-type]
    assert refused.value.code is ExitCode.NOT_FOUND
    data, _ = await _bytes_of(None, real, None, str(tmp_path))  # type: ignore[arg-type,misc]
    assert json.loads(data)["payloadType"]
