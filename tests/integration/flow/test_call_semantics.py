"""The reference's call semantics on the real cluster (issue 27): a tool's own error is
Observed and never run again, Failed only before an effect, a duplicate returns its first
call's receipt, the same key with other arguments is refused, and no identical call runs
while one is Uncertain and unconfirmed."""

from __future__ import annotations

import socket
import threading
import urllib.request
from typing import Any

from kubernetes import client

from tests.integration.objects import (
    Agent,
    approve,
    confirm_effect,
    descriptor,
    get,
    pretty,
    status_of,
)
from tests.integration.servers import recording_server
from tooladapter.devtools import Namespace, OperatorProcess, wait_for

LOOPBACK = "127.0.0.1"


def http_tool(
    api: client.ApiClient, namespace: str, tool: str, port: int, cls: str, **extra: Any
) -> None:
    descriptor(
        api,
        namespace,
        tool,
        kind="http",
        side_effect_class=cls,
        inputSchema={"type": "object", "properties": {"id": {"type": "string"}}},
        http={
            "method": "POST",
            "url": f"http://{LOOPBACK}:{port}/effect/{{id}}",
            "allowedHosts": [f"{LOOPBACK}:{port}"],
        },
        **extra,
    )


def metrics_of(operator: OperatorProcess) -> str:
    url = f"http://127.0.0.1:{operator.metrics_port}/metrics"
    with urllib.request.urlopen(url, timeout=10) as response:
        return str(response.read().decode())


def sample(text: str, name: str, **labels: str) -> float:
    """The sum of `name`'s samples whose labels include `labels` (0 when none)."""
    total = 0.0
    for line in text.splitlines():
        if not line.startswith(name + "{"):
            continue
        head, _, value = line.rpartition(" ")
        if all(f'{k}="{v}"' in head for k, v in labels.items()):
            total += float(value)
    return total


def test_an_approved_write_whose_server_answers_500_is_observed_with_is_error_and_runs_once(
    api: client.ApiClient, ns: Namespace, agent: Agent
) -> None:
    with recording_server(LOOPBACK, status=500) as server:
        # A retry policy is there to prove the flow never uses it on an answered call.
        http_tool(
            api,
            ns.name,
            "post",
            server.port,
            "shared-write",
            retryPolicy={"maxAttempts": 3, "backoffSeconds": 0},
        )
        agent.grant(["post"], ["shared-write"])
        reviewer = Agent.create(api, ns.name, "reviewer-1", role="tooladapter-reviewer")
        name = agent.invoke("post", {"id": "a"})
        agent.wait(name, states={"AwaitingApproval"})
        approve(reviewer, name)
        status = status_of(agent.wait(name, timeout=60))

        assert status["state"] == "Observed", pretty(status)
        assert status["failureClass"] == "tool-error"
        assert status["result"]["isError"] is True
        assert status["result"]["httpStatus"] == 500
        assert '"ok": false' in status["result"]["content"]
        succeeded = {c["type"]: c for c in status["conditions"]}["Succeeded"]
        assert (succeeded["status"], succeeded["reason"]) == ("False", "ToolError")
        assert server.hits["/effect/a"] == 1
        assert status["execution"].get("attempts", 1) == 1, pretty(status)


def test_a_connection_refused_before_sending_ends_failed(
    api: client.ApiClient, ns: Namespace, agent: Agent
) -> None:
    with socket.socket() as closed:
        closed.bind((LOOPBACK, 0))
        port = closed.getsockname()[1]
    http_tool(api, ns.name, "nobody", port, "external")
    agent.grant(["nobody"], ["external"])
    reviewer = Agent.create(api, ns.name, "reviewer-1", role="tooladapter-reviewer")
    name = agent.invoke("nobody", {"id": "a"})
    agent.wait(name, states={"AwaitingApproval"})
    approve(reviewer, name)

    status = status_of(agent.wait(name, timeout=60))

    assert (status["state"], status["failureClass"]) == ("Failed", "transient"), pretty(status)
    assert "could not connect" in status["message"]


def test_a_duplicate_ends_with_the_first_receipt_and_the_same_key_with_other_arguments_is_refused(
    api: client.ApiClient, ns: Namespace, agent: Agent, operator: OperatorProcess
) -> None:
    with recording_server(LOOPBACK) as server:
        http_tool(api, ns.name, "read", server.port, "read")
        agent.grant(["read"], ["read"])
        first = agent.invoke("read", {"id": "a"}, idempotencyKey="k-1")
        first_status = status_of(agent.wait(first))
        assert first_status["state"] == "Observed", pretty(first_status)

        second = status_of(agent.wait(agent.invoke("read", {"id": "a"}, idempotencyKey="k-1")))
        other = status_of(agent.wait(agent.invoke("read", {"id": "b"}, idempotencyKey="k-1")))

        assert second["state"] == "Observed", pretty(second)
        assert second["duplicateOf"] == first
        assert (
            second["duplicateOfUid"]
            == get(api, ns.name, "toolinvocations", first)["metadata"]["uid"]
        )
        assert second["receiptRef"] == first_status["receiptRef"]
        assert second["result"] == first_status["result"]
        assert (other["state"], other["failureClass"]) == ("Denied", "key-reused"), pretty(other)
        assert server.total == 1
    text = metrics_of(operator)
    assert sample(text, "tooladapter_duplicates_total", tenant=ns.name, state="Observed") == 1
    # The key reuse is the only denial; the duplicate is neither a denial nor an invocation.
    assert sample(text, "tooladapter_denials_total", tenant=ns.name) == 1
    assert sample(text, "tooladapter_invocations_total", tenant=ns.name, state="Observed") == 1


def test_no_identical_call_runs_while_one_is_uncertain_and_after_did_not_happen_one_runs_once(
    api: client.ApiClient, ns: Namespace, agent: Agent
) -> None:
    release = threading.Event()
    try:
        with recording_server(LOOPBACK, hold_first=release) as server:
            http_tool(api, ns.name, "deploy", server.port, "external", timeoutSeconds=3)
            agent.grant(["deploy"], ["external"])
            reviewer = Agent.create(api, ns.name, "reviewer-1", role="tooladapter-reviewer")
            first = agent.invoke("deploy", {"id": "x"}, idempotencyKey="k-1")
            agent.wait(first, states={"AwaitingApproval"})
            approve(reviewer, first)
            uncertain = status_of(agent.wait(first, timeout=60))
            assert uncertain["state"] == "Uncertain", pretty(uncertain)
            assert server.total == 1

            # A new key, no key: refused before anything (no approval is even asked).
            extras: tuple[dict[str, Any], ...] = ({"idempotencyKey": "k-2"}, {})
            for extra in extras:
                retry = status_of(agent.wait(agent.invoke("deploy", {"id": "x"}, **extra)))
                assert retry["state"] == "Denied", pretty(retry)
                assert retry["failureClass"] == "unconfirmed-effect"
                assert retry["deniedStage"] == "idempotency"
                assert first in retry["message"] and "confirm" in retry["message"]
            assert server.total == 1

            operations = Agent.create(api, ns.name, "ops", role="tooladapter-operations")
            confirm_effect(
                operations, ns.name, first, happened=False, evidence="the partner has no deploy x"
            )
            confirmed = wait_for(
                lambda: (
                    s
                    if (s := status_of(get(api, ns.name, "toolinvocations", first)))
                    .get("effectConfirmation", {})
                    .get("recorded")
                    else None
                ),
                timeout=30,
                what="confirmation recorded",
            )
            assert confirmed["failureClass"] == "effect-did-not-happen", pretty(confirmed)
            assert operations.user in confirmed["message"]

            again = agent.invoke("deploy", {"id": "x"})
            agent.wait(again, states={"AwaitingApproval"})
            approve(reviewer, again)
            ran = status_of(agent.wait(again, timeout=60))
            assert ran["state"] == "Observed", pretty(ran)
            assert server.hits["/effect/x"] == 2  # the held first one, and this one
    finally:
        release.set()
