"""The API as the person (or agent) at the keyboard: the command line's only way in.

The operator's client (`client.Kube.connect`) speaks as the operator; this one loads the
user's kubeconfig (context and all, as kubectl does), so every create, approval and
confirmation is the user's own act and the admission policies see the real caller.
Errors come back as `UserApiError` with the HTTP status, which the command line turns into its
documented exit codes without importing the client.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

from kubernetes_asyncio import client, config
from kubernetes_asyncio.client.exceptions import ApiException

from tooladapter import GROUP
from tooladapter.kube.client import Kube
from tooladapter.kube.errors import UserApiError
from tooladapter.kube.objects import CustomObjects


class FollowedObjectDeleted(LookupError):
    """The object `UserApi.follow` followed was deleted."""


@dataclass(frozen=True)
class Identity:
    username: str
    groups: tuple[str, ...]


@dataclass
class UserApi:
    """One user's connection: their kubeconfig context, namespace and credentials."""

    kube: Kube
    namespace: str
    server: str

    async def bearer_token(self) -> str | None:
        """The kubeconfig's bearer token (static or from an exec plugin), for the gateway;
        None when the user authenticates otherwise (client certificates)."""
        cfg = self.kube.api.configuration
        value = await cfg.get_api_key_with_prefix("BearerToken")
        if not value:
            return None
        text = str(value)
        return text.removeprefix("Bearer ").strip() or None

    # ------------------------------------------------------------------ who am I

    async def whoami(self) -> Identity:
        """SelfSubjectReview: the username and groups the API server authenticates."""
        body = {"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"}
        try:
            review = await self.kube.authentication.create_self_subject_review(body)
        except ApiException as exc:
            raise UserApiError.of(exc) from exc
        info = review.status.user_info if review.status else None
        if info is None or not info.username:
            raise UserApiError(401, "the API server did not say who you are")
        return Identity(username=info.username, groups=tuple(info.groups or ()))

    async def can_i(
        self, verb: str, resource: str, name: str | None = None, *, group: str = GROUP
    ) -> bool:
        """SelfSubjectAccessReview in this namespace."""
        attributes: dict[str, str] = {
            "namespace": self.namespace,
            "verb": verb,
            "group": group,
            "resource": resource,
        }
        if name:
            attributes["name"] = name
        body = {
            "apiVersion": "authorization.k8s.io/v1",
            "kind": "SelfSubjectAccessReview",
            "spec": {"resourceAttributes": attributes},
        }
        try:
            review = await self.kube.authorization.create_self_subject_access_review(body)
        except ApiException as exc:
            raise UserApiError.of(exc) from exc
        return bool(review.status and review.status.allowed and not review.status.denied)

    # ------------------------------------------------------------------ objects

    objects: CustomObjects = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self.objects = CustomObjects(self.kube.api, error=UserApiError, page_size=500)

    async def get(self, plural: str, name: str) -> dict[str, Any]:
        return await self.objects.get(plural, self.namespace, name)

    async def list_all(
        self, plural: str, *, field_selector: str | None = None
    ) -> list[dict[str, Any]]:
        """Every object of a kind in the namespace, page by page."""
        return await self.objects.list(plural, self.namespace, field_selector=field_selector)

    async def list_where(self, plural: str, path: str, value: str) -> list[dict[str, Any]]:
        """Objects whose field `path` (dotted, e.g. `spec.runId`) equals `value`: by field
        selector where the CRD declares the field selectable, else filtered here."""
        try:
            return await self.list_all(plural, field_selector=f"{path}={value}")
        except UserApiError as err:
            if err.status != 400:  # 400: "field label not supported"
                raise
        return [obj for obj in await self.list_all(plural) if _dig(obj, path) == value]

    async def create(self, plural: str, body: dict[str, Any]) -> dict[str, Any]:
        """Create, strictly: a field the CRD does not know is an error (400), never silently
        dropped (a `spec.dryRun` pruned by an older CRD would make a preview a real call)."""
        return await self.objects.create(plural, self.namespace, body, field_validation="Strict")

    async def json_patch(self, plural: str, name: str, ops: list[dict[str, Any]]) -> dict[str, Any]:
        """A JSON Patch of the object as the user (its `test` operations make it
        conditional; admission decides what may change)."""
        return await self.objects.json_patch(plural, self.namespace, name, ops)

    async def patch_status(self, plural: str, name: str, status: dict[str, Any]) -> dict[str, Any]:
        """A JSON merge patch of the status subresource (admission decides what may change)."""
        return await self.objects.merge_patch_status(plural, self.namespace, name, status)

    # ------------------------------------------------------------------ pods

    async def pod_names(self, selector: str) -> list[str]:
        """The names of the namespace's pods with labels `selector`, as the user lists them."""
        try:
            found = await self.kube.core.list_namespaced_pod(
                self.namespace, label_selector=selector
            )
        except ApiException as exc:
            raise UserApiError.of(exc) from exc
        return [str(pod.metadata.name) for pod in found.items]

    async def delete_pod(self, name: str) -> bool:
        """Delete a pod at once (no grace period) as the user; False: it was gone."""
        try:
            await self.kube.core.delete_namespaced_pod(name, self.namespace, grace_period_seconds=0)
        except ApiException as exc:
            if exc.status == 404:
                return False
            raise UserApiError.of(exc) from exc
        return True

    async def follow(
        self, plural: str, name: str, *, slice_seconds: int = 50
    ) -> AsyncIterator[dict[str, Any]]:
        """The object now, then every new version of it from a watch, for as long as the
        caller iterates (bound it with a timeout). `FollowedObjectDeleted` when it is deleted.

        Watches expire and resourceVersions go stale: on either, read again and re-watch,
        so no version that matters is missed."""
        while True:
            obj = await self.get(plural, name)
            yield obj
            try:
                async for kind, new in self.objects.watch(
                    plural,
                    self.namespace,
                    obj["metadata"]["resourceVersion"],
                    timeout_seconds=slice_seconds,
                    field_selector=f"metadata.name={name}",
                ):
                    if kind == "DELETED":
                        raise FollowedObjectDeleted(name)
                    if kind in ("ADDED", "MODIFIED"):
                        yield new
            except UserApiError as err:
                if err.status not in (410, 500, 503, 504):
                    raise


def _dig(obj: dict[str, Any], path: str) -> Any:
    value: Any = obj
    for part in path.split("."):
        if not isinstance(value, dict):
            return None
        value = value.get(part)
    return value


def _context_namespace(loader: Any) -> str | None:
    current = loader.current_context or {}
    context = current.get("context") or {}
    namespace = context.get("namespace")
    return str(namespace) if namespace else None


_POD_NAMESPACE = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"


def _kubeconfig_path(given: str | None) -> str:
    return given or os.environ.get("KUBECONFIG") or os.path.expanduser("~/.kube/config")


def _in_cluster(path: str) -> str | None:
    """Inside a pod with no kubeconfig: the pod's namespace ("" if unreadable); else None."""
    if not os.environ.get("KUBERNETES_SERVICE_HOST") or os.path.exists(path.split(os.pathsep)[0]):
        return None
    try:
        with open(_POD_NAMESPACE) as fh:
            return fh.read().strip()
    except OSError:
        return ""


@asynccontextmanager
async def connect(
    *, kubeconfig: str | None = None, context: str | None = None, namespace: str | None = None
) -> AsyncIterator[UserApi]:
    """A connection as the user of `kubeconfig` (default: $KUBECONFIG, ~/.kube/config) and
    `context` (default: its current context), in `namespace` (default: the context's, else
    `default`). Inside a pod without a kubeconfig, the pod's own ServiceAccount."""
    cfg = client.Configuration()
    path = _kubeconfig_path(kubeconfig)
    pod_namespace = _in_cluster(path) if not kubeconfig else None
    if pod_namespace is not None:
        config.load_incluster_config(client_configuration=cfg)
        context_ns: str | None = pod_namespace or None
    else:
        try:
            loader = await config.load_kube_config(
                config_file=path, context=context, client_configuration=cfg, persist_config=False
            )
        except config.ConfigException as exc:
            raise UserApiError(0, f"kubeconfig {path}: {exc}") from exc
        except (TypeError, AttributeError, ValueError) as exc:
            # An empty or malformed file reaches the loader's internals (e.g. /dev/null).
            raise UserApiError(0, f"kubeconfig {path}: empty or not a kubeconfig") from exc
        context_ns = _context_namespace(loader)
    api = client.ApiClient(configuration=cfg)
    kube = Kube(api=api)
    try:
        yield UserApi(kube=kube, namespace=namespace or context_ns or "default", server=cfg.host)
    finally:
        await kube.close()
