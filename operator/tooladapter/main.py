"""kopf registrations: the only place handlers are declared; each delegates to `handlers/`.

Every resource is watched with `on.event` handlers, which carry no kopf progress state
(no annotations, no finalizers, no per-handler PATCH round trips), except the invocations:
two watch events a call, watched by the operator's own lean list-and-watch
(`kube.watching`, started with the workers) rather than kopf's per-object machinery. The
invocation flow persists its own state in status, and deletion never blocks on a stopped
operator.
"""

from __future__ import annotations

from typing import Any

import kopf

from tooladapter import GROUP, VERSION
from tooladapter.enums import Resource
from tooladapter.handlers import lifecycle, routing


# CRDs applied a moment ago answer 429 "storage is (re)initializing" for a few seconds: retry
# the start-up soon rather than after kopf's default minute.
@kopf.on.startup(backoff=2)
async def startup(settings: kopf.OperatorSettings, memo: kopf.Memo, **_: Any) -> None:
    await lifecycle.start(settings, memo)


@kopf.on.cleanup()
async def cleanup(memo: kopf.Memo, **_: Any) -> None:
    await lifecycle.stop(memo)


@kopf.on.event(GROUP, VERSION, Resource.DESCRIPTORS.value)
async def descriptor_event(event: kopf.RawEvent, memo: kopf.Memo, **_: Any) -> None:
    await routing.descriptor_event(memo["runtime"], event)


@kopf.on.event(GROUP, VERSION, Resource.POLICIES.value)
async def policy_event(event: kopf.RawEvent, memo: kopf.Memo, **_: Any) -> None:
    await routing.policy_event(memo["runtime"], event)


@kopf.on.event(GROUP, VERSION, Resource.APPROVALS.value)
async def approval_event(event: kopf.RawEvent, memo: kopf.Memo, **_: Any) -> None:
    routing.approval_event(memo["runtime"], event)


@kopf.on.event("", "v1", "namespaces")
async def namespace_event(event: kopf.RawEvent, memo: kopf.Memo, **_: Any) -> None:
    routing.namespace_event(memo["runtime"], event)


@kopf.on.event(GROUP, VERSION, Resource.MCP_SERVERS.value)
async def mcp_server_event(event: kopf.RawEvent, memo: kopf.Memo, **_: Any) -> None:
    routing.mcp_server_event(memo["runtime"], event)
