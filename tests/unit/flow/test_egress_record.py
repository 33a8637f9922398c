"""A sandboxed call's egress as its end records it (issue 37): the proxy's whole list in the
artifact store, named by status and receipt, and counted per host there, so 210 refused
requests before one allowed connection leave that connection in status, receipt and usage."""

from __future__ import annotations

import json

from tests.unit.fake_cluster import (
    FakeCluster,
    finished_job,
    invocation,
    make_runtime,
    pod_result,
    shell_descriptor,
)
from tooladapter.artifacts import Space
from tooladapter.egress.core.tally import LeaseRecords
from tooladapter.enums import EgressVerdict, ToolKind
from tooladapter.executors.sandbox import SandboxExecutor
from tooladapter.model import EgressRecord
from tooladapter.naming import LeaseNames
from tooladapter.sandbox.job import ProxyPeer
from tooladapter.settings import Settings


def proxy_writes(n_refused: int) -> str:
    """What one proxy replica writes: `n_refused` refusals, then one allowed connection."""
    book = LeaseRecords()
    for i in range(n_refused):
        book.add(
            EgressRecord(
                host="evil.example",
                port=443,
                method="CONNECT",
                verdict=EgressVerdict.NOT_ALLOWED,
                reason="not on the allow-list",
                at=f"2030-01-01T00:00:{i % 60:02}Z",
            )
        )
    book.add(
        EgressRecord(
            host="api.example",
            port=443,
            method="CONNECT",
            verdict=EgressVerdict.ALLOWED,
            bytes_up=700,
            bytes_down=9000,
            at="2030-01-01T00:01:00Z",
        )
    )
    return json.dumps(book.wire())


async def test_210_refusals_then_one_allowed_connection_stay_in_status_receipt_and_usage() -> None:
    cluster = FakeCluster()
    settings = Settings()
    h = make_runtime(cluster, executors={ToolKind.SHELL: SandboxExecutor(cluster, settings)})
    h.rt.egress_peer = ProxyPeer(address="10.0.0.9", port=3128)
    h.publish(shell_descriptor(sandbox={"egress": {"allow": ["api.example"]}}))
    h.cluster.grant(tools=["sh"], classes=["sandbox"])
    body = h.submit(invocation("sh-1", tool="sh", arguments={"command": "echo hi"}))
    uid = body["metadata"]["uid"]
    cluster.script_job(uid, finished_job(), outcome=pod_result(log=b"hi\n"))
    # Two replicas wrote: the allowed connection is in one, refusals in both.
    cluster.config_maps[(settings.egress.namespace, LeaseNames.for_uid(uid).egress)] = {
        "records.a": proxy_writes(210),
        "records.b": proxy_writes(5),
    }

    stored = await h.run(body)

    status = stored["status"]
    assert status["state"] == "Observed"
    allowed = [row for row in status["egress"] if row["verdict"] == "allowed"]
    assert allowed == [
        {
            "host": "api.example",
            "port": 443,
            "verdict": "allowed",
            "connections": 2,
            "bytesUp": 1400,
            "bytesDown": 18000,
            "others": False,
        }
    ]
    refused = [row for row in status["egress"] if row["verdict"] == "not-allowed"]
    assert [(r["host"], r["connections"]) for r in refused] == [("evil.example", 215)]
    receipt = h.store.receipt(status["receiptRef"])
    assert receipt["egress"] == status["egress"]
    assert receipt["usage"]["egressBytesUp"] == 1400
    assert receipt["usage"]["egressBytesDown"] == 18000
    # The whole list, as the proxies wrote it, is in the store under the ref both name.
    ref = status["egressRecordsRef"]
    assert receipt["egressRecordsRef"] == ref
    whole = json.loads(h.store.get(ref, Space.RESULTS))
    assert sum(r.get("count", 1) for r in whole) == 217
    assert sum(1 for r in whole if r["verdict"] == "allowed") == 2


async def test_a_call_without_a_proxied_lease_names_no_egress_records() -> None:
    cluster = FakeCluster()
    h = make_runtime(cluster, executors={ToolKind.SHELL: SandboxExecutor(cluster, Settings())})
    h.publish(shell_descriptor())
    h.cluster.grant(tools=["sh"], classes=["sandbox"])
    body = h.submit(invocation("sh-1", tool="sh", arguments={"command": "echo hi"}))
    cluster.script_job(body["metadata"]["uid"], finished_job(), outcome=pod_result(log=b"x"))

    stored = await h.run(body)

    assert "egressRecordsRef" not in stored["status"]
    receipt = h.store.receipt(stored["status"]["receiptRef"])
    assert receipt["egress"] == [] and receipt["egressRecordsRef"] is None


async def test_a_refused_connection_reaches_the_result_beside_the_tools_output() -> None:
    """Issue 44: "CONNECT tunnel failed, response 502" was all the agent read; the proxy's
    reason joins `status.result.egressRefused`, outside the tool's content, redacted."""
    cluster = FakeCluster()
    settings = Settings()
    h = make_runtime(cluster, executors={ToolKind.SHELL: SandboxExecutor(cluster, settings)})
    h.rt.egress_peer = ProxyPeer(address="10.0.0.9", port=3128)
    h.publish(shell_descriptor(sandbox={"egress": {"allow": ["github.com"]}}))
    h.cluster.grant(tools=["sh"], classes=["sandbox"])
    body = h.submit(invocation("sh-1", tool="sh", arguments={"command": "echo hi"}))
    uid = body["metadata"]["uid"]
    output = b"curl: (56) CONNECT tunnel failed, response 502\n"
    cluster.script_job(uid, finished_job(), outcome=pod_result(log=output))
    records = [
        EgressRecord(
            host="github.com",
            port=443,
            method="CONNECT",
            verdict=EgressVerdict.UPSTREAM_FAILED,
            reason="github.com did not resolve",
            at="2030-01-01T00:00:01Z",
        ),
        EgressRecord(
            host="api.example",
            port=443,
            method="CONNECT",
            verdict=EgressVerdict.ALLOWED,
            bytes_up=10,
            bytes_down=20,
            at="2030-01-01T00:00:02Z",
        ),
        # A host the sandbox made up: a line break and a key-shaped token in it.
        EgressRecord(
            host="x\nghp_" + "a" * 36,
            port=443,
            method="CONNECT",
            verdict=EgressVerdict.NOT_ALLOWED,
            reason="not on the allow-list",
            at="2030-01-01T00:00:03Z",
        ),
    ]
    cluster.config_maps[(settings.egress.namespace, LeaseNames.for_uid(uid).egress)] = {
        "records.a": json.dumps([r.wire() for r in records]),
    }

    stored = await h.run(body)

    result = stored["status"]["result"]
    assert result["content"] == output.decode()
    refused = {r["verdict"]: r for r in result["egressRefused"]}
    assert set(refused) == {"upstream-failed", "not-allowed"}  # nothing allowed
    assert refused["upstream-failed"] == {
        "host": "github.com",
        "port": 443,
        "verdict": "upstream-failed",
        "reason": "github.com did not resolve",
        "connections": 1,
    }
    made_up = refused["not-allowed"]["host"]
    assert "\n" not in made_up and "ghp_" + "a" * 36 not in made_up, made_up
    # No host name (a line break, a token's `_`): its length only, never its text.
    assert made_up.startswith("(not a host name: "), made_up
