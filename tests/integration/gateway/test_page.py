"""Issue 18: the reviewers' page in a real headless Chromium (Debian's `chromium`, driven
by Playwright) against the gateway of the session's operator on the real cluster.

Every person signs in with their own ServiceAccount token; what they see and may do is
RBAC's and admission's answer to that token. Playwright's `expect` waits for a condition
with a timeout (never a sleep). Screenshots go to `$TOOLADAPTER_UI_SCREENSHOTS` when set
(the README's come from `TOOLADAPTER_UI_SCREENSHOTS=docs`), else to the test's tmp dir.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any, cast

import pytest
from kubernetes import client
from playwright.sync_api import Browser, Page, expect, sync_playwright

from tests.integration.gateway_client import token_of
from tests.integration.objects import Agent, approve, descriptor, get, status_of, uncertain_call
from tooladapter import GROUP, VERSION
from tooladapter.devtools import Namespace, OperatorProcess

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(600)]

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
NATIVE: dict[str, Any] = {"kind": "native", "native": {"name": "list-tools"}}
#: How long the page may take to show what the cluster did (ms, Playwright's unit).
SHOWN_MS = 90_000


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    if not Path(CHROMIUM).exists():
        pytest.fail(f"no {CHROMIUM}: `make browser` installs Debian's chromium")
    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(
            executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True
        )
        yield chromium
        chromium.close()


@pytest.fixture
def page(browser: Browser) -> Iterator[Page]:
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    context.set_default_timeout(30_000)
    yield context.new_page()
    context.close()


def screenshot(page: Page, name: str, tmp_path: Path) -> None:
    target = Path(os.environ.get("TOOLADAPTER_UI_SCREENSHOTS") or tmp_path)
    target.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(target / f"{name}.png"), full_page=True)


def sign_in(page: Page, operator: OperatorProcess, person: Agent) -> None:
    page.goto(f"{operator.gateway_url}/ui/")
    expect(page).to_have_url(f"{operator.gateway_url}/ui/login")
    page.get_by_label("Bearer token").fill(token_of(person))
    page.get_by_role("button", name="Sign in").click()
    expect(page.get_by_test_id("username")).to_have_text(person.user)


def approvals_in(api: client.ApiClient, namespace: str) -> list[dict[str, object]]:
    found = cast(
        dict[str, Any],
        client.CustomObjectsApi(api).list_namespaced_custom_object(
            GROUP, VERSION, namespace, "toolapprovals"
        ),
    )
    return list(found["items"])


def test_a_reviewer_approves_a_gated_call_and_watches_it_reach_observed(
    api: client.ApiClient,
    ns: Namespace,
    agent: Agent,
    operator: OperatorProcess,
    page: Page,
    tmp_path: Path,
) -> None:
    descriptor(api, ns.name, "propose", side_effect_class="shared-write", **NATIVE)
    agent.grant(["propose"], ["shared-write"])
    reviewer = Agent.create(api, ns.name, "reviewer-1", role="tooladapter-reviewer")
    # An earlier approved call of the same tool by the same caller: the page shows the diff.
    first = agent.invoke("propose", {"branch": "main"}, runId="release-42")
    agent.wait(first, states={"AwaitingApproval"})
    approve(reviewer, first)
    assert status_of(agent.wait(first))["state"] == "Observed"

    arguments = {"branch": "release-42", "force": True, "apiToken": "tok-9f8e7d6c5b4a"}
    name = agent.invoke("propose", arguments, runId="release-42")
    waiting = status_of(agent.wait(name, states={"AwaitingApproval"}))

    sign_in(page, operator, reviewer)
    call = page.locator(f'article[data-testid="pending"][data-name="{name}"]')
    expect(call).to_be_visible()
    expect(call.get_by_role("heading", level=2)).to_contain_text("propose 1.0.0")
    expect(call.get_by_test_id("caller")).to_have_text(agent.user)
    expect(call.get_by_test_id("class")).to_contain_text("shared-write")
    expect(call.get_by_test_id("reasons")).to_contain_text("shared-write")
    expect(call.get_by_test_id("request-hash")).to_have_text(waiting["requestHash"])
    expect(call.get_by_test_id("descriptor-digest")).to_have_text(waiting["descriptorDigest"])
    shown = call.get_by_test_id("arguments")
    expect(shown).to_contain_text('"branch": "release-42"')
    # Issue 28: the reviewer reads what the agent sent, a `token`-named key included.
    expect(shown).to_contain_text('"apiToken": "tok-9f8e7d6c5b4a"')
    expect(shown).not_to_contain_text("REDACTED")
    changes = call.get_by_test_id("changes")
    expect(changes).to_contain_text("/branch")
    expect(changes).to_contain_text('"release-42"')
    expect(changes).to_contain_text("/force")
    screenshot(page, "ui-approvals", tmp_path)

    call.get_by_label("Comment").fill("release branch checked")
    call.get_by_role("button", name="Approve").click()
    expect(page.get_by_role("status").first).to_contain_text(f"approval of {name}")
    state = page.locator(f'table[data-testid="decided"] tr[data-name="{name}"] td.state')
    expect(state).to_have_text("Observed", timeout=SHOWN_MS)

    done = status_of(get(api, ns.name, "toolinvocations", name))
    assert done["state"] == "Observed" and done["approval"]["reviewer"] == reviewer.user
    (mine,) = [a for a in approvals_in(api, ns.name) if a["spec"]["invocation"] == name]  # type: ignore[index]
    assert mine["spec"]["comment"] == "release branch checked"  # type: ignore[index]
    assert mine["spec"]["requestHash"] == waiting["requestHash"]  # type: ignore[index]

    # A call that arrives while the page is open appears without a reload (live updates).
    later = agent.invoke("propose", {"branch": "hotfix"})
    expect(page.locator(f'article[data-testid="pending"][data-name="{later}"]')).to_be_visible(
        timeout=SHOWN_MS
    )


def test_without_the_reviewer_role_no_approve_button_and_a_forged_post_is_refused(
    api: client.ApiClient,
    ns: Namespace,
    agent: Agent,
    operator: OperatorProcess,
    page: Page,
) -> None:
    descriptor(api, ns.name, "propose", side_effect_class="shared-write", **NATIVE)
    agent.grant(["propose"], ["shared-write"])
    name = agent.invoke("propose", {"branch": "main"})
    waiting = status_of(agent.wait(name, states={"AwaitingApproval"}))
    # May read the calls (requester), may not create approvals.
    outsider = Agent.create(api, ns.name, "outsider", role="tooladapter-requester")

    sign_in(page, operator, outsider)
    call = page.locator(f'article[data-testid="pending"][data-name="{name}"]')
    expect(call).to_be_visible()
    expect(call.get_by_role("button", name="Approve")).to_have_count(0)
    expect(call.get_by_test_id("not-reviewer")).to_be_visible()

    url = f"{operator.gateway_url}/ui/approvals/{ns.name}/{name}"
    form = {"decision": "Approved", "expires": "3600", "requestHash": waiting["requestHash"]}
    # No CSRF token: refused before anything reaches the API server.
    forged = page.request.post(url, form=form, max_redirects=0)
    assert forged.status == 403 and "CSRF" in forged.text()
    csrf = page.locator('form[action="/ui/logout"] input[name="csrf"]').get_attribute("value")
    assert csrf
    # The right token from another origin: refused too.
    cross = page.request.post(
        url, form={**form, "csrf": csrf}, headers={"Origin": "http://evil.example"}
    )
    assert cross.status == 403
    # Everything right but the role: the API server refuses the ToolApproval (RBAC).
    denied = page.request.post(url, form={**form, "csrf": csrf}, max_redirects=0)
    assert denied.status == 403, denied.text()
    assert "API server" in denied.text()
    assert approvals_in(api, ns.name) == []
    assert status_of(get(api, ns.name, "toolinvocations", name))["state"] == "AwaitingApproval"


def test_an_operator_confirms_an_uncertain_effect_and_the_new_receipt_shows_it(
    api: client.ApiClient,
    ns: Namespace,
    agent: Agent,
    operator: OperatorProcess,
    page: Page,
    tmp_path: Path,
) -> None:
    name, uncertain = uncertain_call(api, ns.name, agent, runId="deploy-7")
    oncall = Agent.create(api, ns.name, "oncall-1", role="tooladapter-operations")

    sign_in(page, operator, oncall)
    page.get_by_role("link", name="Uncertain effects").click()
    call = page.locator(f'article[data-testid="uncertain"][data-name="{name}"]')
    expect(call).to_be_visible()
    expect(call.get_by_test_id("receipt-ref")).to_have_text(uncertain["receiptRef"])
    expect(call.get_by_test_id("receipt-summary")).to_contain_text("Uncertain")
    expect(call.get_by_test_id("evidence")).to_contain_text("http")
    screenshot(page, "ui-uncertain", tmp_path)

    call.get_by_label("It did not happen").check()
    call.get_by_label("Evidence (what you checked)").fill("the deploy log shows no request")
    call.get_by_role("button", name="Record").click()
    expect(page.get_by_role("status").first).to_contain_text("confirmation was recorded")
    # The operator writes a new receipt; the page follows (live updates).
    confirmed = page.locator(f'article[data-testid="uncertain"][data-name="{name}"]')
    expect(confirmed.get_by_test_id("confirmation")).to_contain_text(
        "recorded on the receipt", timeout=SHOWN_MS
    )
    expect(confirmed.get_by_test_id("receipt-ref")).not_to_have_text(uncertain["receiptRef"])
    expect(confirmed.get_by_test_id("receipt-summary")).to_contain_text("did not happen")

    final = status_of(get(api, ns.name, "toolinvocations", name))
    assert final["effectConfirmation"]["confirmedBy"] == oncall.user
    assert final["effectConfirmation"]["recorded"] is True
    expect(confirmed.get_by_test_id("receipt-ref")).to_have_text(final["receiptRef"])


def test_the_run_view_lists_a_runs_receipts_and_verifies_one(
    api: client.ApiClient,
    ns: Namespace,
    agent: Agent,
    operator: OperatorProcess,
    page: Page,
    tmp_path: Path,
) -> None:
    descriptor(api, ns.name, "list-tools", **NATIVE)
    agent.grant(["list-tools"], ["read"])
    names, refs = [], []
    for _ in range(2):  # one after the other: the page lists them in that order
        names.append(agent.invoke("list-tools", {}, runId="run-ui-1"))
        status = status_of(agent.wait(names[-1]))
        assert status["state"] == "Observed", status
        refs.append(status["receiptRef"])
    auditor = Agent.create(api, ns.name, "auditor", role="tooladapter-observer")

    sign_in(page, operator, auditor)
    page.get_by_role("link", name="Runs", exact=True).click()
    page.get_by_role("link", name="run-ui-1").click()
    calls = page.locator('article[data-testid="run-call"]')
    expect(calls).to_have_count(2)
    for index, (name, ref) in enumerate(zip(names, refs, strict=True)):
        row = calls.nth(index)
        expect(row).to_have_attribute("data-name", name)
        expect(row.get_by_test_id("state")).to_have_text("Observed")
        expect(row.get_by_test_id("receipt-ref")).to_have_text(ref)
        expect(row.locator("table.timeline tbody tr").first).to_be_attached()
    calls.nth(0).get_by_role("button", name=f"Verify the receipt of {names[0]}").click()
    verdict = page.locator(f'article[data-name="{names[0]}"] [data-testid="verdict"]')
    expect(verdict).to_contain_text("Verified")
    expect(verdict).to_contain_text(refs[0])
    receipt = page.locator(f'article[data-name="{names[0]}"] [data-testid="receipt"]')
    expect(receipt).to_contain_text(names[0])
    expect(receipt).to_contain_text('"runId": "run-ui-1"')
    screenshot(page, "ui-runs", tmp_path)
