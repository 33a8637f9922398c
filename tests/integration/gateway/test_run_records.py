"""Issue 28 on the real cluster: a run's rows name their callers (a `runId` is a label any
caller in the namespace may use, not a capability), and a namespace's records belong to its
incarnation: deleted and created again under the same name, with the same agents, it reads
none of the previous one's receipts, run entries or approved calls through REST, the CLI
or the reviewers' page."""

from __future__ import annotations

import contextlib
import json
import urllib.parse
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from tests.integration.cli.test_cli import Cli, explain
from tests.integration.gateway_client import http_json, token_of
from tests.integration.objects import Agent, approve, descriptor, pretty, status_of
from tests.integration.receipts.test_index import signed_in
from tooladapter.devtools import Namespace, OperatorProcess, wait_for
from tooladapter.receipts.core.check import parse_receipt

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(420)]

RUN = "run.records:1"
NATIVE: dict[str, Any] = {"kind": "native", "native": {"name": "list-tools"}}


def run_url(gateway: str, namespace: str, caller: str | None = None) -> str:
    url = f"{gateway}/namespaces/{namespace}/runs/{urllib.parse.quote(RUN, safe='')}/tool-receipts"
    return f"{url}?caller={urllib.parse.quote(caller, safe='')}" if caller else url


def test_another_agents_call_in_my_run_is_listed_with_its_caller(
    api: client.ApiClient, operator: OperatorProcess, ns: Namespace, tmp_path: Path
) -> None:
    me = Agent.create(api, ns.name, "agent-1")
    other = Agent.create(api, ns.name, "agent-2")
    descriptor(api, ns.name, "list-tools", **NATIVE)
    me.grant(["list-tools"], ["read"])
    other.grant(["list-tools"], ["read"])
    mine = me.invoke("list-tools", {}, runId=RUN)
    theirs = other.invoke("list-tools", {}, runId=RUN)
    for agent, name in ((me, mine), (other, theirs)):
        assert status_of(agent.wait(name))["state"] == "Observed", pretty(agent.wait(name))

    gateway = operator.gateway_url
    status, _, run = http_json("GET", run_url(gateway, ns.name), token_of(me))
    assert status == 200, run
    callers = {row["invocation"]: row["caller"] for row in run["items"]}
    assert callers == {mine: me.user, theirs: other.user}, pretty(run)
    status, _, only = http_json("GET", run_url(gateway, ns.name, other.user), token_of(me))
    assert status == 200 and [r["invocation"] for r in only["items"]] == [theirs], only

    cli = Cli(tmp_path, api, me)
    rows = cli.json("receipts", "--run", RUN, "--gateway", gateway)
    assert {r["name"]: r["caller"] for r in rows} == callers, rows
    rows = cli.json("receipts", "--run", RUN, "--gateway", gateway, "--caller", other.user)
    assert [r["name"] for r in rows] == [theirs], rows
    # Without the gateway too, and in the table a person reads.
    rows = cli.json("receipts", "--run", RUN)
    assert {r["name"]: r["caller"] for r in rows} == callers, rows
    table = cli("receipts", "--run", RUN, "--gateway", gateway)
    assert table.returncode == 0 and "CALLER" in table.stdout, explain(table)
    assert other.user in table.stdout and me.user in table.stdout, explain(table)

    browser = signed_in(gateway, token_of(me))
    query = urllib.parse.urlencode({"namespace": ns.name, "run": RUN})
    page = browser.open(f"{gateway}/ui/runs?{query}", timeout=60).read().decode()
    assert f'data-testid="caller">{other.user}<' in page, page
    assert f'data-testid="caller">{me.user}<' in page, page
    query = urllib.parse.urlencode({"namespace": ns.name, "run": RUN, "caller": other.user})
    page = browser.open(f"{gateway}/ui/runs?{query}", timeout=60).read().decode()
    assert f'data-testid="caller">{other.user}<' in page, page
    assert f'data-testid="caller">{me.user}<' not in page, page


def namespace_gone(api: client.ApiClient, name: str) -> bool:
    try:
        client.CoreV1Api(api).read_namespace(name)
    except client.ApiException as exc:
        return exc.status == 404
    return False


def created_again(api: client.ApiClient, ns: Namespace) -> str:
    """Delete `ns`, wait until it is gone, create it again under its name; its new uid."""
    core = client.CoreV1Api(api)
    old_uid = core.read_namespace(ns.name).metadata.uid
    core.delete_namespace(ns.name)
    wait_for(lambda: namespace_gone(api, ns.name), timeout=240, what=f"{ns.name} gone")
    core.create_namespace(
        {"metadata": {"name": ns.name, "labels": {"tooladapter.dev/test": "true"}}}  # type: ignore[arg-type]  # the client sends a dict body as is
    )
    wait_for(
        lambda: any(
            sa.metadata.name == "default"
            for sa in core.list_namespaced_service_account(ns.name).items
        ),
        timeout=60,
        what=f"default serviceaccount in {ns.name}",
    )
    new_uid = str(core.read_namespace(ns.name).metadata.uid)
    assert new_uid != old_uid
    return new_uid


def setup(api: client.ApiClient, namespace: str) -> tuple[Agent, Agent]:
    agent = Agent.create(api, namespace, "agent-1")
    reviewer = Agent.create(api, namespace, "reviewer-1", role="tooladapter-reviewer")
    descriptor(api, namespace, "propose", side_effect_class="shared-write", **NATIVE)
    agent.grant(["propose"], ["shared-write"])
    return agent, reviewer


def test_a_namespace_created_again_serves_none_of_the_old_records(
    api: client.ApiClient, operator: OperatorProcess, tmp_path: Path
) -> None:
    ns = Namespace(api)
    gateway = operator.gateway_url
    try:
        agent, reviewer = setup(api, ns.name)
        first = agent.invoke("propose", {"branch": "main"}, runId=RUN)
        agent.wait(first, states={"AwaitingApproval"})
        approve(reviewer, first)
        old = status_of(agent.wait(first))
        assert old["state"] == "Observed", pretty(old)
        digest = str(old["receiptRef"]).removeprefix("sha256:")
        receipt_url = f"{gateway}/namespaces/{ns.name}/receipts/{digest}"
        # Served to its own incarnation, naming its uid.
        status, _, receipt = http_json("GET", receipt_url, token_of(agent))
        assert status == 200, receipt
        old_uid = client.CoreV1Api(api).read_namespace(ns.name).metadata.uid
        predicate = parse_receipt(json.dumps(receipt).encode()) or {}
        assert predicate["tenantUid"] == old_uid, receipt

        new_uid = created_again(api, ns)
        agent, reviewer = setup(api, ns.name)
        token = token_of(agent)

        # REST: the receipt by hash, and the run.
        status, _, body = http_json("GET", receipt_url, token)
        assert status == 404, body
        status, _, run = http_json("GET", run_url(gateway, ns.name), token)
        assert status == 200 and run["items"] == [], run

        # The CLI, through the gateway.
        cli = Cli(tmp_path, api, agent)
        listed = cli("receipts", "--run", RUN, "--gateway", gateway)
        assert listed.returncode == 8 and first not in listed.stdout, explain(listed)
        got = cli("receipt", "get", str(old["receiptRef"]), "--gateway", gateway)
        assert got.returncode != 0 and old_uid not in got.stdout, explain(got)

        # The page: a waiting call of the same caller and tool has no earlier approved call.
        waiting = agent.invoke("propose", {"branch": "release-42"}, runId=RUN)
        agent.wait(waiting, states={"AwaitingApproval"})
        browser = signed_in(gateway, token_of(reviewer))
        text = browser.open(f"{gateway}/ui/approvals", timeout=60).read().decode()
        assert "release-42" in text, text
        assert f"Since {first}" not in text and "The first call of this tool" in text, text
        query = urllib.parse.urlencode({"namespace": ns.name, "run": RUN})
        page = browser.open(f"{gateway}/ui/runs?{query}", timeout=60).read().decode()
        assert digest not in page and old_uid not in page, page

        # The new incarnation's own records are keyed by its uid and served.
        approve(reviewer, waiting)
        new = status_of(agent.wait(waiting))
        assert new["state"] == "Observed", pretty(new)
        status, _, run = http_json("GET", run_url(gateway, ns.name), token)
        assert status == 200 and [r["invocation"] for r in run["items"]] == [waiting], run
        assert run["items"][0]["receipt"]["tenantUid"] == new_uid, run
    finally:
        with contextlib.suppress(Exception):
            ns.delete()
