"""Built-in read tools run by the operator itself, always as the caller's permissions allow."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from typing import Any

from kubernetes_asyncio.client.exceptions import ApiException

from ..enums import FailureClass
from ..kube import auth
from ..kube.client import Kube, json_body
from . import Call, Outcome

#: Lists the active descriptors of a namespace (served from the operator's index).
DescriptorLister = Callable[[str], list[dict[str, Any]]]


class NativeExecutor:
    def __init__(
        self, kube: Kube, list_descriptors: DescriptorLister, access: auth.AllowCache | None = None
    ) -> None:
        self.kube = kube
        self.access = access
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
            verdict = await auth.can(
                self.kube,
                user=call.caller,
                namespace=call.namespace,
                verb="invoke",
                resource="tooldescriptors",
                name=spec.get("toolId"),
                cache=self.access,
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
        return Outcome.observed(json.dumps(payload).encode(), structured=payload)

    async def read_configmap(self, call: Call) -> Outcome:
        """A ConfigMap of the caller's namespace, only if the caller may read it."""
        name = str(call.arguments.get("name", ""))
        key = call.arguments.get("key")
        verdict = await auth.can(
            self.kube,
            user=call.caller,
            namespace=call.namespace,
            verb="get",
            resource="configmaps",
            name=name,
            group="",
            cache=self.access,
        )
        if not verdict.allowed:
            return Outcome.failed(
                FailureClass.PERMISSION_DENIED,
                f"{call.caller} may not get configmaps/{name} in {call.namespace}",
            )
        try:
            # Only the data is needed: the JSON answer, not the client's model objects.
            cm = await json_body(
                await self.kube.core.read_namespaced_config_map(
                    name, call.namespace, _preload_content=False
                )
            )
        except ApiException as exc:
            if exc.status == 404:
                return Outcome.failed(FailureClass.TOOL_ERROR, f"configmap {name} not found")
            raise
        data = dict(cm.get("data") or {})
        if key is not None:
            if key not in data:
                return Outcome.failed(FailureClass.TOOL_ERROR, f"configmap {name} has no key {key}")
            payload: dict[str, Any] = {"name": name, "key": key, "value": data[key]}
        else:
            payload = {"name": name, "data": data}
        return Outcome.observed(json.dumps(payload).encode(), structured=payload)
