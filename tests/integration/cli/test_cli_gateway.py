"""Issue 16: the CLI's seams with the gateway and the operator, as their users run them.

`receipt get/verify --gateway` read a receipt's bytes through the gateway with the agent's
own token (no artifact store at hand), and `confirm` by a person on call turns an
Uncertain call into a new receipt that verifies the same way."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from kubernetes import client

from tests.integration.cli.test_cli import Cli, explain, native_tool
from tests.integration.objects import Agent, pretty, uncertain_call
from tooladapter.devtools import Namespace, OperatorProcess

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(420)]


def test_receipt_get_and_verify_read_the_receipt_through_the_gateway_as_the_agent(
    api: client.ApiClient,
    ns: Namespace,
    agent: Agent,
    operator: OperatorProcess,
    tmp_path: Path,
) -> None:
    native_tool(api, ns.name, "listing", "read")
    agent.grant(["listing"], ["read"])
    cli = Cli(tmp_path, api, agent)
    outcome = cli.json("invoke", "listing", "--run-id", "run-gw")
    ref = outcome["receiptRef"]
    gateway = operator.gateway_url

    receipt = cli.json("receipt", "get", ref, "--gateway", gateway)
    assert receipt["invocationName"] == outcome["name"], pretty(receipt)
    assert receipt["runId"] == "run-gw" and receipt["state"] == "Observed", pretty(receipt)
    verified = cli.json("receipt", "verify", ref, "--gateway", gateway)
    assert verified["verified"] is True and verified["match"] == "bytes", verified
    assert verified["source"] == gateway, verified

    # A reference no invocation here carries: the gateway answers 404, the CLI exit 8.
    missing = cli("receipt", "get", "sha256:" + "0" * 64, "--gateway", gateway)
    assert missing.returncode == 8, explain(missing)
    # A ServiceAccount with no tooladapter role: the gateway refuses it (exit 9).
    stranger = Cli(tmp_path, api, Agent.create(api, ns.name, "stranger", role="view"))
    refused = stranger("receipt", "get", ref, "--gateway", gateway)
    assert refused.returncode == 9, explain(refused)


def test_confirm_on_an_uncertain_call_writes_a_new_receipt(
    api: client.ApiClient,
    ns: Namespace,
    agent: Agent,
    operator: OperatorProcess,
    tmp_path: Path,
) -> None:
    name, uncertain = uncertain_call(api, ns.name, agent)

    oncall = Cli(
        tmp_path, api, Agent.create(api, ns.name, "oncall-1", role="tooladapter-operations")
    )
    agent_cli = Cli(tmp_path, api, agent)
    # The agent may not confirm its own call's effect (no toolinvocations/status).
    assert agent_cli("confirm", name, "--did-not-happen", "--evidence", "x").returncode == 9

    confirmed = oncall.json(
        "confirm", name, "--did-not-happen", "--evidence", "the deploy log shows no request"
    )
    assert confirmed["recorded"] is True and confirmed["effectHappened"] is False, confirmed
    new_ref = confirmed["receiptRef"]
    assert new_ref and new_ref != uncertain["receiptRef"], pretty([confirmed, uncertain])

    receipt = agent_cli.json("receipt", "get", new_ref, "--gateway", operator.gateway_url)
    assert receipt["invocationName"] == name, pretty(receipt)
    assert json.dumps(receipt).count("the deploy log shows no request") >= 1, pretty(receipt)
    verified = agent_cli.json("receipt", "verify", new_ref, "--gateway", operator.gateway_url)
    assert verified["verified"] is True, verified
