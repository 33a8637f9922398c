"""Leader election per served namespace set (kube/leases.py): the Lease name, the expiry
rule, and contenders over an in-memory Lease store with the API server's optimistic
concurrency (a write with a stale resourceVersion is a 409)."""

from __future__ import annotations

import asyncio
import contextlib
import copy
import os
from datetime import UTC, datetime, timedelta
from typing import Any, cast

import pytest

from tooladapter.handlers import leadership
from tooladapter.kube.client import AlreadyExists, Conflict, Kube, NotFound
from tooladapter.kube.leases import (
    ANNOTATION_SCOPE,
    LeaseElector,
    LeaseRecord,
    LostLease,
    expired,
    holder_identity,
    lease_name,
    renew_deadline,
    retry_period,
)
from tooladapter.settings import Settings

T0 = datetime(2026, 1, 1, 12, 0, 0, tzinfo=UTC)


# --------------------------------------------------------------------------- pure parts


def test_the_lease_name_depends_on_the_namespace_set_only() -> None:
    assert lease_name([]) == lease_name(()) == "tooladapter-all"
    one = lease_name(["team-a-*", "team-b"])
    assert one == lease_name(["team-b", "team-a-*"]) == lease_name(["team-b", "team-a-*", "team-b"])
    assert one.startswith("tooladapter-") and len(one) == len("tooladapter-") + 16
    # Disjoint scopes (the tests', the bench's, the demo's) hold different Leases.
    assert len({one, lease_name(["team-a-*"]), lease_name(["lead-x-*"]), lease_name([])}) == 4
    # A valid object name (DNS subdomain) whatever the globs contain.
    assert lease_name(["*", "a?b", "[xy]-*"]).replace("-", "").isalnum()


def test_holder_identities_are_unique_per_process_start() -> None:
    a = holder_identity("node-1", 42)
    assert a.startswith("node-1_42_")
    assert a != holder_identity("node-1", 42)


def _record(holder: str = "other", *, renewed: datetime = T0, duration: int = 15) -> LeaseRecord:
    return LeaseRecord(
        holder=holder,
        duration_seconds=duration,
        renew_time=renewed,
        resource_version="7",
        transitions=0,
    )


def test_a_held_lease_expires_after_its_duration_by_either_clock() -> None:
    rec = _record()
    assert not expired(rec, now=T0 + timedelta(seconds=14.9), unchanged_for=14.9)
    # The holder's renewTime plus the duration has passed on this contender's clock ...
    assert expired(rec, now=T0 + timedelta(seconds=15), unchanged_for=0)
    # ... or this contender watched the record unchanged for the whole duration (a holder
    # whose clock runs ahead writes renewTimes in the future).
    assert expired(rec, now=T0 - timedelta(hours=1), unchanged_for=15)
    # The duration is the holder's, not the contender's.
    assert not expired(_record(duration=60), now=T0 + timedelta(seconds=30), unchanged_for=30)


def test_a_released_lease_is_free_at_once_and_one_without_renew_time_waits() -> None:
    assert expired(_record(holder=""), now=T0, unchanged_for=0)
    rec = LeaseRecord("other", 15, None, "1", 0)
    assert not expired(rec, now=T0, unchanged_for=10)
    assert expired(rec, now=T0, unchanged_for=15)


def test_the_leader_gives_up_before_any_standby_may_take_over() -> None:
    for seconds in (3, 15, 60):
        assert retry_period(seconds) < renew_deadline(seconds) < seconds


def test_lease_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in (
        "TOOLADAPTER_LEADER_ELECTION",
        "TOOLADAPTER_LEASE_NAMESPACE",
        "TOOLADAPTER_LEASE_SECONDS",
    ):
        monkeypatch.delenv(name, raising=False)
    s = Settings.from_env()
    assert (s.leadership.enabled, s.leadership.lease_namespace, s.leadership.lease_seconds) == (
        True,
        "tooladapter-system",
        15,
    )
    monkeypatch.setenv("TOOLADAPTER_LEADER_ELECTION", "false")
    monkeypatch.setenv("TOOLADAPTER_LEASE_NAMESPACE", "ops")
    monkeypatch.setenv("TOOLADAPTER_LEASE_SECONDS", "5")
    s = Settings.from_env()
    assert (s.leadership.enabled, s.leadership.lease_namespace, s.leadership.lease_seconds) == (
        False,
        "ops",
        5,
    )
    monkeypatch.setenv("TOOLADAPTER_LEASE_SECONDS", "1")
    with pytest.raises(ValueError, match="TOOLADAPTER_LEASE_SECONDS=1 is below its minimum 3"):
        Settings.from_env()


# --------------------------------------------------------------------------- contenders


class Store:
    """Leases as the API server keeps them: creates are atomic, replaces and deletes carry
    the resourceVersion they read and conflict when it is stale."""

    def __init__(self) -> None:
        self.objects: dict[tuple[str, str], dict[str, Any]] = {}
        self.version = 0
        self.down = False

    def _check(self) -> None:
        if self.down:
            raise OSError("connection refused")

    def _stamp(self, body: dict[str, Any]) -> dict[str, Any]:
        self.version += 1
        body = copy.deepcopy(body)
        body["metadata"]["resourceVersion"] = str(self.version)
        return body

    async def get(self, namespace: str, name: str) -> dict[str, Any] | None:
        self._check()
        await asyncio.sleep(0)  # let concurrent contenders read the same version
        obj = self.objects.get((namespace, name))
        return copy.deepcopy(obj) if obj is not None else None

    async def create(self, namespace: str, body: dict[str, Any]) -> dict[str, Any]:
        self._check()
        key = (namespace, body["metadata"]["name"])
        if key in self.objects:
            raise AlreadyExists("exists")
        self.objects[key] = self._stamp(body)
        return copy.deepcopy(self.objects[key])

    async def replace(self, namespace: str, name: str, body: dict[str, Any]) -> dict[str, Any]:
        self._check()
        current = self.objects.get((namespace, name))
        if current is None:
            raise NotFound("gone")
        if body["metadata"].get("resourceVersion") != current["metadata"]["resourceVersion"]:
            raise Conflict("the object has been modified")
        self.objects[(namespace, name)] = self._stamp(body)
        return copy.deepcopy(self.objects[(namespace, name)])

    async def delete(self, namespace: str, name: str, resource_version: str) -> None:
        self._check()
        current = self.objects.get((namespace, name))
        if current is None:
            raise NotFound("gone")
        if current["metadata"]["resourceVersion"] != resource_version:
            raise Conflict("precondition failed")
        del self.objects[(namespace, name)]

    def holder(self, name: str) -> str | None:
        obj = self.objects.get(("tooladapter-system", name))
        return None if obj is None else obj["spec"].get("holderIdentity")


class Clocks:
    def __init__(self) -> None:
        self.wall = T0
        self.mono = 1000.0

    def advance(self, seconds: float) -> None:
        self.wall += timedelta(seconds=seconds)
        self.mono += seconds


def elector(
    store: Store, clocks: Clocks, identity: str, scope: tuple[str, ...] = ("lead-*",)
) -> LeaseElector:
    return LeaseElector(
        api=store,
        namespace="tooladapter-system",
        name=lease_name(scope),
        identity=identity,
        duration_seconds=15,
        scope=scope,
        clock=lambda: clocks.wall,
        monotonic=lambda: clocks.mono,
    )


async def test_the_first_contender_leads_and_the_second_waits() -> None:
    store, clocks = Store(), Clocks()
    a, b = elector(store, clocks, "a"), elector(store, clocks, "b")
    assert await a.try_acquire() is None
    assert a.leading and a.renewed_at == clocks.mono
    assert await b.try_acquire() == "a"
    assert not b.leading
    lease = store.objects[("tooladapter-system", a.name)]
    assert lease["spec"]["leaseDurationSeconds"] == 15
    assert lease["metadata"]["annotations"][ANNOTATION_SCOPE] == "lead-*"
    # While a renews, b never takes over, however long it waits.
    for _ in range(20):
        clocks.advance(3)
        await a.renew()
        assert await b.try_acquire() == "a"
    assert store.holder(a.name) == "a"


async def test_disjoint_scopes_do_not_wait_for_each_other() -> None:
    store, clocks = Store(), Clocks()
    a = elector(store, clocks, "a", ("tests-*",))
    b = elector(store, clocks, "b", ("bench-*",))
    c = elector(store, clocks, "c", ())
    assert [await a.try_acquire(), await b.try_acquire(), await c.try_acquire()] == [None] * 3


async def test_a_standby_takes_over_only_after_the_leader_stopped_renewing() -> None:
    store, clocks = Store(), Clocks()
    a, b = elector(store, clocks, "a"), elector(store, clocks, "b")
    await a.try_acquire()
    assert await b.try_acquire() == "a"
    clocks.advance(14)  # a crashed: no renewals any more
    assert await b.try_acquire() == "a"
    clocks.advance(1)
    assert await b.try_acquire() is None
    spec = store.objects[("tooladapter-system", b.name)]["spec"]
    assert spec["holderIdentity"] == "b" and spec["leaseTransitions"] == 1
    # The deposed leader finds out at its next renewal and must stop.
    with pytest.raises(LostLease, match="held by b"):
        await a.renew()
    assert not a.leading


async def test_a_fresh_contender_takes_a_long_abandoned_lease_at_once() -> None:
    store, clocks = Store(), Clocks()
    await elector(store, clocks, "crashed").try_acquire()
    clocks.advance(60)
    assert await elector(store, clocks, "restarted").try_acquire() is None


async def test_a_contender_whose_clock_lags_still_takes_over_by_its_own_watch() -> None:
    store, clocks = Store(), Clocks()
    await elector(store, clocks, "a").try_acquire()
    b = elector(store, clocks, "b")
    b.clock = lambda: clocks.wall - timedelta(hours=1)
    assert await b.try_acquire() == "a"
    clocks.advance(15)
    assert await b.try_acquire() is None


async def test_two_standbys_racing_for_an_expired_lease_never_both_win() -> None:
    store, clocks = Store(), Clocks()
    await elector(store, clocks, "a").try_acquire()
    clocks.advance(60)
    contenders = [elector(store, clocks, f"s{i}") for i in range(5)]
    results = await asyncio.gather(*(c.try_acquire() for c in contenders))
    winners = [c for c in contenders if c.leading]
    assert len(winners) == 1
    assert store.holder(winners[0].name) == winners[0].identity
    # The losers name the winner (they read again right after losing the race).
    assert sorted(r for r in results if r is not None) == [winners[0].identity] * 4


async def test_racing_creates_of_a_new_lease_have_one_winner() -> None:
    store, clocks = Store(), Clocks()
    contenders = [elector(store, clocks, f"s{i}") for i in range(5)]
    await asyncio.gather(*(c.try_acquire() for c in contenders))
    assert len([c for c in contenders if c.leading]) == 1


async def test_release_hands_over_at_once_but_never_deletes_someone_elses_lease() -> None:
    store, clocks = Store(), Clocks()
    a, b = elector(store, clocks, "a"), elector(store, clocks, "b")
    await a.try_acquire()
    assert await b.try_acquire() == "a"
    await a.release()
    assert store.holder(a.name) is None
    assert await b.try_acquire() is None
    # a believes it leads again, but b took over meanwhile: a's release must not delete it.
    a.lease = {"metadata": {"resourceVersion": "1"}, "spec": {}}
    await a.release()
    assert store.holder(b.name) == "b"


async def test_a_renewal_whose_answer_was_lost_goes_on() -> None:
    store, clocks = Store(), Clocks()
    a = elector(store, clocks, "a")
    await a.try_acquire()
    stale = a.lease
    await a.renew()
    a.lease = stale  # as if the answer of the last renewal never arrived
    clocks.advance(3)
    await a.renew()
    assert a.leading and store.holder(a.name) == "a"
    assert a.renewed_at == clocks.mono


async def test_a_deleted_lease_is_lost_and_an_unreachable_api_is_retried() -> None:
    store, clocks = Store(), Clocks()
    a = elector(store, clocks, "a")
    await a.try_acquire()
    acquired_at = a.renewed_at
    store.down = True
    clocks.advance(3)
    with pytest.raises(OSError):
        await a.renew()
    assert a.leading and a.renewed_at == acquired_at  # the watchdog counts from here
    store.down = False
    store.objects.clear()
    with pytest.raises(LostLease, match="deleted"):
        await a.renew()


async def test_a_restarted_start_up_keeps_its_own_lease() -> None:
    store, clocks = Store(), Clocks()
    a = elector(store, clocks, "a")
    await a.try_acquire()
    acquired = store.objects[("tooladapter-system", a.name)]["spec"]["acquireTime"]
    clocks.advance(2)
    assert await a.try_acquire() is None
    spec = store.objects[("tooladapter-system", a.name)]["spec"]
    assert spec["acquireTime"] == acquired and spec["leaseTransitions"] == 0


# --------------------------------------------------------------------------- stopping


class Exited(BaseException):
    pass


@pytest.fixture
def exits(monkeypatch: pytest.MonkeyPatch) -> None:
    """`os._exit` raises instead, so the test sees the status a deposed leader exits with."""

    def fake_exit(code: int) -> None:
        raise Exited(code)

    monkeypatch.setattr(os, "_exit", fake_exit)


async def test_a_leader_that_finds_another_holder_exits_at_its_next_renewal(exits: None) -> None:
    store, clocks = Store(), Clocks()
    a = elector(store, clocks, "a")
    a.duration_seconds = 3  # renews every 0.6 s
    await a.try_acquire()
    lease = store.objects[("tooladapter-system", a.name)]
    lease["spec"]["holderIdentity"] = "intruder"
    lease["metadata"]["resourceVersion"] = "99"
    held = leadership.Leadership(a, cast(Kube, None))
    with pytest.raises(Exited) as exited:
        await asyncio.wait_for(held._renew(), timeout=5)
    assert exited.value.args == (leadership.LOST_LEADERSHIP_EXIT,)


async def test_a_leader_that_cannot_renew_keeps_trying_until_its_deadline(exits: None) -> None:
    store, clocks = Store(), Clocks()
    a = elector(store, clocks, "a")
    a.duration_seconds = 3
    await a.try_acquire()
    store.down = True
    held = leadership.Leadership(a, cast(Kube, None))
    renewer = asyncio.create_task(held._renew())
    await asyncio.sleep(1.5)  # failed attempts are retried, not fatal by themselves
    assert not renewer.done()
    renewer.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await renewer
    # The watchdog (a thread, so a stalled event loop cannot hold it up) ends it once no
    # renewal succeeded for two thirds of the duration.
    clocks.advance(1.9)
    watchdog = asyncio.create_task(asyncio.to_thread(held._watch))
    try:
        await asyncio.sleep(0.5)
        assert not watchdog.done()  # 1.9 s without a renewal: within the deadline
        clocks.advance(0.2)
        with pytest.raises(Exited):
            await asyncio.wait_for(watchdog, timeout=5)
    finally:
        held.stopped.set()  # never leave the thread behind
    assert clocks.mono - a.renewed_at > renew_deadline(3)
