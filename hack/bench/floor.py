"""The floor: a CRD of the bench's own and the least a controller of a CR-based call does.

The controller runs as its own process (`python -m bench floor-controller NAMESPACE`).
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from tooladapter.devtools import kubeconfig

from .api import Api, Endpoint, ns_path
from .config import BENCH_GROUP, FLOOR_CRD, FLOOR_PLURAL


def crd() -> dict[str, Any]:
    """BenchFloor: namespaced, with a status subresource, any spec and status."""
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": FLOOR_CRD},
        "spec": {
            "group": BENCH_GROUP,
            "scope": "Namespaced",
            "names": {
                "plural": FLOOR_PLURAL,
                "singular": "benchfloor",
                "kind": "BenchFloor",
            },
            "versions": [
                {
                    "name": "v1alpha1",
                    "served": True,
                    "storage": True,
                    "subresources": {"status": {}},
                    "schema": {
                        "openAPIV3Schema": {
                            "type": "object",
                            "properties": {
                                "spec": {
                                    "type": "object",
                                    "x-kubernetes-preserve-unknown-fields": True,
                                },
                                "status": {
                                    "type": "object",
                                    "x-kubernetes-preserve-unknown-fields": True,
                                },
                            },
                        }
                    },
                }
            ],
        },
    }


def floor_terminal(obj: dict[str, Any]) -> str | None:
    return "Observed" if (obj.get("status") or {}).get("state") == "Observed" else None


async def floor_controller(namespace: str) -> None:
    """Patch status once per BenchFloor: the least a controller of a CR-based call does."""
    api = Api(Endpoint.from_kubeconfig(kubeconfig()), limit=64)
    path = ns_path(BENCH_GROUP, "v1alpha1", namespace, FLOOR_PLURAL)
    seen: set[str] = set()
    tasks: set[asyncio.Future[Any]] = set()

    async def settle(name: str) -> None:
        status, _ = await api.call(
            "PATCH",
            f"{path}/{name}/status",
            {"status": {"state": "Observed", "observedAt": time.time()}},
            content_type="application/merge-patch+json",
        )
        if status != 200:
            seen.discard(name)  # retried on its next event

    def handle(kind: str, obj: dict[str, Any], now: float) -> None:
        name = obj["metadata"]["name"]
        if kind == "DELETED":
            seen.discard(name)
            return
        if name in seen or (obj.get("status") or {}).get("state"):
            return
        seen.add(name)
        task = asyncio.ensure_future(settle(name))
        tasks.add(task)
        task.add_done_callback(tasks.discard)

    print(f"floor controller watching {path}", flush=True)
    await api.watch(path, handle)
