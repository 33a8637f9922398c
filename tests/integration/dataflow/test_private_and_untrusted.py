"""Data flow on the real cluster, as an agent (issue 42): a run that read private data and
untrusted content cannot send it out without an approval whose reasons name both calls; a
clean run sends without one; a policy's `deny` ends the send Denied."""

from __future__ import annotations

import pytest
from kubernetes import client

from tests.integration.dataflow.tools import CUSTOMERS, LOOPBACK, publish_tools, read_then_fetch
from tests.integration.objects import (
    Agent,
    approve,
    create,
    get,
    pretty,
    status_of,
    stored_receipt,
)
from tests.integration.servers import Recorder
from tooladapter.devtools import Namespace, OperatorProcess, wait_for


def test_a_run_that_read_private_and_untrusted_data_sends_only_when_approved(
    api: client.ApiClient,
    ns: Namespace,
    agent: Agent,
    sink: Recorder,
    operator: OperatorProcess,
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
    # The approved send's receipt records what its run held, and why it was gated.
    receipt = stored_receipt(operator.artifacts, status_of(ended))
    held = {(s["label"], s["invocation"]) for s in receipt["dataFlow"]["sources"]}
    assert held == sources and read in receipt["dataFlow"]["gated"]
    # The private read's receipt records the label it brought.
    read_receipt = stored_receipt(operator.artifacts, status_of(agent.wait(read)))
    assert read_receipt["dataFlow"]["labels"] == ["private"]


@pytest.mark.parametrize("case", ["clean-run", "one-label", "other-caller"])
def test_the_same_send_runs_without_approval_where_its_scope_lacks_a_label(
    api: client.ApiClient, ns: Namespace, agent: Agent, sink: Recorder, case: str
) -> None:
    publish_tools(api, ns, agent, sink.port)
    sender = agent
    if case == "one-label":
        read = agent.invoke("crm", {"name": CUSTOMERS}, runId="run-a")
        assert status_of(agent.wait(read))["state"] == "Observed"
    else:
        read_then_fetch(agent, "run-a")
    if case == "other-caller":
        sender = Agent.create(api, ns.name, "agent-2")
        sender.grant(["send"], ["read"])

    send = sender.invoke("send", {"q": "alice"}, runId="run-b" if case == "clean-run" else "run-a")
    ended = sender.wait(send)

    status = status_of(ended)
    assert status["state"] == "Observed", pretty(ended)
    assert [s["outcome"] for s in status["stages"] if s["stage"] == "approval"] == ["not-required"]
    assert sink.total == 1


def test_deny_ends_the_send_denied_at_policy(
    api: client.ApiClient, ns: Namespace, agent: Agent, sink: Recorder
) -> None:
    publish_tools(api, ns, agent, sink.port)
    policy(api, ns, "no-exfiltration", {"onPrivateAndUntrusted": "deny"})
    read, fetch = read_then_fetch(agent, "run-a")

    send = agent.invoke("send", {"q": "alice"}, runId="run-a")
    ended = agent.wait(send)

    status = status_of(ended)
    assert status["state"] == "Denied" and status["deniedStage"] == "policy", pretty(ended)
    assert read in status["message"] and fetch in status["message"]
    assert sink.total == 0
    assert get(api, ns.name, "toolinvocations", send)["status"]["failureClass"]


def test_with_scope_caller_a_clean_runs_send_waits_too(
    api: client.ApiClient, ns: Namespace, agent: Agent, sink: Recorder
) -> None:
    publish_tools(api, ns, agent, sink.port)
    policy(api, ns, "by-caller", {"scope": "caller"})
    read, fetch = read_then_fetch(agent, "run-a")

    send = agent.invoke("send", {"q": "alice"}, runId="run-b")
    waiting = agent.wait(send, states={"AwaitingApproval", "Observed", "Denied", "Failed"})

    status = status_of(waiting)
    assert status["state"] == "AwaitingApproval", pretty(waiting)
    assert read in status["dataFlow"]["gated"] and fetch in status["dataFlow"]["gated"]
    assert sink.total == 0


def test_the_gate_holds_after_a_restart_and_the_earlier_calls_deletion(
    api: client.ApiClient,
    ns: Namespace,
    agent: Agent,
    sink: Recorder,
    operator: OperatorProcess,
) -> None:
    publish_tools(api, ns, agent, sink.port)
    read, fetch = read_then_fetch(agent, "run-a")
    # Retention deleted the calls, and the operator restarted: the labels are not theirs.
    api_objects = client.CustomObjectsApi(api)
    for name in (read, fetch):
        api_objects.delete_namespaced_custom_object(
            "tooladapter.dev", "v1alpha1", ns.name, "toolinvocations", name
        )
    operator.stop()
    operator.start()

    send = agent.invoke("send", {"q": "alice"}, runId="run-a")
    waiting = agent.wait(send, states={"AwaitingApproval", "Observed", "Denied", "Failed"})

    status = status_of(waiting)
    assert status["state"] == "AwaitingApproval", pretty(waiting)
    assert read in status["dataFlow"]["gated"] and fetch in status["dataFlow"]["gated"]


def policy(api: client.ApiClient, ns: Namespace, name: str, flow: dict[str, str]) -> None:
    """A ToolPolicy with `dataFlow: flow`, once the operator has seen it."""
    create(
        api,
        ns.name,
        "toolpolicies",
        {"kind": "ToolPolicy", "metadata": {"name": name}, "spec": {"dataFlow": flow}},
    )
    wait_for(
        lambda: (get(api, ns.name, "toolpolicies", name).get("status") or {}).get("valid"),
        timeout=60,
        what=f"policy {name} seen by the operator",
    )


def test_a_dry_run_of_the_send_says_it_would_wait_and_why(
    api: client.ApiClient, ns: Namespace, agent: Agent, sink: Recorder
) -> None:
    publish_tools(api, ns, agent, sink.port)
    read, fetch = read_then_fetch(agent, "run-a")

    preview = status_of(agent.wait(agent.invoke("send", {"q": "x"}, runId="run-a", dryRun=True)))

    assert preview["state"] == "Previewed", pretty(preview)
    assert preview["preview"]["verdict"] == "would-await-approval", pretty(preview)
    reasons = preview["preview"]["approval"]["reasons"]
    assert any(read in r and fetch in r for r in reasons), reasons
    assert sink.total == 0
