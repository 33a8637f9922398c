"""Operator settings, read once from the environment at start-up: one frozen dataclass per
concern, composed into `Settings` (as kopf's `OperatorSettings`): `settings.gateway.port`,
`settings.artifacts.s3_bucket`.

Every knob has a production-sensible default; docs/reference/settings.md lists each
variable (generated from these modules) and docs/operations/configuration.md explains the
ones that matter most. A value that cannot be parsed stops the operator, naming the variable.
The reloadable ones (`setting(..., reloadable=True)`) are also read from the settings
ConfigMap and applied live (`settings.reload`, `settings.live`).
"""

from __future__ import annotations

import fnmatch
from dataclasses import dataclass, field
from pathlib import Path

from tooladapter.enums import EventLevel
from tooladapter.settings import environ as env
from tooladapter.settings.admission import AdmissionSettings
from tooladapter.settings.artifacts import ArtifactSettings
from tooladapter.settings.capacity import CapacitySettings
from tooladapter.settings.egress import EgressSettings
from tooladapter.settings.event_sink import EventSinkSettings
from tooladapter.settings.gateway import GatewaySettings
from tooladapter.settings.leadership import LeadershipSettings
from tooladapter.settings.limits import LimitSettings
from tooladapter.settings.page import PageSettings
from tooladapter.settings.receipts import ReceiptSettings
from tooladapter.settings.retention import RetentionSettings
from tooladapter.settings.sandbox import SandboxSettings
from tooladapter.settings.shell import ShellSettings
from tooladapter.settings.variables import FromEnv, setting
from tooladapter.settings.warm import WarmSettings

__all__ = [
    "AdmissionSettings",
    "ArtifactSettings",
    "CapacitySettings",
    "EgressSettings",
    "EventSinkSettings",
    "GatewaySettings",
    "LeadershipSettings",
    "LimitSettings",
    "PageSettings",
    "ReceiptSettings",
    "RetentionSettings",
    "SandboxSettings",
    "Settings",
    "ShellSettings",
    "WarmSettings",
]


@dataclass(frozen=True)
class Settings(FromEnv):
    """The operator's settings: a few process-wide knobs, and one group per concern."""

    #: Namespace globs this operator serves (empty: all); kopf watches only these.
    namespaces: tuple[str, ...] = setting("TOOLADAPTER_NAMESPACES", env.listed, ())
    #: Port of the Prometheus /metrics endpoint; 0 disables it.
    metrics_port: int = setting("TOOLADAPTER_METRICS_PORT", env.integer, 9464)
    #: Port of `/healthz` and `/readyz`, served from start-up in every role (a standby
    #: too, unlike kopf's own liveness endpoint); 0 disables it (host processes).
    health_port: int = setting("TOOLADAPTER_HEALTH_PORT", env.port, 0)
    #: Events posted per call: `actionable` (denials, approvals, uncertain effects, failures:
    #: someone acts on them) or `all` (also a ToolInvoked event per finished call; the
    #: per-call record is the receipt, `status.receiptRef`, either way).
    events: EventLevel = setting("TOOLADAPTER_EVENTS", env.choice, EventLevel.ACTIONABLE)
    #: Write status at every state change, not only before waits, effects and the end.
    write_every_state: bool = setting("TOOLADAPTER_WRITE_EVERY_STATE", env.boolean, False)
    #: Seconds an allowed SubjectAccessReview answer is reused (0: review every call).
    authz_cache_seconds: int = setting("TOOLADAPTER_AUTHZ_CACHE_SECONDS", env.integer, 2)
    #: Period of the uncertain-effect reconciler and the sandbox reaper.
    reconcile_interval_seconds: int = setting(
        "TOOLADAPTER_RECONCILE_INTERVAL_SECONDS", env.integer, 30
    )
    #: Seconds a caller's data-flow labels count for its calls that name no run or
    #: attempt, and for every call under a ToolPolicy's `dataFlow.scope: caller`.
    dataflow_window_seconds: int = setting(
        "TOOLADAPTER_DATAFLOW_WINDOW_SECONDS", env.at_least(1), 3600
    )
    #: The ConfigMap (`namespace/name`) whose keys, named as these variables, set the
    #: reloadable settings live (the chart sets the release's); a key that does not parse
    #: keeps the value in force, and the ConfigMap's Events say so.
    settings_config_map: str = setting(
        "TOOLADAPTER_SETTINGS_CONFIGMAP", env.namespaced, "tooladapter-system/tooladapter-settings"
    )
    #: Hosts (names, addresses or CIDRs) http tools may never reach, even when a
    #: descriptor allow-lists them: cloud metadata services hand out node credentials.
    blocked_http_hosts: tuple[str, ...] = setting(
        "TOOLADAPTER_BLOCKED_HTTP_HOSTS",
        env.listed,
        ("169.254.169.254", "metadata.google.internal"),
    )
    #: A PEM bundle of private CAs the operator trusts, besides the system's (and
    #: TOOLADAPTER_EGRESS_CA_FILE), for its own outbound TLS: the https APIs http tools
    #: call, the MCP servers it probes and calls, and the OAuth token endpoints credentials
    #: are minted at. Read once at start:
    #: a file that cannot be read, or holds no certificate, stops the operator.
    ca_bundle: Path | None = setting("TOOLADAPTER_CA_BUNDLE", env.path, None)

    #: The artifact store: receipts and results.
    artifacts: ArtifactSettings = field(default_factory=ArtifactSettings)
    #: Per-call defaults and bounds.
    limits: LimitSettings = field(default_factory=LimitSettings)
    #: Calls in flight and the quota wait.
    capacity: CapacitySettings = field(default_factory=CapacitySettings)
    #: Retention of ended calls.
    retention: RetentionSettings = field(default_factory=RetentionSettings)
    #: Leader election.
    leadership: LeadershipSettings = field(default_factory=LeadershipSettings)
    #: Sandbox pods.
    sandbox: SandboxSettings = field(default_factory=SandboxSettings)
    #: The default shell allow and block lists.
    shell: ShellSettings = field(default_factory=ShellSettings)
    #: Workspaces and warm pools.
    warm: WarmSettings = field(default_factory=WarmSettings)
    #: Egress by host name through the egress proxy.
    egress: EgressSettings = field(default_factory=EgressSettings)
    #: The HTTP API and MCP endpoint.
    gateway: GatewaySettings = field(default_factory=GatewaySettings)
    #: The reviewers' page.
    page: PageSettings = field(default_factory=PageSettings)
    #: Receipt signing and chain heads.
    receipts: ReceiptSettings = field(default_factory=ReceiptSettings)
    #: The integration events' sink.
    event_sink: EventSinkSettings = field(default_factory=EventSinkSettings)
    #: The admission policies verified before any call passes validation.
    admission: AdmissionSettings = field(default_factory=AdmissionSettings)

    def serves(self, namespace: str) -> bool:
        return not self.namespaces or any(
            fnmatch.fnmatchcase(namespace, p) for p in self.namespaces
        )
