"""Fair doors' pure parts (issue 28): caps, the failed-authentication limit, the client
address behind a trusted proxy, RBAC rule matching of a SelfSubjectRulesReview, the
rejected-token cache."""

from __future__ import annotations

import pytest

from tooladapter.gateway.auth import ReviewCache
from tooladapter.gateway.doors import Busy, Caps, Doors, FailureLimiter, client_address
from tooladapter.gateway.tools import rules_allow


def test_a_caller_beyond_its_request_cap_is_busy_and_another_is_served() -> None:
    doors = Doors(Caps(caller_requests=2, namespace_requests=10))
    held = [doors.take_request("a", "ns-a") for _ in range(2)]
    with pytest.raises(Busy) as busy:
        doors.take_request("a", "ns-a")
    assert busy.value.cap == "caller-requests" and busy.value.retry_after >= 1
    other = doors.take_request("b", "ns-b")
    for h in [*held, other]:
        doors.give(h)
    assert not doors.requests


def test_a_namespace_cap_holds_across_callers_and_nothing_is_taken_when_busy() -> None:
    doors = Doors(Caps(caller_streams=5, namespace_streams=2))
    doors.take_stream("a", ["ns"])
    doors.take_stream("b", ["ns"])
    with pytest.raises(Busy) as busy:
        doors.take_stream("c", ["ns", "other"])
    assert busy.value.cap == "namespace-streams"
    assert doors.streams[("caller", "c")] == 0 and doors.streams[("namespace", "other")] == 0
    with doors.stream("c", [None]):  # every namespace: a scope of its own
        assert doors.streams[("namespace", "*")] == 1


def test_failed_authentications_are_limited_per_address_and_refill() -> None:
    limiter = FailureLimiter(burst=3, per_minute=60)
    for _ in range(3):
        assert limiter.take("10.0.0.1", now=0.0) == 0
    assert limiter.take("10.0.0.1", now=0.0) >= 1
    assert limiter.take("10.0.0.2", now=0.0) == 0  # another address is not affected
    assert limiter.take("10.0.0.1", now=1.0) == 0  # a second later: one more try
    limiter.succeeded("10.0.0.1", now=1.0)  # a valid token gives its try back
    assert limiter.take("10.0.0.1", now=1.0) == 0


def test_the_forwarded_address_counts_only_behind_a_trusted_proxy() -> None:
    assert client_address("10.1.1.1", "203.0.113.9", ()) == "10.1.1.1"
    assert client_address("10.1.1.1", "203.0.113.9", ("10.0.0.0/8",)) == "203.0.113.9"
    # Entries left of the last untrusted hop were written by the client.
    assert (
        client_address("10.1.1.1", "1.2.3.4, 203.0.113.9, 10.2.2.2", ("10.0.0.0/8",))
        == "203.0.113.9"
    )
    assert client_address("192.0.2.1", "1.2.3.4", ("10.0.0.0/8",)) == "192.0.2.1"


@pytest.mark.parametrize(
    ("rule", "name", "allowed"),
    [
        (
            {
                "verbs": ["invoke"],
                "apiGroups": ["tooladapter.dev"],
                "resources": ["tooldescriptors"],
                "resourceNames": ["t1"],
            },
            "t1",
            True,
        ),
        (
            {
                "verbs": ["invoke"],
                "apiGroups": ["tooladapter.dev"],
                "resources": ["tooldescriptors"],
                "resourceNames": ["t1"],
            },
            "t2",
            False,
        ),
        ({"verbs": ["*"], "apiGroups": ["*"], "resources": ["*"]}, "t2", True),
        (
            {"verbs": ["get"], "apiGroups": ["tooladapter.dev"], "resources": ["tooldescriptors"]},
            "t1",
            False,
        ),
        ({"verbs": ["invoke"], "apiGroups": [""], "resources": ["tooldescriptors"]}, "t1", False),
    ],
)
def test_rules_match_as_rbac_matches_them(
    rule: dict[str, list[str]], name: str, allowed: bool
) -> None:
    assert rules_allow([rule], "invoke", "tooladapter.dev", "tooldescriptors", name) is allowed


def test_a_rejected_token_is_remembered_by_hash_briefly() -> None:
    cache = ReviewCache(rejected_seconds=60, max_entries=2)
    cache.reject("bad-token")
    assert cache.was_rejected("bad-token")
    assert "bad-token" not in repr(cache.rejected)  # only its sha256
    for i in range(3):
        cache.reject(f"other-{i}")
    assert len(cache.rejected) == 2 and not cache.was_rejected("bad-token")
    assert not ReviewCache(rejected_seconds=0).was_rejected("x")
