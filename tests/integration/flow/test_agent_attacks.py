"""Attacks an agent can mount with only an agent's rights, on the real cluster with the real
operator process: each test acts through the agents' own ServiceAccount tokens (a reviewer
approves only what a reviewer would) and states the promise the attack breaks.

- a result cut at its byte bound shows part of a brokered secret, and the hash of the raw
  output confirms guesses of the rest;
- another agent's metadata patches hold an approved call back for as long as they go on;
- an interrupt that lands after the tool reached the outside world ends the call
  `Cancelled` ("before the tool started"), so a retry runs the effect a second time;
- a listed awk program may redirect its output (it writes files) without an approval.
"""

from __future__ import annotations

import base64
import hashlib
import http.server
import json
import re
import subprocess
import threading
from collections import Counter
from collections.abc import Iterator
from typing import Any, ClassVar

import pytest
from kubernetes import client

from tests.integration.objects import (
    TERMINAL,
    Agent,
    approve,
    container_tool,
    custom,
    descriptor,
    get,
    pretty,
    secret_file,
    shell_tool,
    status_of,
)
from tooladapter import GROUP, VERSION
from tooladapter.devtools import Namespace, OperatorProcess, free_port, node_ip, wait_for

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(420)]


# --------------------------------------------------------------------------- helpers


class Hits(http.server.BaseHTTPRequestHandler):
    """Counts requests per path: each path is one call's effect."""

    counts: ClassVar[Counter[str]] = Counter()
    lock: ClassVar[threading.Lock] = threading.Lock()

    def _count(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        self.rfile.read(length)
        with self.lock:
            self.counts[self.path] += 1
        body = json.dumps({"path": self.path}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_GET = do_POST = _count

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def hits() -> Iterator[tuple[str, int]]:
    """A counting HTTP server on the node's address: (host, port)."""
    host = node_ip()
    Hits.counts = Counter()
    server = http.server.ThreadingHTTPServer((host, free_port(host)), Hits)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield host, server.server_address[1]
    server.shutdown()


def reviewer_of(api: client.ApiClient, namespace: str) -> Agent:
    return Agent.create(api, namespace, "reviewer", role="tooladapter-reviewer")


def patch_invocation(
    api: client.ApiClient, namespace: str, name: str, body: dict[str, Any]
) -> None:
    custom(api).patch_namespaced_custom_object(
        GROUP, VERSION, namespace, "toolinvocations", name, body
    )


def state_of(agent: Agent, name: str) -> str | None:
    return status_of(get(agent.api, agent.namespace, "toolinvocations", name)).get("state")


def secret_tool(
    api: client.ApiClient,
    namespace: str,
    tool_id: str,
    value: str,
    command: list[str],
    **spec: Any,
) -> None:
    client.CoreV1Api(api).create_namespaced_secret(
        namespace,
        {  # type: ignore[arg-type]  # the client sends a dict body as is
            "metadata": {"name": "db"},
            "data": {"password": base64.b64encode(value.encode()).decode()},
        },
    )
    container_tool(
        api,
        namespace,
        tool_id,
        command,
        credentials=[secret_file("db", "db", "password")],
        **spec,
    )


# --------------------------------------------------------------------------- leak


def test_a_result_cut_at_its_bound_shows_no_part_of_a_brokered_secret(
    api: client.ApiClient, ns: Namespace, agent: Agent, operator: OperatorProcess
) -> None:
    # A platform tool that echoes its request, then checks the database credential: the
    # agent chooses how long the echo is, so it chooses where the 1024-byte bound cuts.
    value = "pa55-Word-Kq7ZxR2mT9vLw4Yb"
    secret_tool(
        api,
        ns.name,
        "echo-then-check",
        value,
        ["cat", "/tooladapter/arguments.json", "/tooladapter/credentials/db/password"],
        maxResultBytes=1024,
    )
    agent.grant(["echo-then-check"], ["sandbox"])
    for before_cut in (10, len(value) - 2):
        pad = "x" * (1024 - before_cut - len('{"pad":""}'))
        name = agent.invoke("echo-then-check", {"pad": pad})
        status = status_of(agent.wait(name, timeout=180))
        assert status["state"] == "Observed", pretty(status)
        content = status["result"]["content"]
        assert content.startswith('{"pad":"xxx'), content[:40]
        # Redaction comes before the bound: not even a prefix of the value may show.
        assert value[:8] not in json.dumps(status), (before_cut, content[-120:])
        digest = status["resultRef"].split(":", 1)[1]
        stored = (operator.artifacts / "results" / "sha256" / digest[:2] / digest).read_text()
        assert value[:8] not in stored, (before_cut, stored[-120:])


def test_a_brokered_secret_that_is_json_is_kept_out_of_the_structured_result_too(
    api: client.ApiClient, ns: Namespace, agent: Agent
) -> None:
    # A registry credential (a Docker config.json) brokered to a tool that prints it: the
    # same shape of tool as the password check of test_holes.py, with a JSON value.
    auth = base64.b64encode(b"robot:hunter2-Registry-Pw").decode()
    value = json.dumps({"auths": {"registry.example.com": {"auth": auth}}})
    client.CoreV1Api(api).create_namespaced_secret(
        ns.name,
        {  # type: ignore[arg-type]  # the client sends a dict body as is
            "metadata": {"name": "regcred"},
            "data": {"config.json": base64.b64encode(value.encode()).decode()},
        },
    )
    container_tool(
        api,
        ns.name,
        "registry-check",
        ["cat", "/tooladapter/credentials/regcred/config.json"],
        credentials=[secret_file("regcred", "regcred", "config.json")],
    )
    agent.grant(["registry-check"], ["sandbox"])
    status = status_of(agent.wait(agent.invoke("registry-check", {}), timeout=180))
    assert status["state"] == "Observed", pretty(status)
    result = status["result"]
    # The text is redacted as one value ...
    assert "REDACTED" in result["content"] and auth not in result["content"]
    # ... and the same output, parsed as JSON, must not carry the value piece by piece.
    assert auth not in json.dumps(status), json.dumps(result.get("structuredContent"))


def test_what_an_agent_reads_of_a_result_cannot_confirm_a_guess_of_a_brokered_secret(
    api: client.ApiClient, ns: Namespace, agent: Agent
) -> None:
    # A weak but real password: whoever can test guesses offline has it in seconds.
    value = "winter2026!"
    secret_tool(api, ns.name, "db-check", value, ["cat", "/tooladapter/credentials/db/password"])
    agent.grant(["db-check"], ["sandbox"])
    status = status_of(agent.wait(agent.invoke("db-check", {}), timeout=180))
    assert status["state"] == "Observed", pretty(status)
    assert value not in json.dumps(status) and "REDACTED" in status["result"]["content"]
    # Everything hex-looking the agent reads (originalSha256, resultHash, ...) must not be
    # the hash of the raw output, or the agent can check candidate passwords against it.
    seen = set(re.findall(r"[0-9a-f]{64}", json.dumps(status)))
    guesses = {hashlib.sha256(g).hexdigest() for g in (value.encode(), value.encode() + b"\n")}
    assert not guesses & seen, "status carries sha256 of the unredacted output"


# --------------------------------------------------------------------------- stall


def test_another_agents_metadata_patches_do_not_hold_back_an_approved_call(
    api: client.ApiClient, ns: Namespace, agent: Agent, hits: tuple[str, int]
) -> None:
    host, port = hits
    address = f"{host}:{port}"
    descriptor(
        api,
        ns.name,
        "gated",
        kind="http",
        side_effect_class="shared-write",
        inputSchema={"type": "object", "properties": {"id": {"type": "string"}}},
        http={"method": "POST", "url": f"http://{address}/gated/{{id}}", "allowedHosts": [address]},
    )
    agent.grant(["gated"], ["shared-write"])
    other = Agent.create(api, ns.name, "agent-2")
    reviewer = reviewer_of(api, ns.name)
    name = agent.invoke("gated", {"id": "victim"})
    agent.wait(name, states={"AwaitingApproval"})

    # agent-2 only annotates agent-1's invocation, over and over (the API server lets it:
    # the metadata policy guards finalizers, owner references and labels).
    stop = threading.Event()
    outcomes: Counter[object] = Counter()

    def meddle(worker: int) -> None:
        i = 0
        while not stop.is_set():
            i += 1
            try:
                patch_invocation(
                    other.api, ns.name, name, {"metadata": {"annotations": {f"n{worker}": str(i)}}}
                )
                outcomes["accepted"] += 1
            except client.ApiException as exc:
                outcomes[exc.status] += 1

    workers = [threading.Thread(target=meddle, args=(w,), daemon=True) for w in range(8)]
    for worker in workers:
        worker.start()
    try:
        wait_for(lambda: sum(outcomes.values()) > 20, timeout=30, what="agent-2 patching")
        approve(reviewer, name)
        # Approved, the call must run while agent-2 keeps going (it stayed AwaitingApproval
        # for as long as the patches came, ~70/s from one agent).
        ended = status_of(agent.wait(name, timeout=30))
    finally:
        stop.set()
        for worker in workers:
            worker.join(timeout=30)
    assert ended["state"] == "Observed", (pretty(ended), dict(outcomes))
    assert Hits.counts["/gated/victim"] == 1
    # Ended, it lets go of its finalizer (a deleted call must not wait for a new event).
    wait_for(
        lambda: not get(api, ns.name, "toolinvocations", name)["metadata"].get("finalizers"),
        timeout=30,
        what="the ended call's finalizer released",
    )


def test_a_fencing_token_beyond_json_numbers_is_refused_at_create_and_the_largest_works(
    api: client.ApiClient, ns: Namespace, agent: Agent, hits: tuple[str, int]
) -> None:
    host, port = hits
    address = f"{host}:{port}"
    descriptor(
        api,
        ns.name,
        "lookup",
        kind="http",
        inputSchema={"type": "object", "properties": {"id": {"type": "string"}}},
        http={"method": "GET", "url": f"http://{address}/lookup/{{id}}", "allowedHosts": [address]},
        rateLimits={"concurrency": 1},
    )
    agent.grant(["lookup"], ["read"])
    # 2**53 + 1 has no exact JSON number (RFC 8785): such a call once never ended and held
    # its concurrency slot forever. The API server refuses it, naming the field.
    with pytest.raises(client.ApiException) as refused:
        agent.invoke("lookup", {"id": "odd"}, attemptId="attempt-1", fencingToken=2**53 + 1)
    assert refused.value.status == 422 and "spec.fencingToken" in str(refused.value.body)
    largest = agent.invoke("lookup", {"id": "max"}, attemptId="attempt-1", fencingToken=2**53 - 1)
    ended = status_of(agent.wait(largest, timeout=60))
    assert ended["state"] == "Observed" and ended.get("receiptRef"), pretty(ended)
    mine = status_of(agent.wait(agent.invoke("lookup", {"id": "mine"}), timeout=60))
    assert mine["state"] == "Observed", pretty(mine)


# --------------------------------------------------------------------------- interrupt


def test_an_interrupt_after_the_tool_reached_the_network_never_ends_cancelled(
    api: client.ApiClient, ns: Namespace, agent: Agent, hits: tuple[str, int]
) -> None:
    host, port = hits
    # An external-class shell tool (its effect leaves the sandbox), gated by approvals.
    shell_tool(api, ns.name, "deploy", side_effect_class="external", egress=[f"{host}/32"])
    agent.grant(["deploy"], ["external"])
    reviewer = reviewer_of(api, ns.name)
    finals = {}
    for i in range(3):
        path = f"/deploy/{i}"
        name = agent.invoke("deploy", {"command": f"wget -q -O - http://{host}:{port}{path}"})
        agent.wait(name, states={"AwaitingApproval"})
        approve(reviewer, name)

        # The agent interrupts its own approved call the moment the effect has happened
        # (here: the moment the server saw the request).
        def reached(p: str = path) -> bool:
            return Hits.counts[p] > 0

        wait_for(reached, timeout=120, what=f"{path} reached", interval=0.01)
        patch_invocation(agent.api, ns.name, name, {"spec": {"interrupt": True}})
        finals[path] = status_of(agent.wait(name, timeout=120))
    for path, status in finals.items():
        assert Hits.counts[path] == 1
        # "Cancelled when nothing (outside its own sandbox) can have happened, otherwise
        # Uncertain": the request was sent, so Cancelled ("before the tool started") is a
        # false record, and a caller or reviewer trusting it runs the effect again.
        assert status["state"] != "Cancelled", (path, pretty(status))
        assert status["state"] in TERMINAL


# --------------------------------------------------------------------------- egress


def another_host_address() -> str | None:
    """An address of this machine other than the node's (e.g. the pod bridge's gateway):
    reachable from a pod whose egress is not restricted, and outside an allow-list that
    names only the node."""
    node = node_ip()
    for link in json.loads(subprocess.check_output(["ip", "-j", "-4", "addr"])):
        for info in link.get("addr_info") or []:
            address = info.get("local")
            if address and address != node and not address.startswith("127."):
                return str(address)
    return None


def test_a_tool_never_reaches_an_address_outside_its_egress_allow_list(
    api: client.ApiClient, ns: Namespace, agent: Agent, hits: tuple[str, int]
) -> None:
    host, port = hits
    other = another_host_address()
    # The pod network's gateway on the node (the CNI bridge) always stands for one.
    assert other is not None, "no second address of this machine to stand for a forbidden one"
    forbidden: Counter[str] = Counter()

    class Forbidden(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            forbidden[self.path] += 1
            self.send_response(200)
            self.send_header("Content-Length", "2")
            self.end_headers()
            self.wfile.write(b"ok")

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer((other, free_port(other)), Forbidden)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        # The platform lets the tool reach one service on the node (as the `hit` tool of
        # test_trust.py does); that allow-list happens to cover the operator's canary.
        shell_tool(api, ns.name, "fetch", egress=[f"{host}/32"])
        agent.grant(["fetch"], ["sandbox"])
        allowed = status_of(
            agent.wait(agent.invoke("fetch", {"command": f"wget -q -O - http://{host}:{port}/ok"}))
        )
        assert allowed["state"] == "Observed" and Hits.counts["/ok"] == 1, pretty(allowed)
        # The agent's first act is the forbidden request: it must find the policy in force.
        target = f"http://{other}:{server.server_address[1]}"
        for i in range(3):
            name = agent.invoke("fetch", {"command": f"wget -q -O - {target}/forbidden/{i}"})
            status = status_of(agent.wait(name, timeout=180))
            assert forbidden[f"/forbidden/{i}"] == 0, (
                f"the sandbox reached {other}, outside egress.allow, before its NetworkPolicy "
                f"was enforced (no network gate): {pretty(status)}"
            )
    finally:
        server.shutdown()


# --------------------------------------------------------------------------- shell


def test_a_listed_awk_program_that_redirects_its_output_waits_for_approval(
    api: client.ApiClient, ns: Namespace, agent: Agent
) -> None:
    shell_tool(api, ns.name, "text", shell={"allow": ["awk"]})
    agent.grant(["text"], ["sandbox", "shared-write"])
    # The rule: an awk program that redirects is not covered by the `awk` entry ...
    plain = agent.invoke("text", {"command": """awk 'BEGIN{print "a" > "/workspace/x"}'"""})
    waiting = status_of(agent.wait(plain, states={"AwaitingApproval", *TERMINAL}))
    assert waiting["state"] == "AwaitingApproval", pretty(waiting)
    # ... and a brace inside a printed string must not hide the redirect.
    for program in (
        'BEGIN{print "{" > "/workspace/x"; close("/workspace/x");'
        ' getline l < "/workspace/x"; print "read back " l}',
        'BEGIN{printf("}") > "/workspace/y"}',
    ):
        name = agent.invoke("text", {"command": f"awk '{program}'"})
        status = status_of(agent.wait(name, states={"AwaitingApproval", *TERMINAL}))
        assert status["state"] in ("AwaitingApproval", "Denied"), (program, pretty(status))
        assert status["effectiveClass"] != "sandbox" or status["state"] == "Denied"
