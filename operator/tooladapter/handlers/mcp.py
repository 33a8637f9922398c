"""McpServers: lifecycle, discovery with pinned digests, health probes, and MCP tool calls.

One probe loop per server (servers are few; invocations are many): each tick discovers the
server afresh (never a cache), pins every tool by the digest of its whole wire object,
moves the phase (Registered -> Verified -> Active -> Degraded -> Retired), and re-evaluates
the descriptors bound to it, which turn unhealthy on a changed digest (SchemaChanged) or a
Degraded/Retired server. Calls re-list the tools and refuse to send when the pinned digest
no longer matches.

The server's credential (its Secret) is read and sent only once a platform admin activated
the server, and only to the url a probe without it reached (`status.verifiedUrl`;
`pipeline.mcp.probe_plan`): a probe of a server nobody activated never carries it. Every
connection goes only to public addresses or the server's `spec.allowedCidrs`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Any

from prometheus_client import Counter, Gauge
from pydantic import ValidationError

from tooladapter.enums import McpServerPhase, Resource, SideEffectClass
from tooladapter.events import object_ref
from tooladapter.executors.mcp import address_rule, credentials_for
from tooladapter.handlers import descriptors
from tooladapter.kube.client import NotFound
from tooladapter.mcp.core import types as mcp_types
from tooladapter.mcp.core.rules import (
    HELD_BACK,
    REACHABLE,
    BindingCheck,
    check_binding,
    check_closed_schema,
    detect_shadowing,
    next_phase,
    probe_plan,
    reachable_without_credentials,
    server_digest,
    server_reason_for_descriptor,
    standing,
    tool_digest,
    tool_open_objects,
)
from tooladapter.model import (
    Condition,
    McpProbeResult,
    McpPromptInfo,
    McpResourceInfo,
    McpServerSpec,
    McpServerStatus,
    McpToolBinding,
    McpToolInfo,
    ToolDescriptorSpec,
)
from tooladapter.pipeline.dataflow import server_label_problems
from tooladapter.pipeline.validation.credentials import check_server_credentials
from tooladapter.runtime import Runtime
from tooladapter.timeutil import now_iso

logger = logging.getLogger("tooladapter.mcp")

SERVER_UP = Gauge(
    "tooladapter_mcp_server_up", "1 when the last probe passed.", ["tenant", "server"]
)
PROBE_FAILURES = Counter(
    "tooladapter_mcp_probe_failures", "Failed MCP probes.", ["tenant", "server"]
)


class McpServers:
    """`rt.mcp`: one probe loop per McpServer, and the health of descriptors bound to it."""

    def __init__(self, rt: Runtime) -> None:
        self.rt = rt
        self.loops: dict[tuple[str, str], asyncio.Task[None]] = {}
        self.wake: dict[tuple[str, str], asyncio.Event] = {}
        self.background: set[asyncio.Task[None]] = set()

    # ------------------------------------------------------------------ lookups

    def server(self, namespace: str, name: str) -> dict[str, Any] | None:
        return self.rt.catalog.server(namespace, name)

    def descriptor_health(self, namespace: str, spec: dict[str, Any]) -> tuple[bool, str, str]:
        binding = spec.get("mcp") or {}
        body = self.server(namespace, str(binding.get("server")))
        if body is None:
            return False, "ServerNotFound", f"McpServer {binding.get('server')} not found"
        status = body.get("status") or {}
        phase = status.get("phase", McpServerPhase.REGISTERED)
        if phase != McpServerPhase.ACTIVE:
            said = server_reason_for_descriptor(status)
            why = f": {said}" if said else ""
            return False, f"Server{phase}", f"McpServer {binding.get('server')} is {phase}{why}"
        tools = [McpToolInfo.model_validate(t) for t in status.get("tools") or []]
        check = descriptor_binding(spec, tools)
        if not check.bound:
            return False, _BINDING_REASONS[check.code], check.reason
        return True, "Bound", f"bound to {binding.get('server')}/{binding.get('tool')}"

    # ------------------------------------------------------------------ servers

    def on_event(self, event_type: str | None, body: dict[str, Any]) -> None:
        meta = body["metadata"]
        key = (meta["namespace"], meta["name"])
        if event_type == "DELETED":
            task = self.loops.pop(key, None)
            if task is not None:
                task.cancel()
            refresh = asyncio.create_task(self.refresh_descriptors(meta["namespace"], meta["name"]))
            self.background.add(refresh)
            refresh.add_done_callback(self.background.discard)
            return
        self.wake.setdefault(key, asyncio.Event())
        if key not in self.loops or self.loops[key].done():
            self.loops[key] = asyncio.create_task(self.probe_loop(key), name=f"mcp-{key}")
        elif _spec_changed(body):
            self.wake[key].set()

    def poke(self, namespace: str, name: str) -> None:
        """Re-reconcile a server now (a bound descriptor changed)."""
        event = self.wake.get((namespace, name))
        if event is not None:
            event.set()

    async def probe_loop(self, key: tuple[str, str]) -> None:
        namespace, name = key
        while True:
            body = self.server(namespace, name)
            if body is None:
                return
            interval = 30
            # Cleared before reconciling, so a change that arrives meanwhile (activation,
            # a new binding) is not lost: the loop goes round again at once.
            wake = self.wake[key]
            wake.clear()
            try:
                interval = await self.reconcile(body)
            except asyncio.CancelledError:
                raise
            except Exception:
                logger.exception("reconciling McpServer %s/%s failed", namespace, name)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(wake.wait(), timeout=interval)

    async def reconcile(self, body: dict[str, Any]) -> int:
        """Probe and discover once; write status; return seconds until the next probe."""
        meta = body["metadata"]
        namespace, name = meta["namespace"], meta["name"]
        spec = McpServerSpec.model_validate(body["spec"])
        old = McpServerStatus.model_validate(body.get("status") or {})
        status = old.model_copy(deep=True)
        status.observed_generation = meta.get("generation")
        if spec.retired:
            status.phase = McpServerPhase.RETIRED
            status.message = "retired (spec.retired): no probes, no calls"
            await self.write(body, old, status)
            return 3600
        discovery, ok, message, refused = await self.probe(namespace, spec, status)
        status.consecutive_failures = 0 if ok else old.consecutive_failures + 1
        status.last_probe = McpProbeResult(time=now_iso(), ok=ok, message=message)
        SERVER_UP.labels(namespace, name).set(1 if ok else 0)
        if not ok:
            PROBE_FAILURES.labels(namespace, name).inc()
        if discovery is not None:
            self.apply_discovery(status, discovery, namespace, name)
        status.phase = next_phase(
            old.phase,
            activated=spec.activated,
            retired=spec.retired,
            probe_ok=ok,
            consecutive_failures=status.consecutive_failures,
            failure_threshold=spec.probe.failure_threshold,
            discovered=bool(status.tools) or ok,
        )
        status.bindings = self.bindings(namespace, name, status)
        why = standing(
            status.phase,
            activated=spec.activated,
            probe_ok=ok,
            probe_message=message,
            address_refused=refused,
            tools=len(status.tools),
        )
        # The CRD cannot afford to compare each entry with the url's host; a credential that
        # names another host is never sent (`credentials_for`), and the status says so.
        problems = check_server_credentials(spec)
        # An annotation adding data-flow labels that holds a value that is no label.
        problems += server_label_problems(meta.get("annotations"))
        status.message = "; ".join([why.message, *problems])[:1024]
        status.conditions = [
            Condition(
                type="Ready",
                status="True" if status.phase == McpServerPhase.ACTIVE else "False",
                reason=str(status.phase),
                message=status.message,
                observed_generation=meta.get("generation"),
            ),
            Condition(
                type=REACHABLE,
                status="True" if why.reachable else "False",
                reason=why.reason if not why.reachable else "Reached",
                message=status.message,
                observed_generation=meta.get("generation"),
            ),
        ]
        await self.write(body, old, status)
        return spec.probe.interval_seconds

    async def probe(
        self, namespace: str, spec: McpServerSpec, status: McpServerStatus
    ) -> tuple[mcp_types.Discovery | None, bool, str, bool]:
        """Verify the url without credentials, then (activated, verified) discover with them.

        Returns the discovery (if any), whether the server passed, the probe's message, and
        whether the address rule refused every address of the url (nothing was sent); sets
        `status.verified_url` when the url was reached."""
        from tooladapter.mcp import client as mcp_client  # the SDK loads on the first exchange

        rule = address_rule(spec, self.rt.settings.blocked_http_hosts)
        has_credentials = bool(spec.credentials)
        plan = probe_plan(
            url=spec.url,
            verified_url=status.verified_url,
            activated=spec.activated,
            has_credentials=has_credentials,
        )
        timeout = spec.probe.timeout_seconds
        discovery: mcp_types.Discovery | None = None
        reachable, message, refused = False, "", False
        if plan.verify:
            try:
                discovery = await mcp_client.discover(
                    spec.url, timeout=timeout, addresses=rule, tls=self.rt.tls
                )
                reachable, message = True, "discovery ok"
            except mcp_types.McpAddressRefused as exc:
                message, refused = str(exc)[:512], True
            except mcp_types.McpUnavailable as exc:
                message = str(exc)[:512]
                if reachable_without_credentials(exc.http_status, has_credentials=has_credentials):
                    reachable = True
                    message = (
                        f"reachable: {spec.url} answered HTTP 401 without credentials; its "
                        "credentials are sent once a platform admin activates it"
                    )
            except (mcp_types.McpError, OSError) as exc:
                message = str(exc)[:512]
            if reachable:
                status.verified_url = spec.url
        if not plan.with_credentials:
            return discovery, reachable, message, refused
        if status.verified_url != spec.url:
            return None, False, message, refused
        try:
            headers, _ = await credentials_for(self.rt.cluster, namespace, spec)
            discovery = await mcp_client.discover(
                spec.url, headers=headers, timeout=timeout, addresses=rule, tls=self.rt.tls
            )
        except (mcp_types.McpError, NotFound, OSError) as exc:
            refused = isinstance(exc, mcp_types.McpAddressRefused)
            return None, False, str(exc)[:512], refused
        return discovery, True, "discovery ok", False

    def apply_discovery(
        self, status: McpServerStatus, discovery: mcp_types.Discovery, namespace: str, name: str
    ) -> None:
        status.protocol_version = discovery.protocol_version
        status.server_name = discovery.server_name
        status.server_version = discovery.server_version
        status.server_digest = server_digest(
            instructions=discovery.instructions,
            server_name=discovery.server_name,
            server_version=discovery.server_version,
        )
        status.tools = [
            McpToolInfo(
                name=str(t.get("name")),
                title=t.get("title"),
                description=str(t.get("description") or "")[:4096],
                digest=tool_digest(t),
                annotations=t.get("annotations"),
                open_objects=tool_open_objects(t),
            )
            for t in discovery.tools
        ]
        status.resources = [
            McpResourceInfo(
                uri=str(r.get("uri")),
                name=str(r.get("name") or ""),
                description=str(r.get("description") or ""),
            )
            for r in discovery.resources
        ]
        status.prompts = [
            McpPromptInfo(name=str(p.get("name")), description=str(p.get("description") or ""))
            for p in discovery.prompts
        ]
        others = {
            other: [t.get("name", "") for t in (b.get("status") or {}).get("tools") or []]
            for other, b in (
                (e.name, e.body) for e in self.rt.catalog.servers.in_namespace(namespace)
            )
            if other != name
        }
        status.shadowing = detect_shadowing(name, list(discovery.tools), others)

    def bindings(self, namespace: str, name: str, status: McpServerStatus) -> list[McpToolBinding]:
        out = []
        for body in self.rt.catalog.list_descriptors(namespace):
            spec = body.get("spec") or {}
            binding = spec.get("mcp") or {}
            if spec.get("kind") != "mcp" or binding.get("server") != name:
                continue
            check = descriptor_binding(spec, status.tools)
            out.append(
                McpToolBinding(
                    descriptor=body["metadata"]["name"],
                    tool=str(binding.get("tool")),
                    bound=check.bound,
                    reason=check.reason,
                )
            )
        return out

    async def write(self, body: dict[str, Any], old: McpServerStatus, new: McpServerStatus) -> None:
        meta = body["metadata"]
        wire = new.wire()
        if wire == old.wire():
            return
        obj = await self.rt.cluster.patch_status(
            Resource.MCP_SERVERS, meta["namespace"], meta["name"], wire
        )
        self.rt.catalog.update(Resource.MCP_SERVERS, "MODIFIED", obj)
        if new.phase != old.phase:
            self.rt.events.post(
                object_ref("McpServer", meta),
                reason=f"McpServer{new.phase}",
                warning=new.phase == McpServerPhase.DEGRADED,
                message=f"{old.phase} -> {new.phase}: "
                f"{new.last_probe.message if new.last_probe else ''}",
            )
        held = _reachable(new)
        if (
            held is not None
            and held.reason in HELD_BACK
            and ((_reachable(old) or held).reason != held.reason or new.message != old.message)
        ):
            # Once per new refusal (not per probe): the reason a person must act on.
            self.rt.events.post(
                object_ref("McpServer", meta),
                reason=f"McpServer{held.reason}",
                warning=True,
                message=new.message or "",
            )
        if new.shadowing and new.shadowing != old.shadowing:
            self.rt.events.post(
                object_ref("McpServer", meta),
                reason="McpToolShadowing",
                warning=True,
                message="; ".join(new.shadowing),
            )
        await self.refresh_descriptors(meta["namespace"], meta["name"])

    async def refresh_descriptors(self, namespace: str, server: str) -> None:
        for body in self.rt.catalog.list_descriptors(namespace):
            spec = body.get("spec") or {}
            if spec.get("kind") == "mcp" and (spec.get("mcp") or {}).get("server") == server:
                await descriptors.reconcile_descriptor(self.rt, "MODIFIED", body)

    async def close(self) -> None:
        for task in self.loops.values():
            task.cancel()
        await asyncio.gather(*self.loops.values(), return_exceptions=True)


def _reachable(status: McpServerStatus) -> Condition | None:
    return next((c for c in status.conditions if c.type == REACHABLE), None)


def _spec_changed(body: dict[str, Any]) -> bool:
    status = body.get("status") or {}
    return bool(status.get("observedGeneration") != body["metadata"].get("generation"))


__all__ = ["McpServers"]


#: The Ready reason of a descriptor whose binding does not hold, by `BindingCheck.code`.
_BINDING_REASONS = {
    "missing": "ToolMissing",
    "schema-changed": "SchemaChanged",
    "open-schema": "OpenSchema",
}


def descriptor_binding(spec: dict[str, Any], tools: list[McpToolInfo]) -> BindingCheck:
    """Whether an mcp descriptor (`spec`, wire form) binds to the discovered `tools`: the
    pinned digest is listed, and a class that can have effects finds every object of the
    tool's inputSchema closed (`check_closed_schema`)."""
    binding = spec.get("mcp") or {}
    tool = str(binding.get("tool"))
    check = check_binding(
        pinned_digest=str(binding.get("pinnedDigest")),
        discovered={t.name: t.digest for t in tools},
        tool=tool,
    )
    if not check.bound:
        return check
    info = next(t for t in tools if t.name == tool)
    try:
        declared = ToolDescriptorSpec.model_validate(spec).declared_class
    except ValidationError:
        # An invalid descriptor is inactive anyway; judged as the highest class meanwhile.
        declared = SideEffectClass.PRODUCTION
    closed = check_closed_schema(
        tool=tool, declared=declared, annotations=info.annotations, open_paths=info.open_objects
    )
    return closed if not closed.bound else check
