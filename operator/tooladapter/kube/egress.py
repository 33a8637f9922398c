"""The egress proxy's API calls: lease grants (watched) and connection records (written).

Both live in the proxy's own namespace (`pipeline.egress_lease`), so the proxy's RBAC is a
Role there: get, list and watch Secrets; get, create and patch ConfigMaps.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from kubernetes_asyncio import watch

from tooladapter.egress.core.lease import LABEL_EGRESS
from tooladapter.kube.client import Kube
from tooladapter.kube.errors import AlreadyExists, Conflict, NotFound, api_errors, unless_absent
from tooladapter.naming import (
    ANNOTATION_INVOCATION_REF,
    LABEL_INVOCATION_UID,
    LABEL_MANAGED_BY,
    MANAGED_BY,
)

logger = logging.getLogger("tooladapter.egress")

GRANT_SELECTOR = f"{LABEL_EGRESS}=true"

#: (event type, Secret as a plain dict); "SYNC" carries a full list (replace everything).
GrantHandler = Callable[[str, list[dict[str, Any]]], Awaitable[None]]


async def follow_grants(
    kube: Kube, namespace: str, handle: GrantHandler, *, ready: asyncio.Event | None = None
) -> None:
    """List the grants, then watch them, forever: on an expired watch (410) or an error,
    list again. `ready` is set after the first list."""
    while True:
        try:
            listing = await kube.core.list_namespaced_secret(
                namespace, label_selector=GRANT_SELECTOR
            )
            items = [kube.api.sanitize_for_serialization(s) for s in listing.items]
            await handle("SYNC", items)
            if ready is not None:
                ready.set()
            version = listing.metadata.resource_version
            w = watch.Watch()
            try:
                async for event in w.stream(
                    kube.core.list_namespaced_secret,
                    namespace,
                    label_selector=GRANT_SELECTOR,
                    resource_version=version,
                    timeout_seconds=300,
                ):
                    kind = event["type"]
                    if kind == "ERROR":
                        break
                    obj = kube.api.sanitize_for_serialization(event["object"])
                    await handle(kind, [obj])
            finally:
                w.stop()
        except asyncio.CancelledError:
            raise
        except Exception:
            logger.warning("watching egress grants failed; listing again", exc_info=True)
            await asyncio.sleep(1)


async def read_grant(kube: Kube, namespace: str, name: str) -> dict[str, Any] | None:
    secret = await unless_absent(kube.core.read_namespaced_secret(name, namespace))
    if secret is None:
        return None
    obj: dict[str, Any] = kube.api.sanitize_for_serialization(secret)
    if (obj.get("metadata", {}).get("labels") or {}).get(LABEL_EGRESS) != "true":
        return None
    return obj


async def write_records(
    kube: Kube,
    *,
    namespace: str,
    name: str,
    key: str,
    text: str,
    uid: str,
    invocation_ref: str,
) -> None:
    """Set `data[key]` of the lease's records ConfigMap, creating it on first use."""
    patch = {"data": {key: text}}
    try:
        with api_errors():
            await kube.core.patch_namespaced_config_map(name, namespace, patch)
        return
    except NotFound:
        pass
    body = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": {LABEL_MANAGED_BY: MANAGED_BY, LABEL_INVOCATION_UID: uid},
            "annotations": {ANNOTATION_INVOCATION_REF: invocation_ref},
        },
        "data": {key: text},
    }
    try:
        with api_errors():
            await kube.core.create_namespaced_config_map(namespace, body)
    except (AlreadyExists, Conflict):
        # Another replica made it a moment ago.
        with api_errors():
            await kube.core.patch_namespaced_config_map(name, namespace, patch)
