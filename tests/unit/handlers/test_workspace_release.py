"""spec.releaseWorkspace: an attempt's workspace released from one of its calls once it
ended, recorded first, only pods made before the record, once (`handlers.workspace_release`)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from tests.unit.fake_cluster import CALLER, NAMESPACE, Harness, invocation
from tests.unit.sandbox.test_warm_settlement import FakeWarmKube, warm
from tooladapter.enums import Resource
from tooladapter.handlers import workspace_release
from tooladapter.handlers.routing import invocation_event
from tooladapter.sandbox.warm import LABEL_WORKSPACE, workspace_key
from tooladapter.timeutil import to_iso

pytestmark = pytest.mark.timeout(10)

ATTEMPT = "att-1"
ENDED = {"state": "Observed"}
RUNNING = {"state": "Executing"}


def asking(name: str = "call-1", **status: Any) -> dict[str, Any]:
    return invocation(name, attemptId=ATTEMPT, releaseWorkspace=True, status={**ENDED, **status})


@pytest.mark.parametrize(
    ("body", "wanted"),
    [
        (asking(), True),
        (
            invocation(attemptId=ATTEMPT, releaseWorkspace=True, status={"state": "Executing"}),
            False,
        ),
        (invocation(attemptId=ATTEMPT, releaseWorkspace=True), False),  # no state yet
        (invocation(releaseWorkspace=True, status=ENDED), False),  # no attempt
        (invocation(attemptId=ATTEMPT, status=ENDED), False),  # not asked
        (asking(workspaceReleasedAt="2026-12-06T10:00:00Z"), False),  # recorded
        (
            invocation(attemptId=ATTEMPT, releaseWorkspace=True, dryRun=True, status=ENDED),
            False,
        ),
    ],
    ids=["ended", "running", "received", "no-attempt", "not-asked", "recorded", "dry-run"],
)
def test_a_release_is_wanted_only_of_an_ended_call_that_asked_and_was_not_recorded(
    body: dict[str, Any], wanted: bool
) -> None:
    assert workspace_release.wanted(body) is wanted


def workspace_pod(kube: FakeWarmKube, name: str, created: datetime) -> None:
    kube.add(
        name,
        {LABEL_WORKSPACE: workspace_key(NAMESPACE, CALLER, ATTEMPT)},
        created=to_iso(created.replace(microsecond=0)),
    )


async def test_the_release_is_recorded_then_deletes_only_the_pods_made_before_it(
    h: Harness,
) -> None:
    kube = FakeWarmKube()
    h.rt.warm = warm(kube)
    now = datetime.now(UTC)
    workspace_pod(kube, "ws-old", now - timedelta(minutes=5))
    # A later call's new workspace, made after the record (a clock ahead of this one).
    workspace_pod(kube, "ws-new", now + timedelta(minutes=5))
    body = h.cluster.put(Resource.INVOCATIONS, asking())

    await workspace_release.release(h.rt, body)

    stamp = h.cluster.invocation("call-1")["status"]["workspaceReleasedAt"]
    assert stamp
    assert kube.deleted == ["ws-old"]
    assert "ws-new" in kube.pods
    (event,) = h.rt.events.of("WorkspaceReleased")  # type: ignore[attr-defined]
    assert ATTEMPT in event.message and "ws-old" in event.message

    # Seen again (an echo, another replica, a restart): recorded, nothing more is deleted.
    await workspace_release.release(h.rt, h.cluster.invocation("call-1"))
    assert kube.deleted == ["ws-old"]
    assert h.cluster.invocation("call-1")["status"]["workspaceReleasedAt"] == stamp


async def test_an_ended_call_that_asks_is_released_from_its_watch_event(h: Harness) -> None:
    kube = FakeWarmKube()
    h.rt.warm = warm(kube)
    workspace_pod(kube, "ws-1", datetime.now(UTC) - timedelta(minutes=1))
    body = h.cluster.put(Resource.INVOCATIONS, asking())

    invocation_event(h.rt, {"type": "MODIFIED", "object": body})
    await h.cluster.wait_for_status(
        "call-1", lambda status: bool(status.get("workspaceReleasedAt"))
    )
    task = h.rt.tasks.get(workspace_release.task_key(body["metadata"]["uid"]))
    if task is not None:
        await task
    assert kube.deleted == ["ws-1"]
