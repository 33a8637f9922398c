"""Would the namespace's ResourceQuotas admit a sandbox's Job and its pod right now?

Asked before the call is Executing, so a call without capacity waits (and may end Failed)
before any effect. The question goes to the API server as a server-side dry run
(`dryRun=All`) of the Job and of the pod its template makes, never by reading the
ResourceQuotas and adding up here: the quota admission plugin evaluates exactly what the
real create will meet (every quota's scopes and scope selectors, LimitRange defaults filled
in first, init containers counted by their maximum, RuntimeClass overhead, extended
resources), and a dry run persists nothing and consumes no quota. Reading `status.used`
and re-implementing that would wait on quotas that do not apply and miss ones that do.

The Job itself meets only object-count quotas (`count/jobs.batch`); the Job controller
creates the pod later, under its own identity, so the pod is dry-run separately (which
needs `create` on pods: see manifests/rbac/operator.yaml). Only a 403 "exceeded quota" is
a capacity answer; any other refusal of a dry run (the operator not allowed to create
pods, an admission policy that only lets the Job controller create pods) says nothing
about capacity, so the call goes on and the real create decides, as before.

It is a check, not a reservation: another pod may take the quota between this answer and
the Job controller's create. That Job then never gets a pod until its deadline, and the
executor settles it Failed (it never started).
"""

from __future__ import annotations

import re
from typing import Any

from tooladapter.kube.client import Kube, json_body
from tooladapter.kube.errors import AlreadyExists, Conflict, Forbidden, Invalid, api_errors

#: The quota admission plugin's refusal of a request over a ResourceQuota's hard limits.
EXCEEDED = "exceeded quota"
_QUOTA_NAME = re.compile(r"exceeded quota: ([a-z0-9]([-a-z0-9.]*[a-z0-9])?)")


def pod_of(job: dict[str, Any]) -> dict[str, Any]:
    """The pod the Job controller would create from `job`'s template (named by the server)."""
    meta = job["metadata"]
    template = job["spec"]["template"]
    tmeta = template.get("metadata") or {}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "generateName": f"{meta['name']}-",
            "namespace": meta["namespace"],
            "labels": dict(tmeta.get("labels") or {}),
            "annotations": dict(tmeta.get("annotations") or {}),
        },
        "spec": template["spec"],
    }


def quota_named(message: str) -> str | None:
    """The ResourceQuota an "exceeded quota" message names."""
    found = _QUOTA_NAME.search(message)
    return found.group(1) if found else None


async def quota_refusal(kube: Kube, job: dict[str, Any]) -> str | None:
    """The API server's message when a ResourceQuota refuses the Job or its pod now
    (nothing is created); None when both fit, or when the dry run cannot tell."""
    namespace = job["metadata"]["namespace"]
    for obj in (job, pod_of(job)):
        try:
            with api_errors():
                if obj["kind"] == "Job":
                    answer = await kube.batch.create_namespaced_job(
                        namespace, obj, dry_run="All", _preload_content=False
                    )
                else:
                    answer = await kube.core.create_namespaced_pod(
                        namespace, obj, dry_run="All", _preload_content=False
                    )
                await json_body(answer)
        except Forbidden as err:
            if EXCEEDED in err.message:
                return err.message[:1024]
        except (Invalid, Conflict, AlreadyExists):
            # Not a capacity answer (the Job exists already, the operator may not
            # create pods, an admission policy): the real create decides.
            continue
    return None


__all__ = ["EXCEEDED", "pod_of", "quota_named", "quota_refusal"]
