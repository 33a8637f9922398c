"""The gateway's API access: the operator's own identity only to review, the caller's for
everything else.

- `Reviews` asks the API server, as the operator, who a bearer token belongs to
  (TokenReview) and what that identity may do (SubjectAccessReview with the reviewed user,
  uid, groups and extra, so it answers exactly what RBAC answers for the caller).
- `AsCaller` reads and writes objects with the caller's own token. Its connection pool is
  built from the cluster's address and CA only: no client certificate, no token of the
  operator's, no refresh hook. Each request carries `Authorization: Bearer <caller token>`,
  so RBAC and the admission policies (caller identity, reviewer identity, confirmations)
  see the caller, and the gateway needs no impersonation rights.

Every request the gateway makes has a total timeout (`bound_time`): a stalled API server
costs a caller an error, never a connection held forever. Watches (the page's live updates,
MCP follows) go through a pool of their own (`CallerPool.streams`), so streams held by
callers never take the connections other callers' requests need.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Final

from kubernetes_asyncio import client
from kubernetes_asyncio.client.exceptions import ApiException

from tooladapter import GROUP
from tooladapter.dicts import put_given
from tooladapter.kube.auth import AllowCache
from tooladapter.kube.client import Kube, json_body
from tooladapter.kube.errors import CallerApiError as CallerApiError
from tooladapter.kube.objects import CustomObjects, Objects
from tooladapter.metrics import GATEWAY_REVIEWS

#: A watch request ends after this long without an event; the follower starts another.
WATCH_SECONDS: Final = 60

#: Page size of lists read for a caller (runs may hold many invocations).
PAGE_SIZE: Final = 250
#: A watch request's total timeout beyond its server-side `WATCH_SECONDS`.
WATCH_MARGIN_SECONDS: Final = 30


def bound_time(api: client.ApiClient, seconds: float) -> None:
    """Give every request of `api` a total timeout of `seconds` unless it names its own
    (`_request_timeout`): kubernetes_asyncio otherwise waits without end."""
    rest = api.rest_client
    original: Callable[..., Awaitable[Any]] = rest.request

    async def request(*args: Any, _request_timeout: Any = None, **kwargs: Any) -> Any:
        return await original(*args, _request_timeout=_request_timeout or seconds, **kwargs)

    rest.request = request


async def _review_status(kind: str, request: Awaitable[Any]) -> dict[str, Any]:
    """The `status` of one review (`kind`: TokenReview, SubjectAccessReview, ...), counted;
    `CallerApiError` when the API server refuses it or does not answer in time."""
    GATEWAY_REVIEWS.labels(kind.lower()).inc()
    try:
        review = await json_body(await request)
    except ApiException as exc:
        raise CallerApiError.of(exc) from exc
    except TimeoutError as exc:
        raise CallerApiError(0, f"the {kind} timed out") from exc
    status: dict[str, Any] = review.get("status") or {}
    return status


@dataclass(frozen=True)
class CallerIdentity:
    """Who a bearer token belongs to, as the API server's TokenReview said."""

    username: str
    uid: str = ""
    groups: tuple[str, ...] = ()
    #: (key, values) pairs, sorted: hashable, so an identity can key the allowance cache.
    extra: tuple[tuple[str, tuple[str, ...]], ...] = ()


class Reviews:
    """TokenReviews and SubjectAccessReviews, as the operator."""

    def __init__(
        self,
        kube: Kube,
        audiences: tuple[str, ...],
        cache: AllowCache,
        timeout_seconds: float = 10.0,
    ) -> None:
        self.kube = kube
        self.audiences = audiences
        self.cache = cache
        self.timeout_seconds = timeout_seconds

    async def identify(self, token: str) -> CallerIdentity | None:
        """The token's identity; None when the API server does not accept it (for the
        configured audiences)."""
        spec: dict[str, Any] = {"token": token}
        if self.audiences:
            spec["audiences"] = list(self.audiences)
        body = {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview", "spec": spec}
        status = await _review_status(
            "TokenReview",
            self.kube.authentication.create_token_review(
                body, _preload_content=False, _request_timeout=self.timeout_seconds
            ),
        )
        user = status.get("user") or {}
        if not status.get("authenticated") or not user.get("username"):
            return None
        extra = tuple(
            sorted(
                (str(k), tuple(str(x) for x in v or ()))
                for k, v in (user.get("extra") or {}).items()
            )
        )
        return CallerIdentity(
            username=str(user["username"]),
            uid=str(user.get("uid") or ""),
            groups=tuple(str(g) for g in user.get("groups") or ()),
            extra=extra,
        )

    async def allowed(
        self,
        who: CallerIdentity,
        *,
        namespace: str,
        verb: str,
        resource: str,
        name: str | None = None,
        subresource: str | None = None,
        group: str = GROUP,
    ) -> bool:
        """Whether RBAC (and any other authorizer) lets `who` do this; allowances are
        remembered briefly (`AllowCache`), denials never."""
        key = (who, namespace, verb, group, resource, subresource, name)
        if self.cache.allowed(key):
            return True
        attributes = put_given(
            {"namespace": namespace, "verb": verb, "group": group, "resource": resource},
            name=name,
            subresource=subresource,
        )
        spec: dict[str, Any] = {
            "user": who.username,
            "groups": list(who.groups),
            "resourceAttributes": attributes,
        }
        if who.uid:
            spec["uid"] = who.uid
        if who.extra:
            spec["extra"] = {k: list(v) for k, v in who.extra}
        body = {
            "apiVersion": "authorization.k8s.io/v1",
            "kind": "SubjectAccessReview",
            "spec": spec,
        }
        status = await _review_status(
            "SubjectAccessReview",
            self.kube.authorization.create_subject_access_review(
                body, _preload_content=False, _request_timeout=self.timeout_seconds
            ),
        )
        allowed = bool(status.get("allowed") and not status.get("denied"))
        if allowed:
            self.cache.remember(key)
        return allowed


class CallerPool:
    """Connection pools to the API server that hold no credentials of their own: `api` for
    requests, `streams` for watches (live updates, follows). Neither can be taken by one
    caller: the gateway caps each caller's concurrent requests below `api`'s size and its
    streams below `streams`' size (`gateway.doors`)."""

    def __init__(
        self,
        api: client.ApiClient,
        streams: client.ApiClient | None = None,
        timeout_seconds: float = 30.0,
    ) -> None:
        self.api = api
        self.streams = streams or api
        self.timeout_seconds = timeout_seconds

    @staticmethod
    def _bare(connections: int, timeout_seconds: float) -> client.ApiClient:
        loaded = client.Configuration.get_default_copy()
        bare = client.Configuration(host=loaded.host)
        bare.ssl_ca_cert = loaded.ssl_ca_cert
        bare.verify_ssl = loaded.verify_ssl
        bare.tls_server_name = loaded.tls_server_name
        bare.proxy = loaded.proxy
        api = client.ApiClient(configuration=bare)
        api.rest_client.pool_manager.connector._limit = connections
        bound_time(api, timeout_seconds)
        return api

    @classmethod
    def from_default(
        cls,
        connections: int = 100,
        stream_connections: int = 100,
        timeout_seconds: float = 30.0,
    ) -> CallerPool:
        """Built from the configuration `Kube.connect` loaded: address, CA, TLS server
        name and proxy only (never its client certificate, token or refresh hook). Every
        request times out after `timeout_seconds`, a watch after its own end plus
        `WATCH_MARGIN_SECONDS`."""
        return cls(
            cls._bare(connections, timeout_seconds),
            cls._bare(stream_connections, WATCH_SECONDS + WATCH_MARGIN_SECONDS),
            timeout_seconds,
        )

    def as_caller(self, token: str) -> AsCaller:
        return AsCaller(self.api, token, streams=self.streams)

    async def close(self) -> None:
        await self.api.close()
        if self.streams is not self.api:
            await self.streams.close()


class AsCaller:
    """tooladapter objects, read and written with one caller's token."""

    def __init__(
        self, api: client.ApiClient, token: str, *, streams: client.ApiClient | None = None
    ) -> None:
        headers = {"Authorization": f"Bearer {token}"}
        self.api = api
        self.headers = headers
        self.objects = CustomObjects(
            api, error=CallerApiError, page_size=PAGE_SIZE, headers=headers
        )
        #: Watches go through the stream pool (`CallerPool.streams`).
        self.watches = CustomObjects(
            streams or api, error=CallerApiError, page_size=PAGE_SIZE, headers=headers
        )

    async def rules(self, namespace: str) -> tuple[list[dict[str, Any]], bool]:
        """(resource rules, incomplete) of a SelfSubjectRulesReview asked with the caller's
        own token: what every authorizer that can enumerate rules lets the caller do in
        `namespace`, in one request. `incomplete` is true when an authorizer cannot
        enumerate (a webhook authorizer, or an error in one): the rules may then miss
        grants, never add any, so an allowance found in them holds and a missing one must
        be asked (SubjectAccessReview)."""
        body = {
            "apiVersion": "authorization.k8s.io/v1",
            "kind": "SelfSubjectRulesReview",
            "spec": {"namespace": namespace},
        }
        status = await _review_status(
            "SelfSubjectRulesReview",
            client.AuthorizationV1Api(self.api).create_self_subject_rules_review(
                body, _preload_content=False, _headers=self.headers
            ),
        )
        rules = [r for r in status.get("resourceRules") or [] if isinstance(r, dict)]
        return rules, bool(status.get("incomplete"))

    async def get(self, plural: str, namespace: str, name: str) -> dict[str, Any]:
        return await self.objects.get(plural, namespace, name)

    async def list(
        self,
        plural: str,
        namespace: str,
        *,
        field_selector: str | None = None,
        label_selector: str | None = None,
    ) -> list[dict[str, Any]]:
        """Every object of a kind in the namespace (page by page)."""
        return await self.objects.list(
            plural, namespace, field_selector=field_selector, label_selector=label_selector
        )

    async def create(self, plural: str, namespace: str, body: dict[str, Any]) -> dict[str, Any]:
        return await self.objects.create(plural, namespace, body)

    async def merge_patch_status(
        self, plural: str, namespace: str, name: str, status: dict[str, Any]
    ) -> dict[str, Any]:
        return await self.objects.merge_patch_status(plural, namespace, name, status)

    async def watch_one(
        self, plural: str, namespace: str, name: str, resource_version: str
    ) -> AsyncGenerator[dict[str, Any], None]:
        """The object's versions after `resource_version`, until the watch request ends
        (at most `WATCH_SECONDS`); the caller starts another from the last version seen.
        A `CallerApiError` with status 410 means the version is too old: read it again."""
        async for kind, obj in self.watches.watch(
            plural,
            namespace,
            resource_version,
            timeout_seconds=WATCH_SECONDS,
            field_selector=f"metadata.name={name}",
        ):
            if kind in ("ADDED", "MODIFIED"):
                yield obj
            if kind == "DELETED":
                raise CallerApiError(404, f"{plural[:-1]} {name} was deleted")

    async def list_cluster(self, plural: str) -> Objects:
        """Every object of a kind in every namespace (page by page): callers RBAC lets
        list cluster-wide (a ClusterRoleBinding); others get a 403 `CallerApiError`."""
        return await self.objects.list(plural, None)

    async def collection_version(self, plural: str, namespace: str | None) -> str:
        """The current resourceVersion of a kind's collection in `namespace` (None: every
        namespace): where a watch of changes from now on starts."""
        return await self.objects.collection_version(plural, namespace)

    async def watch_changes(
        self, plural: str, namespace: str | None, resource_version: str
    ) -> AsyncGenerator[tuple[str, dict[str, Any]], None]:
        """(event type, object) of every change to a kind in `namespace` (None: every
        namespace) after `resource_version`, until the watch request ends (at most
        `WATCH_SECONDS`); the caller goes on from the last object's resourceVersion. A
        `CallerApiError` with status 410 means the version is too old: start again from
        `collection_version`."""
        async for change in self.watches.watch(
            plural, namespace, resource_version, timeout_seconds=WATCH_SECONDS
        ):
            yield change
