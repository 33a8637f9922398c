"""A descriptor's or policy's status write that fails for a reason that may pass is made
again: kopf never retries an `on.event` handler, so before, one 429 (CRDs a moment after
they were applied answer it) left a descriptor not callable until kopf's next re-listing,
minutes later (CI saw "descriptor sh active" time out once)."""

from __future__ import annotations

from typing import Any

import pytest
from kubernetes_asyncio.client.exceptions import ApiException

from tooladapter.enums import Resource
from tooladapter.handlers import routing

from .fake_cluster import NAMESPACE, Harness, descriptor, policy


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
