"""Following a sandbox Job to its end (`kube.sandbox.wait_for_job`): the Job's own end, or
its pod's, whichever is seen first; the pod's follower never decides by breaking."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from tooladapter.kube import sandbox as ksandbox

pytestmark = pytest.mark.timeout(10)

JOB = {"kind": "Job", "metadata": {"name": "ta-job"}, "status": {"active": 1}}
DONE = {**JOB, "status": {"conditions": [{"type": "Complete", "status": "True"}]}}


def pod(phase: str, owner: str = "ta-job", controller: bool = True) -> dict[str, Any]:
    ref = {"kind": "Job", "name": owner, "controller": controller}
    return {"metadata": {"ownerReferences": [ref]}, "status": {"phase": phase}}


def test_only_a_terminal_pod_has_ended_and_only_a_succeeded_one_answered() -> None:
    assert [ksandbox.pod_ended(pod(p)) for p in ("Pending", "Running")] == [False, False]
    assert [ksandbox.pod_ended(pod(p)) for p in ("Succeeded", "Failed")] == [True, True]
    assert ksandbox.pod_succeeded(pod("Succeeded")) and not ksandbox.pod_succeeded(pod("Failed"))
    assert not ksandbox.pod_ended(None) and not ksandbox.pod_ended({})


def answered(
    *,
    exit_code: int = 0,
    finished: str = "2026-12-06T10:00:03Z",
    deadline: int | None = 60,
    **extra: Any,
) -> dict[str, Any]:
    """A Running pod (its phase not yet terminal) whose tool's container terminated."""
    terminated = {"exitCode": exit_code, "finishedAt": finished}
    status: dict[str, Any] = {
        "phase": "Running",
        "startTime": "2026-12-06T10:00:00Z",
        "containerStatuses": [{"name": "tool", "state": {"terminated": terminated}}],
        **extra.pop("status", {}),
    }
    spec = {} if deadline is None else {"activeDeadlineSeconds": deadline}
    return {"metadata": extra.pop("metadata", {}), "spec": spec, "status": status}


def test_a_tool_that_exited_0_on_its_own_has_answered_before_the_pods_phase_says_so() -> None:
    """The kubelet writes the terminal phase only once the pod's sandbox is stopped, about a
    second after the tool's end; the tool's own exit 0 is its end already."""
    assert ksandbox.tool_answered(answered()) and ksandbox.pod_ended(answered())
    assert ksandbox.pod_succeeded(answered())
    assert ksandbox.tool_answered(answered(deadline=None))
    # Anything else waits for the pod's phase: a non-zero exit (OOM kill, the gate, the
    # deadline's SIGKILL carry their reason there) ...
    assert not ksandbox.pod_ended(answered(exit_code=137))
    # ... and an exit 0 while something was stopping the pod (a tool may answer SIGTERM
    # with 0): deleted, disrupted, at its deadline or within the timestamps' margin of it.
    stopping = [
        answered(metadata={"deletionTimestamp": "2026-12-06T10:00:02Z"}),
        answered(status={"conditions": [{"type": "DisruptionTarget", "status": "True"}]}),
        answered(status={"reason": "DeadlineExceeded"}),
        answered(finished="2026-12-06T10:00:59Z"),
        answered(finished="2026-12-06T10:00:58Z"),
        answered(finished="not a time"),
    ]
    for pod in stopping:
        assert not ksandbox.tool_answered(pod), pod
        assert not ksandbox.pod_ended(pod) and not ksandbox.pod_succeeded(pod), pod
    assert ksandbox.tool_answered(answered(finished="2026-12-06T10:00:57Z"))
    # A tool still running, or a gate still probing, has not.
    running = answered()
    running["status"]["containerStatuses"][0]["state"] = {"running": {}}
    assert not ksandbox.pod_ended(running)


def test_only_the_jobs_own_pod_counts_not_a_look_alike_by_label() -> None:
    assert ksandbox._of_job(pod("Succeeded"), "ta-job")
    assert not ksandbox._of_job(pod("Succeeded", owner="other"), "ta-job")
    assert not ksandbox._of_job(pod("Succeeded", controller=False), "ta-job")
    assert not ksandbox._of_job({"metadata": {}}, "ta-job")


class Followers:
    """Stand-ins for the two followers and the Job's read, each scripted."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.job_end: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self.pod_end: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.read: dict[str, Any] | None = JOB
        self.seen: list[dict[str, Any]] = []

        async def until_job(*_a: Any, **_k: Any) -> Any:
            return await self.job_end

        async def until_pod(*_a: Any, **_k: Any) -> None:
            await self.pod_end

        async def get_job(*_a: Any) -> dict[str, Any] | None:
            return self.read

        monkeypatch.setattr(ksandbox, "_until_job_finished", until_job)
        monkeypatch.setattr(ksandbox, "_until_pod_ended", until_pod)
        monkeypatch.setattr(ksandbox, "get_job", get_job)

    def follow(self, uid: str | None = "u-1") -> asyncio.Task[dict[str, Any] | None]:
        run = ksandbox.wait_for_job(
            None,  # type: ignore[arg-type]  # the followers are scripted
            "ns",
            "ta-job",
            timeout=60,
            seen=self.seen.append,
            uid=uid,
        )
        return asyncio.ensure_future(run)


async def settled() -> None:
    """Run every callback the resolved futures made ready (no I/O here: a few passes of the
    loop are all the followers need to react, so a task still pending after them waits)."""
    for _ in range(20):
        await asyncio.sleep(0)


async def test_the_pods_end_returns_the_job_as_it_is_then(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    f = Followers(monkeypatch)
    task = f.follow()
    await asyncio.sleep(0)
    f.pod_end.set_result(None)
    assert await task == JOB
    assert f.seen == [JOB]  # the meter sees the Job as read


async def test_the_jobs_end_first_is_returned_as_before(monkeypatch: pytest.MonkeyPatch) -> None:
    f = Followers(monkeypatch)
    task = f.follow()
    await asyncio.sleep(0)
    f.job_end.set_result(DONE)
    assert await task == DONE
    f.job_end = asyncio.get_running_loop().create_future()
    task = f.follow()
    await asyncio.sleep(0)
    f.job_end.set_exception(TimeoutError("job ns/ta-job did not finish within 60s"))
    with pytest.raises(TimeoutError):
        await task


async def test_a_broken_pod_follower_leaves_the_decision_to_the_jobs(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    f = Followers(monkeypatch)
    task = f.follow()
    await asyncio.sleep(0)
    f.pod_end.set_exception(RuntimeError("watch broke"))
    await settled()
    assert not task.done(), "a broken pod follower is no end"
    f.job_end.set_result(None)  # the Job vanished
    assert await task is None


async def test_without_a_uid_only_the_job_is_followed(monkeypatch: pytest.MonkeyPatch) -> None:
    f = Followers(monkeypatch)
    task = f.follow(uid=None)
    f.pod_end.set_result(None)
    await settled()
    assert not task.done()
    f.job_end.set_result(DONE)
    assert await task == DONE
