"""The data-flow rule attacked on the real cluster, as an agent with only an agent's rights
(issue 42): the scope stores out of its reach, a label that arrives while a send waits for
its approval, a duplicate key from a clean run, dry runs of the reads."""

from __future__ import annotations

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from tests.integration.dataflow.tools import CUSTOMERS, publish_tools, read_then_fetch
from tests.integration.objects import Agent, approve, pretty, status_of
from tests.integration.servers import Recorder
from tooladapter.devtools import Namespace
from tooladapter.enums import ScopeKind
from tooladapter.pipeline import dataflow as rule

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(600)]

WAITING = {"AwaitingApproval", "Observed", "Denied", "Failed"}


def test_an_agent_can_neither_read_nor_rewrite_nor_delete_its_scopes_labels(
    api: client.ApiClient, ns: Namespace, agent: Agent, sink: Recorder
) -> None:
    publish_tools(api, ns, agent, sink.port)
    read_then_fetch(agent, "run-a")
    store = rule.Scope(ScopeKind.RUN, ns.name, agent.user, "run-a").store_name
    # The operator wrote the run's store.
    held = client.CoreV1Api(api).read_namespaced_config_map(store, ns.name).data
    assert sorted(k.partition(".")[0] for k in held) == ["private", "untrusted"], held

    core = client.CoreV1Api(agent.api)
    attempts = {
        "read": lambda: core.read_namespaced_config_map(store, ns.name),
        "patch": lambda: core.patch_namespaced_config_map(store, ns.name, {"data": None}),
        "delete": lambda: core.delete_namespaced_config_map(store, ns.name),
        "create": lambda: core.create_namespaced_config_map(
            ns.name,
            {"metadata": {"name": rule.STORE_PREFIX + "0" * 40}},  # type: ignore[arg-type]  # the client sends a dict body as is
        ),
    }
    for verb, attempt in attempts.items():
        with pytest.raises(ApiException) as refused:
            attempt()
        assert refused.value.status == 403, verb

    send = agent.invoke("send", {"q": "alice"}, runId="run-a")
    assert status_of(agent.wait(send, states=WAITING))["state"] == "AwaitingApproval"


def test_a_label_that_arrives_while_the_send_waits_denies_it_after_its_approval(
    api: client.ApiClient, ns: Namespace, agent: Agent, sink: Recorder
) -> None:
    publish_tools(api, ns, agent, sink.port)
    read_then_fetch(agent, "run-a")
    send = agent.invoke("send", {"q": "alice"}, runId="run-a")
    assert status_of(agent.wait(send, states=WAITING))["state"] == "AwaitingApproval"
    # More attacker content after the reviewer was asked: the reviewer never saw it.
    later = agent.invoke("web", {}, runId="run-a")
    assert status_of(agent.wait(later))["state"] == "Observed"

    reviewer = Agent.create(api, ns.name, "reviewer-1", role="tooladapter-reviewer")
    approve(reviewer, send)
    ended = status_of(agent.wait(send))

    assert ended["state"] == "Denied", pretty(ended)
    assert later in ended["message"] and "call again" in ended["message"]
    assert sink.total == 0


def test_a_duplicate_key_from_a_clean_run_carries_the_first_calls_label(
    api: client.ApiClient, ns: Namespace, agent: Agent, sink: Recorder
) -> None:
    publish_tools(api, ns, agent, sink.port)
    first = agent.invoke("crm", {"name": CUSTOMERS}, runId="run-a", idempotencyKey="k1")
    assert status_of(agent.wait(first))["state"] == "Observed"
    # The same request and key in a clean run: it returns the first call's data.
    again = agent.invoke("crm", {"name": CUSTOMERS}, runId="run-b", idempotencyKey="k1")
    dup = status_of(agent.wait(again))
    assert dup.get("duplicateOf") == first and dup["dataFlow"]["labels"] == ["private"], dup
    fetch = agent.invoke("web", {}, runId="run-b")
    assert status_of(agent.wait(fetch))["state"] == "Observed"

    send = agent.invoke("send", {"q": "alice"}, runId="run-b")
    waiting = status_of(agent.wait(send, states=WAITING))

    assert waiting["state"] == "AwaitingApproval", pretty(waiting)
    assert again in waiting["dataFlow"]["gated"] and fetch in waiting["dataFlow"]["gated"]
    assert sink.total == 0


def test_dry_runs_of_the_reads_bring_no_label(
    api: client.ApiClient, ns: Namespace, agent: Agent, sink: Recorder
) -> None:
    publish_tools(api, ns, agent, sink.port)
    for tool, arguments in (("crm", {"name": CUSTOMERS}), ("web", {})):
        preview = status_of(agent.wait(agent.invoke(tool, arguments, runId="run-a", dryRun=True)))
        assert preview["state"] == "Previewed", pretty(preview)

    ended = status_of(agent.wait(agent.invoke("send", {"q": "x"}, runId="run-a")))

    assert ended["state"] == "Observed", pretty(ended)
    assert sink.total == 1
