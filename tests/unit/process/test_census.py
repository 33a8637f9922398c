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


NOW = 1_800_000_000.0


def at(seconds_before: float) -> str:
    from datetime import UTC, datetime

    return datetime.fromtimestamp(NOW - seconds_before, UTC).isoformat().replace("+00:00", "Z")


def aged(uid: str, state: str, created_ago: float, **status: Any) -> dict[str, Any]:
    obj = body(uid, state, **status)
    obj["metadata"]["creationTimestamp"] = at(created_ago)
    return obj


def test_the_oldest_approval_wait_counts_from_when_the_wait_began() -> None:
    census = Census(clock=lambda: NOW)
    census.update("ADDED", aged("1", "AwaitingApproval", 5000, approvalRequestedAt=at(1800)))
    census.update("ADDED", aged("2", "AwaitingApproval", 100, approvalRequestedAt=at(60)))
    census.update("ADDED", aged("3", "Observed", 9000))
    assert 'tooladapter_approval_wait_oldest_seconds{tenant="team-a"} 1800.0' in scrape(census)


def test_calls_not_yet_begun_are_counted_with_the_age_of_the_oldest() -> None:
    census = Census(clock=lambda: NOW)
    census.update("ADDED", aged("1", "Received", 90))
    census.update("ADDED", {**aged("2", "Received", 5), "status": None})
    census.update("ADDED", aged("3", "Executing", 600))
    text = scrape(census)
    assert 'tooladapter_pending{tenant="team-a"} 2.0' in text
    assert 'tooladapter_pending_oldest_seconds{tenant="team-a"} 90.0' in text
    census.update("MODIFIED", aged("1", "Observed", 90))
    assert 'tooladapter_pending_oldest_seconds{tenant="team-a"} 5.0' in scrape(census)


def test_an_open_lease_past_its_timeout_is_overdue_and_a_released_one_never() -> None:
    census = Census(clock=lambda: NOW)
    limits = {"timeoutSeconds": 60}
    census.update(
        "ADDED",
        body("1", "Executing", sandboxLease={**LEASE, "limits": limits, "leasedAt": at(61)}),
    )
    census.update(
        "ADDED",
        body("2", "Executing", sandboxLease={**LEASE, "limits": limits, "leasedAt": at(30)}),
    )
    census.update(
        "ADDED",
        body(
            "3",
            "Observed",
            sandboxLease={**LEASE, "limits": limits, "leasedAt": at(900), "releasedAt": at(800)},
        ),
    )
    text = scrape(census)
    assert 'tooladapter_sandboxes_open{kind="Container",tenant="team-a"} 2.0' in text
    assert 'tooladapter_sandboxes_overdue{kind="Container",tenant="team-a"} 1.0' in text
