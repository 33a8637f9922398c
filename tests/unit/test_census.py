"""The gauges are counted from the watch's view: a restart's listing gives the same numbers."""

from __future__ import annotations

from typing import Any

from prometheus_client import CollectorRegistry, generate_latest

from tooladapter.census import Census


def body(uid: str, state: str, ns: str = "team-a", **status: Any) -> dict[str, Any]:
    return {
        "metadata": {"uid": uid, "namespace": ns, "name": uid},
        "status": {"state": state, **status},
    }


def scrape(census: Census) -> str:
    registry = CollectorRegistry()
    registry.register(census)
    return generate_latest(registry).decode()


LEASE = {"kind": "Container", "leaseId": "x"}


def listed() -> Census:
    census = Census()
    census.update("ADDED", body("1", "Uncertain"))
    census.update("ADDED", body("2", "Uncertain", effectConfirmation={"recorded": True}))
    census.update("ADDED", body("3", "AwaitingApproval", effectiveClass="shared-write"))
    census.update("ADDED", body("4", "Executing", sandboxLease=LEASE))
    census.update("ADDED", body("5", "Observed", sandboxLease={**LEASE, "releasedAt": "t"}))
    return census


def test_gauges_count_what_the_watch_shows() -> None:
    text = scrape(listed())
    assert 'tooladapter_uncertain{tenant="team-a"} 1.0' in text
    assert (
        'tooladapter_approvals_waiting{effective_class="shared-write",tenant="team-a"} 1.0' in text
    )
    assert 'tooladapter_sandboxes_open{kind="Container",tenant="team-a"} 1.0' in text


def test_a_restarted_operator_reports_the_same_numbers() -> None:
    assert scrape(listed()) == scrape(listed())


def test_gauges_never_go_negative_on_repeated_events() -> None:
    census = listed()
    for _ in range(3):
        census.update("MODIFIED", body("1", "Uncertain", effectConfirmation={"recorded": True}))
        census.update("DELETED", body("4", "Executing"))
        census.update("DELETED", body("4", "Executing"))
    text = scrape(census)
    assert "tooladapter_uncertain{" not in text
    assert "tooladapter_sandboxes_open{" not in text
