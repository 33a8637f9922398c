"""Issue 28, the gateway's side: which incarnation of a namespace it serves (uid and
creation time, read with the operator's client and cached briefly)."""

from __future__ import annotations

from typing import Any

from tooladapter.gateway.incarnations import Incarnations
from tooladapter.kube.client import NotFound
from tooladapter.receipts.core.index import Incarnation


class FakeKube:
    """`Kube.namespace_incarnation` over a dict of namespaces, counting reads."""

    def __init__(self) -> None:
        self.namespaces: dict[str, tuple[str, str, bool]] = {}
        self.reads = 0

    async def namespace_incarnation(self, name: str) -> tuple[str, str, bool]:
        self.reads += 1
        if name not in self.namespaces:
            raise NotFound(name)
        return self.namespaces[name]


def cache(kube: FakeKube, ttl: float) -> Incarnations:
    fake: Any = kube
    return Incarnations(fake, ttl=ttl)


async def test_a_namespace_is_read_once_within_the_ttl() -> None:
    kube = FakeKube()
    kube.namespaces["team-a"] = ("uid-1", "2026-12-01T00:00:00Z", False)
    held = cache(kube, ttl=60)
    first = await held.of("team-a")
    assert first == Incarnation("team-a", "uid-1", "2026-12-01T00:00:00Z")
    assert await held.of("team-a") == first
    assert kube.reads == 1


async def test_a_namespace_created_again_is_seen_once_the_ttl_passed() -> None:
    kube = FakeKube()
    kube.namespaces["team-a"] = ("uid-1", "2026-12-01T00:00:00Z", False)
    held = cache(kube, ttl=0)
    assert (await held.of("team-a") or Incarnation("", "", "")).uid == "uid-1"
    del kube.namespaces["team-a"]
    assert await held.of("team-a") is None
    kube.namespaces["team-a"] = ("uid-2", "2026-12-02T00:00:00Z", False)
    assert (await held.of("team-a") or Incarnation("", "", "")).uid == "uid-2"


async def test_a_namespace_being_deleted_is_never_cached() -> None:
    kube = FakeKube()
    kube.namespaces["team-a"] = ("uid-1", "2026-12-01T00:00:00Z", True)
    held = cache(kube, ttl=60)
    await held.of("team-a")
    await held.of("team-a")
    assert kube.reads == 2
