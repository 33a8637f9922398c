"""Operator settings from the environment, and the allowance cache they size."""

from __future__ import annotations

import asyncio
import json
import re
from types import SimpleNamespace

import pytest

from tooladapter.enums import EventLevel
from tooladapter.kube.auth import AllowCache, can
from tooladapter.settings import Settings


def test_defaults_batch_status_writes_and_remember_allowances_briefly(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for name in ("TOOLADAPTER_WRITE_EVERY_STATE", "TOOLADAPTER_AUTHZ_CACHE_SECONDS"):
        monkeypatch.delenv(name, raising=False)
    settings = Settings.from_env()
    assert settings.write_every_state is False
    assert settings.authz_cache_seconds == 2
    assert settings.sandbox.network_gate is True


def test_the_operators_ca_bundle_is_a_path_or_none(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TOOLADAPTER_CA_BUNDLE", raising=False)
    assert Settings.from_env().ca_bundle is None
    monkeypatch.setenv("TOOLADAPTER_CA_BUNDLE", " /etc/tooladapter/ca-bundle/ca.crt ")
    assert str(Settings.from_env().ca_bundle) == "/etc/tooladapter/ca-bundle/ca.crt"


@pytest.mark.parametrize(("raw", "expected"), [("true", True), ("ON", True), ("0", False)])
def test_booleans_accept_the_usual_spellings(
    monkeypatch: pytest.MonkeyPatch, raw: str, expected: bool
) -> None:
    monkeypatch.setenv("TOOLADAPTER_WRITE_EVERY_STATE", raw)
    assert Settings.from_env().write_every_state is expected


def test_a_bad_boolean_names_the_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TOOLADAPTER_NETWORK_GATE", "maybe")
    with pytest.raises(ValueError, match="TOOLADAPTER_NETWORK_GATE='maybe' is not a boolean"):
        Settings.from_env()


def test_a_bad_integer_names_the_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TOOLADAPTER_AUTHZ_CACHE_SECONDS", "2s")
    with pytest.raises(ValueError, match="TOOLADAPTER_AUTHZ_CACHE_SECONDS='2s'"):
        Settings.from_env()


def test_allowances_expire(monkeypatch: pytest.MonkeyPatch) -> None:
    clock = [100.0]
    monkeypatch.setattr("tooladapter.kube.auth.time.monotonic", lambda: clock[0])
    cache = AllowCache(ttl_seconds=2)
    key = ("system:serviceaccount:a:b", (), "a", "invoke", "tooladapter.dev", "t", "x")
    assert not cache.allowed(key)
    cache.remember(key)
    clock[0] += 1.9
    assert cache.allowed(key)
    clock[0] += 0.2
    assert not cache.allowed(key)
    assert key not in cache.entries


def test_a_zero_ttl_remembers_nothing() -> None:
    cache = AllowCache(ttl_seconds=0)
    key = ("u", (), "n", "use", "g", "r", "x")
    cache.remember(key)
    assert not cache.allowed(key)


def test_the_cache_stays_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("tooladapter.kube.auth.time.monotonic", lambda: 0.0)
    cache = AllowCache(ttl_seconds=60, max_entries=3)
    for i in range(10):
        cache.remember(("u", (), "n", "use", "g", "r", str(i)))
        assert len(cache.entries) <= 3


def test_runtime_classes_map_sandbox_kinds(monkeypatch: pytest.MonkeyPatch) -> None:
    assert dict(Settings().sandbox.runtime_classes) == {"GVisor": "gvisor", "Kata": "kata"}
    monkeypatch.setenv("TOOLADAPTER_RUNTIME_CLASSES", "GVisor=runsc, Kata=kata-qemu")
    assert dict(Settings.from_env().sandbox.runtime_classes) == {
        "GVisor": "runsc",
        "Kata": "kata-qemu",
    }
    monkeypatch.setenv("TOOLADAPTER_RUNTIME_CLASSES", "GVisor")
    with pytest.raises(ValueError, match="TOOLADAPTER_RUNTIME_CLASSES"):
        Settings.from_env()


def test_calls_in_flight_and_events_default_to_bounded_and_actionable(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for name in ("TOOLADAPTER_MAX_CALLS_IN_FLIGHT", "TOOLADAPTER_EVENTS"):
        monkeypatch.delenv(name, raising=False)
    settings = Settings.from_env()
    assert settings.capacity.calls_in_flight == 16
    assert settings.events == EventLevel.ACTIONABLE
    monkeypatch.setenv("TOOLADAPTER_MAX_CALLS_IN_FLIGHT", "8")
    monkeypatch.setenv("TOOLADAPTER_EVENTS", "All")
    settings = Settings.from_env()
    assert (settings.capacity.calls_in_flight, settings.events) == (8, EventLevel.ALL)


def test_a_call_waits_two_minutes_for_capacity_unless_set(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("TOOLADAPTER_CAPACITY_WAIT_SECONDS", raising=False)
    assert Settings.from_env().capacity.wait_seconds == 120
    monkeypatch.setenv("TOOLADAPTER_CAPACITY_WAIT_SECONDS", "5")
    assert Settings.from_env().capacity.wait_seconds == 5


@pytest.mark.parametrize(
    ("name", "raw", "says"),
    [
        ("TOOLADAPTER_MAX_CALLS_IN_FLIGHT", "0", "below its minimum 1"),
        ("TOOLADAPTER_EVENTS", "some", "is not one of actionable|all"),
        ("TOOLADAPTER_CAPACITY_WAIT_SECONDS", "-1", "below its minimum 0"),
    ],
)
def test_a_bad_in_flight_bound_or_event_level_names_the_variable(
    monkeypatch: pytest.MonkeyPatch, name: str, raw: str, says: str
) -> None:
    monkeypatch.setenv(name, raw)
    with pytest.raises(ValueError, match=f"{name}.*{re.escape(says)}"):
        Settings.from_env()


class _Answer:
    status = 200
    reason = "OK"

    def __init__(self, allowed: bool) -> None:
        self.allowed = allowed

    async def read(self) -> bytes:
        return json.dumps({"status": {"allowed": self.allowed}}).encode()


class _Reviews:
    """The SubjectAccessReview endpoint: counts the reviews, answers when released."""

    def __init__(self, *, allowed: bool = True, fail_first: bool = False) -> None:
        self.asked = 0
        self.allowed = allowed
        self.fail_first = fail_first
        self.release = asyncio.Event()

    async def create_subject_access_review(self, body: dict, **_: object) -> _Answer:
        self.asked += 1
        await self.release.wait()
        if self.fail_first and self.asked == 1:
            raise OSError("connection reset")
        return _Answer(self.allowed)


async def _burst(reviews: _Reviews, n: int) -> list:
    kube = SimpleNamespace(authorization=reviews)
    cache = AllowCache(ttl_seconds=2)
    asks = [
        asyncio.ensure_future(
            can(kube, user="u", namespace="n", verb="invoke", resource="r", cache=cache)  # type: ignore[arg-type]
        )
        for _ in range(n)
    ]
    await asyncio.sleep(0)
    reviews.release.set()
    return list(await asyncio.gather(*asks, return_exceptions=True))


async def test_a_burst_of_the_same_question_asks_the_api_server_once() -> None:
    reviews = _Reviews()
    verdicts = await _burst(reviews, 20)
    assert reviews.asked == 1
    assert all(v.allowed for v in verdicts)


async def test_a_denial_is_shared_by_the_burst_but_never_remembered() -> None:
    reviews = _Reviews(allowed=False)
    verdicts = await _burst(reviews, 5)
    assert reviews.asked == 1 and not any(v.allowed for v in verdicts)


async def test_when_the_shared_question_fails_the_others_ask_on_their_own() -> None:
    reviews = _Reviews(fail_first=True)
    verdicts = await _burst(reviews, 3)
    assert isinstance(verdicts[0], OSError)
    assert [v.allowed for v in verdicts[1:]] == [True, True]
    assert reviews.asked == 3
