"""Services the operator needs the address of: the egress proxy's, read once at start-up
(sandboxes have no DNS, so they are given its ClusterIP)."""

from __future__ import annotations

from tooladapter.kube.client import Kube
from tooladapter.kube.errors import api_errors


async def cluster_ip(kube: Kube, namespace: str, name: str) -> str | None:
    """The Service's ClusterIP; None when it has none (headless, or ExternalName).

    Raises NotFound when the Service does not exist."""
    with api_errors():
        service = await kube.core.read_namespaced_service(name, namespace)
    address = service.spec.cluster_ip if service.spec else None
    if not address or address == "None":
        return None
    return str(address)
