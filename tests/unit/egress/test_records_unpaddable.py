"""Egress records that cannot be padded away (issue 37): a sandbox decides how many
requests it makes, so nothing it does may push an allowed connection out of the proxy's
records, the status, the receipt or the byte usage."""

from __future__ import annotations

import json
from typing import Any

from tooladapter.egress.core.lease import records_from
from tooladapter.egress.core.tally import (
    MAX_ALLOWED_RECORDS,
    MAX_FOLDED,
    MAX_LISTED_HOSTS,
    MAX_REFUSED_RECORDS,
    LeaseRecords,
    bytes_moved,
    uses,
)
from tooladapter.egress.proxy.records import Recorder
from tooladapter.enums import EgressVerdict
from tooladapter.model import EgressRecord

ALLOWED, REFUSED = EgressVerdict.ALLOWED, EgressVerdict.NOT_ALLOWED


def refused(host: str = "evil.example", n: int = 0) -> EgressRecord:
    return EgressRecord(
        host=host,
        port=443,
        method="CONNECT",
        verdict=REFUSED,
        reason="not on the allow-list",
        bytes_up=n,
    )


def allowed(host: str = "api.example", up: int = 100, down: int = 2000) -> EgressRecord:
    return EgressRecord(
        host=host, port=443, method="CONNECT", verdict=ALLOWED, bytes_up=up, bytes_down=down
    )


def test_210_refusals_then_one_allowed_connection_leave_it_in_the_proxys_records() -> None:
    book = LeaseRecords()
    for _ in range(210):
        book.add(refused())
    book.add(allowed())
    written = [EgressRecord.model_validate(r) for r in book.wire()]
    assert [r for r in written if r.verdict == ALLOWED] == [allowed()]
    # The refusals beyond the cap are folded, not dropped: all 210 are counted.
    assert sum(r.count for r in written if r.verdict == REFUSED) == 210


def test_refusals_beyond_every_cap_are_counted_whole_in_an_others_record() -> None:
    book = LeaseRecords()
    hosts = MAX_REFUSED_RECORDS + MAX_FOLDED + 500
    for i in range(hosts):
        book.add(refused(f"h{i}.example", n=1))
    book.add(allowed())
    written = [EgressRecord.model_validate(r) for r in book.wire()]
    assert len(written) == MAX_REFUSED_RECORDS + MAX_FOLDED + 2  # + others + the allowed one
    (others,) = [r for r in written if r.others]
    assert others.count == 500 and others.bytes_up == 500 and others.host == ""
    assert sum(r.count for r in written) == hosts + 1
    assert allowed() in written


def test_allowed_connections_beyond_their_cap_fold_per_host_with_their_bytes() -> None:
    book = LeaseRecords()
    for _ in range(MAX_ALLOWED_RECORDS + 10):
        book.add(allowed(up=1, down=2))
    book.add(allowed("other.example", up=5, down=7))
    written = [EgressRecord.model_validate(r) for r in book.wire()]
    rows = uses(written)
    assert [(r.host, r.connections, r.bytes_up, r.bytes_down) for r in rows] == [
        (
            "api.example",
            MAX_ALLOWED_RECORDS + 10,
            MAX_ALLOWED_RECORDS + 10,
            2 * (MAX_ALLOWED_RECORDS + 10),
        ),
        ("other.example", 1, 5, 7),
    ]


def test_uses_list_allowed_hosts_apart_from_refusals_and_count_every_byte() -> None:
    records = [refused(f"r{i}.example") for i in range(3 * MAX_LISTED_HOSTS)]
    records += [refused("evil.example")] * 5
    records += [allowed(), allowed(), allowed("tiny.example", up=1, down=1)]
    rows = uses(records)
    allowed_rows = [r for r in rows if r.verdict == ALLOWED]
    assert [(r.host, r.connections) for r in allowed_rows] == [
        ("api.example", 2),
        ("tiny.example", 1),
    ]
    refused_rows = [r for r in rows if r.verdict == REFUSED]
    # The busiest refused host first, then by name; the rest in one others row.
    assert refused_rows[0].host == "evil.example" and refused_rows[0].connections == 5
    assert refused_rows[0].reason == "not on the allow-list"
    assert len([r for r in refused_rows if not r.others]) == MAX_LISTED_HOSTS
    (others,) = [r for r in refused_rows if r.others]
    assert others.connections == 3 * MAX_LISTED_HOSTS + 5 - (MAX_LISTED_HOSTS - 1) - 5
    assert sum(r.connections for r in rows) == len(records)
    assert bytes_moved(rows) == (201, 4001)


def test_many_allowed_hosts_past_the_listed_cap_still_count_their_bytes() -> None:
    records = [allowed(f"a{i:03}.example", up=i, down=1) for i in range(MAX_LISTED_HOSTS + 8)]
    rows = uses(records)
    assert len(rows) == MAX_LISTED_HOSTS + 1
    assert rows[0].host == f"a{MAX_LISTED_HOSTS + 7:03}.example"  # most bytes first
    assert rows[-1].others and rows[-1].connections == 8
    assert bytes_moved(rows) == (sum(range(MAX_LISTED_HOSTS + 8)), MAX_LISTED_HOSTS + 8)


async def test_the_proxys_recorder_writes_the_allowed_connection_after_210_refusals() -> None:
    written: dict[str, list[dict[str, Any]]] = {}

    async def write(lease: str, invocation: str, key: str, text: str) -> None:
        written[key] = json.loads(text)

    recorder = Recorder(write, key="records.test")
    for _ in range(210):
        recorder.record(
            lease="l",
            tenant="t",
            invocation="ns/call",
            host="evil.example",
            port=443,
            method="CONNECT",
            verdict=REFUSED,
            reason="not on the allow-list",
        )
    recorder.record(
        lease="l",
        tenant="t",
        invocation="ns/call",
        host="api.example",
        port=443,
        method="CONNECT",
        verdict=ALLOWED,
        bytes_up=10,
        bytes_down=20,
    )
    await recorder.drain()
    records = records_from({k: json.dumps(v) for k, v in written.items()})
    assert [r["host"] for r in records if r["verdict"] == "allowed"] == ["api.example"]
    assert sum(r.get("count", 1) for r in records) == 211
