"""Built-in read tools run by the operator itself, always as the caller's permissions allow."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from typing import Any

from tooladapter.enums import FailureClass, Resource
from tooladapter.executors import Call, InOperator, Outcome
from tooladapter.kube.cluster import Cluster

#: Lists the active descriptors of a namespace (served from the operator's index).
DescriptorLister = Callable[[str], list[dict[str, Any]]]


class NativeExecutor(InOperator):
    def __init__(self, cluster: Cluster, list_descriptors: DescriptorLister) -> None:
        self.cluster = cluster
        self.list_descriptors = list_descriptors
        self.tools: dict[str, Callable[[Call], Awaitable[Outcome]]] = {
            "list-tools": self.list_tools,
            "read-configmap": self.read_configmap,
        }

    async def execute(self, call: Call) -> Outcome:
        native = call.descriptor.native if call.descriptor else None
        if native is None or native.name not in self.tools:
            return Outcome.failed(FailureClass.VALIDATION, "descriptor names no known native tool")
        return await self.tools[native.name](call)

    async def list_tools(self, call: Call) -> Outcome:
        """The active, healthy tools of the namespace the caller may invoke."""
        visible = []
        for body in self.list_descriptors(call.namespace):
            spec, status = body.get("spec", {}), body.get("status") or {}
            if not (status.get("active") and status.get("healthy")):
                continue
            verdict = await self.cluster.can(
                user=call.caller,
                namespace=call.namespace,
                verb="invoke",
                resource=Resource.DESCRIPTORS,
                name=spec.get("toolId"),
            )
            if verdict.allowed:
                visible.append(
                    {
                        "toolId": spec.get("toolId"),
                        "version": spec.get("version"),
                        "kind": spec.get("kind"),
                        "sideEffectClass": spec.get("sideEffectClass"),
                        "description": spec.get("description", ""),
                    }
                )
        visible.sort(key=lambda t: (str(t["toolId"]), str(t["version"])))
        payload = {"tools": visible}
        output = json.dumps(payload).encode()
        return Outcome.observed(output, structured=payload, structured_bytes=len(output))

    async def read_configmap(self, call: Call) -> Outcome:
        """A ConfigMap of the caller's namespace, only if the caller may read it."""
        name = str(call.arguments.get("name", ""))
        key = call.arguments.get("key")
        verdict = await self.cluster.can(
            user=call.caller,
            namespace=call.namespace,
            verb="get",
            resource="configmaps",
            name=name,
            group="",
        )
        if not verdict.allowed:
            return Outcome.failed(
                FailureClass.PERMISSION_DENIED,
                f"{call.caller} may not get configmaps/{name} in {call.namespace}",
            )
        data = await self.cluster.read_config_map(call.namespace, name)
        if data is None:
            return Outcome.tool_error(f"configmap {name} not found")
        if key is not None:
            if key not in data:
                return Outcome.tool_error(f"configmap {name} has no key {key}")
            payload: dict[str, Any] = {"name": name, "key": key, "value": data[key]}
        else:
            payload = {"name": name, "data": data}
        output = json.dumps(payload).encode()
        return Outcome.observed(output, structured=payload, structured_bytes=len(output))
