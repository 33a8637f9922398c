"""The data-flow scopes' stores: one ConfigMap per scope in the call's namespace, written
with merge patches (a key per label and call), so concurrent ends never lose a label and a
repeated write is a no-op (`pipeline.dataflow` says what the keys are)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from tooladapter.kube.client import Kube, json_body
from tooladapter.kube.errors import AlreadyExists, Conflict, NotFound, api_errors
from tooladapter.naming import LABEL_MANAGED_BY, MANAGED_BY


async def merge_config_map(
    kube: Kube,
    *,
    namespace: str,
    name: str,
    data: Mapping[str, str | None],
    labels: Mapping[str, str],
) -> None:
    """Merge `data` into the ConfigMap (a None value removes its key), creating it on first
    use."""
    patch = {"data": dict(data)}
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
            "labels": {LABEL_MANAGED_BY: MANAGED_BY, **labels},
        },
        "data": {k: v for k, v in data.items() if v is not None},
    }
    try:
        with api_errors():
            await kube.core.create_namespaced_config_map(namespace, body)
    except (AlreadyExists, Conflict):
        # Another call of the scope made it a moment ago.
        with api_errors():
            await kube.core.patch_namespaced_config_map(name, namespace, patch)


async def read_config_map(kube: Kube, *, namespace: str, name: str) -> dict[str, str] | None:
    """A ConfigMap's data (None: there is none), as JSON: no client model objects."""
    try:
        with api_errors():
            found = await json_body(
                await kube.core.read_namespaced_config_map(name, namespace, _preload_content=False)
            )
    except NotFound:
        return None
    return {str(k): str(v) for k, v in (found.get("data") or {}).items()}


@dataclass(frozen=True)
class StoredScope:
    """One scope's store as listed: what the garbage collection of stores decides on."""

    namespace: str
    name: str
    #: Its `tooladapter.dev/dataflow-scope` label: run, attempt or caller.
    kind: str
    data: dict[str, str]
    #: The version listed: a store written since is not deleted.
    resource_version: str


async def list_stores(kube: Kube, *, label: str) -> list[StoredScope]:
    """Every scope store of the cluster (label-selected: `label` is the scopes' label key)."""
    with api_errors():
        found = await json_body(
            await kube.core.list_config_map_for_all_namespaces(
                label_selector=f"{LABEL_MANAGED_BY}={MANAGED_BY},{label}",
                _preload_content=False,
            )
        )
    stores = []
    for item in found.get("items") or []:
        meta = item.get("metadata") or {}
        stores.append(
            StoredScope(
                namespace=str(meta.get("namespace") or ""),
                name=str(meta.get("name") or ""),
                kind=str((meta.get("labels") or {}).get(label) or ""),
                data={str(k): str(v) for k, v in (item.get("data") or {}).items()},
                resource_version=str(meta.get("resourceVersion") or ""),
            )
        )
    return stores


async def delete_store(kube: Kube, *, namespace: str, name: str, resource_version: str) -> bool:
    """Delete a scope's store only as it was listed (a label written since keeps it); False
    when it was gone or changed."""
    body = {"preconditions": {"resourceVersion": resource_version}}
    try:
        with api_errors():
            await kube.core.delete_namespaced_config_map(name, namespace, body=body)
    except (NotFound, Conflict):
        return False
    return True
