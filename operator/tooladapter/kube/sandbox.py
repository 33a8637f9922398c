"""Sandbox objects on the API server: create what `pipeline.sandbox` builds, follow, reap.

Creation is idempotent (AlreadyExists means a previous run of this operator made it, and
the deterministic name makes it ours), so a restarted operator never makes a second Job.
"""

from __future__ import annotations

import asyncio
import base64
from collections.abc import Callable, Collection
from dataclasses import dataclass
from typing import Any

from kubernetes_asyncio import watch

from tooladapter.kube.client import Kube
from tooladapter.kube.errors import (
    AlreadyExists,
    Conflict,
    Invalid,
    KubeError,
    NotFound,
    api_errors,
    unless_absent,
)
from tooladapter.naming import LABEL_INVOCATION_UID, LABEL_MANAGED_BY, MANAGED_BY
from tooladapter.sandbox.podspec import CONTAINER_NAME
from tooladapter.timeutil import parse_time

MANAGED_SELECTOR = f"{LABEL_MANAGED_BY}={MANAGED_BY}"


#: kind -> (API group of `Kube`, the kind in its method names), for what tooladapter makes.
_KINDS: dict[str, tuple[str, str]] = {
    "Job": ("batch", "job"),
    "NetworkPolicy": ("networking", "network_policy"),
    "Secret": ("core", "secret"),
    # Only the egress proxy's records (in its namespace) are tooladapter's ConfigMaps.
    "ConfigMap": ("core", "config_map"),
}
#: The kinds made here (the proxy makes its ConfigMaps itself: `kube.egress`).
_CREATED = frozenset({"Job", "NetworkPolicy", "Secret"})


def _api(kube: Kube, kind: str, supported: Collection[str]) -> tuple[Any, str]:
    if kind not in supported:
        raise ValueError(f"unsupported kind {kind}")
    group, noun = _KINDS[kind]
    return getattr(kube, group), noun


async def create_idempotent(kube: Kube, obj: dict[str, Any]) -> bool:
    """Create `obj`; False when it already existed (made by an earlier run)."""
    api, noun = _api(kube, obj["kind"], _CREATED)
    try:
        with api_errors(creating=True):
            await getattr(api, f"create_namespaced_{noun}")(obj["metadata"]["namespace"], obj)
    except AlreadyExists:
        return False
    return True


async def delete_quietly(kube: Kube, kind: str, namespace: str, name: str) -> bool:
    """Delete; True when something was deleted. Pods of Jobs go with them (foreground)."""
    api, noun = _api(kube, kind, _KINDS)
    options: dict[str, Any] = {}
    if kind == "Job":
        options = {"propagation_policy": "Background", "grace_period_seconds": 0}
    try:
        with api_errors():
            await getattr(api, f"delete_namespaced_{noun}")(name, namespace, **options)
    except NotFound:
        return False
    return True


async def read_secret_keys(kube: Kube, namespace: str, name: str) -> dict[str, str]:
    """The base64 data of a Secret; raises NotFound."""
    with api_errors():
        secret = await kube.core.read_namespaced_secret(name, namespace)
    return dict(secret.data or {})


def decode_b64(value: str) -> str:
    return base64.b64decode(value).decode("utf-8", errors="replace")


async def get_job(kube: Kube, namespace: str, name: str) -> dict[str, Any] | None:
    job = await unless_absent(kube.batch.read_namespaced_job(name, namespace))
    if job is None:
        return None
    result: dict[str, Any] = kube.api.sanitize_for_serialization(job)
    return result


def job_finished(job: dict[str, Any]) -> str | None:
    """'Complete' or 'Failed' once the Job controller has decided, else None."""
    for cond in (job.get("status") or {}).get("conditions") or []:
        if cond.get("status") == "True" and cond.get("type") in ("Complete", "Failed"):
            return str(cond["type"])
    return None


def job_never_had_pod(job: dict[str, Any]) -> bool:
    """Whether the Job controller never created a pod for `job`: it counts every pod it
    made (tracked by its finalizer) as active, terminating, succeeded or failed, and a pod
    removed at the deadline as failed. All zero: every create was refused (a ResourceQuota:
    events FailedCreate), so the tool never started."""
    status = job.get("status") or {}
    uncounted = status.get("uncountedTerminatedPods") or {}
    counts = ("active", "ready", "terminating", "succeeded", "failed")
    return not any(status.get(key) for key in counts) and not any(uncounted.values())


def job_failure_reason(job: dict[str, Any]) -> str:
    for cond in (job.get("status") or {}).get("conditions") or []:
        if cond.get("type") == "Failed" and cond.get("status") == "True":
            return str(cond.get("reason") or "")
    return ""


#: Called with every state of a Job the follower sees, as it sees it (the run meter).
JobSighting = Callable[[dict[str, Any]], None]


def job_running(job: dict[str, Any]) -> bool:
    """Whether the Job's pod is Ready: its init containers (the network gate) have passed and
    the tool's container runs. The Job controller counts such pods in `status.ready`."""
    return bool((job.get("status") or {}).get("ready"))


#: Kubernetes' timestamps have whole seconds: a tool that exited this long before its
#: pod's deadline cannot have been stopped by it.
_DEADLINE_MARGIN_SECONDS = 2


def tool_answered(pod: dict[str, Any] | None) -> bool:
    """Whether the tool's container exited 0 on its own: terminated with exit code 0 while
    nothing was stopping the pod (no deletion, no DisruptionTarget, no deadline reached or
    near, so no SIGTERM a tool could answer with 0).

    The kubelet reports the pod's terminal phase only after it has stopped the pod's
    sandbox, about a second after the container's end; with restartPolicy Never nothing
    runs in the pod again, so the tool's own exit is its end."""
    if not pod:
        return False
    meta, spec, status = (pod.get(k) or {} for k in ("metadata", "spec", "status"))
    if meta.get("deletionTimestamp") or status.get("reason") == "DeadlineExceeded":
        return False
    for cond in status.get("conditions") or []:
        if cond.get("type") == "DisruptionTarget" and cond.get("status") == "True":
            return False
    terminated = next(
        (
            (c.get("state") or {}).get("terminated")
            for c in status.get("containerStatuses") or []
            if c.get("name") == CONTAINER_NAME
        ),
        None,
    )
    if not terminated or terminated.get("exitCode") != 0:
        return False
    deadline = spec.get("activeDeadlineSeconds")
    if deadline is None:
        return True
    try:
        ran = parse_time(terminated["finishedAt"]) - parse_time(status["startTime"])
    except (KeyError, TypeError, ValueError):
        return False  # no proof it ended before its deadline: the pod's phase decides
    return bool(ran.total_seconds() < int(deadline) - _DEADLINE_MARGIN_SECONDS)


def pod_ended(pod: dict[str, Any] | None) -> bool:
    """Whether the tool's end is known: the pod is terminal (Succeeded or Failed; with
    restartPolicy Never nothing in it runs again, and the Job, backoffLimit 0, makes no
    other), or its tool answered (`tool_answered`)."""
    phase = ((pod or {}).get("status") or {}).get("phase")
    return phase in ("Succeeded", "Failed") or tool_answered(pod)


def pod_succeeded(pod: dict[str, Any] | None) -> bool:
    """Every container of the pod ended with exit code 0, or the tool's did on its own
    before the pod's phase says so (`tool_answered`): the tool answered."""
    phase = ((pod or {}).get("status") or {}).get("phase")
    return phase == "Succeeded" or tool_answered(pod)


def _of_job(pod: dict[str, Any], job: str) -> bool:
    """The pod is the Job's own (its controller reference), not a look-alike by label."""
    for ref in (pod.get("metadata") or {}).get("ownerReferences") or []:
        if ref.get("controller") and ref.get("kind") == "Job" and ref.get("name") == job:
            return True
    return False


async def _until_pod_ended(
    kube: Kube, namespace: str, job: str, uid: str, seen: JobSighting | None
) -> None:
    """Return once the Job's pod is terminal (by list and watch of the call's pods).

    The Job controller batches pod updates (a sync a second after a pod changes) and then
    writes the Job's counts and conditions: following the pod itself learns of the tool's
    end about a second sooner. Errors and expired watches only start it over; a pod that
    disappears before its end leaves the decision to the Job's follower."""
    selector = f"{LABEL_INVOCATION_UID}={uid}"
    while True:
        w = watch.Watch()
        try:
            with api_errors():
                pods = await kube.core.list_namespaced_pod(namespace, label_selector=selector)
            for item in pods.items:
                pod = {**kube.api.sanitize_for_serialization(item), "kind": "Pod"}
                if _of_job(pod, job):
                    if seen is not None:
                        seen(pod)
                    if pod_ended(pod):
                        return
            async with asyncio.timeout(60):
                with api_errors():
                    async for event in w.stream(
                        kube.core.list_namespaced_pod,
                        namespace,
                        label_selector=selector,
                        resource_version=pods.metadata.resource_version,
                        timeout_seconds=61,
                    ):
                        pod = {
                            **kube.api.sanitize_for_serialization(event["object"]),
                            "kind": "Pod",
                        }
                        if event["type"] == "DELETED" or not _of_job(pod, job):
                            continue
                        if seen is not None:
                            seen(pod)
                        if pod_ended(pod):
                            return
        except (TimeoutError, KubeError):
            pass  # re-list and re-watch: watches expire and resourceVersions go stale
        finally:
            w.stop()
        await asyncio.sleep(0.5)  # gently: a watch the server keeps ending is no busy loop


async def wait_for_job(
    kube: Kube,
    namespace: str,
    name: str,
    *,
    timeout: float,
    seen: JobSighting | None = None,
    uid: str | None = None,
) -> dict[str, Any] | None:
    """Follow a Job by watch until it is Complete or Failed; None when it disappears.
    `seen` gets every state of the Job (and, with `uid`, of its pod, `kind` Pod) read or
    watched, the moment it arrives.

    With `uid` (the call's, its pod's label) the Job's pod is followed too, and once the
    pod is terminal the Job is returned as it is then, finished or not: the pod's end is
    the tool's (`executors.sandbox.SandboxExecutor.settle` reads it from the pod)."""
    if uid is None:
        return await _until_job_finished(kube, namespace, name, timeout=timeout, seen=seen)
    job_end = asyncio.ensure_future(
        _until_job_finished(kube, namespace, name, timeout=timeout, seen=seen)
    )
    pod_end = asyncio.ensure_future(_until_pod_ended(kube, namespace, name, uid, seen))
    try:
        await asyncio.wait({job_end, pod_end}, return_when=asyncio.FIRST_COMPLETED)
        if job_end.done() or pod_end.exception() is not None:
            # The Job's end came first, or the pod's follower broke (not an end): the
            # Job's follower decides.
            return await job_end
    finally:
        pod_end.cancel()
        job_end.cancel()
    job = await get_job(kube, namespace, name)
    if job is not None and seen is not None:
        seen(job)
    return job


async def _until_job_finished(
    kube: Kube,
    namespace: str,
    name: str,
    *,
    timeout: float,
    seen: JobSighting | None = None,
) -> dict[str, Any] | None:
    """Follow a Job by watch until it is Complete or Failed; None when it disappears."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        job = await get_job(kube, namespace, name)
        if job is not None and seen is not None:
            seen(job)
        if job is None or job_finished(job):
            return job
        remaining = deadline - loop.time()
        if remaining <= 0:
            raise TimeoutError(f"job {namespace}/{name} did not finish within {timeout:.0f}s")
        rv = job["metadata"]["resourceVersion"]
        w = watch.Watch()
        try:
            async with asyncio.timeout(min(remaining, 60)):
                with api_errors():
                    async for event in w.stream(
                        kube.batch.list_namespaced_job,
                        namespace,
                        field_selector=f"metadata.name={name}",
                        resource_version=rv,
                        timeout_seconds=int(min(remaining, 60)) + 1,
                    ):
                        obj = kube.api.sanitize_for_serialization(event["object"])
                        if event["type"] == "DELETED":
                            return None
                        if seen is not None:
                            seen(obj)
                        if job_finished(obj):
                            return dict(obj)
        except (TimeoutError, KubeError):
            pass  # re-read and re-watch: watches expire and resourceVersions go stale
        finally:
            w.stop()


@dataclass(frozen=True)
class PodOutcome:
    name: str | None
    started: bool
    exit_code: int | None
    reason: str
    log: bytes
    gate_failed: bool = False
    #: The kubelet ended the pod at its own activeDeadlineSeconds (the tool's timeout,
    #: counted from the pod's start on its node, not from the Job's creation).
    deadline_exceeded: bool = False
    #: When the tool's container started and finished (RFC 3339, from its terminated state).
    started_at: str | None = None
    finished_at: str | None = None
    #: The pod's phase is Succeeded: every container exited 0, the tool ran to its end.
    succeeded: bool = False

    @property
    def run_seconds(self) -> float | None:
        """The tool container's run time, what the sandbox-seconds meter counts (None:
        it never ran to a recorded end)."""
        if not self.started_at or not self.finished_at:
            return None
        try:
            seconds = (parse_time(self.finished_at) - parse_time(self.started_at)).total_seconds()
        except ValueError:
            return None
        return max(seconds, 0.0)


async def job_pod(kube: Kube, namespace: str, uid: str) -> dict[str, Any] | None:
    with api_errors():
        pods = await kube.core.list_namespaced_pod(
            namespace, label_selector=f"{LABEL_INVOCATION_UID}={uid}"
        )
    items = [kube.api.sanitize_for_serialization(p) for p in pods.items]
    if not items:
        return None
    items.sort(key=lambda p: p["metadata"].get("creationTimestamp", ""))
    return dict(items[-1])


def pod_scheduled(pod: dict[str, Any] | None) -> bool:
    """Whether the pod was bound to a node (its kubelet may have started it)."""
    return bool(pod and (pod.get("spec") or {}).get("nodeName"))


@dataclass(frozen=True)
class Unschedulable:
    """A pod the scheduler could not place: its PodScheduled condition is False with
    reason Unschedulable. `since` is when the condition turned so (RFC 3339, the API
    server's clock), `resource_version` the pod's as read (the proof of a later delete)."""

    name: str
    message: str
    since: str | None
    resource_version: str


def pod_unschedulable(pod: dict[str, Any] | None) -> Unschedulable | None:
    """The scheduler's refusal of a pod not bound to a node; None when it is bound, gone,
    or not (yet) refused."""
    if not pod or pod_scheduled(pod):
        return None
    for cond in (pod.get("status") or {}).get("conditions") or []:
        if (
            cond.get("type") == "PodScheduled"
            and cond.get("status") == "False"
            and cond.get("reason") == "Unschedulable"
        ):
            meta = pod.get("metadata") or {}
            return Unschedulable(
                name=str(meta.get("name") or ""),
                message=str(cond.get("message") or "Unschedulable"),
                since=cond.get("lastTransitionTime") or meta.get("creationTimestamp"),
                resource_version=str(meta.get("resourceVersion") or ""),
            )
    return None


async def delete_unscheduled_pod(
    kube: Kube, namespace: str, name: str, resource_version: str
) -> bool:
    """Delete a pod only as it was read (unscheduled): binding it to a node changes its
    resourceVersion, so a True proves no kubelet ever got it; once its deletionTimestamp is
    set (the Job controller's finalizer may keep it a moment) the scheduler skips it and
    the API server refuses to bind it. False: it changed meanwhile (bound: it may run) or
    is gone."""
    body = {
        "preconditions": {"resourceVersion": resource_version},
        "gracePeriodSeconds": 0,
    }
    try:
        with api_errors():
            await kube.core.delete_namespaced_pod(name, namespace, body=body)
    except (Conflict, NotFound):
        return False
    return True


def pod_started(pod: dict[str, Any] | None) -> bool:
    """Whether the tool's process may have run: its container started at some point."""
    if not pod:
        return False
    for status in (pod.get("status") or {}).get("containerStatuses") or []:
        state = status.get("state") or {}
        if "running" in state or "terminated" in state or status.get("started"):
            return True
        if status.get("lastState", {}).get("terminated"):
            return True
    return False


async def pod_outcome(kube: Kube, namespace: str, uid: str, *, max_bytes: int) -> PodOutcome:
    """Exit code, reason and the first `max_bytes + 1` bytes of the tool's stdout."""
    pod = await job_pod(kube, namespace, uid)
    if pod is None:
        return PodOutcome(name=None, started=False, exit_code=None, reason="PodGone", log=b"")
    name = pod["metadata"]["name"]
    exit_code: int | None = None
    reason = ""
    started_at = finished_at = None
    for status in (pod.get("status") or {}).get("containerStatuses") or []:
        if status.get("name") != CONTAINER_NAME:
            continue
        terminated = (status.get("state") or {}).get("terminated") or {}
        if terminated:
            exit_code = terminated.get("exitCode")
            reason = terminated.get("reason") or ""
            started_at, finished_at = terminated.get("startedAt"), terminated.get("finishedAt")
    gate_failed = any(
        ((status.get("state") or {}).get("terminated") or {}).get("exitCode") not in (None, 0)
        for status in (pod.get("status") or {}).get("initContainerStatuses") or []
    )
    log = b""
    try:
        with api_errors():
            # One byte over the bound tells the sanitizer the output was cut.
            text = await kube.core.read_namespaced_pod_log(
                name,
                namespace,
                container=CONTAINER_NAME,
                limit_bytes=max_bytes + 1,
                _preload_content=False,
            )
            log = await text.read()
    except (Invalid, NotFound):
        pass  # 400: the container never started; 404: the pod is gone
    return PodOutcome(
        name=name,
        started=pod_started(pod),
        exit_code=exit_code,
        reason=reason,
        log=log[: max_bytes + 1],
        gate_failed=gate_failed,
        deadline_exceeded=(pod.get("status") or {}).get("reason") == "DeadlineExceeded",
        started_at=started_at,
        finished_at=finished_at,
        succeeded=pod_succeeded(pod),
    )


async def list_managed(kube: Kube, kind: str, namespace: str | None = None) -> list[dict[str, Any]]:
    """Every Job, Secret, NetworkPolicy or ConfigMap tooladapter made (label-selected,
    cluster-wide unless `namespace` is given)."""
    if kind not in _KINDS:
        raise ValueError(kind)
    api, noun = _api(kube, kind, _KINDS)
    with api_errors():
        if namespace is None:
            res = await getattr(api, f"list_{noun}_for_all_namespaces")(
                label_selector=MANAGED_SELECTOR
            )
        else:
            res = await getattr(api, f"list_namespaced_{noun}")(
                namespace, label_selector=MANAGED_SELECTOR
            )
    return [dict(kube.api.sanitize_for_serialization(i)) for i in res.items]


__all__ = [
    "AlreadyExists",
    "JobSighting",
    "NotFound",
    "PodOutcome",
    "Unschedulable",
    "create_idempotent",
    "decode_b64",
    "delete_quietly",
    "delete_unscheduled_pod",
    "get_job",
    "job_failure_reason",
    "job_finished",
    "job_never_had_pod",
    "job_pod",
    "job_running",
    "list_managed",
    "pod_ended",
    "pod_outcome",
    "pod_started",
    "pod_succeeded",
    "pod_unschedulable",
    "read_secret_keys",
    "tool_answered",
    "wait_for_job",
]
