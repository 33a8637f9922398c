"""The receipt index: its key layout, its write-once named keys in both stores, the entries
a call's end writes, and the readers' merge with stored invocations."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from tests.unit.artifacts.test_stores import FakeS3, s3_store
from tests.unit.fake_cluster import (
    CALLER,
    NAMESPACE,
    Harness,
    MemoryStore,
    descriptor,
    invocation,
    is_receipt,
    namespace_uid,
)
from tooladapter.artifacts import CorruptArtifact, LocalArtifactStore, Space, content_ref
from tooladapter.artifacts.index import (
    approved_call_key,
    arguments_document,
    call_entry,
    call_key,
    calls_prefix,
    entries_of,
    entry_bytes,
    key_entry,
    key_prefix,
    ref_of_key,
    run_key,
    run_prefix,
    stamp,
)
from tooladapter.enums import InvocationState
from tooladapter.gateway.ui.earlier import earlier_calls
from tooladapter.receipts.core.index import (
    Incarnation,
    key_holder,
    latest_per_invocation,
    merged_rows,
    of_incarnation,
    previous_call,
    receipt_only_row,
    with_caller,
)
from tooladapter.review.page import pending_for_page
from tooladapter.review.texts import pending_approvals

NS = "team-a"
REF = content_ref(b"receipt")
OTHER = content_ref(b"another receipt")


def receipt(uid: str = "u1", **fields: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "tenantId": NS,
        "invocationId": uid,
        "invocationName": f"call-{uid}",
        "runId": "run/1:a",
        "toolId": "repo.write",
        "caller": {"kind": "ServiceAccount", "name": "system:serviceaccount:team-a:agent"},
        "approvalId": None,
        "state": "Observed",
        "startedAt": "2026-12-01T06:00:00.000000Z",
        "endedAt": "2026-12-01T06:00:01.000000Z",
        "writtenAt": "2026-12-01T06:00:01.000000Z",
    }
    return base | fields


# -- the key layout ------------------------------------------------------------------------


def test_a_run_key_lies_under_its_runs_folder_and_names_its_receipt() -> None:
    key = run_key(NS, "run/1:a", REF)
    assert key.startswith(run_prefix(NS, "run/1:a"))
    assert key.startswith(f"index/runs/{NS}/")
    # The run id is hashed: its `/` makes no folder of its own.
    assert key.count("/") == 4
    assert ref_of_key(key) == REF
    assert run_prefix(NS, "run/1:a") != run_prefix(NS, "run/1:b")
    assert run_prefix(NS, "r") != run_prefix("team-b", "r")


def test_call_keys_sort_as_their_end_times_do() -> None:
    caller = "system:serviceaccount:team-a:agent"
    early = call_key(NS, caller, "repo.write", "2026-12-01T06:00:09.5Z", OTHER)
    late = call_key(NS, caller, "repo.write", "2026-12-01T07:00:01+01:00", REF)  # 06:00:01
    later = call_key(NS, caller, "repo.write", "2026-12-01T06:00:10Z", REF)
    assert early.startswith(calls_prefix(NS, caller, "repo.write"))
    assert sorted([later, early, late]) == [late, early, later]
    assert ref_of_key(late) == REF
    assert stamp("2026-12-01T06:00:10Z") == "20261201T060010.000000Z"


def test_a_receipt_is_indexed_by_run_and_only_an_approved_one_by_caller_and_tool() -> None:
    assert entries_of(receipt(), REF) == [run_key(NS, "run/1:a", REF)]
    approved = entries_of(receipt(approvalId="appr-1"), REF)
    assert approved[0] == run_key(NS, "run/1:a", REF)
    assert approved[1].startswith(
        calls_prefix(NS, "system:serviceaccount:team-a:agent", "repo.write")
    )
    assert entries_of(receipt(runId=None), REF) == []
    assert entries_of(receipt(tenantId=None), REF) == []


@pytest.mark.parametrize("key", ["index/runs/ns/x", "sha256/ab/cd", "index/runs/ns/" + "0" * 63])
def test_a_key_that_ends_in_no_receipt_names_none(key: str) -> None:
    with pytest.raises(KeyError):
        ref_of_key(key)


# -- named keys in both stores ---------------------------------------------------------------


def stores(tmp_path: Path) -> list[Any]:
    return [LocalArtifactStore(tmp_path), s3_store(FakeS3()), s3_store(FakeS3("ignore"))]


@pytest.mark.parametrize("which", [0, 1, 2])
def test_named_keys_are_written_once_and_listed_by_folder(which: int, tmp_path: Path) -> None:
    store = stores(tmp_path)[which]
    first, second = run_key(NS, "r", REF), run_key(NS, "r", OTHER)
    elsewhere = run_key(NS, "r2", REF)
    for key in (second, first, elsewhere):
        store.put_key(key, entry_bytes(ref_of_key(key)))
    store.put_key(first, entry_bytes(REF))  # the same bytes again: left as it is

    assert store.list(run_prefix(NS, "r")) == sorted([first, second])
    assert store.list(run_prefix(NS, "nothing")) == []
    assert store.get_key(first) == entry_bytes(REF)
    with pytest.raises(CorruptArtifact):
        store.put_key(first, b"other bytes")
    assert store.get_key(first) == entry_bytes(REF)
    with pytest.raises(KeyError):
        store.get_key(run_key(NS, "nothing", REF))


@pytest.mark.parametrize(
    "key", ["index/../sha256/ab", "index/a/.tmp-x", "runs/a", "index//a", "index/a b", "/index/a"]
)
def test_a_name_outside_the_index_is_refused(key: str, tmp_path: Path) -> None:
    for store in stores(tmp_path):
        with pytest.raises(KeyError):
            store.put_key(key, b"x")
        with pytest.raises(KeyError):
            store.list(key + "/")
    assert not (tmp_path / "sha256").exists()


def test_the_s3_list_reads_every_page_and_drops_the_store_prefix() -> None:
    fake = FakeS3()
    store = s3_store(fake, prefix="team/")
    keys = [run_key(NS, "r", content_ref(bytes([n]))) for n in range(5)]
    for key in keys:
        store.put_key(key, b"x")
    assert f"team/{keys[0]}" in fake.objects
    assert store.list(run_prefix(NS, "r")) == sorted(keys)


# -- the readers' merge ----------------------------------------------------------------------


def stored_item(uid: str, ref: str) -> dict[str, Any]:
    return {"metadata": {"uid": uid, "name": f"call-{uid}"}, "status": {"receiptRef": ref}}


def test_the_run_shows_deleted_calls_first_then_the_stored_ones() -> None:
    gone_late = (content_ref(b"2"), receipt("u2", startedAt="2026-12-01T06:00:05Z"))
    gone_early = (content_ref(b"1"), receipt("u1"))
    kept = stored_item("u3", REF)
    rows = merged_rows([{"invocation": "call-u3"}], [kept], [gone_late, gone_early], NS, "run/1:a")
    assert [r["invocation"] for r in rows] == ["call-u1", "call-u2", "call-u3"]
    assert rows[0]["receiptRef"] == gone_early[0]
    assert rows[0]["receipt"]["invocationId"] == "u1"


def test_the_merge_drops_receipts_of_stored_calls_and_of_other_runs_or_tenants() -> None:
    kept = stored_item("u1", REF)
    indexed = [
        (REF, receipt("u1")),  # the stored call's own receipt
        (content_ref(b"c"), receipt("u1", writtenAt="2026-12-01T07:00:00Z")),  # a later one
        (content_ref(b"d"), receipt("u4", runId="another")),
        (content_ref(b"e"), receipt("u5", tenantId="team-b")),
    ]
    assert merged_rows([], [kept], indexed, NS, "run/1:a") == []


def test_a_confirmation_s_later_receipt_stands_for_its_call() -> None:
    first = (content_ref(b"f"), receipt("u1", state="Uncertain"))
    confirmed = (content_ref(b"g"), receipt("u1", writtenAt="2026-12-02T00:00:00Z"))
    assert latest_per_invocation([confirmed, first]) == [confirmed]
    assert latest_per_invocation([first, confirmed]) == [confirmed]


# -- the flow writes the entries -------------------------------------------------------------


@pytest.mark.timeout(10)
@pytest.mark.usefixtures("fast_retries")
async def test_an_ended_call_is_indexed_by_run_and_an_approved_one_by_caller_and_tool(
    h: Harness,
) -> None:
    h.publish(descriptor("lister"))
    h.publish(descriptor("writer", side_effect_class="shared-write"))
    h.cluster.grant(tools=["lister", "writer"], classes=["read", "shared-write"])

    read = (await h.run(h.submit(invocation("read-1", runId="run-7"))))["status"]
    body = invocation("write-1", tool="writer", runId="run-7", arguments={"path": "/data/x"})
    task = h.start(h.submit(body))
    await h.cluster.wait_for_state("write-1", InvocationState.AWAITING_APPROVAL)
    h.approve_waiting("write-1", name="yes")
    await asyncio.wait_for(task, 5)
    write = h.cluster.invocation("write-1")["status"]

    uid = namespace_uid(NAMESPACE)
    listed = h.store.list(run_prefix(NAMESPACE, "run-7", uid))
    assert sorted(ref_of_key(k) for k in listed) == sorted(
        [read["receiptRef"], write["receiptRef"]]
    )
    assert h.store.list(run_prefix(NAMESPACE, "run-7")) == []  # no name-keyed entry
    assert h.store.list(calls_prefix(NAMESPACE, CALLER, "lister", uid)) == []
    (approved,) = h.store.list(calls_prefix(NAMESPACE, CALLER, "writer", uid))
    assert ref_of_key(approved) == write["receiptRef"]
    entry = json.loads(h.store.get_key(approved))
    assert entry["receiptRef"] == write["receiptRef"]
    assert (entry["invocation"], entry["approval"]) == ("write-1", "yes")
    assert entry["approvedAt"] == write["approval"]["boundAt"]
    assert entry["approvedBy"] == write["approval"]["reviewer"]
    arguments = json.loads(h.store.get(entry["argumentsRef"], Space.RESULTS))
    assert arguments["tenantId"] == NAMESPACE
    assert arguments["arguments"] == {"path": "/data/x"}


# -- the last approved call, after retention -------------------------------------------------


def waiting_call(uid: str = "w1", path: str = "/data/y") -> dict[str, Any]:
    return {
        "metadata": {"name": f"call-{uid}", "namespace": NAMESPACE, "uid": uid},
        "spec": {
            "caller": {"name": CALLER},
            "tool": {"id": "writer", "version": "1.0.0"},
            "arguments": {"path": path},
        },
        "status": {"state": "AwaitingApproval", "approvalRequestedAt": "2026-12-02T00:00:00Z"},
    }


#: The incarnation of NAMESPACE the page reads (created before every call of these tests).
HERE = Incarnation(NAMESPACE, namespace_uid(NAMESPACE), "2026-11-01T00:00:00Z")


def index_approved_call(
    store: Any,
    uid: str,
    path: str,
    ended: str,
    approved: str,
    tenant_uid: str | None = HERE.uid,
) -> str:
    """What the flow writes for an approved call's end (see the flow test above);
    `tenant_uid` None: as written before uids were recorded (name-keyed)."""
    approved_receipt = receipt(
        uid,
        tenantId=NAMESPACE,
        tenantUid=tenant_uid,
        writtenAt=ended,
        caller={"name": CALLER},
        toolId="writer",
        approvalId=f"appr-{uid}",
        approvedBy="reviewer@example.com",
        endedAt=ended,
    )
    if tenant_uid is None:
        approved_receipt.pop("tenantUid")
    ref = store.put(json.dumps(approved_receipt).encode())
    arguments_ref = store.put(arguments_document(approved_receipt, {"path": path}), Space.RESULTS)
    key = approved_call_key(approved_receipt, ref)
    assert key is not None
    store.put_key(
        key, call_entry(approved_receipt, ref, approved_at=approved, arguments_ref=arguments_ref)
    )
    return ref


def test_the_page_compares_with_the_latest_approved_call_the_index_names() -> None:
    store = MemoryStore()
    index_approved_call(store, "old", "/data/a", "2026-12-01T01:00:00Z", "2026-12-01T00:59:00Z")
    index_approved_call(store, "new", "/data/x", "2026-12-01T02:00:00Z", "2026-12-01T01:59:00Z")
    items = [waiting_call()]

    earlier = earlier_calls(store, items, {NAMESPACE: HERE})
    (view,) = pending_approvals(items, earlier)
    assert view["lastApproved"]["name"] == "call-new"
    assert view["lastApproved"]["approvedBy"] == "reviewer@example.com"
    assert view["lastApproved"]["approvedAt"] == "2026-12-01T01:59:00Z"
    assert view["changes"] and "/data/x" in str(view["changes"])

    (page,) = pending_for_page(items, earlier)
    assert page["lastApproved"]["name"] == "call-new"
    assert page["changes"]
    # Without the index the deleted calls are unknown.
    assert pending_approvals(items)[0]["lastApproved"] is None


def test_a_stored_approved_call_approved_later_wins_over_the_index() -> None:
    store = MemoryStore()
    index_approved_call(store, "gone", "/data/a", "2026-12-01T01:00:00Z", "2026-12-01T00:59:00Z")
    stored = waiting_call("kept", "/data/k")
    stored["status"] = {
        "state": "Observed",
        "approval": {"name": "appr-kept", "reviewer": "r", "boundAt": "2026-12-01T05:00:00Z"},
    }
    items = [waiting_call(), stored]
    (view,) = pending_approvals(items, earlier_calls(store, items, {NAMESPACE: HERE}))
    assert view["lastApproved"]["name"] == "call-kept"


def test_an_arguments_artifact_of_another_tenant_is_not_taken() -> None:
    entry = {"invocationId": "u1", "invocation": "call-u1"}
    other = {"tenantId": "team-b", "invocationId": "u1", "arguments": {}}
    assert previous_call(entry, other, namespace=NAMESPACE, caller=CALLER, tool="t") is None
    mine = other | {"tenantId": NAMESPACE}
    found = previous_call(entry, mine, namespace=NAMESPACE, caller=CALLER, tool="t")
    assert found is not None and found["metadata"]["uid"] == "u1"


async def test_an_end_stores_result_receipt_and_entries_in_one_trip_before_status_names_them(
    h: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every trip to the store's threads waits for the GIL behind a busy event loop: an
    end makes one (result, receipt, its index entries), and status names none of them
    before all are stored."""
    from tooladapter.receipts.service import storing

    trips: list[int] = []
    real = storing._STORE_IO.submit

    def counted(fn: Any, /, *args: Any, **kwargs: Any) -> Any:
        trips.append(len(h.store.blobs))
        return real(fn, *args, **kwargs)

    monkeypatch.setattr(storing._STORE_IO, "submit", counted)
    written: list[dict[str, Any]] = []
    h.cluster.hooks["patch_status"] = lambda *a, **kw: written.append(
        {"blobs": set(h.store.blobs), "results": set(h.store.results), "keys": set(h.store.keys)}
    )
    h.publish(descriptor("lister"))
    h.cluster.grant(tools=["lister"], classes=["read"])

    status = (await h.run(h.submit(invocation("read-1", runId="run-9"))))["status"]

    assert len(trips) == 1
    assert status["receiptRef"] in written[-1]["blobs"]
    assert status["resultRef"] in written[-1]["results"]  # a key space of its own
    (entry,) = h.store.list(run_prefix(NAMESPACE, "run-9", namespace_uid(NAMESPACE)))
    assert entry in written[-1]["keys"]


async def test_a_refused_trip_is_made_again_whole_and_names_the_refused_kind(
    h: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tooladapter.receipts.service import storing

    monkeypatch.setattr(storing, "STORE_RETRY_DELAYS", (0,))
    refusals = iter([OSError("disk full")])

    def receipt_refused_once(data: bytes) -> None:
        if is_receipt(data):
            error = next(refusals, None)
            if error is not None:
                raise error

    h.store.hook = receipt_refused_once
    h.publish(descriptor("lister"))
    h.cluster.grant(tools=["lister"], classes=["read"])

    status = (await h.run(h.submit(invocation("read-2"))))["status"]

    assert status["state"] == "Observed"
    assert status["receiptRef"] in h.store.blobs and status["resultRef"] in h.store.results
    (warning,) = [e for e in h.events.posted if e.reason == "ArtifactStoreUnavailable"]
    assert "receipt" in warning.message and "disk full" in warning.message


# -- issue 28: records belong to a namespace's incarnation; runs name their callers --------

NEXT = Incarnation(NAMESPACE, "11111111-2222-4333-8444-555555555555", "2026-12-05T00:00:00Z")


def test_keys_of_a_receipt_with_its_namespace_uid_lie_in_that_incarnation() -> None:
    approved = receipt(tenantUid=HERE.uid, approvalId="a", toolId="writer")
    keys = entries_of(approved, REF)
    assert keys == [
        run_key(NS, "run/1:a", REF, HERE.uid),
        call_key(NS, approved["caller"]["name"], "writer", approved["endedAt"], REF, HERE.uid),
    ]
    assert all(k.startswith(f"index/ns/{NS}/{HERE.uid}/") for k in keys)
    assert run_prefix(NS, "r", HERE.uid) != run_prefix(NS, "r", NEXT.uid)
    # Without the uid (written before it was recorded): the legacy name-keyed folders.
    assert entries_of(receipt(), REF) == [run_key(NS, "run/1:a", REF)]
    assert run_key(NS, "run/1:a", REF).startswith(f"index/runs/{NS}/")


def test_a_receipt_belongs_to_the_incarnation_its_uid_names() -> None:
    mine = receipt(tenantUid=HERE.uid)
    assert of_incarnation(mine, HERE)
    assert not of_incarnation(mine, NEXT)
    assert not of_incarnation(mine, Incarnation("team-b", HERE.uid, HERE.created))


def test_a_legacy_receipt_belongs_to_the_incarnation_it_was_written_in() -> None:
    old = receipt(writtenAt="2026-12-01T06:00:01Z")  # no tenantUid
    assert of_incarnation(old, HERE)  # written after HERE was created
    assert not of_incarnation(old, NEXT)  # written before NEXT existed: a predecessor's
    # Within the margin of the creation second, or unreadable: not shown.
    assert not of_incarnation(receipt(writtenAt="2026-12-05T00:00:00.900Z"), NEXT)
    assert of_incarnation(receipt(writtenAt="2026-12-05T00:00:01Z"), NEXT)
    assert not of_incarnation(receipt(writtenAt="yesterday"), NEXT)


def test_a_namespace_created_again_never_sees_the_earlier_approved_call() -> None:
    store = MemoryStore()
    index_approved_call(store, "uid", "/data/u", "2026-12-01T02:00:00Z", "2026-12-01T01:59:00Z")
    index_approved_call(
        store, "legacy", "/data/l", "2026-12-01T03:00:00Z", "2026-12-01T02:59:00Z", None
    )
    items = [waiting_call()]
    (found,) = earlier_calls(store, items, {NAMESPACE: HERE})
    assert found["metadata"]["name"] == "call-uid"  # the incarnation's own entries first
    assert earlier_calls(store, items, {NAMESPACE: NEXT}) == []
    assert earlier_calls(store, items, {}) == []  # a namespace not resolved: nothing


def test_a_legacy_approved_call_stays_readable_for_its_namespace() -> None:
    store = MemoryStore()
    index_approved_call(
        store, "legacy", "/data/l", "2026-12-01T03:00:00Z", "2026-12-01T02:59:00Z", None
    )
    (found,) = earlier_calls(store, [waiting_call()], {NAMESPACE: HERE})
    assert found["metadata"]["name"] == "call-legacy"


def test_every_row_of_a_run_names_its_caller_and_filters_by_it() -> None:
    other = "system:serviceaccount:team-a:intruder"
    row = receipt_only_row(receipt(caller={"kind": "ServiceAccount", "name": other}), REF)
    assert row["caller"] == other
    mine = receipt_only_row(receipt(), OTHER)
    rows = [row, mine]
    assert with_caller(rows, other) == [row]
    assert with_caller(rows, None) == rows == with_caller(rows, "")


# -- idempotency keys ------------------------------------------------------------------------

AGENT = "system:serviceaccount:team-a:agent"
UID = "00000000-0000-4000-8000-000000000001"


def keyed(uid: str = "u1", **fields: Any) -> dict[str, Any]:
    return receipt(
        uid, **({"idempotencyKey": "k/1", "tenantUid": UID, "requestHash": "sha256:r"} | fields)
    )


def test_a_key_entry_lies_in_its_incarnation_and_names_its_receipt() -> None:
    found = key_entry(keyed(), REF)
    assert found is not None
    key, data = found
    assert key.startswith(key_prefix(NS, AGENT, "k/1", UID))
    assert key.startswith(f"index/ns/{NS}/{UID}/keys/")
    assert ref_of_key(key) == REF
    # Caller and key hashed together: another caller's same key is another folder.
    assert key_prefix(NS, "other", "k/1", UID) != key_prefix(NS, AGENT, "k/1", UID)
    assert key_prefix(NS, AGENT, "k/1", None).startswith(f"index/keys/{NS}/")
    assert json.loads(data)["status"]["state"] == "Observed"


@pytest.mark.parametrize(
    "fields",
    [
        {"idempotencyKey": None},
        {"duplicateOf": "call-u0"},
        {"stages": [{"stage": "idempotency", "outcome": "denied"}]},  # key-reused, unconfirmed
        {"stages": [{"stage": "idempotency", "outcome": "failed"}]},  # the index unreadable
    ],
    ids=["no-key", "duplicate", "refused-at-the-key", "failed-at-the-key"],
)
def test_a_call_that_did_not_hold_its_key_writes_no_key_entry(fields: dict[str, Any]) -> None:
    assert key_entry(keyed(**fields), REF) is None


def entries(*receipts: tuple[dict[str, Any], str]) -> list[tuple[str, bytes]]:
    found = [key_entry(r, ref) for r, ref in receipts]
    return [entry for entry in found if entry is not None]


def test_the_key_holder_is_the_first_call_that_holds_it() -> None:
    later = keyed("u2", writtenAt="2026-12-01T07:00:00Z")
    held = entries((later, OTHER), (keyed("u1"), REF))

    holder = key_holder(held, namespace=NS, caller=AGENT, key="k/1", own_uid="u9")

    assert holder is not None
    assert (holder.invocation, holder.invocation_id, holder.receipt_ref) == ("call-u1", "u1", REF)
    assert holder.status["receiptRef"] == REF and holder.request_hash == "sha256:r"
    # Another caller's, another key's, or the asking call's own entries count for nothing.
    assert key_holder(held, namespace=NS, caller="other", key="k/1", own_uid="u9") is None
    assert key_holder(held, namespace=NS, caller=AGENT, key="k/2", own_uid="u9") is None
    assert key_holder(held, namespace="team-b", caller=AGENT, key="k/1", own_uid="u9") is None


def test_a_confirmed_did_not_happen_releases_the_key() -> None:
    uncertain = keyed(state="Uncertain")
    confirmation = {"effectHappened": False, "recorded": True, "confirmedBy": "ops"}
    released = keyed(
        state="Uncertain", effectConfirmation=confirmation, writtenAt="2026-12-01T08:00:00Z"
    )
    free = entries((uncertain, REF), (released, OTHER))
    assert key_holder(free, namespace=NS, caller=AGENT, key="k/1", own_uid="u9") is None

    # A call that ran after the release holds the key from then on.
    after = keyed("u3", writtenAt="2026-12-01T09:00:00Z")
    third = content_ref(b"third")
    holder = key_holder(
        [*free, *entries((after, third))], namespace=NS, caller=AGENT, key="k/1", own_uid="u9"
    )
    assert holder is not None and holder.receipt_ref == third


def test_an_entry_that_does_not_parse_fails_the_reader() -> None:
    with pytest.raises(ValueError):
        key_holder(
            [("index/keys/x", b"not json")], namespace=NS, caller=AGENT, key="k", own_uid="u"
        )
