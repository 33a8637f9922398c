"""The reference's integration events on the real cluster (issue 30): with the event sink
down for a minute and the operator killed once meanwhile, every event (the calls', a
sandbox's lease and release, a descriptor's activation) arrives at a CloudEvents receiver
(the `cloudevents` SDK's parser) at least once, none lost, ids stable across redelivery;
ToolInvoked carries the reference's payload fields.

The operator here serves `rev-<SESSION>-*`."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from cloudevents.v1.http import from_http
from kubernetes import client

from tests.integration.objects import Agent, descriptor, pretty, shell_tool, status_of
from tooladapter.devtools import SESSION, Namespace, OperatorProcess, wait_for
from tooladapter.receipts.core.cloudevents import EventType, event_id

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(600)]

SCOPE = f"rev-{SESSION}"
TOOL_INVOKED_FIELDS = {
    "invocationId", "tenantId", "projectId", "runId", "attemptId", "toolId", "toolVersion",
    "effectiveClass", "state", "policyDecisionId", "approvalId", "requestHash", "resultHash",
}  # fmt: skip


class Receiver:
    """A CloudEvents receiver: parses each POST with the SDK; answers 503 while down."""

    def __init__(self) -> None:
        self.down = True
        self.refused = 0
        self.events: list[Any] = []
        self.errors: list[str] = []
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                if receiver.down:
                    receiver.refused += 1
                    self.send_response(503)
                    self.end_headers()
                    return
                try:
                    event = from_http(dict(self.headers), body)
                except Exception as exc:  # recorded, and the test fails on it
                    receiver.errors.append(f"{type(exc).__name__}: {exc}")
                    self.send_response(400)
                    self.end_headers()
                    return
                receiver.events.append(event)
                self.send_response(202)
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    def by_id(self) -> dict[str, list[Any]]:
        out: dict[str, list[Any]] = {}
        for event in self.events:
            out.setdefault(event["id"], []).append(event)
        return out


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    r = Receiver()
    yield r
    r.close()


@pytest.fixture
def sinking_operator(
    api: client.ApiClient, receiver: Receiver, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[OperatorProcess]:
    op = OperatorProcess(
        tmp_path_factory.mktemp("events-operator"),
        {
            "TOOLADAPTER_NAMESPACES": f"{SCOPE}-*",
            "TOOLADAPTER_EVENT_SINK": receiver.url,
            "TOOLADAPTER_EVENT_SOURCE": "/tooladapter-test",
        },
    )
    op.start()
    yield op
    op.stop()


def refused_since_start(op: OperatorProcess) -> bool:
    return op.says("event sink refused an event")


def test_every_event_arrives_at_least_once_through_a_sink_outage_and_a_crash(
    api: client.ApiClient, receiver: Receiver, sinking_operator: OperatorProcess
) -> None:
    op = sinking_operator
    down_since = time.monotonic()
    ns = Namespace(api, prefix=SCOPE)
    try:
        agent = Agent.create(api, ns.name, "agent-1")
        stranger = Agent.create(api, ns.name, "agent-2")  # granted nothing: Denied
        descriptor(api, ns.name, "list-tools", kind="native", native={"name": "list-tools"})
        shell_tool(api, ns.name, "sh")
        agent.grant(["list-tools", "sh"], ["read", "sandbox"])
        names = [agent.invoke("list-tools", {}, runId="run-ev") for _ in range(3)]
        sandboxed = agent.invoke("sh", {"command": "echo leased"}, runId="run-ev")
        denied = stranger.invoke("list-tools", {})
        statuses = {n: status_of(agent.wait(n)) for n in names}
        statuses[sandboxed] = status_of(agent.wait(sandboxed))
        assert statuses[sandboxed]["state"] == "Observed", pretty(statuses[sandboxed])
        statuses[denied] = status_of(stranger.wait(denied))
        assert statuses[denied]["state"] == "Denied", pretty(statuses[denied])
        for name in names:
            assert statuses[name]["state"] == "Observed", pretty(statuses[name])
        wait_for(lambda: refused_since_start(op), timeout=60, what="the sink refused")

        # The operator dies with everything undelivered, and starts again.
        op.kill()
        op.start()
        wait_for(lambda: refused_since_start(op), timeout=60, what="the sink refused again")
        # Down for 10 s in all (past the backoff's first steps, 1, 2 and 5 s; the whole
        # sequence is a unit test's), then up.
        wait_for(
            lambda: time.monotonic() - down_since >= 10,
            timeout=120,
            interval=1,
            what="10 s of sink outage",
        )
        assert not receiver.events
        receiver.down = False

        expected = {event_id(statuses[n]["receiptRef"], EventType.TOOL_INVOKED): n for n in names}
        expected[event_id(statuses[denied]["receiptRef"], EventType.TOOL_INVOCATION_DENIED)] = (
            denied
        )
        for kind in (
            EventType.SANDBOX_LEASED,
            EventType.SANDBOX_RELEASED,
            EventType.TOOL_INVOKED,
        ):
            expected[event_id(statuses[sandboxed]["receiptRef"], kind)] = sandboxed

        def all_arrived() -> bool:
            ids = receiver.by_id()
            activated = any(
                e["type"] == EventType.TOOL_DESCRIPTOR_ACTIVATED
                and e.data.get("toolId") == "list-tools"
                and e.data.get("tenantId") == ns.name
                for e in receiver.events
            )
            return activated and all(i in ids for i in expected)

        wait_for(all_arrived, timeout=180, interval=1, what="every event at the receiver")
        assert not receiver.errors, receiver.errors
        assert receiver.refused >= 2

        source = f"/tooladapter-test/namespaces/{ns.name}"
        mine = [e for e in receiver.events if e["source"] == source]
        for copies in receiver.by_id().values():
            # A redelivery is the same event: same id, type, subject and data.
            assert len({(c["type"], c["subject"], str(c.data)) for c in copies}) == 1, copies
        for eid, name in expected.items():
            (event, *_) = receiver.by_id()[eid]
            assert event["subject"] == f"toolinvocations/{name}"
            assert event["specversion"] == "1.0"
        invoked = [e for e in mine if e["type"] == EventType.TOOL_INVOKED]
        assert {e["id"] for e in invoked} >= {i for i, n in expected.items() if n in names}
        lease = statuses[sandboxed]["sandboxLease"]["leaseId"]
        (leased,) = {e["id"]: e for e in mine if e["type"] == EventType.SANDBOX_LEASED}.values()
        assert leased.data["leaseId"] == lease and leased.data["invocationId"]
        assert set(leased.data) == {"leaseId", "invocationId", "tenantId", "kind", "poolId"}
        (released,) = {e["id"]: e for e in mine if e["type"] == EventType.SANDBOX_RELEASED}.values()
        assert released.data["leaseId"] == lease and released.data["reason"]
        for event in invoked:
            assert set(event.data) == TOOL_INVOKED_FIELDS, event.data
            assert event.data["tenantId"] == ns.name and event.data["state"] == "Observed"
            assert event.data["requestHash"].startswith("sha256:")
            assert event.data["runId"] == "run-ev"
            assert event.data["toolId"] in ("list-tools", "sh")
        (refusal,) = [e for e in mine if e["type"] == EventType.TOOL_INVOCATION_DENIED]
        assert refusal.data["stage"] == "permission" and refusal.data["reason"], refusal.data
    finally:
        ns.delete()
