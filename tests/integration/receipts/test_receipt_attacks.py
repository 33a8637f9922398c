"""Attack pass 7 on signed, chained receipts and integration events (issue 30), as an agent
(a ServiceAccount with `tooladapter-requester` in its own namespace) would: the signing key
is out of its reach (Secret, public key set, gateway, operator log); another tenant's chain
head is not served to it; its own call's status is not its to point elsewhere; the events
its calls cause carry neither its argument values nor a denial's message quoting them; a
duplicate of its call sends no event.

The operator here serves `rv7-<SESSION>-*` and delivers events to a receiver of this
module (parsed with the `cloudevents` SDK, raw bodies kept)."""

from __future__ import annotations

import base64
import io
import json
import threading
import urllib.parse
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from cloudevents.v1.http import from_http
from kubernetes import client

from tests.integration.cli.test_cli import Cli
from tests.integration.gateway.test_run_records import created_again
from tests.integration.gateway_client import http_json, token_of
from tests.integration.objects import Agent, descriptor, pretty, status_of
from tooladapter.devtools import SESSION, Namespace, OperatorProcess, wait_for
from tooladapter.receipts.core.cloudevents import EventType, event_id

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(300)]

SCOPE = f"rv7-{SESSION}"
SYSTEM = "tooladapter-system"
SIGNING = "tooladapter-receipt-signing"
KEYS = "tooladapter-receipt-keys"
HEADS = "tooladapter-receipt-heads"
#: What the agent sends as an argument, and a schema error's message quotes.
PIN = "pin-4242-do-not-export"


class Sink:
    """A CloudEvents receiver that keeps each POST's raw body and its parsed event."""

    def __init__(self) -> None:
        self.bodies: list[bytes] = []
        self.events: list[Any] = []
        self.errors: list[str] = []
        self.lock = threading.Lock()
        sink = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                try:
                    event = from_http(dict(self.headers), body)
                except Exception as exc:  # recorded, and the test fails on it
                    with sink.lock:
                        sink.errors.append(f"{type(exc).__name__}: {exc}")
                    self.send_response(400)
                    self.end_headers()
                    return
                with sink.lock:
                    sink.bodies.append(body)
                    sink.events.append(event)
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

    def subjects(self) -> list[str]:
        with self.lock:
            return [str(e["subject"]) for e in self.events]


@pytest.fixture(scope="module")
def sink() -> Iterator[Sink]:
    s = Sink()
    yield s
    s.close()


@pytest.fixture(scope="module")
def wave_operator(
    api: client.ApiClient, sink: Sink, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[OperatorProcess]:
    op = OperatorProcess(
        tmp_path_factory.mktemp("rv7-operator"),
        {"TOOLADAPTER_NAMESPACES": f"{SCOPE}-*", "TOOLADAPTER_EVENT_SINK": sink.url},
    )
    op.start()
    yield op
    op.stop()


@pytest.fixture
def tenant(api: client.ApiClient, wave_operator: OperatorProcess) -> Iterator[Namespace]:
    namespace = Namespace(api, prefix=SCOPE)
    yield namespace
    namespace.delete()


def _status(exc: client.ApiException) -> int:
    return int(exc.status or 0)


def test_an_agent_reaches_no_signing_key_and_no_other_tenants_chain(
    api: client.ApiClient, wave_operator: OperatorProcess, tenant: Namespace
) -> None:
    agent = Agent.create(api, tenant.name, "agent-1")
    other = Namespace(api, prefix=SCOPE)
    try:
        core = client.CoreV1Api(agent.api)
        # The Secret: not by name, not by listing, neither there nor in its own namespace.
        for attempt in (
            lambda: core.read_namespaced_secret(SIGNING, SYSTEM),
            lambda: core.list_namespaced_secret(SYSTEM),
            lambda: core.list_namespaced_secret(tenant.name),
            lambda: core.list_secret_for_all_namespaces(),
        ):
            with pytest.raises(client.ApiException) as refused:
                attempt()
            assert _status(refused.value) == 403
        # The public keys are public, and only that; the heads (every tenant's namespaces
        # and call counts) are not the agent's to read.
        published = core.read_namespaced_config_map(KEYS, SYSTEM).data or {}
        with pytest.raises(client.ApiException) as refused:
            core.read_namespaced_config_map(HEADS, SYSTEM)
        assert _status(refused.value) == 403

        secret = client.CoreV1Api(api).read_namespaced_secret(SIGNING, SYSTEM)
        keyring = json.loads(base64.b64decode((secret.data or {})["keyring.json"]))
        privates = [str(k["privateKey"]) for k in keyring["keys"]]
        assert privates
        status, _, served = http_json("GET", f"{wave_operator.gateway_url}/receipt-keys")
        assert status == 200, served
        log = wave_operator.log_text()
        for private in privates:
            raw = base64.b64decode(private)
            for form in (private, raw.hex(), base64.urlsafe_b64encode(raw).decode().rstrip("=")):
                assert form not in json.dumps(published)
                assert form not in json.dumps(served)
                assert form not in log
        assert all("privateKey" not in key for key in served["keys"]), served

        # Its own chain's head, at its own incarnation; never another tenant's.
        token = token_of(agent)
        status, _, mine = http_json(
            "GET", f"{wave_operator.gateway_url}/namespaces/{tenant.name}/receipt-chain", token
        )
        assert status == 200, mine
        meta = client.CoreV1Api(api).read_namespace(tenant.name).metadata
        assert meta is not None
        assert mine["incarnation"] == meta.uid, mine
        status, _, theirs = http_json(
            "GET", f"{wave_operator.gateway_url}/namespaces/{other.name}/receipt-chain", token
        )
        assert status == 403, theirs
    finally:
        other.delete()


def test_events_carry_no_argument_value_and_a_duplicate_sends_none(
    api: client.ApiClient, sink: Sink, tenant: Namespace
) -> None:
    agent = Agent.create(api, tenant.name, "agent-1")
    descriptor(api, tenant.name, "list-tools", kind="native", native={"name": "list-tools"})
    descriptor(
        api,
        tenant.name,
        "pinned",
        kind="native",
        native={"name": "list-tools"},
        inputSchema={"type": "object", "properties": {"pin": {"type": "integer"}}},
    )
    agent.grant(["list-tools", "pinned"], ["read"])

    # A denial whose message quotes what the agent sent.
    denied = agent.invoke("pinned", {"pin": PIN}, runId="run-rv7")
    refusal = status_of(agent.wait(denied))
    assert refusal["state"] == "Denied", pretty(refusal)
    assert PIN in json.dumps(refusal), pretty(refusal)  # the status (and receipt) keep it

    # A call, and its duplicate (the same idempotency key and request).
    first = agent.invoke("list-tools", {}, idempotencyKey="rv7-key")
    assert status_of(agent.wait(first))["state"] == "Observed"
    duplicate = agent.invoke("list-tools", {}, idempotencyKey="rv7-key")
    twin = status_of(agent.wait(duplicate))
    assert twin.get("duplicateOf") == first, pretty(twin)
    assert twin["receipt"].get("sequence"), pretty(twin)  # its own link of the chain

    # A later call: a chain's links are delivered in order, so once its event is in, every
    # earlier link's events (or their absence) are decided.
    last = agent.invoke("list-tools", {})
    closing = status_of(agent.wait(last))
    assert closing["state"] == "Observed", pretty(closing)
    wait_for(
        lambda: f"toolinvocations/{last}" in sink.subjects(),
        timeout=120,
        interval=0.5,
        what="the last call's event at the sink",
    )
    assert not sink.errors, sink.errors
    with sink.lock:
        bodies = list(sink.bodies)
        events = list(sink.events)
    for body in bodies:
        assert PIN.encode() not in body, body
    subjects = [str(e["subject"]) for e in events]
    assert f"toolinvocations/{duplicate}" not in subjects
    ids = {str(e["id"]) for e in events}
    assert event_id(refusal["receiptRef"], EventType.TOOL_INVOCATION_DENIED) in ids
    first_status = status_of(agent.wait(first))
    assert event_id(first_status["receiptRef"], EventType.TOOL_INVOKED) in ids
    (denial,) = [e for e in events if e["subject"] == f"toolinvocations/{denied}"]
    assert set(denial.data) == {"invocationId", "tenantId", "toolId", "reason", "stage"}


class PickySink(Sink):
    """A sink that stores events where a NUL cannot go (PostgreSQL's jsonb, among others):
    it answers 500 to an event holding one, every time."""

    def __init__(self) -> None:
        super().__init__()
        self.refused = 0
        picky = self
        handler = self.server.RequestHandlerClass
        accept = handler.do_POST  # type: ignore[attr-defined]

        def do_post(request: BaseHTTPRequestHandler) -> None:
            length = int(request.headers.get("Content-Length") or 0)
            body = request.rfile.read(length)
            if b"\\u0000" in body:
                with picky.lock:
                    picky.refused += 1
                request.send_response(500)
                request.end_headers()
                return
            request.rfile = io.BytesIO(body)
            accept(request)

        handler.do_POST = do_post  # type: ignore[attr-defined]


def test_a_tenants_event_the_sink_refuses_never_holds_another_tenants_events(
    api: client.ApiClient, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """Hit: delivery stopped each round at the first refusal, whichever chain it was in, so
    one tenant's agent, by putting what the sink cannot store in its call (a NUL in its run
    id), held every other tenant's events for as long as it liked."""
    picky = PickySink()
    op = OperatorProcess(
        tmp_path_factory.mktemp("rv7-picky"),
        {"TOOLADAPTER_NAMESPACES": f"{SCOPE}p-*", "TOOLADAPTER_EVENT_SINK": picky.url},
    )
    op.start()
    # Chains are delivered in the order the operator came to know them: by name from its
    # first listing, then as created. The attacker's comes first both ways.
    attacker_ns = Namespace(api, prefix=f"{SCOPE}p")
    victim_ns = Namespace(api, prefix=f"{SCOPE}p")
    while victim_ns.name < attacker_ns.name:
        victim_ns.delete()
        victim_ns = Namespace(api, prefix=f"{SCOPE}p")
    try:
        attacker = Agent.create(api, attacker_ns.name, "agent-1")
        victim = Agent.create(api, victim_ns.name, "agent-1")
        for who, ns in ((attacker, attacker_ns), (victim, victim_ns)):
            descriptor(api, ns.name, "list-tools", kind="native", native={"name": "list-tools"})
            who.grant(["list-tools"], ["read"])
        poison = attacker.invoke("list-tools", {}, runId="run\u0000poison")
        assert status_of(attacker.wait(poison))["state"] == "Observed"
        wait_for(lambda: picky.refused >= 1, timeout=60, what="the sink refused the poison")
        honest = victim.invoke("list-tools", {})
        assert status_of(victim.wait(honest))["state"] == "Observed"
        wait_for(
            lambda: f"toolinvocations/{honest}" in picky.subjects(),
            timeout=90,
            interval=0.5,
            what="the other tenant's event at the sink",
        )
        assert not picky.errors, picky.errors
    finally:
        op.stop()
        picky.close()
        attacker_ns.delete()
        victim_ns.delete()


def test_a_namespace_created_again_starts_a_chain_of_its_own_and_neither_replays_the_other(
    api: client.ApiClient, wave_operator: OperatorProcess, tmp_path: Path
) -> None:
    """A tenant deletes its namespace and makes it again under its name, with the same
    agent: the new incarnation's chain begins at 1 under its uid (the old chain neither
    continues into it nor is served to it), and both verify, each on its own."""
    ns = Namespace(api, prefix=SCOPE)
    try:
        agent = Agent.create(api, ns.name, "agent-1")
        descriptor(api, ns.name, "list-tools", kind="native", native={"name": "list-tools"})
        agent.grant(["list-tools"], ["read"])
        old = [status_of(agent.wait(agent.invoke("list-tools", {}))) for _ in range(2)]
        assert [s["receipt"]["sequence"] for s in old] == [1, 2], pretty(old)

        new_uid = created_again(api, ns)
        again = Agent.create(api, ns.name, "agent-1")
        descriptor(api, ns.name, "list-tools", kind="native", native={"name": "list-tools"})
        again.grant(["list-tools"], ["read"])
        fresh = status_of(again.wait(again.invoke("list-tools", {})))
        assert fresh["state"] == "Observed", pretty(fresh)
        assert fresh["receipt"]["sequence"] == 1, pretty(fresh)

        token = token_of(again)
        gateway = wave_operator.gateway_url
        status, _, head = http_json("GET", f"{gateway}/namespaces/{ns.name}/receipt-chain", token)
        assert status == 200 and head["incarnation"] == new_uid, head
        digest = str(old[-1]["receiptRef"]).removeprefix("sha256:")
        status, _, body = http_json(
            "GET", f"{gateway}/namespaces/{ns.name}/receipts/{digest}", token
        )
        assert status == 404, body

        keys = tmp_path / "keys.json"
        keys.write_text(json.dumps(http_json("GET", f"{gateway}/receipt-keys")[2]))
        cli = Cli(tmp_path, api, again)
        done = cli(
            "receipts", "verify", "-n", ns.name, "--store", str(wave_operator.artifacts),
            "--keys", str(keys), "--offline", "-o", "json",
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
        reports = {r["incarnation"]: r for r in json.loads(done.stdout)}
        assert reports[new_uid]["checked"] == 1 and reports[new_uid]["verified"], reports
        (before,) = [r for u, r in reports.items() if u != new_uid]
        assert before["checked"] == 2 and before["verified"], reports
        assert before["head"]["ref"] == old[-1]["receiptRef"], reports
        # The agent's own view (its incarnation, the gateway's head, the statuses).
        done = cli(
            "receipts", "verify", "--store", str(wave_operator.artifacts), "--gateway", gateway
        )
        assert done.returncode == 0, done.stderr
    finally:
        ns.delete()


def test_the_page_shows_a_signed_receipt_of_a_run_id_made_to_confuse_it(
    api: client.ApiClient, wave_operator: OperatorProcess, tenant: Namespace
) -> None:
    """An agent names its run with markup, a NUL, a right-to-left override and astral
    characters: the run's page still shows its receipt's signature as valid, the run id
    escaped, never as markup."""
    from tests.integration.receipts.test_index import signed_in

    run = '<script>x</script>"\u0000\u202e\U0001f600' + "\u0301" * 40
    agent = Agent.create(api, tenant.name, "agent-1")
    descriptor(api, tenant.name, "list-tools", kind="native", native={"name": "list-tools"})
    agent.grant(["list-tools"], ["read"])
    done = status_of(agent.wait(agent.invoke("list-tools", {}, runId=run)))
    assert done["state"] == "Observed", pretty(done)
    browser = signed_in(wave_operator.gateway_url, token_of(agent))
    query = urllib.parse.urlencode(
        {"namespace": tenant.name, "run": run, "verify": done["receiptRef"]}
    )
    text = browser.open(f"{wave_operator.gateway_url}/ui/runs?{query}", timeout=60).read()
    page = text.decode()
    assert "Signature valid, by ed25519:" in page, page
    assert "<script>x</script>" not in page


def test_a_burst_of_calls_leaves_one_unbroken_chain_and_another_tenants_own(
    api: client.ApiClient, wave_operator: OperatorProcess, tenant: Namespace, tmp_path: Path
) -> None:
    """An agent fires 30 calls at once while another tenant calls: every call ends, the
    burst's receipts take the numbers 1..30 of its namespace's chain (none twice, none
    skipped), the other tenant's chain is its own, and both verify."""
    agent = Agent.create(api, tenant.name, "agent-1")
    other_ns = Namespace(api, prefix=SCOPE)
    try:
        other = Agent.create(api, other_ns.name, "agent-1")
        for who, ns in ((agent, tenant), (other, other_ns)):
            descriptor(api, ns.name, "list-tools", kind="native", native={"name": "list-tools"})
            who.grant(["list-tools"], ["read"])
        burst = [agent.invoke("list-tools", {}, runId="burst") for _ in range(30)]
        lone = other.invoke("list-tools", {})
        assert status_of(other.wait(lone))["receipt"]["sequence"] == 1
        ends = [status_of(agent.wait(name)) for name in burst]
        assert all(s["state"] == "Observed" for s in ends), pretty(ends)
        assert sorted(s["receipt"]["sequence"] for s in ends) == list(range(1, 31))

        keys = tmp_path / "keys.json"
        gateway = wave_operator.gateway_url
        keys.write_text(json.dumps(http_json("GET", f"{gateway}/receipt-keys")[2]))
        for ns, who, count in ((tenant, agent, 30), (other_ns, other, 1)):
            done = Cli(tmp_path, api, who)(
                "receipts", "verify", "-n", ns.name, "--store", str(wave_operator.artifacts),
                "--keys", str(keys), "--offline", "-o", "json",
            )  # fmt: skip
            assert done.returncode == 0, done.stderr
            (report,) = json.loads(done.stdout)
            assert report["checked"] == count and report["verified"], report
    finally:
        other_ns.delete()
