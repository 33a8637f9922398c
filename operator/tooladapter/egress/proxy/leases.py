"""The open leases, as the proxy knows them from their grants (`pipeline.egress_lease`).

A lease is usable from the moment its grant is seen until it is deleted (the call ended:
the operator deletes it in the same step that releases the sandbox) or expires, whichever
comes first. Deletion ends the lease's open connections at once.

The watch may lag the operator by a moment: a token for a uid the table does not know yet
is looked up with one GET of its grant (at most once a second per uid), never guessed.
"""

from __future__ import annotations

import asyncio
import base64
import hmac
import logging
import time
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from tooladapter.credentials.requests import carries, method_overrides
from tooladapter.egress.core.lease import GRANT_KEY, TOKEN_HASH_KEY, LeaseGrant, token_digest
from tooladapter.egress.core.lease_ca import CA_CERT_KEY, CA_KEY_KEY, LeaseCA
from tooladapter.egress.core.rules import HTTPS_PORT, AllowList, normalize_host
from tooladapter.model import CredentialInjection
from tooladapter.naming import LABEL_INVOCATION_UID
from tooladapter.timeutil import parse_time

logger = logging.getLogger("tooladapter.egress")

#: A uid the table does not know is looked up at most this often.
LOOKUP_INTERVAL_SECONDS = 1.0
#: And all unknown uids together at most this many times a second: made-up uids, one
#: per connection, would otherwise turn into as many GETs on the API server.
LOOKUPS_PER_SECOND = 10


@dataclass(frozen=True)
class Credential:
    """One HTTP credential of a lease: which requests carry it (`credentials.requests`)."""

    inject: CredentialInjection
    header: str
    #: The header's value (the scheme or `Basic ...` included).
    value: str
    #: The Secret's value itself: what a response must never hand back.
    secret: str = ""


@dataclass
class Lease:
    grant: LeaseGrant
    token_sha256: str
    allow: AllowList
    credentials: tuple[Credential, ...]
    expires: datetime
    ended: asyncio.Event = field(default_factory=asyncio.Event)
    #: Open connections (their tasks), ended with the lease.
    connections: set[asyncio.Task[Any]] = field(default_factory=set)
    #: The lease's CA (with HTTP credentials): the proxy ends https to their hosts with
    #: leaves it signs (`server.EgressProxy._terminate`).
    ca: LeaseCA | None = None
    #: Server contexts by host, each with its leaf's expiry (made on first use).
    leaves: dict[str, tuple[Any, datetime]] = field(default_factory=dict)

    @property
    def uid(self) -> str:
        return self.grant.uid

    @property
    def tenant(self) -> str:
        return self.grant.namespace

    def open(self, now: datetime | None = None) -> bool:
        return not self.ended.is_set() and (now or datetime.now(UTC)) < self.expires

    def credential_for(
        self,
        host: str,
        port: int | None,
        method: str,
        path: str,
        headers: Iterable[tuple[str, str]],
    ) -> Credential | None:
        """The credential a plain-http request carries (the proxy sends it upstream over
        TLS): the request's port (443 when it names none) must be exactly its entry's
        (443 when the entry names none), and its method, every method its override
        headers name (among `headers`: required, so no caller forgets them), and its path
        must match."""
        overrides = method_overrides(headers)
        for credential in self.credentials:
            if carries(
                credential.inject,
                host=host,
                port=port if port is not None else HTTPS_PORT,
                default_port=HTTPS_PORT,
                method=method,
                path=path,
                overrides=overrides,
            ):
                return credential
        return None

    def terminates(self, host: str, port: int) -> bool:
        """Whether a CONNECT to `host:port` is ended here (TLS with a leaf of the lease CA):
        some credential names that host and port, whatever its methods and paths (those
        are judged per request inside the tunnel)."""
        if self.ca is None:
            return False
        # Methods and paths lifted: the host and port alone decide.
        return any(
            carries(
                CredentialInjection(hosts=list(credential.inject.hosts or [])),
                host=host,
                port=port,
                default_port=HTTPS_PORT,
                method="GET",
                path="/",
            )
            for credential in self.credentials
        )


def _decode(data: dict[str, str], key: str) -> str:
    return base64.b64decode(data[key]).decode()


def lease_of(secret: dict[str, Any]) -> Lease:
    """A Lease from its grant Secret; raises (ValueError, KeyError, ...) on a malformed one."""
    data = secret.get("data") or {}
    grant = LeaseGrant.from_document(_decode(data, GRANT_KEY))
    credentials = []
    for item in grant.credentials:
        inject = CredentialInjection(
            hosts=list(item.hosts),
            methods=list(item.methods) if item.methods is not None else None,
            paths=list(item.paths) if item.paths is not None else None,
        )
        credentials.append(
            Credential(
                inject, item.header, _decode(data, item.key), _decode(data, f"{item.key}-raw")
            )
        )
    ca = (
        LeaseCA(_decode(data, CA_CERT_KEY), _decode(data, CA_KEY_KEY))
        if CA_KEY_KEY in data and CA_CERT_KEY in data
        else None
    )
    return Lease(
        grant=grant,
        token_sha256=_decode(data, TOKEN_HASH_KEY),
        allow=AllowList.parse(grant.allow),
        credentials=tuple(credentials),
        expires=parse_time(grant.expires_at),
        ca=ca,
    )


class LeaseTable:
    """Leases by uid, fed by `kube.egress.follow_grants`."""

    def __init__(
        self,
        fetch: Callable[[str], Awaitable[dict[str, Any] | None]],
        serves: Callable[[str], bool] = lambda namespace: True,
    ) -> None:
        #: Reads one grant by lease uid (a GET), for uids the watch has not delivered yet.
        self.fetch = fetch
        self.serves = serves
        self.leases: dict[str, Lease] = {}
        self._looked_up: dict[str, float] = {}
        #: (the second, the lookups made in it).
        self._budget: tuple[int, int] = (0, 0)

    def _admit(self, secret: dict[str, Any]) -> Lease | None:
        name = (secret.get("metadata") or {}).get("name", "?")
        try:
            lease = lease_of(secret)
        except Exception as exc:
            logger.warning("egress grant %s is malformed (%s): ignored", name, type(exc).__name__)
            return None
        if not self.serves(lease.tenant):
            return None
        known = self.leases.get(lease.uid)
        if known is not None:
            return known
        self.leases[lease.uid] = lease
        return lease

    def end(self, uid: str, why: str) -> None:
        lease = self.leases.pop(uid, None)
        if lease is None:
            return
        lease.ended.set()
        for task in list(lease.connections):
            task.cancel()
        logger.info("lease %s (%s) ended: %s", uid, lease.tenant, why)

    async def handle(self, kind: str, items: list[dict[str, Any]]) -> None:
        if kind == "SYNC":
            seen = set()
            for secret in items:
                lease = self._admit(secret)
                if lease is not None:
                    seen.add(lease.uid)
            for uid in set(self.leases) - seen:
                self.end(uid, "its grant is gone")
        elif kind in ("ADDED", "MODIFIED"):
            for secret in items:
                self._admit(secret)
        elif kind == "DELETED":
            for secret in items:
                labels = (secret.get("metadata") or {}).get("labels") or {}
                uid = str(labels.get(LABEL_INVOCATION_UID) or "")
                if uid:
                    self.end(uid, "its grant was deleted (the call ended)")

    async def authenticate(self, user: str, token: str) -> Lease | None:
        """The open lease `user` names, when `token` is its token; else None."""
        user = normalize_host(user)
        lease = self.leases.get(user)
        if lease is None and user and len(user) <= 64:
            now = time.monotonic()
            if now - self._looked_up.get(user, 0.0) >= LOOKUP_INTERVAL_SECONDS and self._spend(now):
                self._looked_up[user] = now
                if len(self._looked_up) > 10_000:
                    self._looked_up.clear()
                secret = await self.fetch(user)
                if secret is not None:
                    lease = self._admit(secret)
        if lease is None or lease.uid != user:
            return None
        if not hmac.compare_digest(lease.token_sha256, token_digest(token)):
            return None
        if not lease.open():
            if lease.ended.is_set() is False:
                self.end(lease.uid, "it expired")
            return None
        return lease

    def _spend(self, now: float) -> bool:
        second, used = self._budget
        if int(now) != second:
            second, used = int(now), 0
        if used >= LOOKUPS_PER_SECOND:
            return False
        self._budget = (second, used + 1)
        return True

    def expire(self) -> None:
        now = datetime.now(UTC)
        for uid, lease in list(self.leases.items()):
            if not lease.open(now):
                self.end(uid, "it expired")
