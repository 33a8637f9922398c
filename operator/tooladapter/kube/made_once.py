"""Objects every replica needs and the first one to start makes: a session key, a signing
keyring, the published receipt keys and chain heads.

Replicas start together, so two may both find the object absent and both create it: the
API server accepts one create and answers the other AlreadyExists, and that replica reads
the winner's. A published ConfigMap is replaced only onto the version read, so two writers
never overwrite each other: the loser reads again and merges.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from tooladapter.kube.client import Kube
from tooladapter.kube.errors import AlreadyExists, Conflict, NotFound, api_errors

T = TypeVar("T")

#: A ConfigMap's data with what is published merged in; None: it holds that already.
Changed = Callable[[dict[str, str]], dict[str, str] | None]


async def read_or_create(
    read: Callable[[], Awaitable[T]], create: Callable[[], Awaitable[T]], *, where: str
) -> T:
    """What `read` finds; when absent, what `create` makes (AlreadyExists: read again)."""
    for _ in range(2):
        try:
            return await read()
        except NotFound:
            pass
        try:
            return await create()
        except AlreadyExists:
            continue  # another replica made it first: read theirs
    raise RuntimeError(f"{where}: made and gone again")


async def publish_config_map(
    kube: Kube,
    namespace: str,
    name: str,
    metadata: dict[str, Any],
    changed: Changed,
    *,
    tries: int,
) -> bool:
    """Write the ConfigMap's data as `changed` makes it, creating it when absent; False
    when it held that already. `Conflict` when it kept changing for `tries` reads."""
    for _ in range(tries):
        try:
            with api_errors():
                found = await kube.core.read_namespaced_config_map(name, namespace)
        except NotFound:
            body = {
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": metadata,
                "data": changed({}) or {},
            }
            try:
                with api_errors():
                    await kube.core.create_namespaced_config_map(namespace, body)
                return True
            except AlreadyExists:
                continue
        data = changed(found.data or {})
        if data is None:
            return False
        body = {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {**metadata, "resourceVersion": found.metadata.resource_version},
            "data": data,
        }
        try:
            with api_errors():
                await kube.core.replace_namespaced_config_map(name, namespace, body)
            return True
        except Conflict:
            continue  # another writer published meanwhile: merge again
    raise Conflict(f"ConfigMap {namespace}/{name} kept changing")
