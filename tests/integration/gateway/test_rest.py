"""Issue 16: the gateway's REST API on the real cluster: reads as the caller, refusals for
callers without rights, receipts by hash, and schemathesis against its OpenAPI document."""

from __future__ import annotations

import hashlib
import json
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
import schemathesis
from hypothesis import HealthCheck, settings
from kubernetes import client
from schemathesis.checks import (
    content_type_conformance,
    not_a_server_error,
    response_schema_conformance,
    status_code_conformance,
)

from tests.integration.gateway_client import http_json, token_of, unbound_sa
from tests.integration.objects import Agent, descriptor, get, status_of, uncertain_call
from tooladapter.devtools import Namespace, OperatorProcess, wait_for
from tooladapter.gateway.openapi import document
from tooladapter.gateway.routes import MODULES
from tooladapter.receipts.core.check import parse_receipt

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(600)]

NATIVE: dict[str, Any] = {"kind": "native", "native": {"name": "list-tools"}}


@dataclass
class Tenant:
    ns: Namespace
    agent: Agent
    token: str
    call: str
    receipt_ref: str


def _tenant(api: client.ApiClient, run_id: str) -> Tenant:
    ns = Namespace(api)
    descriptor(api, ns.name, "list-tools", **NATIVE)
    descriptor(api, ns.name, "hidden", **NATIVE)
    agent = Agent.create(api, ns.name, "agent-1")
    agent.grant(["list-tools"], ["read"])
    call = agent.invoke("list-tools", {}, runId=run_id)
    status = status_of(agent.wait(call))
    assert status["state"] == "Observed", status
    return Tenant(ns, agent, token_of(agent), call, status["receiptRef"])


@pytest.fixture(scope="module")
def tenants(api: client.ApiClient, operator: OperatorProcess) -> Iterator[tuple[Tenant, Tenant]]:
    first, second = _tenant(api, "run-1"), _tenant(api, "run-1")
    yield first, second
    for tenant in (first, second):
        tenant.ns.delete()


def test_rest_reads_act_as_the_caller(
    api: client.ApiClient, operator: OperatorProcess, tenants: tuple[Tenant, Tenant]
) -> None:
    one, _ = tenants
    base, token = f"{operator.gateway_url}/namespaces/{one.ns.name}", one.token

    status, _, tools = http_json("GET", f"{base}/tools", token)
    assert status == 200, tools
    assert [t["toolId"] for t in tools["items"]] == ["list-tools"]
    assert tools["items"][0]["annotations"]["readOnlyHint"] is True

    status, _, tool = http_json("GET", f"{base}/tools/list-tools", token)
    assert status == 200 and tool["inputSchema"] == {"type": "object"}, tool
    assert tool["auditRequirements"]["argumentsHash"] is True
    status, kind, missing = http_json("GET", f"{base}/tools/hidden", token)
    assert status == 404 and kind.startswith("application/problem+json"), missing

    status, _, call = http_json("GET", f"{base}/tool-invocations/{one.call}", token)
    assert status == 200, call
    assert call["status"]["state"] == "Observed"
    assert call["spec"]["caller"]["name"] == one.agent.user
    assert call["status"]["stages"], call

    status, _, run = http_json("GET", f"{base}/runs/run-1/tool-receipts", token)
    assert status == 200, run
    assert [row["invocation"] for row in run["items"]] == [one.call]
    row = run["items"][0]
    assert row["receiptRef"] == one.receipt_ref
    assert row["receipt"]["invocationName"] == one.call
    status, _, empty = http_json("GET", f"{base}/runs/no-such-run/tool-receipts", token)
    assert status == 200 and empty["items"] == []


def test_receipts_by_hash_only_for_their_namespace_and_readers(
    api: client.ApiClient, operator: OperatorProcess, tenants: tuple[Tenant, Tenant]
) -> None:
    one, two = tenants
    digest = one.receipt_ref.removeprefix("sha256:")
    url = f"{operator.gateway_url}/namespaces/{one.ns.name}/receipts/{digest}"

    request = urllib.request.Request(url, headers={"Authorization": f"Bearer {one.token}"})
    with urllib.request.urlopen(request, timeout=30) as response:
        assert response.headers["ETag"] == f'"{one.receipt_ref}"'
        raw = response.read()
    assert hashlib.sha256(raw).hexdigest() == digest
    assert (parse_receipt(raw) or {}).get("invocationName") == one.call

    # The other tenant's receipt through this namespace: as if absent.
    other = two.receipt_ref.removeprefix("sha256:")
    status, _, body = http_json(
        "GET", f"{operator.gateway_url}/namespaces/{one.ns.name}/receipts/{other}", one.token
    )
    assert status == 404, body
    # The other tenant's agent, asking in a namespace where it has no role.
    status, _, body = http_json("GET", url, two.token)
    assert status == 403, body
    # A ServiceAccount without any tooladapter role.
    stranger = unbound_sa(api, one.ns.name, "stranger")
    status, kind, body = http_json("GET", url, stranger)
    assert status == 403 and kind.startswith("application/problem+json"), body


def test_callers_without_rights_are_refused(
    api: client.ApiClient, operator: OperatorProcess, tenants: tuple[Tenant, Tenant]
) -> None:
    one, two = tenants
    base = f"{operator.gateway_url}/namespaces/{one.ns.name}"
    stranger = unbound_sa(api, one.ns.name, "stranger")
    for path in ("/tools", f"/tool-invocations/{one.call}", "/runs/run-1/tool-receipts"):
        status, kind, body = http_json("GET", base + path, stranger)
        assert status == 403, (path, body)
        assert kind.startswith("application/problem+json")
        assert body["type"].endswith("/forbidden")
        status, _, body = http_json("GET", base + path, None)
        assert status == 401, (path, body)
    # Another tenant's agent cannot read this tenant's calls.
    status, _, body = http_json("GET", f"{base}/tool-invocations/{one.call}", two.token)
    assert status == 403, body


def test_confirm_effect_checks_the_state_and_the_body(
    operator: OperatorProcess, tenants: tuple[Tenant, Tenant]
) -> None:
    one, _ = tenants
    url = f"{operator.gateway_url}/namespaces/{one.ns.name}/tool-invocations/{one.call}"
    status, _, body = http_json(
        "POST", f"{url}/confirm-effect", one.token, {"effectHappened": True, "evidence": "x"}
    )
    assert status == 409 and "Uncertain" in body["detail"], body
    status, _, body = http_json("POST", f"{url}/confirm-effect", one.token, {"evidence": "x"})
    assert status == 422, body
    status, _, body = http_json("GET", f"{operator.gateway_url}/nowhere", one.token)
    assert status == 404 and body["status"] == 404


# The document the gateway serves, built the same way (the next test checks they agree);
# the MCP endpoint speaks JSON-RPC, not this API's problems, and has its own tests.
DOCUMENT = document(module.PATHS for module in MODULES)
schema = schemathesis.openapi.from_dict(DOCUMENT).exclude(path_regex=r"/mcp$")


def test_the_gateway_serves_its_openapi_document(operator: OperatorProcess) -> None:
    status, _, served = http_json("GET", f"{operator.gateway_url}/openapi.json")
    assert status == 200
    assert served == json.loads(json.dumps(DOCUMENT))
    assert served["openapi"] == "3.1.0"
    assert {
        "/namespaces/{namespace}/mcp",
        "/healthz",
        "/namespaces/{namespace}/tools/{toolId}/dry-run",
    } <= set(served["paths"])


@schema.parametrize()
@settings(
    max_examples=15,
    deadline=None,
    suppress_health_check=list(HealthCheck),
)
def test_the_api_matches_its_openapi_document_and_never_fails_with_5xx(
    case: schemathesis.Case, operator: OperatorProcess, tenants: tuple[Tenant, Tenant]
) -> None:
    one, _ = tenants
    if case.path_parameters and "namespace" in case.path_parameters:
        # Mostly the tenant's own namespace, so real objects answer (others are 403s).
        steer = hash(json.dumps(case.path_parameters, sort_keys=True, default=str))
        if steer % 4:
            case.path_parameters["namespace"] = one.ns.name
        # Mostly a tool that exists, so dry runs and tool reads answer previews and tools.
        if "toolId" in case.path_parameters and steer % 3:
            case.path_parameters["toolId"] = "list-tools"
    case.call_and_validate(
        base_url=operator.gateway_url,
        headers={"Authorization": f"Bearer {one.token}"},
        checks=[
            not_a_server_error,
            status_code_conformance,
            content_type_conformance,
            response_schema_conformance,
        ],
        timeout=60,
    )


def test_an_uncertain_effect_is_confirmed_through_the_gateway_as_the_caller(
    api: client.ApiClient, ns: Namespace, agent: Agent, operator: OperatorProcess
) -> None:
    name, uncertain = uncertain_call(api, ns.name, agent)
    oncall = Agent.create(api, ns.name, "oncall-1", role="tooladapter-operations")
    url = f"{operator.gateway_url}/namespaces/{ns.name}/tool-invocations/{name}/confirm-effect"
    claim = {"effectHappened": False, "evidence": "the deploy log shows no request"}

    # The agent has no right to confirm (no toolinvocations/status): the API says so.
    status, _, body = http_json("POST", url, token_of(agent), claim)
    assert status == 403, body
    status, _, body = http_json("POST", url, token_of(oncall), claim)
    assert status == 202, body
    assert body["status"]["effectConfirmation"]["confirmedBy"] == oncall.user

    def recorded() -> dict[str, object] | None:
        current = status_of(get(api, ns.name, "toolinvocations", name))
        return current if (current.get("effectConfirmation") or {}).get("recorded") else None

    final = wait_for(recorded, timeout=60, what="the confirmation on a new receipt")
    assert final["receiptRef"] != uncertain["receiptRef"]
    status, _, body = http_json("POST", url, token_of(oncall), claim)
    assert status == 409, body
