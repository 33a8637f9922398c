"""The seam between the invocation flow (and its executors) and the API server.

`Cluster` names every API operation a call needs, in the flow's own words; `KubeCluster`
does them with kubernetes_asyncio. The flow and the executors see only the protocol, so the
unit suite drives them against an in-memory fake of it (`tests/unit/fake_cluster.py`),
the way httpx puts all I/O behind one transport.
"""

from __future__ import annotations

import base64
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from tooladapter import GROUP
from tooladapter.enums import Resource
from tooladapter.kube import admission as kadmission
from tooladapter.kube import auth, capacity, claims
from tooladapter.kube import dataflow as kdataflow
from tooladapter.kube import sandbox as ksandbox
from tooladapter.kube.client import Kube, json_body
from tooladapter.kube.errors import NotFound, api_errors
from tooladapter.pipeline.retention import ClaimRecord
from tooladapter.pipeline.validation.shipped import Key, Observed

Body = dict[str, Any]


class Cluster(Protocol):
    """What one governed call asks of the API server."""

    # -- our own resources
    async def get(self, resource: Resource, namespace: str, name: str) -> Body:
        """The object; `NotFound` when it does not exist."""

    async def list_all(self, resource: Resource, namespace: str) -> list[Body]: ...

    async def namespace_labels(self, name: str) -> dict[str, str]:
        """The namespace's labels as stored now; `NotFound` when it does not exist."""

    async def namespace_incarnation(self, name: str) -> tuple[str, str, bool]:
        """The namespace's uid, creationTimestamp and whether its deletion has begun;
        `NotFound` when it does not exist."""

    async def patch_status(
        self,
        resource: Resource,
        namespace: str,
        name: str,
        status: Body,
        *,
        resource_version: str | None = None,
    ) -> Body:
        """Merge-patch status; with `resource_version`, only if nobody wrote since
        (`Conflict` otherwise): the atomic claim on an execution."""

    async def set_finalizers(
        self,
        resource: Resource,
        namespace: str,
        name: str,
        finalizers: list[str],
        *,
        resource_version: str,
    ) -> Body:
        """Replace the finalizers, only onto `resource_version` (`Conflict` otherwise)."""

    # -- exactly-once
    async def claim_idempotency_key(
        self,
        *,
        namespace: str,
        caller: str,
        key: str,
        invocation_name: str,
        invocation_uid: str,
        request_hash: str | None = None,
    ) -> claims.Claim: ...

    async def release_idempotency_key(
        self, *, namespace: str, caller: str, key: str, holder_uid: str
    ) -> bool: ...

    async def check_fencing_token(
        self, *, namespace: str, caller: str, attempt_id: str, token: int, holder_uid: str
    ) -> claims.FencingVerdict: ...

    async def record_idempotency_end(
        self, *, namespace: str, caller: str, key: str, end: claims.ClaimEnd
    ) -> bool:
        """The winner's receipt and end onto its claim (kept past the winner's deletion)."""

    # -- bounded storage
    async def delete_invocation(
        self, namespace: str, name: str, *, uid: str, resource_version: str
    ) -> bool:
        """Delete an invocation only as it was read (uid and resourceVersion); False when
        it changed meanwhile or is gone."""

    async def list_idempotency_claims(self) -> list[ClaimRecord]: ...

    async def delete_idempotency_claim(
        self, namespace: str, name: str, *, resource_version: str
    ) -> bool: ...

    # -- authorization and credentials
    async def can(
        self,
        *,
        user: str,
        namespace: str,
        verb: str,
        resource: str,
        name: str | None = None,
        group: str = GROUP,
        fresh: bool = False,
        groups: list[str] | None = None,
    ) -> auth.AccessVerdict:
        """A SubjectAccessReview for `user` (with the `groups` it claimed, admission-checked);
        `fresh`: never a remembered allowance."""

    async def request_token(
        self,
        *,
        namespace: str,
        service_account: str,
        audiences: list[str],
        expiration_seconds: int,
        bound_secret: str | None = None,
        store_key: str | None = None,
    ) -> tuple[str, str]:
        """(token, expiry); bound to the Secret `bound_secret` when given (valid only while
        it exists), which then also receives the token under `store_key` when given.
        `NotFound` when the ServiceAccount does not exist."""

    async def read_secret(self, namespace: str, name: str) -> dict[str, str]:
        """The Secret's base64 data; `NotFound` when it does not exist."""

    async def read_config_map(self, namespace: str, name: str) -> dict[str, str] | None: ...

    async def merge_config_map(
        self,
        namespace: str,
        name: str,
        data: Mapping[str, str | None],
        labels: Mapping[str, str],
    ) -> None:
        """Merge `data` into a ConfigMap (None removes a key), creating it on first use."""
        ...

    # -- sandbox objects
    async def list_scope_stores(self, label: str) -> list[kdataflow.StoredScope]:
        """Every data-flow scope store of the cluster (`label`: the scopes' label key)."""

    async def delete_scope_store(self, namespace: str, name: str, *, resource_version: str) -> bool:
        """Delete a scope store as listed; False when it is gone or was written since."""

    async def runtime_class_exists(self, name: str) -> bool: ...

    async def create(self, obj: Body) -> bool:
        """Create; False when it already exists (deterministic names make it idempotent)."""

    async def delete(self, kind: str, namespace: str, name: str) -> bool: ...

    async def wait_for_job(
        self,
        namespace: str,
        name: str,
        *,
        timeout: float,
        seen: ksandbox.JobSighting | None = None,
        uid: str | None = None,
    ) -> Body | None:
        """The finished Job; None when it vanished; `TimeoutError` past `timeout`. `seen`
        gets every state of the Job the follower sees, as it arrives (the run meter). With
        `uid` the Job's pod is followed too (its states seen, `kind` Pod), and the Job is
        returned as it is once the pod is terminal, finished or not."""

    async def job_pod(self, namespace: str, uid: str) -> Body | None: ...

    async def delete_unscheduled_pod(
        self, namespace: str, name: str, resource_version: str
    ) -> bool:
        """Delete a pod only at `resource_version` (as read, unscheduled); False when it
        changed meanwhile (bound to a node) or is gone (`ksandbox.delete_unscheduled_pod`)."""

    async def pod_outcome(
        self, namespace: str, uid: str, *, max_bytes: int
    ) -> ksandbox.PodOutcome: ...

    async def quota_refusal(self, job: Body) -> str | None:
        """The API server's message when a ResourceQuota would refuse the Job or its pod
        now (a dry run: nothing is created); None when both fit (`kube.capacity`)."""

    # -- identity
    async def admission_objects(self, names: Collection[Key]) -> dict[Key, Observed]:
        """The admission policies and bindings among `names` the cluster holds now."""


@dataclass
class KubeCluster:
    """`Cluster` over the shared API client, with allowed reviews remembered briefly."""

    kube: Kube
    access: auth.AllowCache | None = None

    async def get(self, resource: Resource, namespace: str, name: str) -> Body:
        return await self.kube.get_custom(resource, namespace, name)

    async def list_all(self, resource: Resource, namespace: str) -> list[Body]:
        return await self.kube.list_custom(resource, namespace)

    async def admission_objects(self, names: Collection[Key]) -> dict[Key, Observed]:
        return await kadmission.admission_objects(self.kube, names)

    async def namespace_labels(self, name: str) -> dict[str, str]:
        return await self.kube.namespace_labels(name)

    async def namespace_incarnation(self, name: str) -> tuple[str, str, bool]:
        return await self.kube.namespace_incarnation(name)

    # The keyword-only options (the resourceVersion to write onto, the claims' fields) are
    # passed on as `Cluster` names them, not restated.

    async def patch_status(
        self, resource: Resource, namespace: str, name: str, status: Body, **options: Any
    ) -> Body:
        return await self.kube.patch_status(resource, namespace, name, status, **options)

    async def set_finalizers(
        self, resource: Resource, namespace: str, name: str, finalizers: list[str], **options: Any
    ) -> Body:
        return await self.kube.patch_metadata(
            resource, namespace, name, {"finalizers": finalizers}, **options
        )

    async def claim_idempotency_key(self, **claim: Any) -> claims.Claim:
        return await claims.claim_idempotency_key(self.kube, **claim)

    async def release_idempotency_key(self, **claim: Any) -> bool:
        return await claims.release_idempotency_key(self.kube, **claim)

    async def check_fencing_token(self, **claim: Any) -> claims.FencingVerdict:
        return await claims.check_fencing_token(self.kube, **claim)

    async def record_idempotency_end(self, **claim: Any) -> bool:
        return await claims.record_idempotency_end(self.kube, **claim)

    async def can(
        self, *, fresh: bool = False, groups: list[str] | None = None, **review: Any
    ) -> auth.AccessVerdict:
        return await auth.can(
            self.kube,
            groups=auth.groups_of(review["user"], groups) if groups else None,
            cache=None if fresh else self.access,
            **review,
        )

    async def request_token(
        self,
        *,
        namespace: str,
        bound_secret: str | None = None,
        store_key: str | None = None,
        **request: Any,
    ) -> tuple[str, str]:
        bound = None
        if bound_secret is not None:
            with api_errors():
                secret = await json_body(
                    await self.kube.core.read_namespaced_secret(
                        bound_secret, namespace, _preload_content=False
                    )
                )
            bound = (bound_secret, str(secret["metadata"]["uid"]))
        token, expiry = await auth.request_token(
            self.kube, namespace=namespace, bound_secret=bound, **request
        )
        if bound_secret is not None and store_key is not None:
            with api_errors():
                await self.kube.core.patch_namespaced_secret(
                    bound_secret,
                    namespace,
                    {"data": {store_key: base64.b64encode(token.encode()).decode()}},
                )
        return token, expiry

    async def read_secret(self, namespace: str, name: str) -> dict[str, str]:
        return await ksandbox.read_secret_keys(self.kube, namespace, name)

    async def read_config_map(self, namespace: str, name: str) -> dict[str, str] | None:
        try:
            with api_errors():
                # Only the data is needed: the JSON answer, not the client's model objects.
                cm = await json_body(
                    await self.kube.core.read_namespaced_config_map(
                        name, namespace, _preload_content=False
                    )
                )
        except NotFound:
            return None
        return dict(cm.get("data") or {})

    async def merge_config_map(
        self,
        namespace: str,
        name: str,
        data: Mapping[str, str | None],
        labels: Mapping[str, str],
    ) -> None:
        await kdataflow.merge_config_map(
            self.kube, namespace=namespace, name=name, data=data, labels=labels
        )

    async def list_scope_stores(self, label: str) -> list[kdataflow.StoredScope]:
        return await kdataflow.list_stores(self.kube, label=label)

    async def delete_scope_store(self, namespace: str, name: str, *, resource_version: str) -> bool:
        return await kdataflow.delete_store(
            self.kube, namespace=namespace, name=name, resource_version=resource_version
        )

    async def runtime_class_exists(self, name: str) -> bool:
        try:
            with api_errors():
                # json_body raises for a non-2xx answer (a raw answer does not by itself).
                await json_body(
                    await self.kube.node.read_runtime_class(name, _preload_content=False)
                )
        except NotFound:
            return False
        return True

    async def delete_invocation(
        self, namespace: str, name: str, *, uid: str, resource_version: str
    ) -> bool:
        return await self.kube.delete_custom(
            Resource.INVOCATIONS,
            namespace,
            name,
            preconditions={"uid": uid, "resourceVersion": resource_version},
        )

    async def list_idempotency_claims(self) -> list[ClaimRecord]:
        return await claims.list_idempotency_claims(self.kube)

    async def delete_idempotency_claim(
        self, namespace: str, name: str, *, resource_version: str
    ) -> bool:
        return await claims.delete_claim(self.kube, namespace, name, resource_version)

    async def create(self, obj: Body) -> bool:
        return await ksandbox.create_idempotent(self.kube, obj)

    async def delete(self, kind: str, namespace: str, name: str) -> bool:
        return await ksandbox.delete_quietly(self.kube, kind, namespace, name)

    async def wait_for_job(
        self,
        namespace: str,
        name: str,
        *,
        timeout: float,
        seen: ksandbox.JobSighting | None = None,
        uid: str | None = None,
    ) -> Body | None:
        return await ksandbox.wait_for_job(
            self.kube, namespace, name, timeout=timeout, seen=seen, uid=uid
        )

    async def job_pod(self, namespace: str, uid: str) -> Body | None:
        return await ksandbox.job_pod(self.kube, namespace, uid)

    async def delete_unscheduled_pod(
        self, namespace: str, name: str, resource_version: str
    ) -> bool:
        return await ksandbox.delete_unscheduled_pod(self.kube, namespace, name, resource_version)

    async def pod_outcome(self, namespace: str, uid: str, *, max_bytes: int) -> ksandbox.PodOutcome:
        return await ksandbox.pod_outcome(self.kube, namespace, uid, max_bytes=max_bytes)

    async def quota_refusal(self, job: Body) -> str | None:
        return await capacity.quota_refusal(self.kube, job)


__all__ = ["Cluster", "KubeCluster", "NotFound"]
