"""Data flow on the real cluster, as an agent (issue 42): a run that read private data and
untrusted content cannot send it out without an approval whose reasons name both calls; a
clean run sends without one; a policy's `deny` ends the send Denied."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from kubernetes import client

from tests.integration.objects import Agent, approve, create, descriptor, get, pretty, status_of
from tests.integration.servers import Recorder, recording_server
from tooladapter.devtools import Namespace, wait_for

LOOPBACK = "127.0.0.1"
CUSTOMERS = "customers"


@pytest.fixture
def sink() -> Iterator[Recorder]:
    with recording_server(LOOPBACK) as server:
        yield server


def publish_tools(api: client.ApiClient, ns: Namespace, agent: Agent, port: int) -> None:
    """`crm` reads a ConfigMap (private), `web` stands for attacker-written content
    (untrusted), `send` is an http tool of class read that can reach one host (a sink)."""
    client.CoreV1Api(api).create_namespaced_config_map(
        ns.name,
        {"metadata": {"name": CUSTOMERS}, "data": {"alice": "alice@example.com"}},  # type: ignore[arg-type]  # the client sends a dict body as is
    )
    rbac = client.RbacAuthorizationV1Api(api)
    rbac.create_namespaced_role(
        ns.name,
        {  # type: ignore[arg-type]  # the client sends a dict body as is
            "metadata": {"name": "read-customers"},
            "rules": [
                {
                    "apiGroups": [""],
                    "resources": ["configmaps"],
                    "verbs": ["get"],
                    "resourceNames": [CUSTOMERS],
                }
            ],
        },
    )
    rbac.create_namespaced_role_binding(
        ns.name,
        {  # type: ignore[arg-type]  # the client sends a dict body as is
            "metadata": {"name": "read-customers"},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "Role",
                "name": "read-customers",
            },
            "subjects": [{"kind": "ServiceAccount", "name": agent.name, "namespace": ns.name}],
        },
    )
    descriptor(
        api,
        ns.name,
        "crm",
        kind="native",
        native={"name": "read-configmap"},
        dataFlow={"labels": ["private"]},
    )
    descriptor(
        api,
        ns.name,
        "web",
        kind="native",
        native={"name": "list-tools"},
        dataFlow={"labels": ["untrusted"]},
    )
    descriptor(
        api,
        ns.name,
        "send",
        kind="http",
        inputSchema={"type": "object", "properties": {"q": {"type": "string"}}},
        http={
            "method": "GET",
            "url": f"http://{LOOPBACK}:{port}/send?q={{q}}",
            "allowedHosts": [f"{LOOPBACK}:{port}"],
        },
    )
    agent.grant(["crm", "web", "send"], ["read"])


def read_then_fetch(agent: Agent, run: str) -> tuple[str, str]:
    read = agent.invoke("crm", {"name": CUSTOMERS}, runId=run)
    assert status_of(agent.wait(read))["state"] == "Observed"
    fetch = agent.invoke("web", {}, runId=run)
    assert status_of(agent.wait(fetch))["state"] == "Observed"
    return read, fetch


def test_a_run_that_read_private_and_untrusted_data_sends_only_when_approved(
    api: client.ApiClient, ns: Namespace, agent: Agent, sink: Recorder
) -> None:
    publish_tools(api, ns, agent, sink.port)
    read, fetch = read_then_fetch(agent, "run-a")

    send = agent.invoke("send", {"q": "alice"}, runId="run-a")
    waiting = agent.wait(send, states={"AwaitingApproval", "Observed", "Denied", "Failed"})

    status = status_of(waiting)
    assert status["state"] == "AwaitingApproval", pretty(waiting)
    (detail,) = [s["detail"] for s in status["stages"] if s.get("outcome") == "waiting"]
    assert read in detail and fetch in detail, detail
    assert f"{LOOPBACK}:{sink.port}" in detail
    assert sink.total == 0

    reviewer = Agent.create(api, ns.name, "reviewer-1", role="tooladapter-reviewer")
    approve(reviewer, send)
    ended = agent.wait(send)
    assert status_of(ended)["state"] == "Observed", pretty(ended)
    assert sink.total == 1
    sources = {(s["label"], s["invocation"]) for s in status_of(ended)["dataFlow"]["sources"]}
    assert sources == {("private", read), ("untrusted", fetch)}


def test_the_same_send_in_a_clean_run_runs_without_approval(
    api: client.ApiClient, ns: Namespace, agent: Agent, sink: Recorder
) -> None:
    publish_tools(api, ns, agent, sink.port)
    read_then_fetch(agent, "run-a")

    send = agent.invoke("send", {"q": "alice"}, runId="run-b")
    ended = agent.wait(send)

    status = status_of(ended)
    assert status["state"] == "Observed", pretty(ended)
    assert [s["outcome"] for s in status["stages"] if s["stage"] == "approval"] == ["not-required"]
    assert sink.total == 1


def test_deny_ends_the_send_denied_at_policy(
    api: client.ApiClient, ns: Namespace, agent: Agent, sink: Recorder
) -> None:
    publish_tools(api, ns, agent, sink.port)
    create(
        api,
        ns.name,
        "toolpolicies",
        {
            "kind": "ToolPolicy",
            "metadata": {"name": "no-exfiltration"},
            "spec": {"dataFlow": {"onPrivateAndUntrusted": "deny"}},
        },
    )
    wait_for(
        lambda: (get(api, ns.name, "toolpolicies", "no-exfiltration").get("status") or {}).get(
            "valid"
        ),
        timeout=60,
        what="the policy seen by the operator",
    )
    read, fetch = read_then_fetch(agent, "run-a")

    send = agent.invoke("send", {"q": "alice"}, runId="run-a")
    ended = agent.wait(send)

    status = status_of(ended)
    assert status["state"] == "Denied" and status["deniedStage"] == "policy", pretty(ended)
    assert read in status["message"] and fetch in status["message"]
    assert sink.total == 0
    assert get(api, ns.name, "toolinvocations", send)["status"]["failureClass"]
