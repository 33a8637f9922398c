"""Who may do what: SubjectAccessReviews, TokenReviews and TokenRequests."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field

from tooladapter.kube.client import Kube, json_body
from tooladapter.kube.errors import api_errors
from tooladapter.timeutil import unexpired


@dataclass(frozen=True)
class AccessVerdict:
    allowed: bool
    reason: str


def groups_of(username: str, claimed: list[str] | None = None) -> list[str]:
    """The groups the API server gives a ServiceAccount user; others get authenticated only.

    A SubjectAccessReview needs the caller's groups for group-bound RBAC; for users other
    than ServiceAccounts we cannot know them after the fact, so only the name binds.
    """
    groups = ["system:authenticated"]
    parts = username.split(":")
    if len(parts) == 4 and parts[:2] == ["system", "serviceaccount"]:
        groups += ["system:serviceaccounts", f"system:serviceaccounts:{parts[2]}"]
    # `claimed`: the caller's spec.caller.groups, which admission checked against the
    # groups the API server authenticated for the creator.
    return groups + [g for g in claimed or [] if g not in groups]


@dataclass
class AllowCache:
    """Allowed review answers, remembered for `ttl_seconds` (0: ask every time).

    An agent calling a tool many times a second would otherwise cost two or three reviews per
    call. Only allowances are kept, so a new grant works at once and a denial is never
    served from memory; a revoked grant stops working within `ttl_seconds`, as with the API
    server's own webhook authorizer cache (whose default keeps allowances five minutes).
    """

    ttl_seconds: float
    max_entries: int = 10_000
    entries: dict[tuple[object, ...], float] = field(default_factory=dict)
    #: Reviews on their way: a burst of one agent's calls asks once, not once per call.
    asking: dict[tuple[object, ...], asyncio.Future[AccessVerdict]] = field(default_factory=dict)

    def allowed(self, key: tuple[object, ...]) -> bool:
        return unexpired(self.entries, key)

    def remember(self, key: tuple[object, ...]) -> None:
        if self.ttl_seconds <= 0:
            return
        if len(self.entries) >= self.max_entries:
            now = time.monotonic()
            self.entries = {k: t for k, t in self.entries.items() if t > now}
            if len(self.entries) >= self.max_entries:
                self.entries.clear()
        self.entries[key] = time.monotonic() + self.ttl_seconds


async def can(
    kube: Kube,
    *,
    user: str,
    namespace: str,
    verb: str,
    resource: str,
    name: str | None = None,
    group: str = "tooladapter.dev",
    groups: list[str] | None = None,
    cache: AllowCache | None = None,
) -> AccessVerdict:
    key = (user, tuple(groups or ()), namespace, verb, group, resource, name)
    if cache is None:
        return await review(kube, user, namespace, verb, resource, name, group, groups)
    if cache.allowed(key):
        return AccessVerdict(allowed=True, reason="allowed (remembered)")
    if (pending := cache.asking.get(key)) is not None:
        # The same question is already asked: its answer is as fresh as a new one. If that
        # asking failed or was cancelled, this call asks on its own.
        await asyncio.wait([pending])
        if not pending.cancelled() and pending.exception() is None:
            return pending.result()
        return await review(kube, user, namespace, verb, resource, name, group, groups)
    future: asyncio.Future[AccessVerdict] = asyncio.get_running_loop().create_future()
    cache.asking[key] = future
    try:
        verdict = await review(kube, user, namespace, verb, resource, name, group, groups)
    except BaseException:
        future.cancel()
        raise
    finally:
        del cache.asking[key]
    future.set_result(verdict)
    if verdict.allowed:
        cache.remember(key)
    return verdict


async def review(
    kube: Kube,
    user: str,
    namespace: str,
    verb: str,
    resource: str,
    name: str | None,
    group: str,
    groups: list[str] | None,
) -> AccessVerdict:
    """One SubjectAccessReview."""
    body = {
        "apiVersion": "authorization.k8s.io/v1",
        "kind": "SubjectAccessReview",
        "spec": {
            "user": user,
            "groups": groups if groups is not None else groups_of(user),
            "resourceAttributes": {
                "namespace": namespace,
                "verb": verb,
                "group": group,
                "resource": resource,
                **({"name": name} if name else {}),
            },
        },
    }
    with api_errors():
        # Two reviews per call: read the JSON answer directly instead of building the
        # client's model objects (their deserialisation was a hot spot under load).
        answer = await json_body(
            await kube.authorization.create_subject_access_review(body, _preload_content=False)
        )
    status = answer.get("status") or {}
    allowed = bool(status.get("allowed") and not status.get("denied"))
    return AccessVerdict(allowed=allowed, reason=str(status.get("reason") or ""))


@dataclass(frozen=True)
class Identity:
    username: str
    groups: tuple[str, ...]


async def authenticate(kube: Kube, token: str) -> Identity | None:
    """TokenReview of a bearer token; None when the API server does not accept it."""
    body = {
        "apiVersion": "authentication.k8s.io/v1",
        "kind": "TokenReview",
        "spec": {"token": token},
    }
    with api_errors():
        review = await kube.authentication.create_token_review(body)
    status = review.status
    if not status or not status.authenticated or not status.user:
        return None
    return Identity(username=status.user.username, groups=tuple(status.user.groups or ()))


async def request_token(
    kube: Kube,
    *,
    namespace: str,
    service_account: str,
    audiences: list[str],
    expiration_seconds: int,
    bound_secret: tuple[str, str] | None = None,
) -> tuple[str, str]:
    """A TokenRequest token; returns (token, expiration timestamp).

    `bound_secret` (name, uid): the token is bound to that Secret and stops being valid
    the moment the Secret is deleted (the lease's ephemeral Secret: it dies with the call)."""
    spec: dict[str, object] = {
        "audiences": audiences or None,
        # The API server's minimum is 600 s; a shorter call still gets the minimum.
        "expirationSeconds": max(600, expiration_seconds),
    }
    if bound_secret is not None:
        spec["boundObjectRef"] = {
            "apiVersion": "v1",
            "kind": "Secret",
            "name": bound_secret[0],
            "uid": bound_secret[1],
        }
    body = {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": spec}
    with api_errors():
        result = await kube.core.create_namespaced_service_account_token(
            service_account, namespace, body
        )
    expiry = result.status.expiration_timestamp
    return result.status.token, expiry.isoformat() if expiry else ""
