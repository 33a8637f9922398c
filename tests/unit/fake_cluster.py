"""In-memory fakes of the flow's seams, for driving the invocation flow without a cluster.

`FakeCluster` implements our `tooladapter.kube.cluster.Cluster` protocol (not the Kubernetes
client): custom objects with merge-patched status, idempotency and fencing claims, RBAC
answered from a set of grants, Secrets, sandbox objects, and scripted Job and pod outcomes.
Every method can be made to fail: `fail_next[method] = exc` raises once, `hooks[method]` is
called with the method's arguments before it runs (and may raise), `after[method]` with its
result after it ran (to stop the "operator" right after a write, say).

`make_runtime` builds a `Runtime` over these fakes with `Settings()` defaults and a primed
`Catalog`; the body builders make the objects the flow reads.
"""

from __future__ import annotations

import asyncio
import base64
import copy
import dataclasses
import functools
import inspect
import itertools
from collections.abc import (
    AsyncIterator,
    Awaitable,
    Callable,
    Collection,
    Coroutine,
    Iterable,
    Mapping,
)
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, Concatenate, ParamSpec, TypeVar

import yaml
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from tooladapter import API_VERSION, GROUP
from tooladapter.artifacts import CorruptArtifact, Space, content_ref, index_key, index_prefix
from tooladapter.artifacts.chain import ReceiptChains
from tooladapter.catalog import Catalog, invocation_key
from tooladapter.enums import AdmissionKind, InvocationState, Resource, ToolKind
from tooladapter.executors import Call, Executor, InOperator, Outcome
from tooladapter.flow import run_invocation
from tooladapter.kube.auth import AccessVerdict
from tooladapter.kube.claims import Claim, ClaimEnd, FencingVerdict, idempotency_claim_name
from tooladapter.kube.client import Conflict, NotFound
from tooladapter.kube.dataflow import StoredScope
from tooladapter.kube.sandbox import PodOutcome
from tooladapter.naming import LeaseNames
from tooladapter.pipeline.hashing import canonical_json, descriptor_digest, request_hash
from tooladapter.pipeline.retention import ClaimRecord
from tooladapter.pipeline.validation.shipped import Key, Observed, compare
from tooladapter.receipts.core.signing import Signer, receipt_of
from tooladapter.runtime import Runtime
from tooladapter.settings import Settings
from tooladapter.settings.live import LiveSettings
from tooladapter.timeutil import parse_time, to_iso

Body = dict[str, Any]
REPO = Path(__file__).resolve().parents[2]
Hook = Callable[..., Any]

NAMESPACE = "team-a"
CALLER = "system:serviceaccount:team-a:agent"
REVIEWER = "alice"

#: A scripted `wait_for_job` answer that never comes (the Job is still running).
PENDING: Any = object()

_uids = itertools.count(1)


def namespace_uid(name: str) -> str:
    """The uid the fake gives namespace `name` (one incarnation per name)."""
    return f"00000000-0000-4000-8000-{sum(name.encode()):012d}"


def new_uid() -> str:
    """A uid shaped like the API server's (36 characters of [0-9a-f-])."""
    return f"00000000-0000-4000-8000-{next(_uids):012d}"


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch: None deletes, objects merge, everything else replaces."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


P = ParamSpec("P")
R = TypeVar("R")
Method = Callable[Concatenate["FakeCluster", P], Coroutine[Any, Any, R]]


def seam(method: Method[P, R]) -> Method[P, R]:
    """A `Cluster` method of the fake: recorded, fault-injectable, observable after."""
    name = method.__name__
    signature = inspect.signature(method)

    async def wrapper(self: FakeCluster, /, *args: P.args, **kwargs: P.kwargs) -> R:
        bound = signature.bind(self, *args, **kwargs)
        bound.apply_defaults()
        arguments = {k: v for k, v in bound.arguments.items() if k != "self"}
        await self._enter(name, arguments)
        result = await method(self, *args, **kwargs)
        await self._leave(name, result, arguments)
        return result

    # As functools.wraps, whose typed result mypy cannot match to the method's signature.
    functools.update_wrapper(wrapper, method)
    return wrapper


class FakeCluster:
    """The `Cluster` protocol in memory. Attributes are the state tests set and inspect."""

    def __init__(self) -> None:
        #: Our custom objects by (resource, namespace, name).
        self.objects: dict[tuple[str, str, str], Body] = {}
        #: Namespaces' labels as the API server holds them (the catalog's view may lag).
        self.namespaces: dict[str, dict[str, str]] = {}
        #: Namespaces' creationTimestamp where a test sets one (else long ago).
        self.namespace_created: dict[str, str] = {}
        #: Idempotency claims: (namespace, caller, key) -> (winner name, winner uid).
        self.claims: dict[tuple[str, str, str], tuple[str, str]] = {}
        #: What a claim records beside its winner: created, resourceVersion, and from its
        #: winner's end receipt-ref, ended-at, state.
        self.claim_notes: dict[tuple[str, str, str], dict[str, str]] = {}
        #: Fencing: (namespace, caller, attempt id) -> highest token seen.
        self.fencing: dict[tuple[str, str, str], int] = {}
        #: RBAC grants: (user, verb, resource, name); name "*" grants every name.
        self.grants: set[tuple[str, str, str, str]] = set()
        #: ServiceAccounts a token can be requested for: (namespace, name).
        self.service_accounts: set[tuple[str, str]] = set()
        #: Minted tokens and the Secret each is bound to (they die with it).
        self.token_bindings: dict[str, str] = {}
        #: Secrets' base64 data by (namespace, name) (created Secrets land here too).
        self.secrets: dict[tuple[str, str], dict[str, str]] = {}
        self.config_maps: dict[tuple[str, str], dict[str, str]] = {}
        #: ConfigMaps' labels and resourceVersions, as `merge_config_map` made them.
        self.config_map_labels: dict[tuple[str, str], dict[str, str]] = {}
        self.config_map_versions: dict[tuple[str, str], str] = {}
        #: RuntimeClasses the cluster has (e.g. gvisor).
        self.runtime_classes: set[str] = set()
        #: Jobs, NetworkPolicies and Secrets made through `create`: (kind, namespace, name).
        self.owned: dict[tuple[str, str, str], Body] = {}
        #: Every object `create` made, in order (not the ones that already existed).
        self.created: list[Body] = []
        #: Every (kind, namespace, name) `delete` was asked for, in order.
        self.deleted: list[tuple[str, str, str]] = []
        #: Scripted `wait_for_job` answers by Job name: a Job body, None (vanished), an
        #: exception to raise (e.g. TimeoutError) or PENDING.
        self.job_results: dict[str, Any] = {}
        #: Scripted `job_pod` answers by invocation uid.
        self.pods: dict[str, Body | None] = {}
        #: Scripted states of a Job by name that `wait_for_job`'s follower sees (`seen`)
        #: before its answer, in order (the answer's Job body is seen last).
        self.job_sightings: dict[str, list[Body]] = {}
        #: Scripted `pod_outcome` answers by invocation uid (default: the pod is gone).
        self.pod_outcomes: dict[str, PodOutcome] = {}
        #: Scripted `quota_refusal` answers, one per question; the last one repeats (empty:
        #: every Job fits). A str is the API server's "exceeded quota" message.
        self.quota_answers: list[str | None] = []
        #: Fault injection: raised once by the named method, then removed.
        self.fail_next: dict[str, BaseException] = {}
        #: Called with the method's arguments before it runs; may raise; may be async.
        self.hooks: dict[str, Hook] = {}
        #: Called with the method's result and arguments after it ran; may raise.
        self.after: dict[str, Hook] = {}
        #: Every call: (method, arguments).
        self.calls: list[tuple[str, dict[str, Any]]] = []
        #: Every status write that reached the store: (resource, namespace, name, patch).
        self.status_writes: list[tuple[str, str, str, Body]] = []
        #: The admission policies and bindings as the API server holds them, by (kind,
        #: name): the shipped ones (manifests/admission/), created long ago.
        self.admission: dict[Key, Body] = shipped_admission()
        self._versions = itertools.count(1)
        self._wrote: asyncio.Event | None = None

    # ------------------------------------------------------------------ test helpers

    def put(self, resource: Resource | str, body: Body) -> Body:
        """Store `body` as the API server would hold it (uid and resourceVersion filled)."""
        obj = copy.deepcopy(body)
        meta = obj.setdefault("metadata", {})
        meta.setdefault("uid", new_uid())
        meta["resourceVersion"] = str(next(self._versions))
        self.objects[(str(resource), meta["namespace"], meta["name"])] = obj
        return copy.deepcopy(obj)

    def stored(self, resource: Resource | str, namespace: str, name: str) -> Body:
        return copy.deepcopy(self.objects[(str(resource), namespace, name)])

    def invocation(self, name: str, namespace: str = NAMESPACE) -> Body:
        return self.stored(Resource.INVOCATIONS, namespace, name)

    def grant(
        self,
        user: str = CALLER,
        *,
        tools: Iterable[str] = (),
        classes: Iterable[str] = (),
    ) -> None:
        """The platform team's grant: invoke these tools, use these side-effect classes."""
        for tool in tools:
            self.grants.add((user, "invoke", str(Resource.DESCRIPTORS), tool))
        for cls in classes:
            self.grants.add((user, "use", str(Resource.SIDE_EFFECT_CLASSES), str(cls)))

    def calls_of(self, method: str) -> list[dict[str, Any]]:
        return [args for name, args in self.calls if name == method]

    def writes_of(self, name: str, resource: Resource = Resource.INVOCATIONS) -> list[Body]:
        return [
            patch for res, _, obj, patch in self.status_writes if (res, obj) == (resource, name)
        ]

    def script_job(
        self,
        uid: str,
        job: Any,
        *,
        outcome: PodOutcome | None = None,
        pod: Body | None = None,
    ) -> None:
        """What following the Job of invocation `uid` finds."""
        self.job_results[LeaseNames.for_uid(uid).job] = job
        if outcome is not None:
            self.pod_outcomes[uid] = outcome
        if pod is not None:
            self.pods[uid] = pod

    async def wait_for_status(
        self,
        name: str,
        predicate: Callable[[Body], bool],
        *,
        namespace: str = NAMESPACE,
        timeout: float = 5.0,
    ) -> Body:
        """Wait (bounded) until the stored invocation's status satisfies `predicate`."""

        async def until() -> Body:
            while True:
                self._changed().clear()
                obj = self.objects.get((str(Resource.INVOCATIONS), namespace, name))
                if obj is not None and predicate(obj.get("status") or {}):
                    return copy.deepcopy(obj)
                await self._changed().wait()

        return await asyncio.wait_for(until(), timeout)

    async def wait_for_state(
        self, name: str, state: InvocationState, *, namespace: str = NAMESPACE
    ) -> Body:
        return await self.wait_for_status(
            name, lambda s: s.get("state") == state, namespace=namespace
        )

    def _changed(self) -> asyncio.Event:
        if self._wrote is None:
            self._wrote = asyncio.Event()
        return self._wrote

    async def _enter(self, method: str, args: dict[str, Any]) -> None:
        self.calls.append((method, args))
        if method in self.fail_next:
            raise self.fail_next.pop(method)
        hook = self.hooks.get(method)
        if hook is not None:
            result = hook(**args)
            if inspect.isawaitable(result):
                await result

    async def _leave(self, method: str, result: Any, args: dict[str, Any]) -> None:
        hook = self.after.get(method)
        if hook is not None:
            done = hook(result, **args)
            if inspect.isawaitable(done):
                await done

    # ------------------------------------------------------------------ our own resources

    @seam
    async def get(self, resource: Resource, namespace: str, name: str) -> Body:
        try:
            return self.stored(resource, namespace, name)
        except KeyError:
            raise NotFound(f"{resource} {namespace}/{name}") from None

    @seam
    async def list_all(self, resource: Resource, namespace: str) -> list[Body]:
        return [
            copy.deepcopy(obj)
            for (res, ns, _), obj in self.objects.items()
            if res == str(resource) and ns == namespace
        ]

    @seam
    async def namespace_labels(self, name: str) -> dict[str, str]:
        if name not in self.namespaces:
            raise NotFound(f"namespace {name}")
        return dict(self.namespaces[name])

    @seam
    async def namespace_incarnation(self, name: str) -> tuple[str, str, bool]:
        if name not in self.namespaces:
            raise NotFound(f"namespace {name}")
        created = self.namespace_created.get(name, "2020-01-01T00:00:00Z")
        return namespace_uid(name), created, False

    @seam
    async def patch_status(
        self,
        resource: Resource,
        namespace: str,
        name: str,
        status: Body,
        *,
        resource_version: str | None = None,
    ) -> Body:
        key = (str(resource), namespace, name)
        obj = self.objects.get(key)
        if obj is None:
            raise NotFound(f"{resource} {namespace}/{name}")
        if resource_version is not None and resource_version != obj["metadata"]["resourceVersion"]:
            raise Conflict(f"{resource} {namespace}/{name} changed since {resource_version}")
        obj["status"] = merge_patch(obj.get("status") or {}, copy.deepcopy(status))
        obj["metadata"]["resourceVersion"] = str(next(self._versions))
        self.status_writes.append((str(resource), namespace, name, copy.deepcopy(status)))
        self._changed().set()
        return copy.deepcopy(obj)

    @seam
    async def set_finalizers(
        self,
        resource: Resource,
        namespace: str,
        name: str,
        finalizers: list[str],
        *,
        resource_version: str,
    ) -> Body:
        obj = self.objects.get((str(resource), namespace, name))
        if obj is None:
            raise NotFound(f"{resource} {namespace}/{name}")
        if resource_version != obj["metadata"]["resourceVersion"]:
            raise Conflict(f"{resource} {namespace}/{name} changed since {resource_version}")
        obj["metadata"]["finalizers"] = list(finalizers)
        obj["metadata"]["resourceVersion"] = str(next(self._versions))
        self._changed().set()
        return copy.deepcopy(obj)

    # ------------------------------------------------------------------ exactly-once

    @seam
    async def claim_idempotency_key(
        self,
        *,
        namespace: str,
        caller: str,
        key: str,
        invocation_name: str,
        invocation_uid: str,
        request_hash: str | None = None,
    ) -> Claim:
        claim_key = (namespace, caller, key)
        note = self.claim_note(claim_key)
        if claim_key not in self.claims and request_hash:
            note["request_hash"] = request_hash
        name, uid = self.claims.setdefault(claim_key, (invocation_name, invocation_uid))
        return Claim(
            won=uid == invocation_uid,
            winner_name=name,
            winner_uid=uid,
            receipt_ref=note.get("receipt"),
            request_hash=note.get("request_hash"),
            state=note.get("state"),
        )

    def claim_note(self, claim_key: tuple[str, str, str]) -> dict[str, str]:
        """A claim's record beside its winner (claims a test put in place get one too)."""
        return self.claim_notes.setdefault(
            claim_key,
            {"created": to_iso(datetime.now(UTC)), "version": str(next(self._versions))},
        )

    @seam
    async def record_idempotency_end(
        self, *, namespace: str, caller: str, key: str, end: ClaimEnd
    ) -> bool:
        claim_key = (namespace, caller, key)
        claim = self.claims.get(claim_key)
        if claim is None or claim[1] != end.holder_uid:
            return False
        self.claim_note(claim_key).update(
            receipt=end.receipt_ref,
            ended=end.ended_at,
            state=end.state,
            version=str(next(self._versions)),
        )
        return True

    @seam
    async def list_idempotency_claims(self) -> list[ClaimRecord]:
        return [
            ClaimRecord(
                namespace=ns,
                name=idempotency_claim_name(ns, caller, key),
                resource_version=self.claim_note((ns, caller, key))["version"],
                created=self.claim_note((ns, caller, key))["created"],
                winner_name=name,
                winner_uid=uid,
                ended_at=self.claim_note((ns, caller, key)).get("ended"),
                state=self.claim_note((ns, caller, key)).get("state"),
                receipt_ref=self.claim_note((ns, caller, key)).get("receipt"),
            )
            for (ns, caller, key), (name, uid) in self.claims.items()
        ]

    @seam
    async def delete_idempotency_claim(
        self, namespace: str, name: str, *, resource_version: str
    ) -> bool:
        for claim_key in list(self.claims):
            ns, caller, key = claim_key
            if ns == namespace and idempotency_claim_name(ns, caller, key) == name:
                if self.claim_note(claim_key)["version"] != resource_version:
                    return False
                del self.claims[claim_key]
                self.claim_notes.pop(claim_key, None)
                return True
        return False

    @seam
    async def delete_invocation(
        self, namespace: str, name: str, *, uid: str, resource_version: str
    ) -> bool:
        key = (str(Resource.INVOCATIONS), namespace, name)
        obj = self.objects.get(key)
        if obj is None:
            return False
        meta = obj["metadata"]
        if meta["uid"] != uid or meta.get("resourceVersion") != resource_version:
            return False
        del self.objects[key]
        self._changed().set()
        return True

    @seam
    async def release_idempotency_key(
        self, *, namespace: str, caller: str, key: str, holder_uid: str
    ) -> bool:
        claim = self.claims.get((namespace, caller, key))
        if claim is None or claim[1] != holder_uid:
            return False
        del self.claims[(namespace, caller, key)]
        self.claim_notes.pop((namespace, caller, key), None)
        return True

    @seam
    async def check_fencing_token(
        self, *, namespace: str, caller: str, attempt_id: str, token: int, holder_uid: str
    ) -> FencingVerdict:
        highest = self.fencing.get((namespace, caller, attempt_id))
        if highest is not None and token < highest:
            return FencingVerdict(accepted=False, highest=highest)
        self.fencing[(namespace, caller, attempt_id)] = token
        return FencingVerdict(accepted=True, highest=token)

    # ------------------------------------------------------------------ authorization

    @seam
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
    ) -> AccessVerdict:
        allowed = (user, verb, str(resource), name or "") in self.grants or (
            user,
            verb,
            str(resource),
            "*",
        ) in self.grants
        return AccessVerdict(allowed=allowed, reason="granted" if allowed else "no grant")

    @seam
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
        if (namespace, service_account) not in self.service_accounts:
            raise NotFound(f"serviceaccount {namespace}/{service_account}")
        expiry = to_iso(datetime.now(UTC) + timedelta(seconds=expiration_seconds))
        token = f"token-of-{service_account}"
        if bound_secret is not None:
            # Bound to the lease's Secret, and written into it (as the real seam does).
            self.token_bindings[token] = bound_secret
            if store_key is not None and (namespace, bound_secret) in self.secrets:
                encoded = base64.b64encode(token.encode()).decode()
                self.secrets[(namespace, bound_secret)][store_key] = encoded
        return token, expiry

    @seam
    async def read_secret(self, namespace: str, name: str) -> dict[str, str]:
        try:
            return dict(self.secrets[(namespace, name)])
        except KeyError:
            raise NotFound(f"secret {namespace}/{name}") from None

    @seam
    async def read_config_map(self, namespace: str, name: str) -> dict[str, str] | None:
        data = self.config_maps.get((namespace, name))
        return dict(data) if data is not None else None

    # ------------------------------------------------------------------ sandbox objects

    @seam
    async def merge_config_map(
        self,
        namespace: str,
        name: str,
        data: Mapping[str, str | None],
        labels: Mapping[str, str],
    ) -> None:
        stored = self.config_maps.setdefault((namespace, name), {})
        for key, value in data.items():
            if value is None:
                stored.pop(key, None)
            else:
                stored[key] = value
        self.config_map_labels.setdefault((namespace, name), dict(labels))
        self.config_map_versions[(namespace, name)] = str(next(self._versions))

    @seam
    async def list_scope_stores(self, label: str) -> list[StoredScope]:
        return [
            StoredScope(
                namespace=namespace,
                name=name,
                kind=self.config_map_labels.get((namespace, name), {}).get(label, ""),
                data=dict(data),
                resource_version=self.config_map_versions.get((namespace, name), "0"),
            )
            for (namespace, name), data in self.config_maps.items()
            if label in self.config_map_labels.get((namespace, name), {})
        ]

    @seam
    async def delete_scope_store(self, namespace: str, name: str, *, resource_version: str) -> bool:
        key = (namespace, name)
        if key not in self.config_maps or self.config_map_versions.get(key) != resource_version:
            return False
        del self.config_maps[key]
        self.config_map_labels.pop(key, None)
        self.config_map_versions.pop(key, None)
        self.deleted.append(("ConfigMap", namespace, name))
        return True

    @seam
    async def runtime_class_exists(self, name: str) -> bool:
        return name in self.runtime_classes

    @seam
    async def create(self, obj: Body) -> bool:
        meta = obj["metadata"]
        key = (obj["kind"], meta["namespace"], meta["name"])
        if key in self.owned:
            return False
        stored = copy.deepcopy(obj)
        self.owned[key] = stored
        self.created.append(stored)
        if obj["kind"] == "Secret":
            self.secrets[(meta["namespace"], meta["name"])] = dict(obj.get("data") or {})
        return True

    @seam
    async def delete(self, kind: str, namespace: str, name: str) -> bool:
        self.deleted.append((kind, namespace, name))
        if kind == "Secret":
            self.secrets.pop((namespace, name), None)
        return self.owned.pop((kind, namespace, name), None) is not None

    @seam
    async def wait_for_job(
        self,
        namespace: str,
        name: str,
        *,
        timeout: float,
        seen: Callable[[Body], None] | None = None,
        uid: str | None = None,
    ) -> Body | None:
        for sighting in self.job_sightings.get(name, []):
            if seen is not None:
                seen(copy.deepcopy(sighting))
        if name in self.job_results:
            result = self.job_results[name]
        elif ("Job", namespace, name) in self.owned:
            result = PENDING  # made but unscripted: it runs until someone scripts an end
        else:
            result = None  # never made, or gone
        if result is PENDING:
            await asyncio.Future()  # until cancelled
        if isinstance(result, BaseException):
            raise result
        if isinstance(result, dict) and seen is not None:
            seen(copy.deepcopy(result))
        return copy.deepcopy(result)

    @seam
    async def job_pod(self, namespace: str, uid: str) -> Body | None:
        return copy.deepcopy(self.pods.get(uid))

    @seam
    async def delete_unscheduled_pod(
        self, namespace: str, name: str, resource_version: str
    ) -> bool:
        for uid, body in self.pods.items():
            meta = (body or {}).get("metadata") or {}
            if meta.get("name") == name:
                if str(meta.get("resourceVersion") or "") != resource_version:
                    return False  # changed since read (bound): the precondition fails
                self.pods[uid] = None
                return True
        return False

    @seam
    async def pod_outcome(self, namespace: str, uid: str, *, max_bytes: int) -> PodOutcome:
        outcome = self.pod_outcomes.get(uid)
        if outcome is None:
            return PodOutcome(name=None, started=False, exit_code=None, reason="PodGone", log=b"")
        # Every scripted field (the container's times too), the log cut as the real read is.
        return dataclasses.replace(outcome, log=outcome.log[: max_bytes + 1])

    @seam
    async def quota_refusal(self, job: Body) -> str | None:
        if len(self.quota_answers) > 1:
            return self.quota_answers.pop(0)
        return self.quota_answers[0] if self.quota_answers else None

    @seam
    async def admission_objects(self, names: Collection[Key]) -> dict[Key, Observed]:
        return {
            key: Observed(
                spec=copy.deepcopy(obj["spec"]),
                created=parse_time(obj["metadata"]["creationTimestamp"]),
            )
            for key, obj in self.admission.items()
            if key in names
        }

    def recreate_admission(self, key: Key, obj: Body, *, created: datetime | None = None) -> None:
        """Put an admission object back as new (its creationTimestamp now, or `created`)."""
        obj = copy.deepcopy(obj)
        moment = created if created is not None else datetime.now(UTC)
        obj.setdefault("metadata", {})["creationTimestamp"] = to_iso(moment)
        self.admission[key] = obj


#: When the shipped admission objects were created in the fake (before any call).
ADMISSION_CREATED = "2020-01-01T00:00:00Z"


def shipped_admission() -> dict[Key, Body]:
    """Every policy and binding of manifests/admission/, as `make install` leaves them."""
    found: dict[Key, Body] = {}
    for path in sorted((REPO / "manifests" / "admission").glob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            if isinstance(doc, dict) and doc.get("kind") in {k.value for k in AdmissionKind}:
                doc["metadata"]["creationTimestamp"] = ADMISSION_CREATED
                found[(AdmissionKind(doc["kind"]), doc["metadata"]["name"])] = doc
    return found


# --------------------------------------------------------------------------- Job and pod bodies


def finished_job(condition: str = "Complete", reason: str = "") -> Body:
    """A Job the Job controller has decided: Complete, or Failed with a reason."""
    return {
        "kind": "Job",
        "metadata": {"name": "job"},
        "status": {"conditions": [{"type": condition, "status": "True", "reason": reason}]},
    }


def pod(*, started: bool) -> Body:
    """A pod of a sandbox Job, its tool container started (running) or still waiting."""
    state = {"running": {}} if started else {"waiting": {"reason": "ContainerCreating"}}
    return {
        "metadata": {"name": "ta-pod", "resourceVersion": "5"},
        "status": {"containerStatuses": [{"name": "tool", "state": state, "started": started}]},
    }


def unschedulable_pod(
    message: str = "0/1 nodes are available: 1 Insufficient cpu.",
    *,
    since: str | None = None,
    resource_version: str = "7",
) -> Body:
    """A pod of a sandbox Job the scheduler cannot place (PodScheduled False, Unschedulable);
    `since` defaults to now."""
    return {
        "metadata": {"name": "ta-pod", "resourceVersion": resource_version},
        "spec": {},
        "status": {
            "phase": "Pending",
            "conditions": [
                {
                    "type": "PodScheduled",
                    "status": "False",
                    "reason": "Unschedulable",
                    "message": message,
                    "lastTransitionTime": since or to_iso(datetime.now(UTC)),
                }
            ],
        },
    }


def pod_result(
    *,
    exit_code: int | None = 0,
    log: bytes = b"",
    reason: str = "Completed",
    started: bool = True,
    gate_failed: bool = False,
    name: str | None = "ta-pod",
    succeeded: bool = False,
) -> PodOutcome:
    return PodOutcome(
        name=name,
        started=started,
        exit_code=exit_code,
        reason=reason,
        log=log,
        gate_failed=gate_failed,
        succeeded=succeeded,
    )


# --------------------------------------------------------------------------- other seams


@dataclass(frozen=True)
class PostedEvent:
    obj: Body
    reason: str
    message: str
    warning: bool


class RecordingEvents:
    """An `EventSink` that keeps what was posted."""

    def __init__(self) -> None:
        self.posted: list[PostedEvent] = []

    def post(self, obj: Body, *, reason: str, message: str, warning: bool = False) -> None:
        self.posted.append(PostedEvent(obj, reason, message, warning))

    def reasons(self) -> list[str]:
        return [event.reason for event in self.posted]

    def of(self, reason: str) -> list[PostedEvent]:
        return [event for event in self.posted if event.reason == reason]


def is_receipt(data: bytes) -> bool:
    """Whether stored bytes are a receipt (signed or not)."""
    receipt = receipt_of(data)
    return receipt is not None and receipt.get("schema") == "tool-invocation-v1"


class MemoryStore:
    """An `ArtifactStore` in a dict, addressed by content hash like the real one.

    `hook`, when set, is called with the bytes of every put before they are stored (and
    may raise, as a full disk would)."""

    def __init__(self) -> None:
        #: The receipts' space (`Space.RECEIPTS`) and the results' (`Space.RESULTS`).
        self.blobs: dict[str, bytes] = {}
        self.results: dict[str, bytes] = {}
        #: Named index entries (`put_key`), write-once like the real stores.
        self.keys: dict[str, bytes] = {}
        self.hook: Callable[[bytes], None] | None = None

    def receipts(self) -> list[bytes]:
        """The stored receipts' bytes as the operator would write them unsigned (a signed
        receipt's predicate, canonical JSON), in the order they were stored."""
        found = []
        for blob in self.blobs.values():
            receipt = receipt_of(blob)
            if receipt is not None and receipt.get("schema") == "tool-invocation-v1":
                found.append(canonical_json({k: v for k, v in receipt.items() if k != "chain"}))
        return found

    def receipt(self, ref: str) -> dict[str, Any]:
        """The receipt stored under `ref` (a signed receipt's predicate)."""
        found = receipt_of(self.get(ref))
        assert found is not None, f"{ref} is not a receipt"
        return found

    def signed(self) -> list[bytes]:
        """The stored receipts' bytes as stored (signed envelopes)."""
        return [
            blob
            for blob in self.blobs.values()
            if receipt_of(blob) is not None and b'"payloadType"' in blob
        ]

    def put(self, data: bytes, space: Space = Space.RECEIPTS) -> str:
        if self.hook is not None:
            self.hook(data)
        ref = content_ref(data)
        (self.blobs if space is Space.RECEIPTS else self.results)[ref] = bytes(data)
        return ref

    def get(self, ref: str, space: Space = Space.RECEIPTS) -> bytes:
        return (self.blobs if space is Space.RECEIPTS else self.results)[ref]

    def put_key(self, key: str, data: bytes) -> None:
        held = self.keys.setdefault(index_key(key), bytes(data))
        if held != data:
            raise CorruptArtifact(f"{key} already holds other bytes")

    def get_key(self, key: str) -> bytes:
        return self.keys[key]

    def list(self, prefix: str) -> list[str]:
        return sorted(k for k in self.keys if k.startswith(index_prefix(prefix)))


class ScriptedExecutor(InOperator):
    """An in-operator executor that returns a given Outcome and counts its calls.

    `raises` makes `execute` raise; `resume_outcome` / `resume_raises` script `resume`
    (by default an in-operator resume: the unconfirmed rule of `InOperator`). `gate`, when
    given, holds `execute` (after `started` is set) until the test sets it.
    """

    def __init__(
        self,
        outcome: Outcome | None = None,
        *,
        raises: BaseException | None = None,
        resume_outcome: Outcome | None = None,
        resume_raises: BaseException | None = None,
        gate: asyncio.Event | None = None,
    ) -> None:
        self.outcome = outcome or Outcome.observed(b'{"ok": true}', structured={"ok": True})
        self.raises = raises
        self.resume_outcome = resume_outcome
        self.resume_raises = resume_raises
        self.gate = gate
        self.started = asyncio.Event()
        self.executed: list[Call] = []
        self.resumed: list[Call] = []

    async def execute(self, call: Call) -> Outcome:
        self.executed.append(call)
        self.started.set()
        if self.gate is not None:
            await self.gate.wait()
        if self.raises is not None:
            raise self.raises
        return self.outcome

    async def resume(self, call: Call) -> Outcome:
        self.resumed.append(call)
        if self.resume_raises is not None:
            raise self.resume_raises
        if self.resume_outcome is not None:
            return self.resume_outcome
        return await super().resume(call)


# --------------------------------------------------------------------------- the runtime


@dataclass
class Harness:
    """A Runtime over the fakes, and the fakes, for one test."""

    rt: Runtime
    cluster: FakeCluster
    store: MemoryStore
    events: RecordingEvents
    executors: dict[ToolKind, Executor] = field(default_factory=dict)

    @property
    def catalog(self) -> Catalog:
        return self.rt.catalog

    def publish(self, body: Body, *, active: bool = True, healthy: bool = True) -> Body:
        """A ToolDescriptor as the catalog and the API server hold it."""
        body = copy.deepcopy(body)
        body.setdefault("status", {"active": active, "healthy": healthy})
        stored = self.cluster.put(Resource.DESCRIPTORS, body)
        self.catalog.update(Resource.DESCRIPTORS, "ADDED", stored)
        return stored

    def add_policy(self, body: Body) -> Body:
        stored = self.cluster.put(Resource.POLICIES, body)
        self.catalog.update(Resource.POLICIES, "ADDED", stored)
        return stored

    def add_approval(self, body: Body) -> Body:
        """A ToolApproval created by its reviewer: stored, then seen by the watch."""
        stored = self.cluster.put(Resource.APPROVALS, body)
        self.catalog.update(Resource.APPROVALS, "ADDED", stored)
        return stored

    def label_namespace(self, labels: dict[str, str], namespace: str = NAMESPACE) -> None:
        """Labels as stored, and as the namespaces' watch then delivers them."""
        self.cluster.namespaces[namespace] = dict(labels)
        self.catalog.update_namespace(
            "MODIFIED",
            {"metadata": {"name": namespace, "uid": namespace_uid(namespace), "labels": labels}},
        )

    def submit(self, body: Body) -> Body:
        """The invocation as created: stored, and the body of its first watch event."""
        return self.cluster.put(Resource.INVOCATIONS, body)

    def invocation_changed(self, name: str, namespace: str = NAMESPACE) -> None:
        """What the invocations watch does on an event of `name`: wake its waiters."""
        self.catalog.notify(namespace, invocation_key(name))

    def digest_of(self, body: Body) -> str:
        """The descriptor digest the flow records for `body` (its status.descriptorDigest)."""
        tool = body["spec"]["tool"]
        entry = self.catalog.find_descriptor(
            body["metadata"]["namespace"], tool["id"], tool["version"]
        )
        assert entry is not None and entry.spec is not None
        return descriptor_digest(entry.spec.wire())

    def pre_approve(self, body: Body, **spec: Any) -> Body:
        """An approval of `body`'s exact request, there before the call asks for one."""
        return self.add_approval(
            approval(body["metadata"]["name"], hash_of(body), self.digest_of(body), **spec)
        )

    def approve_waiting(self, invocation_name: str, **spec: Any) -> Body:
        """An approval of what the stored, waiting invocation shows in its status."""
        status = self.cluster.invocation(invocation_name)["status"]
        return self.add_approval(
            approval(invocation_name, status["requestHash"], status["descriptorDigest"], **spec)
        )

    async def run(self, body: Body, *, timeout: float = 5.0) -> Body:
        """Run the flow on `body` as the operator would (bounded); the stored object after."""
        await asyncio.wait_for(run_invocation(self.rt, body), timeout)
        meta = body["metadata"]
        return self.cluster.invocation(meta["name"], meta["namespace"])

    def start(self, body: Body) -> asyncio.Task[None]:
        """Run the flow on `body` in the background (the test bounds and awaits it)."""
        return asyncio.ensure_future(run_invocation(self.rt, body))


def make_runtime(
    cluster: FakeCluster | None = None,
    *,
    settings: Settings | None = None,
    executors: dict[ToolKind, Executor] | None = None,
    namespaces: dict[str, dict[str, str]] | None = None,
    store: Any = None,
) -> Harness:
    """A Runtime with `Settings()` defaults (or `settings`), a ready catalog holding the
    namespaces (default: `NAMESPACE`, unlabelled), a scripted native executor unless
    `executors` says otherwise, and a `MemoryStore` unless `store` is another (a
    `LocalArtifactStore`, to test the file layout)."""
    cluster = cluster if cluster is not None else FakeCluster()
    store, events = (store if store is not None else MemoryStore()), RecordingEvents()
    catalog = Catalog()
    for name, labels in (namespaces if namespaces is not None else {NAMESPACE: {}}).items():
        cluster.namespaces.setdefault(name, dict(labels))
        catalog.update_namespace(
            "ADDED", {"metadata": {"name": name, "uid": namespace_uid(name), "labels": labels}}
        )
    catalog.ready.set()
    chosen: dict[ToolKind, Executor] = (
        executors if executors is not None else {ToolKind.NATIVE: ScriptedExecutor()}
    )
    signer = Signer.of(Ed25519PrivateKey.generate())
    rt = Runtime(
        cluster=cluster,
        live=LiveSettings(settings or Settings()),
        store=store,
        catalog=catalog,
        executors=chosen,
        events=events,
        chains=ReceiptChains(store, lambda: signer),
    )
    rt.census.synced.set()  # as after the operator's first listing
    # As after the operator's first comparison at start (`identity.verify`).
    observed = {
        key: Observed(spec=obj["spec"], created=parse_time(obj["metadata"]["creationTimestamp"]))
        for key, obj in cluster.admission.items()
    }
    rt.admission.observe(compare(observed), at=datetime.now(UTC), observed=observed)
    return Harness(rt=rt, cluster=cluster, store=store, events=events, executors=chosen)


# --------------------------------------------------------------------------- bodies


def descriptor(
    tool_id: str = "lister",
    *,
    kind: str = "native",
    side_effect_class: str = "read",
    version: str = "1.0.0",
    namespace: str = NAMESPACE,
    **spec: Any,
) -> Body:
    body_spec: Body = {
        "toolId": tool_id,
        "version": version,
        "kind": kind,
        "sideEffectClass": side_effect_class,
    }
    if kind == "native":
        body_spec["native"] = {"name": "list-tools"}
    body_spec.update(spec)
    return {
        "apiVersion": API_VERSION,
        "kind": "ToolDescriptor",
        "metadata": {"name": f"{tool_id}-{version.replace('.', '-')}", "namespace": namespace},
        "spec": body_spec,
    }


def credential(
    name: str = "api",
    *,
    secret: str | None = None,
    key: str = "token",
    service_account: str | None = None,
    audiences: list[str] | None = None,
    hosts: list[str] | None = None,
    file: str | None = None,
    **inject: Any,
) -> Body:
    """One `spec.credentials` entry (wire names): from Secret `secret`'s `key` (default:
    the Secret named like the credential) or ServiceAccount `service_account`'s token,
    injected into requests to `hosts` (with `inject` extras: header, scheme, ...) or into
    `file`."""
    source: Body
    if service_account is not None:
        token: Body = {"serviceAccountName": service_account}
        if audiences is not None:
            token["audiences"] = audiences
        source = {"serviceAccountToken": token}
    else:
        source = {"secretKeyRef": {"name": secret or name, "key": key}}
    where: Body = {"file": file} if file is not None else {"hosts": hosts, **inject}
    return {"name": name, "source": source, "inject": where}


def http_descriptor(tool_id: str, url: str, **spec: Any) -> Body:
    """A GET http tool whose URL's host and port are on its allow-list."""
    host = url.split("/")[2]
    http = {"method": "GET", "url": url, "allowedHosts": [host]}
    return descriptor(tool_id, kind="http", http=http, **spec)


@asynccontextmanager
async def loopback_http(path: str, handler: Callable[..., Awaitable[Any]]) -> AsyncIterator[str]:
    """An aiohttp server on 127.0.0.1 answering GET `path` with `handler`; yields its URL."""
    from aiohttp import web

    app = web.Application()
    app.router.add_get(path, handler)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    try:
        yield f"http://127.0.0.1:{port}{path}"
    finally:
        await runner.cleanup()


SHELL_SCHEMA: Body = {
    "type": "object",
    "properties": {"command": {"type": "string", "maxLength": 4096}},
    "required": ["command"],
    "additionalProperties": False,
}


def shell_descriptor(
    tool_id: str = "sh",
    *,
    side_effect_class: str = "sandbox",
    sandbox: Body | bool | None = True,
    **spec: Any,
) -> Body:
    """A shell tool; `sandbox=None` leaves the sandbox block out (admission would refuse)."""
    extra: Body = {"inputSchema": SHELL_SCHEMA, "timeoutSeconds": 60, **spec}
    if sandbox is True:
        extra["sandbox"] = {
            "resources": {"limits": {"cpu": "500m", "memory": "64Mi"}},
            "egress": {"allow": []},
        }
    elif isinstance(sandbox, dict):
        extra["sandbox"] = sandbox
    # Only listed commands run as their class: the commands these tests run are listed.
    extra.setdefault("shell", {"allow": list(TEST_SHELL_ALLOW)})
    return descriptor(tool_id, kind="shell", side_effect_class=side_effect_class, **extra)


#: The allow list of `shell_descriptor` tools (a command on no entry needs an approval).
TEST_SHELL_ALLOW = ("echo", "env", "sleep", "true", "cat", "ls")


def container_descriptor(
    tool_id: str = "ct",
    *,
    command: list[str] | None = None,
    side_effect_class: str = "sandbox",
    **spec: Any,
) -> Body:
    """A container tool: the platform's fixed argv (the arguments arrive as a JSON file);
    the kind that may carry brokered credentials."""
    extra: Body = {
        "inputSchema": SHELL_SCHEMA,
        "timeoutSeconds": 60,
        "sandbox": {
            "command": command or ["cat", "/tooladapter/arguments.json"],
            "resources": {"limits": {"cpu": "500m", "memory": "64Mi"}},
            "egress": {"allow": []},
        },
        **spec,
    }
    return descriptor(tool_id, kind="container", side_effect_class=side_effect_class, **extra)


def invocation(
    name: str = "call-1",
    *,
    tool: str = "lister",
    version: str = "1.0.0",
    arguments: Body | None = None,
    caller: str = CALLER,
    namespace: str = NAMESPACE,
    uid: str | None = None,
    status: Body | None = None,
    **spec: Any,
) -> Body:
    """A ToolInvocation body (`spec` extras in their wire names, e.g. idempotencyKey)."""
    body: Body = {
        "apiVersion": API_VERSION,
        "kind": "ToolInvocation",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "uid": uid or new_uid(),
            "creationTimestamp": to_iso(datetime.now(UTC)),
        },
        "spec": {
            "tool": {"id": tool, "version": version},
            "caller": {"name": caller},
            "arguments": arguments if arguments is not None else {},
            **spec,
        },
    }
    if status is not None:
        body["status"] = status
    return body


def hash_of(body: Body) -> str:
    """The request hash the flow computes for an invocation body."""
    spec = body["spec"]
    return request_hash(
        namespace=body["metadata"]["namespace"],
        tool_id=spec["tool"]["id"],
        tool_version=spec["tool"]["version"],
        arguments=spec.get("arguments") or {},
    )


def approval(
    invocation_name: str,
    request_hash_: str,
    descriptor_digest_: str,
    *,
    decision: str = "Approved",
    reviewer: str = REVIEWER,
    tool_version: str = "1.0.0",
    name: str | None = None,
    namespace: str = NAMESPACE,
    **spec: Any,
) -> Body:
    return {
        "apiVersion": API_VERSION,
        "kind": "ToolApproval",
        "metadata": {
            "name": name or f"{invocation_name}-{decision.lower()}",
            "namespace": namespace,
        },
        "spec": {
            "invocation": invocation_name,
            "requestHash": request_hash_,
            "descriptorDigest": descriptor_digest_,
            "toolVersion": tool_version,
            "decision": decision,
            "reviewer": reviewer,
            **spec,
        },
    }


def policy(name: str = "tenant", *, namespace: str = NAMESPACE, **spec: Any) -> Body:
    return {
        "apiVersion": API_VERSION,
        "kind": "ToolPolicy",
        "metadata": {"name": name, "namespace": namespace},
        "spec": spec,
    }


def ago(seconds: float) -> str:
    return to_iso(datetime.now(UTC) - timedelta(seconds=seconds))
