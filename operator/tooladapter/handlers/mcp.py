"""McpServers: lifecycle, discovery with pinned digests, health probes, and MCP tool calls.

One probe loop per server (servers are few; invocations are many): each tick discovers the
server afresh (never a cache), pins every tool by the digest of its whole wire object,
moves the phase (Registered -> Verified -> Active -> Degraded -> Retired), and re-evaluates
the descriptors bound to it, which turn unhealthy on a changed digest (SchemaChanged) or a
Degraded/Retired server. Calls re-list the tools and refuse to send when the pinned digest
no longer matches.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import logging
from typing import Any

from prometheus_client import Counter, Gauge

from .. import mcp_types
from ..enums import FailureClass, McpServerPhase, SideEffectClass
from ..executors import Call, Outcome, unconfirmed
from ..kube import sandbox as ksandbox
from ..kube.client import NotFound
from ..model import (
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
from ..pipeline.classification import mcp_hint_class
from ..pipeline.mcp import (
    check_binding,
    detect_shadowing,
    next_phase,
    server_digest,
    tool_digest,
    validate_structured_output,
)
from ..pipeline.sanitize import redact_text
from ..timeutil import now_iso
from . import descriptors
from .events import object_ref, post
from .runtime import Runtime

logger = logging.getLogger("tooladapter.mcp")
PLURAL = "mcpservers"

SERVER_UP = Gauge(
    "tooladapter_mcp_server_up", "1 when the last probe passed.", ["tenant", "server"]
)
PROBE_FAILURES = Counter(
    "tooladapter_mcp_probe_failures", "Failed MCP probes.", ["tenant", "server"]
)


class McpSupport:
    """`rt.mcp`: what the invocation flow and descriptor reconciliation ask of MCP."""

    def __init__(self, rt: Runtime) -> None:
        self.rt = rt
        self.loops: dict[tuple[str, str], asyncio.Task[None]] = {}
        self.wake: dict[tuple[str, str], asyncio.Event] = {}
        self.background: set[asyncio.Task[None]] = set()

    # ------------------------------------------------------------------ lookups

    def server(self, namespace: str, name: str) -> dict[str, Any] | None:
        return self.rt.catalog.servers.get(namespace, {}).get(name)

    def discovered_tool(self, namespace: str, server: str, tool: str) -> dict[str, Any] | None:
        body = self.server(namespace, server)
        for info in ((body or {}).get("status") or {}).get("tools") or []:
            if info.get("name") == tool:
                return dict(info)
        return None

    def hinted_class(
        self, namespace: str, descriptor: ToolDescriptorSpec
    ) -> SideEffectClass | None:
        """Annotations are untrusted hints: `classify` lets them raise, never lower."""
        if descriptor.mcp is None:
            return None
        info = self.discovered_tool(namespace, descriptor.mcp.server, descriptor.mcp.tool)
        return mcp_hint_class((info or {}).get("annotations"))

    def descriptor_health(self, namespace: str, spec: dict[str, Any]) -> tuple[bool, str, str]:
        binding = spec.get("mcp") or {}
        body = self.server(namespace, str(binding.get("server")))
        if body is None:
            return False, "ServerNotFound", f"McpServer {binding.get('server')} not found"
        status = body.get("status") or {}
        phase = status.get("phase", McpServerPhase.REGISTERED)
        if phase != McpServerPhase.ACTIVE:
            return False, f"Server{phase}", f"McpServer {binding.get('server')} is {phase}"
        discovered = {t["name"]: t["digest"] for t in status.get("tools") or []}
        check = check_binding(
            pinned_digest=str(binding.get("pinnedDigest")),
            discovered=discovered,
            tool=str(binding.get("tool")),
        )
        if not check.bound:
            reason = "SchemaChanged" if check.code == "schema-changed" else "ToolMissing"
            return False, reason, check.reason
        return True, "Bound", f"bound to {binding.get('server')}/{binding.get('tool')}"

    # ------------------------------------------------------------------ calls

    async def headers_for(self, namespace: str, spec: McpServerSpec) -> dict[str, str]:
        """Server credentials from its Secret, sent only to that server."""
        return (await self.credentials_for(namespace, spec))[0]

    async def credentials_for(
        self, namespace: str, spec: McpServerSpec
    ) -> tuple[dict[str, str], list[str]]:
        """The headers carrying the server's credential, and the secret value itself."""
        if spec.credentials is None:
            return {}, []
        ref = spec.credentials.secret_key_ref
        data = await ksandbox.read_secret_keys(self.rt.kube, namespace, ref.name)
        if ref.key not in data:
            raise NotFound(f"secret {ref.name} has no key {ref.key}")
        value = ksandbox.decode_b64(data[ref.key])
        header = {spec.credentials.header: f"{spec.credentials.scheme} {value}".strip()}
        return header, [value]

    async def execute(self, call: Call) -> Outcome:
        descriptor = call.descriptor
        if descriptor is None or descriptor.mcp is None:
            return Outcome.failed(FailureClass.VALIDATION, "descriptor has no mcp binding")
        binding = descriptor.mcp
        body = self.server(call.namespace, binding.server)
        if body is None:
            return Outcome.failed(FailureClass.TRANSIENT, f"McpServer {binding.server} not found")
        spec = McpServerSpec.model_validate(body["spec"])
        try:
            headers, secrets = await self.credentials_for(call.namespace, spec)
        except NotFound as exc:
            return Outcome.failed(FailureClass.CREDENTIALS, f"server credentials: {exc}")
        outcome = await self._call(call, spec.url, headers)
        return _redacted(outcome, secrets) if secrets else outcome

    async def _call(self, call: Call, url: str, headers: dict[str, str]) -> Outcome:
        binding = call.descriptor.mcp if call.descriptor is not None else None
        assert binding is not None
        try:
            from .. import mcp_client  # the SDK loads on the first exchange

            result = await mcp_client.call_tool(
                url,
                headers=headers,
                tool=binding.tool,
                arguments=call.arguments,
                timeout=call.timeout_seconds,
                idempotency_key=call.idempotency_key,
                expected_digest=binding.pinned_digest,
            )
        except (
            mcp_types.McpUnavailable,
            mcp_types.McpToolNotListed,
            mcp_types.McpToolChanged,
        ) as exc:
            return Outcome.failed(FailureClass.TRANSIENT, str(exc))
        except mcp_types.McpError as exc:
            if exc.effect_possible:
                return unconfirmed(call, f"MCP call broke: {exc}")
            return Outcome.failed(FailureClass.TOOL_ERROR, str(exc))
        output = result.content_text.encode()
        if result.is_error:
            return Outcome.failed(
                FailureClass.TOOL_ERROR, "the MCP tool reported an error", output=output
            )
        problems = validate_structured_output(
            (result.tool or {}).get("outputSchema"), result.structured_content
        )
        if problems:
            return Outcome.failed(
                FailureClass.OUTPUT_INVALID,
                "structuredContent violates the outputSchema: " + "; ".join(problems[:10]),
                output=output,
            )
        return Outcome.observed(output, structured=result.structured_content)

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
            await self.write(body, old, status)
            return 3600
        discovery: mcp_types.Discovery | None = None
        message = ""
        try:
            headers = await self.headers_for(namespace, spec)
            from .. import mcp_client  # the SDK loads on the first exchange

            discovery = await mcp_client.discover(
                spec.url, headers=headers, timeout=spec.probe.timeout_seconds
            )
        except (mcp_types.McpError, NotFound, OSError) as exc:
            message = str(exc)[:512]
        ok = discovery is not None
        status.consecutive_failures = 0 if ok else old.consecutive_failures + 1
        status.last_probe = McpProbeResult(
            time=now_iso(), ok=ok, message="discovery ok" if ok else message
        )
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
        status.conditions = [
            Condition(
                type="Ready",
                status="True" if status.phase == McpServerPhase.ACTIVE else "False",
                reason=str(status.phase),
                message=status.last_probe.message,
                observed_generation=meta.get("generation"),
            )
        ]
        await self.write(body, old, status)
        return spec.probe.interval_seconds

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
            for other, b in self.rt.catalog.servers.get(namespace, {}).items()
            if other != name
        }
        status.shadowing = detect_shadowing(name, list(discovery.tools), others)

    def bindings(self, namespace: str, name: str, status: McpServerStatus) -> list[McpToolBinding]:
        discovered = {t.name: t.digest for t in status.tools}
        out = []
        for body in self.rt.catalog.list_descriptors(namespace):
            spec = body.get("spec") or {}
            binding = spec.get("mcp") or {}
            if spec.get("kind") != "mcp" or binding.get("server") != name:
                continue
            check = check_binding(
                pinned_digest=str(binding.get("pinnedDigest")),
                discovered=discovered,
                tool=str(binding.get("tool")),
            )
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
        obj = await self.rt.kube.patch_status(PLURAL, meta["namespace"], meta["name"], wire)
        self.rt.catalog.update(self.rt.catalog.servers, "MODIFIED", obj)
        if new.phase != old.phase:
            post(
                object_ref("McpServer", meta),
                reason=f"McpServer{new.phase}",
                warning=new.phase == McpServerPhase.DEGRADED,
                message=f"{old.phase} -> {new.phase}: "
                f"{new.last_probe.message if new.last_probe else ''}",
            )
        if new.shadowing and new.shadowing != old.shadowing:
            post(
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


def _redacted(outcome: Outcome, secrets: list[str]) -> Outcome:
    """The server's own credential never reaches a result or message, even if echoed."""
    structured = outcome.structured
    if structured is not None:
        structured = json.loads(redact_text(json.dumps(structured), secrets))
    return dataclasses.replace(
        outcome,
        output=redact_text(outcome.output.decode(errors="replace"), secrets).encode(),
        structured=structured,
        message=redact_text(outcome.message, secrets),
    )


def _spec_changed(body: dict[str, Any]) -> bool:
    status = body.get("status") or {}
    return bool(status.get("observedGeneration") != body["metadata"].get("generation"))


def attach(rt: Runtime) -> McpSupport:
    support = McpSupport(rt)
    rt.mcp = support
    return support


__all__ = ["McpSupport", "attach"]
