"""The receipt index on the real cluster: after retention deletes a run's invocations, the
gateway's run receipts still list every call, from the artifact store's run index, and only
to callers who may list the namespace's invocations; and the reviewers' page still compares a
waiting call with the caller's last approved call after retention deleted that call.

The operator here serves `rix-<SESSION>-*`, out of the session operator's scope."""

from __future__ import annotations

import http.cookiejar
import re
import urllib.parse
import urllib.request
from collections.abc import Callable, Mapping
from functools import partial
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from tests.integration.cli.test_cli import Cli
from tests.integration.conftest import Configured
from tests.integration.gateway_client import http_json, token_of, unbound_sa
from tests.integration.objects import Agent, approve, descriptor, get, pretty, status_of
from tooladapter.devtools import wait_for

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(300)]

RUN = "run.index:1"


@pytest.fixture(scope="module")
def short_retention(configured: Callable[[Mapping[str, str]], Configured]) -> Configured:
    return configured(
        {"TOOLADAPTER_RETENTION_SECONDS": "2", "TOOLADAPTER_RECONCILE_INTERVAL_SECONDS": "2"}
    )


def gone(api: client.ApiClient, namespace: str, name: str) -> bool:
    try:
        get(api, namespace, "toolinvocations", name)
    except client.ApiException as exc:
        return exc.status == 404
    return False


def test_run_receipts_are_complete_after_retention_deleted_the_invocations(
    api: client.ApiClient, short_retention: Configured, tmp_path: Path
) -> None:
    ns = short_retention.namespace(api)
    try:
        agent = Agent.create(api, ns.name, "agent-1")
        descriptor(api, ns.name, "list-tools", kind="native", native={"name": "list-tools"})
        agent.grant(["list-tools"], ["read"])
        calls = [agent.invoke("list-tools", {}, runId=RUN) for _ in range(2)]
        other = agent.invoke("list-tools", {}, runId="another-run")
        statuses = {name: status_of(agent.wait(name)) for name in [*calls, other]}
        for observed in statuses.values():
            assert observed["state"] == "Observed", pretty(observed)
        for name in [*calls, other]:
            wait_for(partial(gone, api, ns.name, name), timeout=90, what=f"{name} deleted")

        url = (
            f"{short_retention.operator.gateway_url}/namespaces/{ns.name}/runs/{RUN}/tool-receipts"
        )
        status, _, run = http_json("GET", url, token_of(agent))
        assert status == 200, run
        rows = {row["invocation"]: row for row in run["items"]}
        assert sorted(rows) == sorted(calls), pretty(run)
        for name in calls:
            row = rows[name]
            assert row["receiptRef"] == statuses[name]["receiptRef"]
            assert row["state"] == "Observed" and row["toolId"] == "list-tools"
            assert row["receipt"]["runId"] == RUN
            assert row["receipt"]["tenantId"] == ns.name

        # The command line, through the gateway, shows them too; alone, it finds none.
        cli = Cli(tmp_path, api, agent)
        gateway = short_retention.operator.gateway_url
        listed = cli.json("receipts", "--run", RUN, "--gateway", gateway)
        assert sorted(r["name"] for r in listed) == sorted(calls), listed
        assert {r["receiptRef"] for r in listed} == {statuses[n]["receiptRef"] for n in calls}
        assert cli("receipts", "--run", RUN).returncode == 8

        # The index is served only to who may list the namespace's invocations.
        stranger = unbound_sa(api, ns.name, "stranger")
        status, kind, body = http_json("GET", url, stranger)
        assert status == 403 and kind.startswith("application/problem+json"), body
        assert not any(s["receiptRef"] in str(body) for s in statuses.values()), body
    finally:
        ns.delete()


def signed_in(gateway: str, token: str) -> urllib.request.OpenerDirector:
    """A browser's cookie jar, signed in to the reviewers' page with `token`."""
    opener = urllib.request.build_opener(
        urllib.request.HTTPCookieProcessor(http.cookiejar.CookieJar()),
        urllib.request.ProxyHandler({}),
    )
    form = opener.open(f"{gateway}/ui/login", timeout=60).read().decode()
    nonce = re.search(r'name="nonce" value="([^"]+)"', form)
    assert nonce is not None, form
    data = urllib.parse.urlencode({"nonce": nonce.group(1), "token": token}).encode()
    opener.open(f"{gateway}/ui/login", data=data, timeout=60).read()
    return opener


def test_the_reviewers_page_compares_with_an_approved_call_retention_deleted(
    api: client.ApiClient, short_retention: Configured
) -> None:
    ns = short_retention.namespace(api)
    try:
        agent = Agent.create(api, ns.name, "agent-1")
        reviewer = Agent.create(api, ns.name, "reviewer-1", role="tooladapter-reviewer")
        native: dict[str, Any] = {"kind": "native", "native": {"name": "list-tools"}}
        descriptor(api, ns.name, "propose", side_effect_class="shared-write", **native)
        agent.grant(["propose"], ["shared-write"])
        first = agent.invoke("propose", {"branch": "main"})
        agent.wait(first, states={"AwaitingApproval"})
        approve(reviewer, first)
        assert status_of(agent.wait(first))["state"] == "Observed"
        wait_for(lambda: gone(api, ns.name, first), timeout=90, what=f"{first} deleted")

        waiting = agent.invoke("propose", {"branch": "release-42"})
        agent.wait(waiting, states={"AwaitingApproval"})
        browser = signed_in(short_retention.operator.gateway_url, token_of(reviewer))
        html = browser.open(
            f"{short_retention.operator.gateway_url}/ui/approvals", timeout=60
        ).read()
        text = html.decode()
        assert f"Since {first}, approved by {reviewer.user}" in text, text
        assert "release-42" in text and "The first call of this tool" not in text, text
    finally:
        ns.delete()
