"""Signed receipts and their chain (issue 30): DSSE/PAE encoding, the in-toto statement,
signature checks with key validity, appends by two writers, and the chain verifier naming
the first break. Pure, over the in-memory store."""

from __future__ import annotations

import base64
import json
import threading
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from tests.unit.fake_cluster import MemoryStore
from tooladapter.artifacts import Space, content_ref
from tooladapter.artifacts.chain import ReceiptChains, chain_key, read_chain
from tooladapter.pipeline.hashing import canonical_json
from tooladapter.receipts.core import chain as chainlib
from tooladapter.receipts.core import check as receipt_check
from tooladapter.receipts.core.chain import BreakKind, Expected, Head
from tooladapter.receipts.core.keyring import (
    new_keyring,
    public_keys,
    rotated,
    signer_of,
)
from tooladapter.receipts.core.signing import (
    PAYLOAD_TYPE,
    PREDICATE_TYPE,
    STATEMENT_TYPE,
    KeySet,
    PublicKey,
    SignatureStatus,
    Signer,
    key_id,
    pae,
    parse_stored,
    receipt_of,
    seal,
    signature_of_stored,
    signature_status,
    stored_signature,
)

NS, UID = "team-a", "00000000-0000-4000-8000-000000000001"
T0 = datetime(2026, 12, 3, 12, 0, tzinfo=UTC)


def receipt(n: int = 0, **extra: Any) -> dict[str, Any]:
    return {
        "schema": "tool-invocation-v1",
        "invocationId": f"uid-{n}",
        "invocationName": f"call-{n}",
        "tenantId": NS,
        "tenantUid": UID,
        "requestHash": "sha256:" + "ab" * 32,
        "state": "Observed",
        "writtenAt": "2026-12-03T12:00:00Z",
        **extra,
    }


def keyset_of(*signers: Signer, not_before: str = "2020-01-01T00:00:00Z") -> KeySet:
    return KeySet.of(PublicKey(s.keyid, s.private.public_key(), not_before) for s in signers)


@pytest.fixture
def signer() -> Signer:
    return Signer.of(Ed25519PrivateKey.generate())


def test_pae_is_the_dsse_v1_encoding() -> None:
    # The DSSE protocol's own example.
    assert (
        pae("http://example.com/HelloWorld", b"hello world")
        == b"DSSEv1 29 http://example.com/HelloWorld 11 hello world"
    )
    assert pae("", b"") == b"DSSEv1 0  0 "


def test_a_sealed_receipt_is_a_dsse_envelope_of_an_in_toto_statement(signer: Signer) -> None:
    data = seal(receipt(), signer)
    envelope = json.loads(data)
    assert data == canonical_json(envelope)  # stored canonical: receiptRef = sha256(bytes)
    assert envelope["payloadType"] == PAYLOAD_TYPE
    statement = json.loads(base64.b64decode(envelope["payload"]))
    assert statement["_type"] == "https://in-toto.io/Statement/v1"
    assert statement["predicateType"] == PREDICATE_TYPE
    (subject,) = statement["subject"]
    assert subject["name"] == "toolinvocations/team-a/call-0"
    assert subject["digest"] == {"sha256": "ab" * 32}
    assert subject["annotations"]["invocationId"] == "uid-0"
    assert statement["predicate"] == receipt()
    (sig,) = envelope["signatures"]
    assert sig["keyid"] == signer.keyid
    signer.private.public_key().verify(
        base64.b64decode(sig["sig"]), pae(PAYLOAD_TYPE, base64.b64decode(envelope["payload"]))
    )
    assert receipt_of(data) == receipt()


def test_a_key_id_names_the_public_key_and_a_signer_never_shows_its_key(signer: Signer) -> None:
    assert signer.keyid == key_id(signer.private.public_key())
    assert signer.keyid.startswith("ed25519:") and len(signer.keyid) == 8 + 32
    assert repr(signer) == f"Signer({signer.keyid})"


def test_a_rewritten_predicate_under_the_old_signature_is_invalid(signer: Signer) -> None:
    envelope = json.loads(seal(receipt(), signer))
    statement = json.loads(base64.b64decode(envelope["payload"]))
    statement["predicate"]["state"] = "Failed"
    envelope["payload"] = base64.b64encode(canonical_json(statement)).decode()
    parsed = parse_stored(canonical_json(envelope))
    assert parsed is not None
    assert signature_status(parsed[1], keyset_of(signer))[0] is SignatureStatus.INVALID


def test_a_receipt_signed_by_another_key_is_unknown_and_a_plain_one_unsigned(
    signer: Signer,
) -> None:
    forger = Signer.of(Ed25519PrivateKey.generate())
    forged = parse_stored(seal(receipt(), forger))
    assert forged is not None
    assert signature_status(forged[1], keyset_of(signer))[0] is SignatureStatus.UNKNOWN_KEY
    # A forger who puts its own key id on the envelope gains nothing: the id's key decides.
    envelope = json.loads(seal(receipt(), forger))
    envelope["signatures"][0]["keyid"] = signer.keyid
    relabelled = parse_stored(canonical_json(envelope))
    assert relabelled is not None
    assert signature_status(relabelled[1], keyset_of(signer))[0] is SignatureStatus.INVALID
    plain = parse_stored(canonical_json(receipt()))
    assert plain is not None
    assert signature_status(plain[1], keyset_of(signer))[0] is SignatureStatus.UNSIGNED


def test_an_unsigned_receipt_is_never_valid(signer: Signer) -> None:
    """Every receipt is signed: a plain one is `unsigned`, whenever it says it was written."""
    keys = keyset_of(signer, not_before="2026-12-01T00:00:00Z")
    for plain in (receipt(writtenAt="2026-11-30T00:00:00Z"), receipt(writtenAt=None)):
        assert stored_signature(plain, None, keys) == (SignatureStatus.UNSIGNED, None)
        assert stored_signature(plain, None, KeySet()) == (SignatureStatus.UNSIGNED, None)
    # A signed one is checked as before.
    parsed = parse_stored(seal(receipt(), signer))
    assert parsed is not None
    assert stored_signature(parsed[0], parsed[1], keyset_of(signer))[0] is SignatureStatus.VALID


def test_a_retired_key_verifies_what_it_signed_before_and_nothing_after() -> None:
    ring = new_keyring(T0)
    old = signer_of(ring)
    ring = rotated(ring, T0 + timedelta(hours=1))
    new = signer_of(ring)
    assert new.keyid != old.keyid
    keys = public_keys(ring)
    assert keys.find(old.keyid) is not None and keys.find(new.keyid) is not None

    def signed_at(by: Signer, moment: datetime) -> SignatureStatus:
        body = receipt(chain={"signedAt": moment.isoformat().replace("+00:00", "Z")})
        parsed = parse_stored(seal(body, by))
        assert parsed is not None
        return signature_status(parsed[1], keys)[0]

    assert signed_at(old, T0 + timedelta(minutes=30)) is SignatureStatus.VALID
    # Within the rotation's overlap (the operators read the Secret again meanwhile).
    assert signed_at(old, T0 + timedelta(hours=1, seconds=30)) is SignatureStatus.VALID
    assert signed_at(old, T0 + timedelta(hours=3)) is SignatureStatus.OUTSIDE_VALIDITY
    assert signed_at(new, T0 + timedelta(hours=3)) is SignatureStatus.VALID
    assert signed_at(new, T0 - timedelta(hours=3)) is SignatureStatus.OUTSIDE_VALIDITY


def test_a_published_key_set_round_trips_and_refuses_a_key_under_another_id() -> None:
    keys = public_keys(rotated(new_keyring(T0), T0 + timedelta(days=1)))
    again = KeySet.parse(json.loads(json.dumps(keys.wire())))
    assert [k.keyid for k in again.keys] == [k.keyid for k in keys.keys]
    assert "privateKey" not in json.dumps(keys.wire())
    wire = keys.wire()
    wire["keys"][0]["keyid"] = wire["keys"][1]["keyid"]
    with pytest.raises(ValueError, match="is really"):
        KeySet.parse(wire)


# -- the chain -------------------------------------------------------------------------


def appended(store: MemoryStore, signer: Signer, count: int) -> list[str]:
    chains = ReceiptChains(store, lambda: signer)
    refs = []
    for n in range(count):
        data, ref, seq = chains.append(receipt(n), namespace=NS, uid=UID)
        store.put(data)
        assert seq == n + 1
        refs.append(ref)
    return refs


def place(store: MemoryStore, sequence: int, data: bytes) -> str:
    """What an attacker with write access to the store does: `data` stored under its hash,
    and the link at `sequence` pointed at it."""
    ref = store.put(data)
    store.keys[chain_key(NS, UID, sequence)] = ref.encode()
    return ref


def verify(store: MemoryStore, signer: Signer, **kw: Any) -> chainlib.Report:
    return chainlib.verify(
        read_chain(store, NS, UID), namespace=NS, incarnation=UID, keys=keyset_of(signer), **kw
    )


def test_links_carry_their_sequence_and_the_previous_receipts_digest(signer: Signer) -> None:
    store = MemoryStore()
    refs = appended(store, signer, 3)
    links = read_chain(store, NS, UID)
    assert sorted(links) == [1, 2, 3]
    chains = [receipt_of(links[n].data or b"")["chain"] for n in (1, 2, 3)]  # type: ignore[index]
    assert [c["sequence"] for c in chains] == [1, 2, 3]
    assert [c["previous"] for c in chains] == [None, refs[0], refs[1]]
    assert all(content_ref(links[n + 1].data or b"") == refs[n] for n in range(3))
    # One stored receipt: the link names it; its bytes are the ones every reader fetches.
    assert [store.keys[chain_key(NS, UID, n + 1)] for n in range(3)] == [r.encode() for r in refs]
    assert all(store.get(ref) == links[n + 1].data for n, ref in enumerate(refs))
    assert sorted(store.blobs) == sorted(refs)
    report = verify(store, signer, head=Head(3, refs[2]))
    assert report.ok and report.checked == 3 and report.first == 1
    assert report.last == Head(3, refs[2])


def test_a_receipt_removed_from_the_middle_is_named(signer: Signer) -> None:
    store = MemoryStore()
    appended(store, signer, 5)
    del store.keys[chain_key(NS, UID, 3)]
    report = verify(store, signer)
    assert report.first_break is not None
    assert (report.first_break.sequence, report.first_break.kind) == (3, BreakKind.MISSING)
    assert len(report.breaks) == 1  # 4's link to the missing 3 is not a second break


def test_the_newest_receipt_removed_is_named_by_the_head_or_a_status(signer: Signer) -> None:
    store = MemoryStore()
    refs = appended(store, signer, 5)
    del store.keys[chain_key(NS, UID, 5)]
    assert verify(store, signer).ok  # without a head nothing says there was a fifth
    by_head = verify(store, signer, head=Head(5, refs[4])).first_break
    assert by_head is not None and (by_head.sequence, by_head.kind) == (5, BreakKind.MISSING)
    by_status = verify(store, signer, expected=[Expected("call-4", refs[4], 5)]).first_break
    assert by_status is not None and by_status.sequence == 5


def test_a_receipt_rewritten_and_resigned_by_another_key_is_named(signer: Signer) -> None:
    store = MemoryStore()
    refs = appended(store, signer, 4)
    forger = Signer.of(Ed25519PrivateKey.generate())
    links = read_chain(store, NS, UID)
    body = receipt_of(links[2].data or b"")
    assert body is not None
    body["state"] = "Failed"
    forged_ref = place(store, 2, seal(body, forger))  # an attacker with write access
    report = verify(store, signer, expected=[Expected("call-1", forged_ref, 2)])
    first = report.first_break
    assert first is not None and (first.sequence, first.kind) == (2, BreakKind.SIGNATURE)
    # And the next link still names the original second receipt.
    assert any(b.sequence == 3 and b.kind is BreakKind.LINK for b in report.breaks)
    assert refs[1] != forged_ref


def test_a_status_pointing_outside_the_chain_is_named(signer: Signer) -> None:
    store = MemoryStore()
    appended(store, signer, 2)
    other = store.put(seal(receipt(9), signer))  # validly signed, never chained
    report = verify(store, signer, expected=[Expected("call-9", other)])
    assert [b.kind for b in report.breaks] == [BreakKind.NOT_IN_CHAIN]


def test_a_link_moved_to_another_number_or_namespace_is_named(signer: Signer) -> None:
    store = MemoryStore()
    appended(store, signer, 3)
    links = read_chain(store, NS, UID)
    place(store, 3, links[2].data or b"")  # a replay of 2 under 3
    first = verify(store, signer).first_break
    assert first is not None and (first.sequence, first.kind) == (3, BreakKind.SEQUENCE)
    report = chainlib.verify(
        read_chain(store, NS, UID), namespace=NS, incarnation="other-uid", keys=keyset_of(signer)
    )
    assert report.first_break is not None and report.first_break.sequence == 1


def test_since_trusts_the_previous_of_its_first_link(signer: Signer) -> None:
    store = MemoryStore()
    appended(store, signer, 5)
    del store.keys[chain_key(NS, UID, 1)]
    assert not verify(store, signer).ok
    report = verify(store, signer, since=3)
    assert report.ok and report.checked == 3


def test_a_head_naming_other_bytes_is_a_break(signer: Signer) -> None:
    store = MemoryStore()
    appended(store, signer, 2)
    first = verify(store, signer, head=Head(2, "sha256:" + "0" * 64)).first_break
    assert first is not None and (first.sequence, first.kind) == (2, BreakKind.HEAD)


def test_head_text_round_trips_and_refuses_garbage() -> None:
    head = Head(7, "sha256:" + "a" * 64)
    assert Head.parse(head.wire()) == head
    for bad in ("x", "-1:sha256:aa", "3:", "3:md5:aa"):
        with pytest.raises(ValueError):
            Head.parse(bad)


def test_two_writers_never_fork_the_chain(signer: Signer) -> None:
    store = MemoryStore()
    lock = threading.Lock()
    original = store.put_key

    def serialised(key: str, data: bytes) -> None:
        with lock:
            original(key, data)

    store.put_key = serialised  # type: ignore[method-assign]
    writers = [ReceiptChains(store, lambda: signer) for _ in range(2)]

    def write(chains: ReceiptChains, base: int) -> None:
        for n in range(20):
            data, _, _ = chains.append(receipt(base + n), namespace=NS, uid=UID)
            store.put(data)

    threads = [threading.Thread(target=write, args=(w, i * 100)) for i, w in enumerate(writers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(read_chain(store, NS, UID)) == list(range(1, 41))
    assert verify(store, signer).ok
    assert sum(w.conflicts for w in writers) >= 0


def test_a_writer_that_lost_a_number_follows_the_winner(signer: Signer) -> None:
    store = MemoryStore()
    first, second = ReceiptChains(store, lambda: signer), ReceiptChains(store, lambda: signer)
    store.put(first.append(receipt(1), namespace=NS, uid=UID)[0])
    store.put(second.append(receipt(2), namespace=NS, uid=UID)[0])  # discovers 1
    data, _, seq = first.append(receipt(3), namespace=NS, uid=UID)  # 2 is taken: 3
    store.put(data)
    assert seq == 3 and first.conflicts == 1
    assert verify(store, signer).ok


def test_a_receipt_is_stored_before_its_link_names_it(signer: Signer) -> None:
    store = MemoryStore()
    order: list[str] = []
    put, put_key = store.put, store.put_key

    def recorded_put(data: bytes, space: Space = Space.RECEIPTS) -> str:
        order.append("receipt")
        return put(data, space)

    def recorded_put_key(key: str, data: bytes) -> None:
        order.append("link")
        put_key(key, data)

    store.put, store.put_key = recorded_put, recorded_put_key  # type: ignore[method-assign]
    ReceiptChains(store, lambda: signer).append(receipt(1), namespace=NS, uid=UID)
    assert order == ["receipt", "link"]  # a crash between them leaves no link to nothing


def test_a_start_finds_the_end_from_a_published_head(signer: Signer) -> None:
    store = MemoryStore()
    refs = appended(store, signer, 3)
    fresh = ReceiptChains(store, lambda: signer, hints={(NS, UID): Head(1, refs[0])})
    assert fresh.ensure_head(NS, UID) == Head(3, refs[2])
    # A published head that lies about its digest is only where reading starts.
    liar = ReceiptChains(store, lambda: signer, hints={(NS, UID): Head(2, "sha256:" + "f" * 64)})
    assert liar.ensure_head(NS, UID) == Head(3, refs[2])


# -- attacks on the chain (issue 30), as regressions ------------------------------------


def test_a_link_nested_thousands_deep_is_unreadable_not_a_crash(signer: Signer) -> None:
    store = MemoryStore()
    appended(store, signer, 2)
    bomb = b"[" * 100_000 + b"]" * 100_000
    place(store, 2, bomb)
    first = verify(store, signer).first_break
    assert first is not None and (first.sequence, first.kind) == (2, BreakKind.UNREADABLE)
    envelope = {
        "payloadType": PAYLOAD_TYPE,
        "payload": base64.b64encode(bomb).decode(),
        "signatures": [{"keyid": signer.keyid, "sig": ""}],
    }
    place(store, 2, canonical_json(envelope))
    first = verify(store, signer).first_break
    assert first is not None and first.sequence == 2
    assert receipt_of(bomb) is None


def test_a_link_replayed_from_another_namespaces_chain_is_named(signer: Signer) -> None:
    store = MemoryStore()
    appended(store, signer, 2)
    other = ReceiptChains(store, lambda: signer)
    body = receipt(7, tenantId="team-b", tenantUid="uid-b")
    theirs, _, _ = other.append(body, namespace="team-b", uid="uid-b")
    place(store, 3, theirs)  # validly signed, and in its own chain at 1
    first = verify(store, signer).first_break
    assert first is not None and (first.sequence, first.kind) == (3, BreakKind.SEQUENCE)


def test_an_unsigned_receipt_put_into_the_chain_is_named(signer: Signer) -> None:
    store = MemoryStore()
    appended(store, signer, 3)
    place(store, 2, canonical_json(receipt(1, chain={"sequence": 2})))
    first = verify(store, signer).first_break
    assert first is not None and (first.sequence, first.kind) == (2, BreakKind.SIGNATURE)
    assert "unsigned" in first.detail


def test_a_status_without_a_sequence_still_counts_once_the_chain_began() -> None:
    from tooladapter.cli.chainverify import expected_of

    def item(name: str, created: str, sequence: int | None) -> dict[str, Any]:
        receipt_summary = {"state": "Observed", "writtenAt": created}
        if sequence:
            receipt_summary["sequence"] = sequence  # type: ignore[assignment]
        return {
            "metadata": {"name": name, "creationTimestamp": created},
            "status": {"receiptRef": "sha256:" + "1" * 64, "receipt": receipt_summary},
        }

    began = "2026-12-03T12:00:00Z"
    found = expected_of(
        [
            item("old", "2026-12-01T00:00:00Z", None),  # before the chain: its hash only
            item("stripped", "2026-12-03T13:00:00Z", None),  # its sequence patched away
            item("chained", "2026-12-03T14:00:00Z", 7),
        ],
        began,
    )
    assert [(e.invocation, e.sequence) for e in found] == [("stripped", None), ("chained", 7)]


def test_the_keys_the_gateway_publishes_hold_no_private_part() -> None:
    ring = rotated(new_keyring(T0), T0 + timedelta(days=1))
    wire = json.dumps(public_keys(ring).wire())
    for item in ring["keys"]:
        assert item["privateKey"] not in wire
    assert "privateKey" not in wire


def test_published_heads_only_move_forward_and_other_entries_stay() -> None:
    from tooladapter.kube.receipt_keys import head_key, merged, parse_heads

    ref = "sha256:" + "a" * 64
    data = {head_key(NS, UID): f"5:{ref}", "team-b.uid-b": f"9:{ref}", "junk": "x"}
    assert merged(data, {(NS, UID): Head(4, ref)}) is None  # behind: unchanged
    moved = merged(data, {(NS, UID): Head(6, ref), ("team-c", "uid-c"): Head(1, ref)})
    assert moved is not None
    heads = parse_heads(moved)
    assert heads[(NS, UID)] == Head(6, ref) and heads[("team-b", "uid-b")] == Head(9, ref)
    assert heads[("team-c", "uid-c")] == Head(1, ref) and moved["junk"] == "x"


def test_heads_are_taken_for_publication_once_per_move(signer: Signer) -> None:
    store = MemoryStore()
    chains = ReceiptChains(store, lambda: signer)
    for n in range(3):
        store.put(chains.append(receipt(n), namespace=NS, uid=UID)[0])
    taken = chains.take_changed()
    assert list(taken) == [(NS, UID)] and taken[(NS, UID)].sequence == 3
    assert chains.take_changed() == {}  # nothing moved since: no write to publish
    chains.mark_changed(taken)  # a failed publication is tried again
    assert chains.take_changed() == taken


def test_bytes_that_are_no_receipt_are_invalid_never_unsigned(signer: Signer) -> None:
    # Attack pass (this wave): each of these passed `receipt verify` with exit 0 as "written
    # before receipts were signed" while claiming a current time and a chain link.
    late = "2027-01-05T10:00:00Z"
    forged = receipt(writtenAt=late, chain={"sequence": 3, "signedAt": late})
    keys = keyset_of(signer, not_before="2026-12-01T00:00:00Z")

    def envelope(signatures: list[dict[str, str]]) -> bytes:
        body = {"_type": STATEMENT_TYPE, "subject": [], "predicateType": PREDICATE_TYPE}
        payload = json.dumps({**body, "predicate": forged}).encode()
        return json.dumps(
            {
                "payloadType": PAYLOAD_TYPE,
                "payload": base64.b64encode(payload).decode(),
                "signatures": signatures,
            }
        ).encode()

    plain = json.dumps(forged)
    cases = [
        envelope([]),
        envelope([{"keyid": "x", "sig": "!!"}]),
        plain.encode() + b"\n#",
        json.dumps({**forged, "pad": "x" * (4 * 1024 * 1024)}).encode(),
        json.dumps([forged]).encode(),
        plain.replace("Observed", "Observed\udcff").encode("utf-8", "surrogateescape"),
    ]
    for data in cases:
        assert signature_of_stored(parse_stored(data), keys) == (SignatureStatus.INVALID, None), (
            data[:80]
        )


def test_an_envelope_naming_a_key_twice_is_no_receipt(signer: Signer) -> None:
    # Python keeps the last duplicate, other readers the first: a forged payload first and
    # the signed one last verified as "valid" (after canonicalisation) in file mode.
    legit = seal(receipt(), signer)
    envelope = json.loads(legit)
    forged = base64.b64encode(b'{"predicate": {"state": "Failed"}}').decode()
    doubled = (
        f'{{"payload":"{forged}","payload":"{envelope["payload"]}",'
        f'"payloadType":"{envelope["payloadType"]}",'
        f'"signatures":{json.dumps(envelope["signatures"])}}}'
    ).encode()
    assert parse_stored(doubled) is None
    assert (
        signature_of_stored(parse_stored(doubled), keyset_of(signer))[0] is SignatureStatus.INVALID
    )
    assert not receipt_check.verify(doubled, content_ref(legit)).ok
    pretty = json.dumps(envelope, indent=2).encode()
    assert receipt_check.verify(pretty, content_ref(legit)).ok
