"""Calls stored before issue 27 stay readable by every door that reads ended calls.

Before issue 27 a tool that ran and answered with an error ended `Failed` (failure class
`tool-error`), and a duplicate ended `Denied` (`duplicate`, `duplicateOf` naming the key's
holder). An upgrade finds such objects; this test writes those shapes into the status of
ended calls (as the admin, the way the old operator wrote them) and reads them back through
REST, the CLI (with and without the gateway) and the reviewers' page: the old tool error is
an error (never "safe to retry"), the old duplicate points at its holder. (MCP reads no
ended call: a tools/call is a new call.)"""

from __future__ import annotations

import urllib.parse
from pathlib import Path

import pytest
from kubernetes import client

from tooladapter.devtools import Namespace, OperatorProcess

from .gateway_client import http_json, token_of
from .objects import Agent, descriptor, pretty, status_of
from .test_cli import Cli, explain
from .test_receipt_index import signed_in

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(300)]

RUN = "legacy.outcomes:1"
NATIVE = {"kind": "native", "native": {"name": "list-tools"}}
OLD_TOOL_ERROR = {
    "state": "Failed",
    "failureClass": "tool-error",
    "message": "the tool exited with code 2",
    "result": {"isError": None, "exitCode": 2, "content": "boom"},
}


def patch_status(api: client.ApiClient, namespace: str, name: str, status: dict) -> None:
    client.CustomObjectsApi(api).patch_namespaced_custom_object_status(
        "tooladapter.dev", "v1alpha1", namespace, "toolinvocations", name, {"status": status}
    )


def test_a_failed_tool_error_and_a_denied_duplicate_stored_before_read_as_they_meant(
    api: client.ApiClient, operator: OperatorProcess, ns: Namespace, agent: Agent, tmp_path: Path
) -> None:
    descriptor(api, ns.name, "list-tools", **NATIVE)
    agent.grant(["list-tools"], ["read"])
    holder, errored, duplicate = (agent.invoke("list-tools", {}, runId=RUN) for _ in range(3))
    for name in (holder, errored, duplicate):
        assert status_of(agent.wait(name))["state"] == "Observed"
    patch_status(api, ns.name, errored, OLD_TOOL_ERROR)
    patch_status(
        api,
        ns.name,
        duplicate,
        {"state": "Denied", "failureClass": "duplicate", "deniedStage": "idempotency",
         "duplicateOf": holder, "message": f"idempotency key held by {holder}"},
    )  # fmt: skip
    # The operator leaves an ended call's status alone: the old shapes stay as written.
    assert status_of(agent.wait(errored))["state"] == "Failed"
    assert status_of(agent.wait(duplicate))["failureClass"] == "duplicate"

    gateway = operator.gateway_url
    base = f"{gateway}/namespaces/{ns.name}/tool-invocations"
    code, _, view = http_json("GET", f"{base}/{errored}", token_of(agent))
    assert code == 200 and view["toolError"] is True, pretty(view)
    code, _, view = http_json("GET", f"{base}/{holder}", token_of(agent))
    assert code == 200 and view["toolError"] is False, pretty(view)
    run = urllib.parse.quote(RUN, safe="")
    code, _, rows = http_json(
        "GET", f"{gateway}/namespaces/{ns.name}/runs/{run}/tool-receipts", token_of(agent)
    )
    assert code == 200, rows
    outcomes = {r["invocation"]: r["outcome"] for r in rows["items"]}
    assert outcomes == {
        holder: "Observed",
        errored: "Failed: tool error (exit code 2)",
        duplicate: f"Denied: duplicate of {holder}",
    }, pretty(rows)

    cli = Cli(tmp_path, api, agent)
    for extra in ((), ("--gateway", gateway)):
        listed = cli.json("receipts", "--run", RUN, *extra)
        assert {r["name"]: r["outcome"] for r in listed} == outcomes, listed
    table = cli("receipts", "--run", RUN)
    assert table.returncode == 0, explain(table)
    assert "tool error (exit code 2)" in table.stdout, explain(table)

    browser = signed_in(gateway, token_of(agent))
    query = urllib.parse.urlencode({"namespace": ns.name, "run": RUN})
    page = browser.open(f"{gateway}/ui/runs?{query}", timeout=60).read().decode()
    assert 'tool-error" data-testid="state">Failed: tool error (exit code 2)<' in page, page
    assert f'data-testid="state">Denied: duplicate of {holder}<' in page, page
