"""The reviewers' page for a sink the data-flow rule gated (issue 42): beside its reasons,
the calls that brought each label into its run, label by label."""

from __future__ import annotations

from typing import Any

from tests.unit.fake_cluster import http_descriptor
from tests.unit.review.test_credentials_shown import render, waiting
from tooladapter.review import page as reviewpage
from tooladapter.review.texts import pending_approvals

SOURCES = [
    {"label": "untrusted", "invocation": "fetch-2", "tool": "web", "at": "2026-01-01T00:00:02Z"},
    {"label": "private", "invocation": "read-1", "tool": "crm", "at": "2026-01-01T00:00:01Z"},
    {"label": "untrusted", "invocation": "fetch-0", "tool": "web", "at": "2026-01-01T00:00:00Z"},
]


def gated_send(**flow: Any) -> dict[str, Any]:
    call = waiting(http_descriptor("send", "https://api.example.com/x"))
    call["status"]["dataFlow"] = {"labels": [], "sink": True, "sources": SOURCES, **flow}
    return call


def test_a_gated_sink_lists_the_calls_behind_each_label() -> None:
    call = gated_send(gated="data flow: private data from read-1 (crm) and ...")

    (view,) = pending_approvals([call])

    flow = view["dataFlow"]
    assert flow["gated"].startswith("data flow: private data from read-1")
    assert [c["invocation"] for c in flow["sources"]["private"]] == ["read-1"]
    # Oldest first within a label.
    assert [c["invocation"] for c in flow["sources"]["untrusted"]] == ["fetch-0", "fetch-2"]
    assert flow["sources"]["private"][0]["tool"] == "crm"


def test_the_page_shows_the_calls_by_label() -> None:
    html = render(reviewpage.pending_for_page([gated_send(gated="data flow: ...")]))

    assert 'data-testid="dataflow"' in html
    private = html.split('data-label="private"', 1)[1].split("</dd>", 1)[0]
    untrusted = html.split('data-label="untrusted"', 1)[1].split("</dd>", 1)[0]
    assert 'data-name="read-1"' in private and "fetch" not in private
    assert 'data-name="fetch-0"' in untrusted and 'data-name="fetch-2"' in untrusted
    assert "(crm, ended" in private


def test_a_call_the_rule_did_not_gate_shows_no_data_flow_section() -> None:
    # Its scopes held labels, but it waits for its class only (or was not a sink).
    call = gated_send()

    (view,) = pending_approvals([call])

    assert view["dataFlow"] is None
    assert 'data-testid="dataflow"' not in render(reviewpage.pending_for_page([call]))
