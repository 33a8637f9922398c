"""Issue 43: interrupt through the REST door, and a call read by its uid, on the real
cluster. The interrupt is the caller's own `spec.interrupt` write, so the admission policy
decides who may: the call's caller yes, another agent of the namespace no."""

from __future__ import annotations

import uuid

import pytest
from kubernetes import client

from tests.integration.flow.test_trust import running_pod
from tests.integration.gateway_client import http_json, token_of, unbound_sa
from tests.integration.objects import Agent, get, pretty, shell_tool, status_of
from tooladapter.devtools import Namespace, OperatorProcess, wait_for

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(600)]

#: Interrupted while its tool runs: Cancelled (a sandbox-class effect stays in its own
#: sandbox) or Uncertain; never Observed (it would have slept 300 s) nor Failed.
SETTLED = {"Cancelled", "Uncertain"}


def test_a_running_sandboxed_call_is_interrupted_through_rest_by_its_caller_only(
    api: client.ApiClient, ns: Namespace, agent: Agent, operator: OperatorProcess
) -> None:
    shell_tool(api, ns.name, "long", timeout=300)
    agent.grant(["long"], ["sandbox"])
    other = Agent.create(api, ns.name, "agent-2")
    call = agent.invoke("long", {"command": "sleep 300"})
    wait_for(lambda: running_pod(api, ns.name, call), timeout=180, what="pod running")
    url = f"{operator.gateway_url}/namespaces/{ns.name}/tool-invocations/{call}"

    # Another agent of the namespace may read the call (its role grants get) but not stop it.
    status, kind, body = http_json("POST", f"{url}/interrupt", token_of(other))
    assert status == 403 and kind.startswith("application/problem+json"), body
    assert "interrupt" in body["detail"], body
    assert not (get(api, ns.name, "toolinvocations", call).get("spec") or {}).get("interrupt")

    status, _, body = http_json("POST", f"{url}/interrupt", token_of(agent))
    assert status == 202, body
    assert body["name"] == call and body["spec"]["interrupt"] is True, body
    ended = status_of(agent.wait(call, timeout=180))
    assert ended["state"] in SETTLED, pretty(ended)

    # Once it ended there is nothing to interrupt.
    status, _, body = http_json("POST", f"{url}/interrupt", token_of(agent))
    assert status == 409 and ended["state"] in body["detail"], body
    missing = f"{operator.gateway_url}/namespaces/{ns.name}/tool-invocations/nope/interrupt"
    status, _, body = http_json("POST", missing, token_of(agent))
    assert status == 404, body


def test_an_invocation_is_read_by_its_uid_with_the_rights_of_a_read_by_name(
    api: client.ApiClient, ns: Namespace, agent: Agent, operator: OperatorProcess
) -> None:
    shell_tool(api, ns.name, "echo")
    agent.grant(["echo"], ["sandbox"])
    call = agent.invoke("echo", {"command": "echo hi"})
    # Ended first: the two reads below compare whole objects, which a running call changes.
    agent.wait(call)
    uid = get(api, ns.name, "toolinvocations", call)["metadata"]["uid"]
    base = f"{operator.gateway_url}/namespaces/{ns.name}/tool-invocations"
    token = token_of(agent)

    status, _, by_name = http_json("GET", f"{base}/{call}", token)
    assert status == 200, by_name
    status, _, by_uid = http_json("GET", f"{base}/{uid}", token)
    assert status == 200, by_uid
    assert by_uid["name"] == call and by_uid["uid"] == uid and by_uid == by_name

    # A uid that names nothing, and one from another namespace, are not found.
    status, _, body = http_json("GET", f"{base}/{uuid.uuid4()}", token)
    assert status == 404, body
    elsewhere = Namespace(api)
    try:
        status, _, body = http_json(
            "GET",
            f"{operator.gateway_url}/namespaces/{elsewhere.name}/tool-invocations/{uid}",
            token,
        )
        assert status == 403, body  # the agent may read nothing there
    finally:
        elsewhere.delete()

    # Without a right to read invocations, the uid does not help.
    status, _, body = http_json("GET", f"{base}/{uid}", unbound_sa(api, ns.name, "stranger"))
    assert status == 403, body
    assert call not in body["detail"], body
