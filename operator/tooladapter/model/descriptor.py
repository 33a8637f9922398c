"""ToolDescriptor: a published tool version, what it takes, how it runs, its side-effect class.

The kind-specific blocks (shell, http, mcp, native; the sandbox is in `model.sandbox`) and the
CEL rules across them are here, as is `effective_timeout`, the one reader of a descriptor's
deadline.
"""

from __future__ import annotations

import ipaddress
from typing import Annotated, Any, Literal

from pydantic import ConfigDict, Field, model_validator
from pydantic.config import JsonDict

from tooladapter.enums import (
    RISK_TO_CLASS,
    InFlightPolicy,
    RiskClass,
    SideEffectClass,
    ToolKind,
    WorkspaceMode,
)
from tooladapter.model import common
from tooladapter.model.base import FREE_FORM, Model, Resource
from tooladapter.model.credentials import MAX_CREDENTIALS, Credential, credentials_field_schema
from tooladapter.model.dataflow import DescriptorDataFlow
from tooladapter.model.sandbox import SandboxSpec

DEFAULT_TIMEOUT_SECONDS = 300
DEFAULT_MAX_RESULT_BYTES = 1_048_576


class RetryPolicy(Model):
    """Tool-level retries apply only to calls that were never sent: no connection, a request
    cut short before its last byte, the sandbox Job refused by the API server. Never for an
    Uncertain call, never once a request's last byte was written (a reset, a timeout or a
    502/504 after that is not retried, whatever the class)."""

    max_attempts: int = Field(default=1, ge=1, le=10)
    """Attempts in all (1: no retry)."""
    backoff_seconds: int = Field(default=0, ge=0, le=3600)
    """Wait before a retry, times the attempt number."""


class RateLimits(Model):
    """Per tool and tenant (and per caller where a ToolPolicy says so), counted when a call
    starts executing; a call over a limit is Denied `rate-limited` with retryAfterSeconds."""

    per_minute: int | None = Field(default=None, ge=1)
    """Calls that may start executing per minute, per tool and namespace."""
    concurrency: int | None = Field(default=None, ge=1)
    """Calls that may execute at once, per tool and namespace."""


class AuditRequirements(Model):
    """What the call's receipt records."""

    arguments_hash: bool = True
    """Record the sha256 of the arguments."""
    output_hash: bool = True
    """Record the hashes of the output."""
    command_line: bool = True
    """Record the (redacted) command line of shell and container tools."""


class ShellSpec(Model):
    """The shell tool's allow and block lists."""

    allow: list[str] | None = Field(
        default=None,
        description="Allowed argv prefixes: commands that run as the declared class. Unset: "
        "the reference's default list (dotnet restore/build/test, git diff/status, npm "
        "test); set (even empty), it replaces that list. A command on no entry needs an "
        "approval (or is denied by policy).",
    )
    block: list[str] = Field(
        default_factory=list,
        description="Blocked command patterns, added to the reference's block list.",
    )
    use_shell: bool = Field(
        default=False, description="Run through /bin/sh -c (the command is still checked)."
    )


class HttpSpec(Model):
    """The HTTP request an http tool sends, with {name} placeholders filled from the arguments."""

    method: Literal["GET", "POST", "PUT", "PATCH", "DELETE", "HEAD"] = "GET"
    """The HTTP method."""
    url: str = Field(min_length=1, description="May hold {name} placeholders from arguments.")
    headers: dict[str, str] = Field(default_factory=dict)
    """Request headers; values may hold {name} placeholders (never Content-Type)."""
    body: str | None = None
    """The request body template; placeholders are encoded by the Content-Type header (JSON-
    escaped, form-encoded, or plain)."""
    allowed_hosts: list[Annotated[str, Field(max_length=260)]] = Field(
        default_factory=list,
        max_length=64,
        description="Hosts (host or host:port) the URL may name. An IP literal here also "
        "allows connecting to that address when it is loopback, private or link-local; a "
        "host name never does.",
    )


class McpBinding(Model):
    """The MCP server tool this descriptor calls, pinned by digest."""

    server: str = Field(min_length=1, description="McpServer name in the same namespace.")
    tool: str = Field(min_length=1)
    """The tool's name as the server lists it."""
    pinned_digest: str = Field(pattern=common.SHA256_REF_PATTERN)
    """sha256 of the tool's wire object as reviewed; the descriptor is unhealthy while the server
    lists another."""


class NativeSpec(Model):
    """A tool built into the operator."""

    name: Literal["list-tools", "read-configmap"]
    """list-tools (the namespace's callable tools) or read-configmap."""


def _credential_rules() -> list[JsonDict]:
    """CEL rules across `credentials` and the tool's kind, sandbox and egress: refused at
    apply, naming the field (`pipeline.validation.credentials` says the same, with the
    entry's index, for objects stored before)."""
    has_files = "has(self.credentials) && self.credentials.exists(c, has(c.inject.file))"
    declared = "has(self.credentials) && size(self.credentials) > 0"
    attempt = (
        "has(self.sandbox) && has(self.sandbox.workspace) && self.sandbox.workspace == 'attempt'"
    )
    http_allow = "(has(self.http) && has(self.http.allowedHosts) ? self.http.allowedHosts : [])"
    sandbox_allow = (
        "(has(self.sandbox) && has(self.sandbox.egress) && has(self.sandbox.egress.allow)"
        " ? self.sandbox.egress.allow : [])"
    )
    explicit = (
        "(self.kind == 'http' ? (has(self.http) && has(self.http.allowedHosts) && "
        "size(self.http.allowedHosts) > 0) : (has(self.sandbox) && has(self.sandbox.egress) "
        "&& has(self.sandbox.egress.allow)))"
    )
    allow = f"(self.kind == 'http' ? {http_allow} : {sandbox_allow})"
    # `endsWith` compares the port too: `*.example.com` allows `api.example.com`, not
    # `api.example.com:8443`, as the proxy and the http executor judge it.
    covered = f"{allow}.exists(e, e == h || (e.startsWith('*.') && h.endsWith(e.substring(1))))"
    return [
        {
            "rule": f"!(self.kind in ['native', 'mcp']) || !({declared})",
            "message": "spec.credentials: native tools take none, and an mcp tool's "
            "credentials are declared on its McpServer",
            "fieldPath": ".credentials",
            "reason": "FieldValueForbidden",
        },
        {
            "rule": f"self.kind != 'shell' || !({has_files})",
            "message": "spec.credentials[].inject.file is not allowed when kind is shell: the "
            "agent chooses a shell tool's command, so it must never run beside a credential "
            "file; inject it into HTTP requests (hosts), or use a container tool",
            "fieldPath": ".credentials",
            "reason": "FieldValueForbidden",
        },
        {
            "rule": f"!({attempt}) || !({has_files})",
            "message": "spec.credentials[].inject.file is not allowed with sandbox.workspace "
            "attempt: a workspace outlives its calls, and agents' commands run in it",
            "fieldPath": ".credentials",
            "reason": "FieldValueForbidden",
        },
        {
            "rule": f"!({declared}) || {explicit}",
            "message": "spec.credentials: a tool that declares credentials must set its egress "
            "explicitly (http.allowedHosts for an http tool, sandbox.egress.allow otherwise), "
            "so no default can widen where a credential goes",
            "fieldPath": ".credentials",
            "reason": "FieldValueRequired",
        },
        {
            "rule": "!has(self.credentials) || self.credentials.all(c, !has(c.inject.hosts) "
            f"|| c.inject.hosts.all(h, {covered}))",
            "message": "spec.credentials[].inject.hosts: every entry must be allowed by the "
            "tool's egress (http.allowedHosts or sandbox.egress.allow; `*.suffix` only where "
            "the egress allows names below it, with the same port)",
            "fieldPath": ".credentials",
            "reason": "FieldValueForbidden",
        },
    ]


def _dataflow_rules() -> list[JsonDict]:
    """CEL: `dataFlow.sink: none` only where the tool provably cannot send data out (refused
    at apply, naming the field; `pipeline.dataflow` ignores it anywhere else)."""
    declared = "has(self.dataFlow) && has(self.dataFlow.sink) && self.dataFlow.sink == 'none'"
    no_egress = (
        "has(self.sandbox) && has(self.sandbox.egress) && has(self.sandbox.egress.allow) "
        "&& size(self.sandbox.egress.allow) == 0"
    )
    low_class = (
        "!(self.sideEffectClass in ['external', 'production', 'spend']) && "
        "!(has(self.riskClass) && self.riskClass in ['EXTERNAL_EFFECT', 'IRREVERSIBLE_WRITE', "
        "'PRODUCTION', 'SECURITY_SENSITIVE', 'FINANCIAL'])"
    )
    return [
        {
            "rule": f"!({declared}) || (!(self.kind in ['http', 'mcp']) && ({no_egress}) "
            f"&& {low_class})",
            "message": "spec.dataFlow.sink: none is allowed only with sandbox.egress.allow: [] "
            "and never for http or mcp tools or classes external and above",
            "fieldPath": ".dataFlow.sink",
            "reason": "FieldValueForbidden",
        }
    ]


def _requires_block(kind: ToolKind, field: str, extra: str = "") -> JsonDict:
    """A CEL rule: a descriptor of `kind` must carry its kind-specific block `field`."""
    return {
        "rule": f"self.kind != '{kind.value}' || "
        + (f"(has(self.{field}){extra})" if extra else f"has(self.{field})"),
        "message": f"spec.{field} is required when kind is {kind.value}",
        "fieldPath": f".{field}",
        "reason": "FieldValueRequired",
    }


class Retirement(Model):
    """The release's in-flight policy for a retired tool version."""

    in_flight: InFlightPolicy = InFlightPolicy.COMPLETE
    """Complete: calls already Executing run to their end. Cancel: they are interrupted, and
    settle as an interrupt does (Cancelled when the tool never started or its effects stay in
    its sandbox, Uncertain otherwise)."""


class ToolDescriptorSpec(Model):
    """A published tool version: what it takes, how it runs, its side-effect class."""

    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                _requires_block(ToolKind.HTTP, "http"),
                _requires_block(ToolKind.MCP, "mcp"),
                _requires_block(ToolKind.NATIVE, "native"),
                _requires_block(
                    ToolKind.CONTAINER,
                    "sandbox",
                    " && has(self.sandbox.command) && size(self.sandbox.command) > 0",
                ),
                *_credential_rules(),
                *_dataflow_rules(),
                {
                    "rule": "self.toolId == oldSelf.toolId",
                    "message": "spec.toolId is immutable: publish a new ToolDescriptor",
                    "fieldPath": ".toolId",
                },
                {
                    "rule": "self.version == oldSelf.version",
                    "message": "spec.version is immutable: publish a new ToolDescriptor",
                    "fieldPath": ".version",
                },
            ]
        }
    )

    tool_id: str = Field(pattern=common.TOOL_ID_PATTERN, max_length=common.TOOL_ID_MAX)
    """The tool's id: what calls name and what RBAC grants (verb invoke on
    tooldescriptors/<toolId>). Immutable."""
    version: str = Field(pattern=common.VERSION_PATTERN, max_length=common.VERSION_MAX)
    """The version calls name (semantic-version-like). Immutable: publish a new descriptor for a
    new version."""
    kind: ToolKind
    """How the tool runs: native, mcp, shell, container or http."""
    description: str = ""
    """For people and the tool list."""
    release_id: str = ""
    """The release this version belongs to, for people and the tool list."""
    input_schema: dict[str, Any] = Field(
        default_factory=lambda: {"type": "object"}, json_schema_extra=FREE_FORM
    )
    """JSON Schema 2020-12 of the arguments (local references only); unknown keywords are flagged on
    the status."""
    output_schema: dict[str, Any] | None = Field(default=None, json_schema_extra=FREE_FORM)
    """JSON Schema 2020-12 of the structured result."""
    side_effect_class: SideEffectClass
    """The declared class: read, sandbox, shared-write, external, production or spend. Calls are
    never classified lower; shared-write and above wait for an approval."""
    risk_class: RiskClass | None = None
    """The reference's risk class (READ_ONLY ... FINANCIAL); may raise the class, never lower it."""
    credentials: list[Credential] = Field(
        default_factory=list,
        max_length=MAX_CREDENTIALS,
        json_schema_extra=credentials_field_schema,
        description="What a call carries: each credential's source (a Secret's key or a "
        "ServiceAccount token) and where it goes (HTTP requests to listed hosts, or a "
        "read-only file for a container tool). See the Credentials guide.",
    )
    timeout_seconds: int | None = Field(default=None, ge=1, le=86_400)
    """The call's deadline in seconds. Unset: the operator's TOOLADAPTER_DEFAULT_TIMEOUT_SECONDS
    (300 unless set), shown in status.effectiveTimeoutSeconds. Descriptors stored before this
    field lost its CRD default carry the 300 the API server filled in: remove it to follow
    the setting."""
    max_result_bytes: int | None = Field(default=None, ge=1024, le=64 * 1_048_576)
    """Results beyond this are truncated (with a marker), never beyond the operator's
    TOOLADAPTER_MAX_RESULT_BYTES. Unset: that setting (1 MiB unless set, reloadable), shown
    in status.effectiveMaxResultBytes. Descriptors stored before this field lost its CRD
    default carry the 1048576 the API server filled in: remove it to follow the setting."""
    retry_policy: RetryPolicy = Field(default_factory=RetryPolicy)
    """Retries of attempts that provably had no effect."""
    rate_limits: RateLimits = Field(default_factory=RateLimits)
    """Rate and concurrency limits per tool and namespace."""
    audit_requirements: AuditRequirements = Field(default_factory=AuditRequirements)
    """What the receipt records."""
    result_delimiters: bool | None = None
    """Whether MCP results wrap this tool's text between `<tool-result id=NONCE>` delimiters
    (data for the model, a closing tag inside neutralised); unset: the gateway's setting
    TOOLADAPTER_RESULT_DELIMITERS (default on). Display only: never in status, hashes or
    receipts. Off for a client that parses the text itself."""
    sandbox: SandboxSpec | None = None
    """The sandbox of shell and container tools (and egress CIDRs of http tools)."""
    shell: ShellSpec | None = None
    """Allow and block lists of a shell tool."""
    http: HttpSpec | None = None
    """The request of an http tool."""
    mcp: McpBinding | None = None
    """The MCP server tool of an mcp tool."""
    native: NativeSpec | None = None
    """The built-in tool of a native tool."""
    data_flow: DescriptorDataFlow | None = None
    """What the results are (private, untrusted) and whether the tool can send data out:
    the data-flow rule gates a sink call once its run holds both labels (Data flow)."""
    retired: bool = False
    """Retire the version: new calls, and calls not yet Executing (waiting for an approval or
    brokered), are Denied with failure class retired; running calls follow
    retirement.inFlight."""
    retirement: Retirement = Field(default_factory=Retirement)
    """What retiring does to calls already Executing."""

    @property
    def declared_class(self) -> SideEffectClass:
        """The class a call starts from: the declared one, raised by the risk class (the
        namespace's environment, MCP annotations or a shell command may raise it further at
        call time)."""
        if self.risk_class is None:
            return self.side_effect_class
        return SideEffectClass.highest(self.side_effect_class, RISK_TO_CLASS[self.risk_class])

    @property
    def interrupts_in_flight(self) -> bool:
        """Retired with `retirement.inFlight: Cancel`: its Executing calls are interrupted."""
        return self.retired and self.retirement.in_flight == InFlightPolicy.CANCEL

    @model_validator(mode="after")
    def _attempt_without_cidrs(self) -> ToolDescriptorSpec:
        """An attempt's workspace pod is warm, and warm pods reach only the egress proxy:
        CIDR entries (NetworkPolicy rules of their own, per call) are refused."""
        sandbox = self.sandbox
        if sandbox is None or sandbox.workspace != WorkspaceMode.ATTEMPT:
            return self
        for entry in sandbox.egress.allow or []:
            try:
                ipaddress.ip_network(entry, strict=False)
            except ValueError:
                continue
            raise ValueError(
                f"sandbox.egress.allow entry {entry!r} is a CIDR, which sandbox.workspace "
                "attempt does not take: an attempt's calls reach hosts by name through the "
                "egress proxy only"
            )
        return self

    @property
    def sandbox_spec(self) -> SandboxSpec | None:
        """The sandbox a shell or container tool runs in: a shell tool without a `sandbox`
        block gets the default one (default limits, and the operator's default egress list,
        TOOLADAPTER_DEFAULT_EGRESS_ALLOW, as for any sandbox whose `egress.allow` is unset;
        `egress.allow: []` is no egress); other kinds get none."""
        if self.kind == ToolKind.SHELL:
            return self.sandbox or SandboxSpec()
        if self.kind == ToolKind.CONTAINER:
            return self.sandbox
        return None


def effective_timeout(spec: ToolDescriptorSpec | None, default_seconds: int) -> int:
    """The deadline a call of `spec` gets: its `timeoutSeconds`, else the operator's default
    (TOOLADAPTER_DEFAULT_TIMEOUT_SECONDS, passed in as `default_seconds`). Every reader of a
    descriptor's timeout goes through here, so the flow, the lease, the sandbox Job, the
    gateway's wait and the status agree."""
    if spec is None or spec.timeout_seconds is None:
        return default_seconds
    return spec.timeout_seconds


def effective_max_result_bytes(spec: ToolDescriptorSpec | None, ceiling: int) -> int:
    """The result bound a call of `spec` gets: its `maxResultBytes`, never above the
    operator's TOOLADAPTER_MAX_RESULT_BYTES (`ceiling`), which also applies when the spec
    sets none. Every reader goes through here, so the call's limits and the status agree."""
    if spec is None or spec.max_result_bytes is None:
        return ceiling
    return min(spec.max_result_bytes, ceiling)


class ToolDescriptorStatus(Model):
    """Whether the descriptor is valid and callable, as the operator found it."""

    active: bool = False
    """Valid and not retired: calls may name it."""
    healthy: bool = False
    """Able to run now (an mcp tool's server is active and lists the pinned digest)."""
    schema_digest: str | None = None
    """sha256 of the input and output schemas."""
    message: str | None = None
    """Why it is (in)active or (un)healthy."""
    conditions: list[common.Condition] = Field(default_factory=list)
    """Ready (active and healthy, with a reason) and SchemaKeywords (every inputSchema keyword is
    known)."""
    observed_generation: int | None = None
    """The metadata.generation this status was computed for."""
    effective_timeout_seconds: int | None = None
    """The deadline calls get: spec.timeoutSeconds, or the operator's
    TOOLADAPTER_DEFAULT_TIMEOUT_SECONDS when the spec sets none."""
    effective_max_result_bytes: int | None = None
    """The result bound calls get: spec.maxResultBytes, never above the operator's
    TOOLADAPTER_MAX_RESULT_BYTES, which applies when the spec sets none."""


# --------------------------------------------------------------------------- MCP server


class ToolDescriptor(Resource):
    """A published tool version: what it takes, how it runs, its side-effect class."""

    kind: Literal["ToolDescriptor"] = "ToolDescriptor"
    spec: ToolDescriptorSpec
    status: ToolDescriptorStatus | None = None
