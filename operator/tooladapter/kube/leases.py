"""Leader election: one coordination.k8s.io Lease per served namespace set.

Two operators serving the same namespaces must not both act: each call would run twice. The
one holding the scope's Lease leads; the others wait as standbys and take over once the
holder stops renewing. Operators serving other namespace sets hold other Leases and never
wait for each other.

Every write carries the resourceVersion it read, so when two contenders write at the same
moment the API server accepts one and answers 409 Conflict to the other: the Lease never
names two holders. Who may take over is decided the way client-go decides it, from what
this contender observed (a record unchanged for `leaseDurationSeconds` of its own clock,
free of clock skew), or from a `renewTime` older than the duration on its wall clock (a
Lease left behind by a process that crashed a while ago). A leader stops acting when it
has not renewed for two thirds of the duration (`renew_deadline`), before any contender
can take over.
"""

from __future__ import annotations

import copy
import hashlib
import os
import secrets
import socket
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, Protocol

from kubernetes_asyncio import client

from tooladapter.kube.client import Kube, json_body
from tooladapter.kube.errors import AlreadyExists, Conflict, Forbidden, NotFound, api_errors
from tooladapter.naming import LABEL_MANAGED_BY, MANAGED_BY
from tooladapter.timeutil import parse_time, to_iso

#: Which namespace globs a leadership Lease stands for, for people reading it.
ANNOTATION_SCOPE = "tooladapter.dev/namespaces"
LEASE_PREFIX = "tooladapter-"


def lease_name(namespaces: Iterable[str]) -> str:
    """The Lease of a served namespace set: the same set (in any order, with repeats) gives
    the same name; serving every namespace is `tooladapter-all`."""
    globs = sorted(set(namespaces))
    if not globs:
        return f"{LEASE_PREFIX}all"
    digest = hashlib.sha256("\n".join(globs).encode()).hexdigest()
    return f"{LEASE_PREFIX}{digest[:16]}"


def scope_text(namespaces: Iterable[str]) -> str:
    return ",".join(sorted(set(namespaces))) or "*"


def holder_identity(host: str | None = None, pid: int | None = None) -> str:
    """Unique per process: the host (the pod's name in-cluster), the pid, and a random part
    so a restarted process with a reused pid is a new holder."""
    host = host if host is not None else socket.gethostname()
    pid = pid if pid is not None else os.getpid()
    return f"{host}_{pid}_{secrets.token_hex(4)}"


@dataclass(frozen=True)
class LeaseRecord:
    """What the election reads of a Lease."""

    holder: str
    duration_seconds: int
    renew_time: datetime | None
    resource_version: str
    transitions: int

    @classmethod
    def of(cls, lease: dict[str, Any], default_duration: int) -> LeaseRecord:
        spec = lease.get("spec") or {}
        renew = spec.get("renewTime") or spec.get("acquireTime")
        try:
            renew_time = parse_time(renew) if renew else None
        except ValueError:
            renew_time = None
        return cls(
            holder=spec.get("holderIdentity") or "",
            duration_seconds=int(spec.get("leaseDurationSeconds") or default_duration),
            renew_time=renew_time,
            resource_version=str((lease.get("metadata") or {}).get("resourceVersion") or ""),
            transitions=int(spec.get("leaseTransitions") or 0),
        )


def expired(record: LeaseRecord, *, now: datetime, unchanged_for: float) -> bool:
    """Whether a contender may take the Lease over from its holder.

    `unchanged_for` is how long (monotonic seconds) this contender has seen the record
    unchanged. Either bound suffices: the record has not moved for the holder's whole
    duration as this contender watched it, or its renewTime plus the duration has passed on
    this contender's clock (tolerating a skew of a third of the duration, since the holder
    gives up after two thirds). A Lease with no holder is free at once."""
    if not record.holder:
        return True
    if unchanged_for >= record.duration_seconds:
        return True
    if record.renew_time is None:
        return False
    return now >= record.renew_time + timedelta(seconds=record.duration_seconds)


def renew_deadline(duration_seconds: int) -> float:
    """A leader that has not renewed for this long stops acting: two thirds of the
    duration, so it is gone before any contender may take over."""
    return duration_seconds * 2 / 3


def retry_period(duration_seconds: int) -> float:
    """How often a leader renews and a standby looks again."""
    return max(duration_seconds / 5, 0.5)


class LeaseUnavailable(RuntimeError):
    """The Lease cannot be read or written for good: its namespace is missing, or RBAC
    forbids it. Waiting does not help."""


class LostLease(RuntimeError):
    """Another holder owns the Lease now: this process must stop acting at once."""


class LeaseApi(Protocol):
    """The four Lease operations the election needs, on plain JSON objects."""

    async def get(self, namespace: str, name: str) -> dict[str, Any] | None: ...

    async def create(self, namespace: str, body: dict[str, Any]) -> dict[str, Any]: ...

    async def replace(self, namespace: str, name: str, body: dict[str, Any]) -> dict[str, Any]: ...

    async def delete(self, namespace: str, name: str, resource_version: str) -> None: ...


@contextmanager
def _lease_errors(verb: str, namespace: str, name: str) -> Iterator[None]:
    """The block's API errors; those waiting cannot cure as `LeaseUnavailable`."""
    where = f"Lease {name} in namespace {namespace}"
    try:
        with api_errors():
            yield
    except Forbidden as err:
        raise LeaseUnavailable(
            f"cannot {verb} {where}: forbidden; the operator needs get, create, update and "
            f"delete on leases.coordination.k8s.io in {namespace} (manifests/rbac/operator.yaml)"
        ) from err
    except NotFound as err:
        if verb != "create":
            raise
        raise LeaseUnavailable(
            f"cannot create {where}: namespace {namespace} not found; create it "
            f"(`make install` applies manifests/namespace.yaml) or point "
            f"TOOLADAPTER_LEASE_NAMESPACE at an existing namespace"
        ) from err


@dataclass
class KubeLeases:
    """`LeaseApi` over the API server, every request bounded by `timeout` seconds."""

    kube: Kube
    timeout: float

    async def _call(
        self, verb: str, namespace: str, name: str, method: Any, *args: Any, **params: Any
    ) -> dict[str, Any]:
        with _lease_errors(verb, namespace, name):
            obj: dict[str, Any] = await json_body(
                await method(*args, _preload_content=False, _request_timeout=self.timeout, **params)
            )
        return obj

    async def get(self, namespace: str, name: str) -> dict[str, Any] | None:
        try:
            return await self._call(
                "read",
                namespace,
                name,
                self.kube.coordination.read_namespaced_lease,
                name,
                namespace,
            )
        except NotFound:
            return None

    async def create(self, namespace: str, body: dict[str, Any]) -> dict[str, Any]:
        return await self._call(
            "create",
            namespace,
            body["metadata"]["name"],
            self.kube.coordination.create_namespaced_lease,
            namespace,
            body,
        )

    async def replace(self, namespace: str, name: str, body: dict[str, Any]) -> dict[str, Any]:
        return await self._call(
            "update",
            namespace,
            name,
            self.kube.coordination.replace_namespaced_lease,
            name,
            namespace,
            body,
        )

    async def delete(self, namespace: str, name: str, resource_version: str) -> None:
        options = client.V1DeleteOptions(
            preconditions=client.V1Preconditions(resource_version=resource_version)
        )
        await self._call(
            "delete",
            namespace,
            name,
            self.kube.coordination.delete_namespaced_lease,
            name,
            namespace,
            body=options,
        )


@dataclass
class LeaseElector:
    """One contender for one Lease. Not thread-safe; `renewed_at` may be read by a
    watchdog thread (a float, written whole)."""

    api: LeaseApi
    namespace: str
    name: str
    identity: str
    duration_seconds: int
    scope: tuple[str, ...] = ()
    clock: Callable[[], datetime] = lambda: datetime.now(UTC)
    monotonic: Callable[[], float] = time.monotonic
    #: The Lease as this holder last wrote it (None unless leading).
    lease: dict[str, Any] | None = None
    #: Monotonic time at which the last successful write of this holder was sent.
    renewed_at: float = 0.0
    _observed_version: str = ""
    _observed_at: float = 0.0

    @property
    def leading(self) -> bool:
        return self.lease is not None

    def _observe(self, record: LeaseRecord) -> float:
        """How long the record has been seen unchanged (resets when it moves)."""
        now = self.monotonic()
        if record.resource_version != self._observed_version:
            self._observed_version = record.resource_version
            self._observed_at = now
        return now - self._observed_at

    def _spec(self, previous: LeaseRecord | None, acquire_time: str | None) -> dict[str, Any]:
        now = to_iso(self.clock())
        before = previous.holder if previous is not None else ""
        transitions = previous.transitions if previous is not None else 0
        keep = before == self.identity and acquire_time
        return {
            "holderIdentity": self.identity,
            "leaseDurationSeconds": self.duration_seconds,
            "acquireTime": acquire_time if keep else now,
            "renewTime": now,
            # Counted when the Lease passes from one holder to another, as client-go does.
            "leaseTransitions": transitions + (1 if before and before != self.identity else 0),
        }

    def _new(self) -> dict[str, Any]:
        return {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {
                "name": self.name,
                "namespace": self.namespace,
                "labels": {LABEL_MANAGED_BY: MANAGED_BY},
                "annotations": {ANNOTATION_SCOPE: scope_text(self.scope)},
            },
            "spec": self._spec(None, None),
        }

    async def try_acquire(self) -> str | None:
        """Take the Lease if it is free, expired or already ours. None when this process
        leads now; otherwise the identity of the holder (empty when unknown)."""
        holder = ""
        for _ in range(2):  # once more right away after losing a race, to name the winner
            sent = self.monotonic()
            current = await self.api.get(self.namespace, self.name)
            if current is None:
                try:
                    self.lease = await self.api.create(self.namespace, self._new())
                except AlreadyExists:
                    continue
                self.renewed_at = sent
                return None
            record = LeaseRecord.of(current, self.duration_seconds)
            unchanged_for = self._observe(record)
            holder = record.holder
            if holder and holder != self.identity:
                if not expired(record, now=self.clock(), unchanged_for=unchanged_for):
                    return holder
            body = copy.deepcopy(current)
            spec = body.get("spec") or {}
            body["spec"] = {**spec, **self._spec(record, spec.get("acquireTime"))}
            try:
                self.lease = await self.api.replace(self.namespace, self.name, body)
            except (Conflict, NotFound):
                continue
            self.renewed_at = sent
            return None
        return holder

    async def renew(self) -> None:
        """Write a new renewTime; `LostLease` when another holder owns the Lease (or it
        is gone). Other errors (the API server unreachable) propagate for a retry."""
        if self.lease is None:
            raise LostLease(f"Lease {self.namespace}/{self.name} is not held")
        sent = self.monotonic()
        current = self.lease
        for _ in range(2):
            body = copy.deepcopy(current)
            body["spec"]["renewTime"] = to_iso(self.clock())
            body["spec"]["leaseDurationSeconds"] = self.duration_seconds
            try:
                self.lease = await self.api.replace(self.namespace, self.name, body)
            except NotFound:
                break
            except Conflict:
                # Changed since this holder wrote it: by this holder (an answer lost on the
                # way back) it can go on; by anyone else, leadership is gone.
                fresh = await self.api.get(self.namespace, self.name)
                if fresh is None:
                    break
                if (fresh.get("spec") or {}).get("holderIdentity") != self.identity:
                    self.lease = None
                    holder = (fresh.get("spec") or {}).get("holderIdentity") or "nobody"
                    raise LostLease(
                        f"Lease {self.namespace}/{self.name} is held by {holder} now"
                    ) from None
                current = fresh
                continue
            self.renewed_at = sent
            return
        else:
            raise Conflict(f"Lease {self.namespace}/{self.name} kept changing")
        self.lease = None
        raise LostLease(f"Lease {self.namespace}/{self.name} was deleted")

    async def release(self) -> None:
        """Give the Lease up so a standby takes over at once: delete it, unless it changed
        since this holder's last write (then it is someone else's)."""
        lease, self.lease = self.lease, None
        if lease is None:
            return
        version = str(lease["metadata"].get("resourceVersion") or "")
        try:
            await self.api.delete(self.namespace, self.name, version)
        except (Conflict, NotFound):
            pass
