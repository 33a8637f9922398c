"""The status writes of descriptors and policies.

A write that fails for a reason that may pass is made again: kopf never retries an
`on.event` handler, so before, one 429 (CRDs a moment after they were applied answer it) left
a descriptor not callable until kopf's next re-listing, minutes later (CI saw "descriptor sh
active" time out once). And what was written is what calls are judged on at once: before,
the catalog held it only when the watch's echo came (kopf batches an object's events for
0.1 s), and a call made the moment the status said active was denied "not active" (CI saw
that once in test_mcp)."""

from __future__ import annotations

from typing import Any

import pytest
from kubernetes_asyncio.client.exceptions import ApiException

from tests.unit.fake_cluster import NAMESPACE, Harness, descriptor, policy
from tooladapter.enums import Resource
from tooladapter.handlers import descriptors, routing


@pytest.fixture(autouse=True)
def no_waits(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(routing, "RECONCILE_RETRY_DELAYS", (0, 0, 0))


def failing(times: int, status: int) -> tuple[list[int], Any]:
    """A patch_status hook failing its first `times` calls with `status`, and the count."""
    seen = [0]

    def hook(**_: Any) -> None:
        seen[0] += 1
        if seen[0] <= times:
            raise ApiException(status=status, reason="Too Many Requests")

    return seen, hook


async def test_a_descriptor_is_activated_though_its_first_status_writes_answer_429(
    h: Harness,
) -> None:
    stored = h.cluster.put(Resource.DESCRIPTORS, descriptor("lister"))
    seen, h.cluster.hooks["patch_status"] = failing(2, 429)

    await routing.descriptor_event(h.rt, {"type": "ADDED", "object": stored})

    assert seen[0] == 3
    status = h.cluster.stored(Resource.DESCRIPTORS, NAMESPACE, "lister-1-0-0")["status"]
    assert status["active"] is True


async def test_a_policy_status_is_written_though_the_first_write_answers_503(h: Harness) -> None:
    stored = h.cluster.put(Resource.POLICIES, policy("tenant"))
    seen, h.cluster.hooks["patch_status"] = failing(1, 503)

    await routing.policy_event(h.rt, {"type": "ADDED", "object": stored})

    assert seen[0] == 2
    assert h.cluster.stored(Resource.POLICIES, NAMESPACE, "tenant").get("status")


async def test_a_refused_write_is_not_made_again_and_retries_end(h: Harness) -> None:
    stored = h.cluster.put(Resource.DESCRIPTORS, descriptor("lister"))
    seen, h.cluster.hooks["patch_status"] = failing(1, 422)
    with pytest.raises(ApiException):
        await routing.descriptor_event(h.rt, {"type": "ADDED", "object": stored})
    assert seen[0] == 1

    seen, h.cluster.hooks["patch_status"] = failing(100, 429)
    with pytest.raises(ApiException):
        await routing.descriptor_event(h.rt, {"type": "ADDED", "object": stored})
    assert seen[0] == 4  # the first attempt and one after each of the three delays


async def test_calls_are_judged_on_the_written_status_before_the_watch_echoes_it(
    h: Harness,
) -> None:
    stored = h.cluster.put(Resource.DESCRIPTORS, descriptor("lister"))
    h.catalog.update(Resource.DESCRIPTORS, "ADDED", stored)  # as the watch delivered it

    await routing.descriptor_event(h.rt, {"type": "ADDED", "object": stored})

    entry = h.catalog.find_descriptor(NAMESPACE, "lister", "1.0.0")
    assert entry is not None
    assert entry.status.get("active") is True


async def test_a_written_status_does_not_replace_a_newer_version_or_bring_back_a_deleted_one(
    h: Harness,
) -> None:
    """The MCP prober reconciles descriptors outside kopf's one-event-at-a-time handling:
    an event may bring a newer version, or the deletion, while its write is on its way."""
    stored = h.cluster.put(Resource.DESCRIPTORS, descriptor("lister"))
    h.catalog.update(Resource.DESCRIPTORS, "ADDED", stored)
    newer = {**stored, "metadata": {**stored["metadata"], "resourceVersion": "newer"}}
    newer["spec"] = {**stored["spec"], "description": "changed meanwhile"}

    def meanwhile(event_type: str) -> Any:
        def hook(**_: Any) -> None:
            h.catalog.update(Resource.DESCRIPTORS, event_type, newer)

        return hook

    h.cluster.hooks["patch_status"] = meanwhile("MODIFIED")
    await descriptors.reconcile_descriptor(h.rt, "ADDED", stored)
    entry = h.catalog.find_descriptor(NAMESPACE, "lister", "1.0.0")
    assert entry is not None
    assert entry.body["spec"]["description"] == "changed meanwhile"

    h.catalog.update(Resource.DESCRIPTORS, "MODIFIED", stored)
    h.cluster.hooks["patch_status"] = meanwhile("DELETED")
    await descriptors.reconcile_descriptor(h.rt, "MODIFIED", stored)
    assert h.catalog.find_descriptor(NAMESPACE, "lister", "1.0.0") is None
