"""The five resources of tooladapter as pydantic v2 models: the one source of truth.

The CRDs in `crds/` are generated from these models (`make crds`, see `crdgen`), so a field
added here appears in the API server's schema. Python attributes are snake_case; the wire
names are camelCase, as Kubernetes does. A raw body from the API is parsed once at the edge
(`ToolInvocation.model_validate(body)`) and typed data travels inward.

`json_schema_extra` keys starting with `x-kubernetes-` pass through to the CRD untouched:
that is how CEL rules, preserve-unknown-fields and list types reach the API server.
"""

from __future__ import annotations

import functools
import ipaddress
import re
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator
from pydantic.alias_generators import to_camel
from pydantic.config import JsonDict

from tooladapter.enums import (
    ApprovalDecision,
    BlockAction,
    EgressVerdict,
    FailureClass,
    InFlightPolicy,
    InvocationState,
    McpServerPhase,
    PreviewVerdict,
    RiskClass,
    SandboxKind,
    SandboxStart,
    SideEffectClass,
    Stage,
    StageOutcome,
    ToolKind,
    UnlistedAction,
    WorkspaceMode,
)

#: Free-form JSON subtrees (schemas, arguments, results) keep unknown fields.
FREE_FORM: dict[str, Any] = {"x-kubernetes-preserve-unknown-fields": True}
#: Free-form and owned whole: an agent's keys never become managedFields entries (each
#: would be stored, served and diffed on every write of the object).
FREE_FORM_ATOMIC: dict[str, Any] = {**FREE_FORM, "x-kubernetes-map-type": "atomic"}


def no_crd_default(schema: dict[str, Any]) -> None:
    """Leave a field's default out of the CRD: the API server would store and serve it in
    every item of every object, while every reader already takes its absence as the default
    (`sparse_wire` omits it on writing)."""
    schema.pop("default", None)


#: Tool ids are RBAC resourceNames and appear in object names: DNS-label-like.
TOOL_ID_PATTERN = r"^[a-z0-9]([-a-z0-9._]{0,61}[a-z0-9])?$"
#: Semantic-version-like; compared with `packaging` version ranges in policies.
VERSION_PATTERN = r"^[0-9]+(\.[0-9]+){0,2}([-+][0-9A-Za-z.-]+)?$"
SHA256_REF_PATTERN = r"^sha256:[0-9a-f]{64}$"
#: Upper bounds matching the patterns above (the CRD's CEL cost estimator needs them).
TOOL_ID_MAX = 63
VERSION_MAX = 64
SHA256_REF_MAX = 71

DEFAULT_TIMEOUT_SECONDS = 300
DEFAULT_MAX_RESULT_BYTES = 1_048_576


def describe_errors(exc: ValidationError, root: str = "spec") -> str:
    """One line naming every invalid field by its wire path, e.g. `spec.tool.id: ...`."""
    return "; ".join(
        f"{'.'.join([root, *(str(p) for p in err['loc'])])}: {err['msg']}" for err in exc.errors()
    )


class Model(BaseModel):
    """Base: camelCase on the wire, strict about unknown fields in typed subtrees."""

    model_config = ConfigDict(
        alias_generator=to_camel,
        populate_by_name=True,
        extra="forbid",
        use_enum_values=False,
        # A docstring under a field is its description: the CRD's, so `kubectl explain`.
        use_attribute_docstrings=True,
    )

    def wire(self) -> dict[str, Any]:
        """The JSON-ready, camelCase form without unset optionals."""
        return self.model_dump(by_alias=True, exclude_none=True, mode="json")

    def sparse_wire(self) -> dict[str, Any]:
        """`wire()` without optional fields left at an empty default ("", [], {}): what a
        reader gets back by parsing anyway, and bytes every write, watch event and stored
        copy would carry (issue 17: a smaller status per call)."""
        return _sparse(self, self.wire())


_EMPTY: tuple[Any, ...] = ("", [], {})
#: A field `_sparse` never drops (required, or its default is not an empty value).
_KEPT = object()


@functools.cache
def _sparse_fields(cls: type[BaseModel]) -> tuple[tuple[str, str, Any], ...]:
    """(attribute, wire key, empty default or `_KEPT`) of each field of `cls`, once per class:
    pydantic's `get_default` inspects the default factory's signature on every call, which
    cost ~0.7 ms of every status write (3 of them parse a builtin's text signature)."""
    fields = []
    for name, info in cls.model_fields.items():
        empty = _KEPT
        if not info.is_required():
            default = info.get_default(call_default_factory=True)
            if any(default == e and type(default) is type(e) for e in _EMPTY):
                empty = default
        fields.append((name, info.alias or name, empty))
    return tuple(fields)


def _sparse(model: BaseModel, dumped: dict[str, Any]) -> dict[str, Any]:
    for name, key, empty in _sparse_fields(type(model)):
        if key not in dumped:
            continue
        out = dumped[key]
        if empty is not _KEPT and type(out) is type(empty) and out == empty:
            del dumped[key]
            continue
        value = getattr(model, name)
        if isinstance(value, BaseModel):
            _sparse(value, out)
        elif isinstance(value, list):
            for item, item_out in zip(value, out, strict=True):
                if isinstance(item, BaseModel):
                    _sparse(item, item_out)
    return dumped


class Condition(Model):
    """One observation of the object's state, in the Kubernetes conditions convention."""

    type: str
    """The condition's type, e.g. Ready, Finished, Succeeded."""
    status: Literal["True", "False", "Unknown"]
    """True, False or Unknown."""
    reason: str = ""
    """A CamelCase reason for the status."""
    message: str = ""
    """Why, in words."""
    last_transition_time: str | None = None
    """When the status last changed (RFC 3339)."""
    observed_generation: int | None = None
    """The metadata.generation the condition was computed for."""


# --------------------------------------------------------------------------- descriptor


class SecretDependency(Model):
    """A Secret the tool needs, and the only keys of it that are brokered."""

    secret_name: str = Field(min_length=1, max_length=253)
    """A Secret in the descriptor's namespace (its writer must be allowed to get it)."""
    keys: list[str] = Field(min_length=1, description="Only these keys are brokered.")


class ServiceAccountIdentity(Model):
    """Ask for a TokenRequest-bound token of this ServiceAccount, expiring with the call."""

    service_account_name: str = Field(min_length=1, max_length=253)
    """A ServiceAccount in the descriptor's namespace (its writer must be allowed to create its
    tokens)."""
    audiences: list[str] = Field(default_factory=list)
    """Audiences of the token (default: the API server's)."""


class Authorization(Model):
    """Which Kubernetes identity the tool's sandbox runs with (who may call the tool is RBAC:
    verb invoke on tooldescriptors/<toolId>)."""

    # The reference's `scopes`/`roles` are not here: nothing could enforce them yet, and a
    # field that looks enforced but is not is worse than none. Who may call a tool is RBAC
    # (`invoke` on tooldescriptors/<toolId>).
    kubernetes_identity: ServiceAccountIdentity | None = None
    """A TokenRequest token of this ServiceAccount for the sandbox, bound to the lease's Secret;
    not allowed for shell tools."""


class RetryPolicy(Model):
    """Tool-level retries apply only to calls that provably had no effect: nothing left the
    operator (connection refused, the sandbox Job refused by the API server). Never for an
    Uncertain call, never after a request was sent."""

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


#: An extended resource name (`nvidia.com/gpu`): a DNS-subdomain prefix, a slash, a name.
EXTENDED_RESOURCE_PATTERN = (
    # `[.]`, not an escaped dot: the pattern is also a CEL string literal in the CRD.
    r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?([.][a-z0-9]([-a-z0-9]*[a-z0-9])?)*"
    r"/[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$"
)
#: A Kubernetes quantity (`500m`, `64Mi`, `1.5`, `2e3`).
QUANTITY_PATTERN = r"^[+]?([0-9]+(\.[0-9]*)?|\.[0-9]+)([eE][-+]?[0-9]+|[numkMGTPE]|[KMGTPE]i)?$"
#: Most resource names one pod section may list (bounds the CRD's CEL cost).
MAX_RESOURCE_NAMES = 16
_EXTENDED = re.compile(EXTENDED_RESOURCE_PATTERN)
_QUANTITY = re.compile(QUANTITY_PATTERN)


def _resource_map_schema(schema: JsonDict) -> None:
    """On the wire a map from resource name to quantity, as a pod's: a structural schema
    cannot have `properties` beside `additionalProperties`, and extended names are open."""
    schema.pop("properties", None)
    schema["additionalProperties"] = {"x-kubernetes-int-or-string": True}
    schema["maxProperties"] = MAX_RESOURCE_NAMES
    schema["x-kubernetes-validations"] = [
        {
            "rule": "self.all(k, k == 'cpu' || k == 'memory' || "
            f"k.matches('{EXTENDED_RESOURCE_PATTERN}'))",
            "message": "resource names are cpu, memory or an extended resource "
            "(<domain>/<name>, e.g. nvidia.com/gpu)",
        }
    ]


class ResourceQuantities(Model):
    """Quantities by resource name, as in a pod's resources: cpu, memory, and extended
    resources such as nvidia.com/gpu (a whole number, passed to the pod as given)."""

    # Extended names are open-ended (any vendor's domain): kept as extra keys, checked below.
    model_config = ConfigDict(extra="allow", json_schema_extra=_resource_map_schema)

    cpu: str | None = None
    """A CPU quantity, e.g. 500m."""
    memory: str | None = None
    """A memory quantity, e.g. 64Mi."""

    @model_validator(mode="before")
    @classmethod
    def _check_names(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            return data
        out = dict(data)
        for name, value in data.items():
            if name in ("cpu", "memory"):
                if isinstance(value, int | float) and not isinstance(value, bool):
                    out[name] = str(value)
                continue
            problem = extended_resource_problem(str(name), value)
            if problem:
                raise ValueError(f"{name}: {problem}")
            out[name] = str(value)
        return out

    @property
    def extended(self) -> dict[str, str]:
        """The extended resources (every key but cpu and memory), by name."""
        return {k: str(v) for k, v in (self.__pydantic_extra__ or {}).items()}


def extended_resource_problem(name: str, value: Any) -> str | None:
    """Why `name: value` is not an extended resource the pod can carry; None when it is."""
    if not _EXTENDED.match(name) or len(name) > 253:
        return (
            "not a resource name: cpu, memory, or an extended resource <domain>/<name> "
            "(e.g. nvidia.com/gpu)"
        )
    domain = name.split("/", 1)[0]
    if domain == "kubernetes.io" or domain.endswith(".kubernetes.io"):
        return "the kubernetes.io domain is reserved for Kubernetes' own resources"
    if isinstance(value, bool) or not isinstance(value, int | str):
        return "the quantity must be a whole number, e.g. 1"
    text = str(value)
    if not _QUANTITY.match(text) or not text.lstrip("+").isdigit():
        # Kubernetes does not overcommit extended resources: only whole units.
        return f"the quantity {text!r} must be a whole number, e.g. 1"
    return None


class Resources(Model):
    """Requests and limits of the sandbox pod."""

    requests: ResourceQuantities = Field(default_factory=ResourceQuantities)
    """What the sandbox pod requests."""
    limits: ResourceQuantities = Field(default_factory=ResourceQuantities)
    """What the sandbox pod may use at most; extended resources (nvidia.com/gpu: 1) go here
    (a request of one, if given, must equal its limit)."""

    @model_validator(mode="after")
    def _extended_limits(self) -> Resources:
        # Kubernetes refuses an extended resource requested without an equal limit; said
        # here, naming the field, rather than by a Job the API server refuses at run time.
        limits = self.limits.extended
        for name, value in self.requests.extended.items():
            if limits.get(name) != value:
                raise ValueError(
                    f"requests.{name}: an extended resource's request must equal its limit "
                    f"(limits.{name}: {limits.get(name, 'unset')})"
                )
        return self


class SecretKeyRef(Model):
    """One key of a Secret in the same namespace."""

    name: str = Field(min_length=1)
    """The Secret's name."""
    key: str = Field(min_length=1)
    """The key in the Secret."""


class EgressCredential(Model):
    """A header the egress proxy adds to requests for `host`: the sandbox never holds it."""

    host: str = Field(
        min_length=1,
        max_length=260,
        description="Host name (exact or `*.suffix`), optionally `:port`, as in `allow`; the "
        "sandbox sends plain `http://host/...` to the proxy, which speaks verified TLS upstream.",
    )
    header: str = Field(default="Authorization", min_length=1, max_length=128)
    """The header's name."""
    scheme: str = Field(
        default="Bearer", max_length=64, description="Prefix of the header value; may be empty."
    )
    secret_key_ref: SecretKeyRef
    """The Secret key holding the value (whoever names it must be able to read it)."""


class Egress(Model):
    """Where the sandbox may connect (default: the operator's default list)."""

    allow: list[str] | None = Field(
        default=None,
        description="Host names (exact or `*.suffix`, optionally `:port`; through the egress "
        "proxy, port 443 for CONNECT and 80 for plain HTTP unless given) and CIDRs (in the "
        "lease's NetworkPolicy). Unset: the operator's default list "
        "(TOOLADAPTER_DEFAULT_EGRESS_ALLOW); `[]`: no egress.",
    )
    credentials: list[EgressCredential] = Field(
        default_factory=list,
        description="Headers the egress proxy injects for a host; the value never enters the "
        "sandbox.",
    )


class SandboxSpec(Model):
    """The sandbox Job a shell or container tool runs in."""

    kind: SandboxKind = SandboxKind.CONTAINER
    """Isolation: Container, GVisor or Kata (each maps to a RuntimeClass, see
    TOOLADAPTER_RUNTIME_CLASSES); None is not allowed for a sandbox."""
    image: str | None = None
    """The container image the tool runs in; unset: the operator's sandbox image
    (TOOLADAPTER_SANDBOX_IMAGE, the chart's settings.sandboxImage), which is what the network
    gate runs too. Descriptors stored while this field had a default keep
    localhost/tooladapter-sandbox:dev until it is removed from them."""
    command: list[str] = Field(default_factory=list)
    """The argv of a container tool (required for kind container); the arguments arrive as JSON
    in /tooladapter/arguments.json."""
    resources: Resources = Field(default_factory=Resources)
    """Requests and limits of the sandbox pod."""
    runtime_class_name: str | None = Field(
        default=None,
        description="RuntimeClass of the pod; when unset, the one TOOLADAPTER_RUNTIME_CLASSES "
        "maps `kind` to (Container: the node's default).",
    )
    workspace_size_limit: str = "64Mi"
    """Size of the writable workspace volume of a call (an attempt's workspace is sized by
    TOOLADAPTER_WORKSPACE_SIZE and the namespace's ResourceQuota instead)."""
    workspace: WorkspaceMode = WorkspaceMode.CALL
    """Whose /workspace a call sees: `call` (a fresh one per call) or `attempt` (calls with the
    same spec.attemptId from the same caller in the same namespace share it, one at a time,
    until it is idle for TOOLADAPTER_WORKSPACE_IDLE_SECONDS or released). Not with brokered
    credentials (secretDependencies, kubernetesIdentity) or CIDR egress entries."""
    pool_id: str = "default"
    """The sandbox pool (recorded on the lease and the receipt)."""
    egress: Egress = Field(default_factory=Egress)
    """Where the sandbox may connect; a default-deny NetworkPolicy allows only these."""


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
    allowed_hosts: list[str] = Field(
        default_factory=list,
        description="Hosts (host or host:port) the URL may name. An IP literal here also "
        "allows connecting to that address when it is loopback, private or link-local; a "
        "host name never does.",
    )


class McpBinding(Model):
    """The MCP server tool this descriptor calls, pinned by digest."""

    server: str = Field(min_length=1, description="McpServer name in the same namespace.")
    tool: str = Field(min_length=1)
    """The tool's name as the server lists it."""
    pinned_digest: str = Field(pattern=SHA256_REF_PATTERN)
    """sha256 of the tool's wire object as reviewed; the descriptor is unhealthy while the server
    lists another."""


class NativeSpec(Model):
    """A tool built into the operator."""

    name: Literal["list-tools", "read-configmap"]
    """list-tools (the namespace's callable tools) or read-configmap."""


def _no_secrets_for_shell(field: str, present: str) -> JsonDict:
    """A CEL rule: a shell tool's argv comes from the agent, so it may not carry brokered
    credentials (`field`); a container tool (a fixed `sandbox.command`) may."""
    return {
        "rule": f"self.kind != 'shell' || !({present})",
        "message": f"spec.{field} is not allowed when kind is shell: the agent chooses a shell "
        "tool's command, so it must never run beside brokered credentials; use a container "
        "tool (a fixed sandbox.command) instead",
        "fieldPath": f".{field}",
        "reason": "FieldValueForbidden",
    }


def _no_secrets_for_attempt(field: str, present: str) -> JsonDict:
    """A CEL rule: an attempt's workspace pod outlives each call, so no brokered credential
    (`field`) is ever mounted into it: a later call would inherit it."""
    attempt = (
        "has(self.sandbox) && has(self.sandbox.workspace) && self.sandbox.workspace == 'attempt'"
    )
    return {
        "rule": f"!({attempt}) || !({present})",
        "message": f"spec.{field} is not allowed with sandbox.workspace attempt: a workspace "
        "outlives its calls, and a later call must never inherit an earlier one's credential",
        "fieldPath": f".{field}",
        "reason": "FieldValueForbidden",
    }


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
                _no_secrets_for_shell(
                    "secretDependencies",
                    "has(self.secretDependencies) && size(self.secretDependencies) > 0",
                ),
                _no_secrets_for_shell(
                    "authorization.kubernetesIdentity",
                    "has(self.authorization) && has(self.authorization.kubernetesIdentity)",
                ),
                _no_secrets_for_attempt(
                    "secretDependencies",
                    "has(self.secretDependencies) && size(self.secretDependencies) > 0",
                ),
                _no_secrets_for_attempt(
                    "authorization.kubernetesIdentity",
                    "has(self.authorization) && has(self.authorization.kubernetesIdentity)",
                ),
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

    tool_id: str = Field(pattern=TOOL_ID_PATTERN, max_length=TOOL_ID_MAX)
    """The tool's id: what calls name and what RBAC grants (verb invoke on
    tooldescriptors/<toolId>). Immutable."""
    version: str = Field(pattern=VERSION_PATTERN, max_length=VERSION_MAX)
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
    authorization: Authorization = Field(default_factory=Authorization)
    """The Kubernetes identity the sandbox runs with."""
    secret_dependencies: list[SecretDependency] = Field(default_factory=list)
    """Secrets brokered into the sandbox, mounted under /tooladapter/secrets/<secret>/<key>; not
    allowed for shell tools."""
    timeout_seconds: int | None = Field(default=None, ge=1, le=86_400)
    """The call's deadline in seconds. Unset: the operator's TOOLADAPTER_DEFAULT_TIMEOUT_SECONDS
    (300 unless set), shown in status.effectiveTimeoutSeconds. Descriptors stored before this
    field lost its CRD default carry the 300 the API server filled in: remove it to follow
    the setting."""
    max_result_bytes: int = Field(default=DEFAULT_MAX_RESULT_BYTES, ge=1024, le=64 * 1_048_576)
    """Results beyond this are truncated (with a marker)."""
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
    retired: bool = False
    """Retire the version: new calls, and calls not yet Executing (waiting for an approval or
    brokered), are Denied with failure class retired; running calls follow
    retirement.inFlight."""
    retirement: Retirement = Field(default_factory=Retirement)
    """What retiring does to calls already Executing."""

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
        block gets the default one (no egress, default limits); other kinds get none."""
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
    conditions: list[Condition] = Field(default_factory=list)
    """Ready (active and healthy, with a reason) and SchemaKeywords (every inputSchema keyword is
    known)."""
    observed_generation: int | None = None
    """The metadata.generation this status was computed for."""
    effective_timeout_seconds: int | None = None
    """The deadline calls get: spec.timeoutSeconds, or the operator's
    TOOLADAPTER_DEFAULT_TIMEOUT_SECONDS when the spec sets none."""


# --------------------------------------------------------------------------- MCP server


class McpCredentials(Model):
    """The header the operator sends to an activated server, from a Secret."""

    secret_key_ref: SecretKeyRef
    """The Secret key holding the credential."""
    header: str = "Authorization"
    """The header that carries it."""
    scheme: str = Field(default="Bearer", description="Prefix of the header value; may be empty.")


class McpProbe(Model):
    """How often and how patiently the operator probes the server."""

    interval_seconds: int = Field(default=30, ge=1, le=3600)
    """Time between probes."""
    timeout_seconds: int = Field(default=10, ge=1, le=300)
    """How long one probe may take."""
    failure_threshold: int = Field(default=3, ge=1, le=100)
    """Failed probes in a row before the server is Degraded."""


#: A canonical CIDR (no host bits) narrower than the whole address space.
_CIDR: JsonDict = {
    "x-kubernetes-validations": [
        {
            "rule": "isCIDR(self) && cidr(self) == cidr(self).masked()"
            " && cidr(self).prefixLength() > 0",
            "message": "must be a canonical CIDR narrower than the whole address space,"
            " e.g. 10.0.0.0/8 or 127.0.0.1/32",
        }
    ]
}


class McpServerSpec(Model):
    """A registered MCP server: where it is and whether a platform admin activated it."""

    url: str = Field(
        min_length=1,
        max_length=2048,
        pattern=r"^https?://",
        json_schema_extra={
            "x-kubernetes-validations": [
                {
                    "rule": "isURL(self) && url(self).getScheme() in ['http', 'https']"
                    " && url(self).getHostname() != ''",
                    "message": "url must be an absolute http(s) URL with a host",
                }
            ]
        },
    )
    """The server's streamable-HTTP endpoint (absolute http(s) URL)."""
    transport: Literal["streamable-http"] = "streamable-http"
    """The MCP transport; only streamable-http."""
    credentials: McpCredentials | None = None
    """A credential sent only to an activated server at its verified url."""
    activated: bool = Field(
        default=False,
        description="Set by a platform admin to activate; the credentials are sent only to "
        "an activated server.",
    )
    retired: bool = False
    """Retire the server: its tools are unhealthy."""
    probe: McpProbe = Field(default_factory=McpProbe)
    """Probe interval, timeout and failure threshold."""
    allowed_cidrs: list[Annotated[str, Field(max_length=64, json_schema_extra=_CIDR)]] = Field(
        default_factory=list,
        max_length=32,
        description="Non-public networks the server may be reached at (loopback, private, "
        "link-local: a server in the cluster or on this machine), e.g. 10.96.0.0/12 or "
        "127.0.0.1/32; public addresses need no entry.",
    )


class McpToolInfo(Model):
    """One tool the server listed, pinned by the digest of its whole wire object."""

    name: str
    """The tool's name."""
    title: str | None = None
    """The tool's title."""
    description: str = ""
    """The tool's description (untrusted text from the server)."""
    digest: str
    """sha256 of the RFC 8785 JSON of the tool's whole wire object."""
    annotations: dict[str, Any] | None = Field(default=None, json_schema_extra=FREE_FORM)
    """The tool's annotations (untrusted hints: they may raise a class, never lower it)."""


class McpResourceInfo(Model):
    """One resource the server listed."""

    uri: str
    """The resource's URI."""
    name: str = ""
    """The resource's name."""
    description: str = ""
    """The resource's description."""


class McpPromptInfo(Model):
    """One prompt the server listed."""

    name: str
    """The prompt's name."""
    description: str = ""
    """The prompt's description."""


class McpToolBinding(Model):
    """Whether a descriptor of this server is bound to a listed tool of the pinned digest."""

    descriptor: str
    """The ToolDescriptor's name."""
    tool: str
    """The server tool it names."""
    bound: bool
    """Whether the server lists the tool with the pinned digest."""
    reason: str = ""
    """Why not."""


class McpProbeResult(Model):
    """The outcome of the last probe."""

    time: str
    """When the probe ran (RFC 3339)."""
    ok: bool
    """Whether it succeeded."""
    message: str = ""
    """What it found, or why it failed."""


class McpServerStatus(Model):
    """The server's lifecycle phase and what its last discovery listed."""

    phase: McpServerPhase = McpServerPhase.REGISTERED
    """Registered, Verified, Active, Degraded or Retired."""
    message: str | None = None
    """Why the server is in its phase: a refused address (naming spec.allowedCidrs), a
    failing probe, a verified server waiting for spec.activated."""
    #: The url a probe without credentials reached (it answered, or asked for credentials
    #: with 401): the credentials are sent only to this url, and only once activated.
    verified_url: str | None = None
    """The url a probe without credentials reached: credentials go only here, and only once
    activated."""
    protocol_version: str | None = None
    """The MCP protocol version the server speaks."""
    server_name: str | None = None
    """The server's name, as it reports it."""
    server_version: str | None = None
    """The server's version, as it reports it."""
    server_digest: str | None = None
    """sha256 over the listed tools, resources and prompts."""
    tools: list[McpToolInfo] = Field(default_factory=list)
    """Tools the last discovery listed."""
    resources: list[McpResourceInfo] = Field(default_factory=list)
    """Resources the last discovery listed."""
    prompts: list[McpPromptInfo] = Field(default_factory=list)
    """Prompts the last discovery listed."""
    bindings: list[McpToolBinding] = Field(default_factory=list)
    """Descriptors naming this server, and whether each is bound."""
    shadowing: list[str] = Field(default_factory=list)
    """Tool names this server shares with other servers in the namespace."""
    last_probe: McpProbeResult | None = None
    """The last probe's outcome."""
    consecutive_failures: int = 0
    """Probes failed in a row."""
    conditions: list[Condition] = Field(default_factory=list)
    """The server's conditions."""
    observed_generation: int | None = None
    """The metadata.generation this status was computed for."""


# --------------------------------------------------------------------------- invocation


class ToolRef(Model):
    """The tool and version a call names."""

    id: str = Field(pattern=TOOL_ID_PATTERN, max_length=TOOL_ID_MAX)
    """The ToolDescriptor's toolId."""
    version: str = Field(pattern=VERSION_PATTERN, max_length=VERSION_MAX)
    """The ToolDescriptor's version."""


class Caller(Model):
    """Who makes the call: the authenticated creator of the invocation (admission-checked)."""

    kind: Literal["agent", "user", "service"] = "agent"
    """agent, user or service."""
    name: str = Field(
        min_length=1, max_length=253, description="The authenticated username of the creator."
    )
    groups: list[Annotated[str, Field(min_length=1, max_length=253)]] = Field(
        default_factory=list,
        max_length=64,
        description="Groups of the creator (admission checks each) used in every permission "
        "review, so grants to groups apply; ServiceAccounts get their own groups anyway.",
    )


class ToolInvocationSpec(Model):
    """Immutable once created, except `interrupt`, which may only go from false to true."""

    tool: ToolRef
    """The tool and version to call."""
    arguments: dict[str, Any] = Field(default_factory=dict, json_schema_extra=FREE_FORM_ATOMIC)
    """The arguments, validated against the tool's inputSchema (bounded: 32 levels deep, 1024
    entries per object or array)."""
    caller: Caller
    """Who calls: must be the creating user (admission-checked)."""
    run_id: str | None = Field(default=None, max_length=128)
    """The agent run this call belongs to: `kubectl get ti --field-selector spec.runId=<id>`
    lists a run's calls."""
    attempt_id: str | None = Field(default=None, max_length=128)
    """The attempt this call belongs to, for fencing (with fencingToken)."""
    fencing_token: int | None = Field(
        default=None,
        ge=0,
        # RFC 8785 (receipts, hashes) takes integers up to 2^53 - 1 only.
        le=2**53 - 1,
    )
    """A token lower than the highest seen for the same attemptId (and caller) is Denied at stage
    fencing."""
    idempotency_key: str | None = Field(default=None, min_length=1, max_length=256)
    """Calls with the same key (per namespace and caller) execute once: a later call with the
    same request waits for the first and ends as it did (its state, receiptRef and result,
    with status.duplicateOf); the same key with other arguments is Denied (key-reused)."""
    environment_id: str | None = Field(default=None, max_length=128)
    """The caller's environment, recorded on the receipt."""
    interrupt: bool = False
    """Set to true to stop the call (the only spec field that may change; never back to false)."""
    dry_run: bool = False
    """Evaluate the call without executing it: it ends Previewed with status.preview saying what
    a real call would meet (validation, policy, class, permission, approval, sandbox). No
    idempotency key is claimed, no rate limit or metric counted, no receipt written."""


class StageEntry(Model):
    """One pipeline stage as the call passed it."""

    stage: Stage
    """The stage."""
    outcome: StageOutcome
    """What happened at it."""
    time: str
    """When (RFC 3339)."""
    detail: str = Field(default="", json_schema_extra=no_crd_default)
    """Details (redacted, bounded; absent when there are none)."""


class ApprovalBinding(Model):
    """The ToolApproval bound to this call, and what it was bound to."""

    name: str
    """The ToolApproval's name."""
    reviewer: str
    """Who approved."""
    bound_at: str
    """When it bound (RFC 3339)."""
    request_hash: str
    """The request hash it was bound to."""
    descriptor_digest: str | None = None
    """The descriptor digest it was bound to."""
    tool_version: str
    """The tool version it was bound to."""


class LeaseLimits(Model):
    """The bounds of a sandbox lease."""

    cpu: str | None = None
    """CPU limit."""
    memory: str | None = None
    """Memory limit."""
    timeout_seconds: int
    """The deadline of the sandbox Job."""
    extended: dict[str, str] = Field(default_factory=dict)
    """Extended resource limits (e.g. nvidia.com/gpu), by name."""
    egress_allow: list[str] = Field(default_factory=list)
    """Where the sandbox may connect."""


class WorkspaceLease(Model):
    """An attempt's workspace: a lease of its own, shared by the attempt's calls."""

    id: str
    """The workspace's id (its pod's name)."""
    size_limit: str
    """Its size bound (TOOLADAPTER_WORKSPACE_SIZE)."""
    created_at: str
    """When it was created (RFC 3339)."""
    last_used_at: str | None = None
    """When a call of the attempt last ended in it, before this one (RFC 3339)."""
    fresh: bool = False
    """This call is the first in it (a new or recreated workspace)."""


class SandboxLease(Model):
    """The sandbox leased for one call: its Job, NetworkPolicy, credentials and bounds."""

    lease_id: str
    """The lease's id."""
    kind: SandboxKind
    """The sandbox kind."""
    pool_id: str
    """The sandbox pool."""
    workspace_ref: str | None = None
    """The workspace volume."""
    limits: LeaseLimits
    """The lease's bounds."""
    credential_expiry: str | None = None
    """When the brokered credentials expire (RFC 3339)."""
    leased_at: str
    """When the lease began (RFC 3339)."""
    released_at: str | None = None
    """When it was released (RFC 3339)."""
    job_name: str | None = None
    """The sandbox Job."""
    network_policy_name: str | None = None
    """The lease's default-deny NetworkPolicy."""
    secret_name: str | None = None
    """The ephemeral Secret with the brokered keys (deleted when the call ends)."""
    runtime_class: str | None = None
    """The RuntimeClass the sandbox pod runs with (None: the node's default runtime)."""
    egress_proxy: str | None = None
    """`address:port` of the egress proxy the pod was pointed at (None: no host egress)."""
    start: SandboxStart | None = None
    """cold (a Job of its own) or warm (a pod ready before the call: a pool's, or the
    attempt's workspace pod); set when the call ran."""
    sandbox_name: str | None = None
    """The Job or pod that ran the call."""
    workspace: WorkspaceLease | None = None
    """The attempt's workspace the call ran in (sandbox.workspace attempt)."""


class EgressRecord(Model):
    """One connection of a sandbox through the egress proxy, as the proxy recorded it."""

    host: str
    """The host the sandbox asked for."""
    port: int
    """Its port."""
    method: str
    """CONNECT, or the forwarded request's method."""
    verdict: EgressVerdict
    """What the proxy decided."""
    reason: str = ""
    """Why, for a refusal."""
    bytes_up: int = 0
    """Bytes sent upstream."""
    bytes_down: int = 0
    """Bytes sent back to the sandbox."""
    at: str | None = None
    """When the connection ended (RFC 3339)."""


class InvocationResult(Model):
    """A sanitized result, inline when small; the whole result is at `resultRef`."""

    provenance: Literal["tool-result"] = "tool-result"
    """Always tool-result: the content is data from a tool, never instructions."""
    content: str = ""
    """The sanitized result text (when inline)."""
    structured_content: dict[str, Any] | None = Field(default=None, json_schema_extra=FREE_FORM)
    """The sanitized structured result (when inline)."""
    truncated: bool = False
    """Cut at maxResultBytes."""
    inline: bool = True
    """Whether content is here; the whole result is at resultRef either way."""
    original_bytes: int = 0
    """Size of the raw output."""
    original_sha256: str | None = None
    """sha256 of the raw output, only when nothing needed redaction."""
    redactions: list[str] = Field(default_factory=list)
    """The kinds of redactions made."""
    exit_code: int | None = None
    """The exit code of a shell or container tool."""
    is_error: bool = False
    """The tool ran to its end and answered with an error (a non-zero exit code, an HTTP status
    of 400 or more, an MCP isError): the call is Observed, its effect may have happened, and
    failureClass says tool-error or output-invalid. Never a reason to run it again blindly."""
    http_status: int | None = None
    """The HTTP status an http tool's server answered."""


class ReceiptSummary(Model):
    """A summary of the receipt in the artifact store (receiptRef holds the whole). What the
    receipt shares with the status is not repeated here: its class, request and result
    hashes, approval and policy decision are status.effectiveClass, requestHash, resultHash,
    approval.name and policyDecisionId."""

    schema_: str = Field(default="tool-invocation-v1", alias="schema")
    """The receipt's schema (tool-invocation-v1)."""
    state: InvocationState
    """The state the receipt records."""
    effect_confirmed: bool | None = None
    """What an operator confirmed for an Uncertain effect."""
    written_at: str
    """When the receipt was written (RFC 3339)."""
    sequence: int | None = Field(default=None, ge=1)
    """The receipt's sequence number in its namespace's receipt chain (signed receipts;
    `tooladapter receipts verify` checks the chain)."""


class EffectConfirmation(Model):
    """Patched onto status by a person with the Operator role for an Uncertain effect."""

    effect_happened: bool
    """Whether the effect happened (false releases the idempotency key)."""
    confirmed_by: str = Field(min_length=1)
    """The confirming user (must be the patching user)."""
    evidence: str = Field(min_length=1, max_length=4096)
    """What shows it."""
    confirmed_at: str | None = None
    """When the operator recorded it (RFC 3339)."""
    recorded: bool = False
    """Set by the operator once the new receipt is written."""


class ExecutionRecord(Model):
    """What the operator needs to follow an execution after a restart."""

    kind: ToolKind
    """The tool kind that ran."""
    started_at: str
    """When the execution began (RFC 3339)."""
    job_name: str | None = None
    """The sandbox Job, for shell and container tools."""
    command_line: list[str] = Field(default_factory=list)
    """The argv a shell or container tool runs (after the shell check), for the receipt."""
    holder: str | None = None
    """The operator process that claimed the execution (one claim per invocation)."""
    attempts: int = 1
    """Attempts made under the descriptor's retryPolicy (1: no retry so far)."""
    sandbox_seconds: float | None = None
    """How long the sandbox's tool container ran (started to finished), as metered in
    tooladapter_sandbox_seconds_total and the receipt's usage."""


class ArgumentError(Model):
    """One way the arguments fail the tool's input schema."""

    path: str
    """The JSON path of the failing value, e.g. $.files[1].name."""
    message: str
    """What is wrong with it."""


class PreviewValidation(Model):
    """Validation as a real call would meet it: the descriptor lookup, the bounds and the input
    schema."""

    passed: bool
    """Whether a real call would pass validation."""
    errors: list[ArgumentError] = Field(default_factory=list)
    """Every failing JSON path (the first 20)."""
    request_hash: str | None = None
    """The request hash a real call (and its approval) would carry."""
    descriptor_digest: str | None = None
    """The digest of the descriptor the call would be validated against."""
    published_versions: list[str] = Field(default_factory=list)
    """When the named version is not published: the versions of the tool that are."""


class PreviewPolicy(Model):
    """The tenant policies' decision for this call."""

    decision_id: str
    """The decision's id (the same id a real call with these arguments would record)."""
    allowed: bool
    """Whether the policies allow the call."""
    policies: list[str] = Field(default_factory=list)
    """The ToolPolicies evaluated (namespace/name)."""
    reasons: list[str] = Field(default_factory=list)
    """Every rule that applied, naming its policy."""
    denials: list[str] = Field(default_factory=list)
    """The rules that deny the call, naming their policies."""
    max_class: SideEffectClass | None = None
    """The class ceiling (the lowest maxClass of the policies)."""
    max_class_set_by: str | None = None
    """The policy that sets the ceiling."""


class PreviewClassification(Model):
    """The effective side-effect class and why."""

    declared: SideEffectClass
    """The descriptor's sideEffectClass."""
    effective: SideEffectClass
    """The class the call would run as."""
    reason: str
    """Why: what raised the class, or why it is refused."""
    raised_by: list[str] = Field(default_factory=list)
    """Every rule that raised the class, in order."""
    refused: bool = False
    """Whether classification refuses the call (frozen namespace, blocked shell command)."""
    approval_forced: bool = False
    """An escalated shell command needs an approval whatever its class."""
    shell: str | None = None
    """The shell check of a shell tool's command."""


class PreviewPermission(Model):
    """RBAC for the caller: verb invoke on the tool, verb use on the effective class."""

    checked: bool
    """Whether RBAC was asked (false: the verdict assumes it allows the call)."""
    allowed: bool | None = None
    """Whether RBAC allows both."""
    asked: list[str] = Field(default_factory=list)
    """The questions, e.g. invoke tooldescriptors/shell, use sideeffectclasses/sandbox."""
    reason: str = ""
    """The answer, naming the missing verb."""


class PreviewApproval(Model):
    """Whether the call would wait for a ToolApproval, and who may give it."""

    required: bool
    """Whether the call would wait in AwaitingApproval."""
    reasons: list[str] = Field(default_factory=list)
    """Why it needs one."""
    reviewer_groups: list[str] = Field(default_factory=list)
    """Groups whose members may approve (empty: any reviewer with RBAC to create ToolApprovals)."""
    reviewers: str = ""
    """Who may approve, in words (never the caller)."""
    timeout_seconds: int | None = None
    """How long the call would wait before it is Denied."""


class PreviewSandbox(Model):
    """The sandbox a shell or container tool would run in."""

    kind: SandboxKind
    """Container, GVisor or Kata."""
    runtime_class: str | None = None
    """The RuntimeClass the pod would run with (none: the node's default)."""
    image: str | None = None
    """The image the tool would run in."""
    egress: list[str] = Field(default_factory=list)
    """Where the sandbox could connect (default-deny otherwise)."""


class InvocationPreview(Model):
    """A dry run's result: what a real call with this spec would meet now, stage by stage,
    evaluated without executing anything."""

    verdict: PreviewVerdict
    """would-run, would-await-approval or would-be-denied."""
    denied_stage: Stage | None = None
    """The stage a real call would be denied at."""
    failure_class: FailureClass | None = None
    """The failure class a real call would end with."""
    message: str = ""
    """The message a real call would carry."""
    tool_kind: ToolKind | None = None
    """The tool's kind."""
    validation: PreviewValidation
    """Validation: descriptor lookup, bounds, input schema."""
    policy: PreviewPolicy | None = None
    """The tenant policy decision."""
    classification: PreviewClassification | None = None
    """The effective class and why."""
    permission: PreviewPermission | None = None
    """RBAC for the caller."""
    approval: PreviewApproval | None = None
    """Whether an approval is needed, from whom, for how long."""
    sandbox: PreviewSandbox | None = None
    """The sandbox a shell or container tool would run in."""
    egress: list[str] = Field(default_factory=list)
    """Where the call could connect: sandbox egress, an http tool's allowed hosts, an MCP server."""
    not_evaluated: list[Stage] = Field(default_factory=list)
    """Stages a dry run does not evaluate (they act on the world or count the call)."""


class ToolInvocationStatus(Model):
    """The call's walk through the pipeline, written by the operator."""

    state: InvocationState = InvocationState.RECEIVED
    """Received, Validated, Authorized, AwaitingApproval, Brokered, Executing, then one terminal
    state. Observed: the tool ran to its end and answered, whatever it said (result.isError
    marks its own error: a non-zero exit, an HTTP status >= 400, an MCP isError; its effect may
    have happened, never retry blindly). Failed: the tool provably never started acting (or its
    effects are contained and the answer was lost): the only outcome safe to call again.
    Uncertain: it may have acted and the answer was lost; an operator confirms it, and no new
    call of the same request runs until then. Cancelled: interrupted before any effect.
    Denied: refused before executing. Previewed: a dry run. A duplicate (duplicateOf) ends in
    its first call's state."""
    message: str | None = None
    """Why the call is where it is (a denial names its stage and rule)."""
    request_hash: str | None = None
    """sha256 of the RFC 8785 JSON of namespace, tool id, version and arguments; approvals bind
    to it."""
    effect_hash: str | None = None
    """sha256 of what reaches the tool (the rendered http request, the shell argv, or the
    arguments; never the version): while a call is Uncertain and unconfirmed, no new call with
    the same effectHash (or requestHash) runs."""
    descriptor_digest: str | None = None
    """sha256 of the RFC 8785 JSON of the descriptor spec the call was validated against
    (without description and releaseId); approvals bind to it."""
    declared_class: SideEffectClass | None = None
    """The descriptor's sideEffectClass."""
    effective_class: SideEffectClass | None = None
    """The class the call runs as (never lower than declared)."""
    policy_decision_id: str | None = None
    """The tenant policy decision's id."""
    policy_reasons: list[str] = Field(default_factory=list)
    """The policy rules that applied."""
    approval: ApprovalBinding | None = None
    """The bound ToolApproval."""
    sandbox_lease: SandboxLease | None = None
    """The sandbox leased for the call."""
    execution: ExecutionRecord | None = None
    """What ran, and who claimed it."""
    result: InvocationResult | None = None
    """The sanitized result (inline when small)."""
    result_ref: str | None = None
    """The whole sanitized result in the artifact store (sha256:...)."""
    result_hash: str | None = None
    """The result's hash."""
    receipt: ReceiptSummary | None = None
    """A summary of the receipt."""
    receipt_ref: str | None = None
    """The tool-invocation-v1 receipt in the artifact store (a duplicate's is its winner's)."""
    audit_ref: str | None = None
    """This invocation's own receipt."""
    failure_class: FailureClass | None = None
    """Why the call did not succeed, e.g. permission-denied, policy-denied, validation,
    key-reused, or tool-error on an Observed call whose tool reported an error (duplicate:
    calls stored before duplicates ended as their first call)."""
    denied_stage: Stage | None = None
    """The stage that denied the call."""
    approval_forced: bool | None = None
    """A block-listed shell command escalated by policy needs an approval whatever its class."""
    approval_requested_at: str | None = None
    """When the wait for an approval began (its timeout counts from here, across restarts)."""
    retry_after_seconds: int | None = None
    """Denied `rate-limited`: when a new call may fit again."""
    stages: list[StageEntry] = Field(default_factory=list)
    """Every stage the call passed, in order, with its outcome and time."""
    started_at: str | None = None
    """When the operator began the call (RFC 3339)."""
    ended_at: str | None = None
    """When it ended (RFC 3339)."""
    duplicate_of: str | None = None
    """The first call with this idempotency key (same caller, same request): this call ended in
    its state, with its receiptRef and result, and ran nothing itself."""
    duplicate_of_uid: str | None = None
    """The uid of the call named by duplicateOf."""
    effect_confirmation: EffectConfirmation | None = None
    """An operator's statement on an Uncertain effect."""
    egress: list[EgressRecord] = Field(default_factory=list)
    """Connections through the egress proxy (bounded; the receipt's `egress` list)."""
    preview: InvocationPreview | None = None
    """A dry run's result (spec.dryRun)."""
    conditions: list[Condition] = Field(default_factory=list)
    """Finished (any terminal state: `kubectl wait --for=condition=Finished`) and Succeeded
    (Observed)."""
    observed_generation: int | None = None
    """The metadata.generation this status was written for."""
    trace_id: str | None = Field(default=None, pattern="^[0-9a-f]{32}$")
    """The OpenTelemetry trace of this call (32 hex), when the operator exports traces; derived
    from the uid, so a call resumed after a restart continues the same trace."""


# --------------------------------------------------------------------------- approval


class ToolApprovalSpec(Model):
    """A reviewer's decision on one invocation's exact request; immutable once created."""

    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                {
                    "rule": "self == oldSelf",
                    "message": "a ToolApproval's spec is immutable: create a new ToolApproval",
                }
            ]
        }
    )

    invocation: str = Field(min_length=1, max_length=253)
    """The ToolInvocation's name."""
    invocation_uid: str | None = Field(
        default=None,
        max_length=64,
        description="The invocation's metadata.uid; when set, the approval binds only to it "
        "(a deleted and recreated invocation of the same name has another uid).",
    )
    request_hash: str = Field(pattern=SHA256_REF_PATTERN, max_length=SHA256_REF_MAX)
    """The invocation's status.requestHash."""
    descriptor_digest: str = Field(
        pattern=SHA256_REF_PATTERN,
        max_length=SHA256_REF_MAX,
        description="The invocation's status.descriptorDigest: the approval binds only while "
        "the tool's descriptor is exactly the one the reviewer saw.",
    )
    tool_version: str = Field(pattern=VERSION_PATTERN, max_length=VERSION_MAX)
    """The invocation's tool version."""
    decision: ApprovalDecision
    """Approved or Rejected."""
    reviewer: str = Field(min_length=1, max_length=253)
    """The reviewer: must be the creating user and not the caller."""
    reviewer_groups: list[Annotated[str, Field(min_length=1, max_length=253)]] = Field(
        default_factory=list,
        max_length=64,
        description="Groups the reviewer claims; admission checks the creator is in each.",
    )
    comment: str = Field(default="", max_length=4096)
    """The reviewer's comment (quoted in a rejection)."""
    expires_at: str | None = Field(
        default=None,
        max_length=64,
        description="RFC 3339 time.",
        json_schema_extra={"format": "date-time"},
    )


class ToolApprovalStatus(Model):
    """Whether the approval bound to its invocation, and why not."""

    bound: bool = False
    """Whether it bound to its invocation."""
    bound_to: str | None = None
    """The invocation it bound to."""
    bound_uid: str | None = None
    """The uid of the invocation it bound to: approvals are single-use per invocation object."""
    bound_at: str | None = None
    """When it bound (RFC 3339)."""
    reason: str | None = None
    """Why it bound, or why not (e.g. descriptor-changed, already-used)."""


# --------------------------------------------------------------------------- policy


class ToolVersionRule(Model):
    """A tool (and version range) on a policy's allow or deny list."""

    id: str = Field(description="Tool id, or * for every tool.")
    versions: str = Field(default="", description="A version range, e.g. '>=1.0,<2'.")
    reason: str = ""
    """Quoted in denials."""


class ToolLists(Model):
    """Which tools may run in the namespace."""

    allow: list[ToolVersionRule] | None = Field(
        default=None, description="When set, only these tools may run in the namespace."
    )
    deny: list[ToolVersionRule] = Field(default_factory=list)
    """Tools denied in the namespace (deny wins over every allow)."""


class RateLimitPolicy(Model):
    """How descriptors' rateLimits are counted in the namespace."""

    per_caller: bool = Field(
        default=False,
        description="Count descriptors' rateLimits per caller as well as per namespace.",
    )


class ShellPolicy(Model):
    """Shell rules added to every shell tool's in the namespace."""

    allow: list[str] | None = Field(
        default=None,
        description="Narrows the tools' allow lists: when any policy sets one, a command must "
        "also match an entry of some policy's list to run without approval.",
    )
    block: list[str] = Field(
        default_factory=list, description="Blocked command patterns, added to every tool's."
    )
    block_action: BlockAction = Field(
        default=BlockAction.DENY,
        description="A block-listed command: deny, or escalate to production (approval).",
    )
    unlisted: UnlistedAction = Field(
        default=UnlistedAction.ESCALATE,
        description="A command on no allow list: escalate (raised to shared-write, it waits "
        "for an approval) or deny. Deny wins when policies differ.",
    )


class EgressPolicy(Model):
    """How a tenant narrows its sandboxes' egress."""

    allow: list[str] | None = Field(
        default=None,
        description="Narrows every sandbox's egress allow-list: an entry survives only when "
        "one of these covers it (a host, `*.suffix` or CIDR entry; a port must match).",
    )


class SpendPolicy(Model):
    """How spend-class calls are gated."""

    argument: str = Field(default="amount", description="Argument holding the amount.")
    threshold: float = Field(default=0, ge=0)
    """Spend calls above this amount wait for an approval."""
    prohibited: bool = False
    """Deny every spend call."""


class ApprovalPolicy(Model):
    """How long gated calls wait for an approval, and who may approve them."""

    timeout_seconds: int = Field(default=3600, ge=1, le=7 * 86_400)
    """How long a gated call waits for an approval before it is Denied (the shortest of the
    policies applies)."""
    reviewer_groups: list[str] = Field(default_factory=list)
    """Groups whose members may approve (empty: any reviewer)."""
    production_reviewer_groups: list[str] = Field(default_factory=list)
    """Groups whose members may approve production-class calls."""


class ArgumentCondition(Model):
    """A rule on one argument value: deny the call or require an approval."""

    tool: str = "*"
    """Tool ids the condition applies to (a glob; * for all)."""
    path: str = Field(description="JSON pointer into the arguments, e.g. /target/env.")
    operator: Literal["equals", "notEquals", "in", "matches", "greaterThan", "lessThan", "exists"]
    """equals, notEquals, in, matches (RE2), greaterThan, lessThan or exists."""
    value: Any = Field(default=None, json_schema_extra=FREE_FORM)
    """The value to compare with."""
    effect: Literal["deny", "requireApproval"] = "deny"
    """deny the call, or requireApproval."""
    reason: str = ""
    """Quoted in the decision."""


class ToolPolicySpec(Model):
    """Tenant policy for the namespace: tool lists, class ceiling, shell, spend, approvals,
    argument conditions. Several policies combine: deny wins, allow lists add up, the
    strictest ceiling and timeout apply."""

    tools: ToolLists = Field(default_factory=ToolLists)
    """Allow and deny lists of tools (with version ranges)."""
    max_class: SideEffectClass | None = None
    """The highest effective class allowed in the namespace."""
    shell: ShellPolicy = Field(default_factory=ShellPolicy)
    """Shell allow and block lists, and what to do with blocked or unlisted commands."""
    spend: SpendPolicy | None = None
    """How spend-class calls are gated."""
    approval: ApprovalPolicy | None = None
    """Approval timeout and reviewer groups."""
    rate_limits: RateLimitPolicy = Field(default_factory=RateLimitPolicy)
    """How descriptors' rateLimits are counted."""
    egress: EgressPolicy = Field(default_factory=EgressPolicy)
    """Narrows every sandbox's egress allow-list."""
    conditions: list[ArgumentCondition] = Field(default_factory=list)
    """Rules on argument values."""


class ToolPolicyStatus(Model):
    """Whether the policy is valid, and the rules it contributes."""

    valid: bool = False
    """Whether the policy is valid (an invalid one denies every call until fixed)."""
    rules: list[str] = Field(default_factory=list)
    """The rules it contributes."""
    message: str | None = None
    """What is wrong with it, when invalid."""
    observed_generation: int | None = None
    """The metadata.generation this status was computed for."""


# --------------------------------------------------------------------------- resources


class Resource(Model):
    """A whole object as the API returns it; metadata stays a plain dict."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="ignore")
    api_version: str = "tooladapter.dev/v1alpha1"
    kind: str
    metadata: dict[str, Any] = Field(default_factory=dict)


class ToolDescriptor(Resource):
    """A published tool version: what it takes, how it runs, its side-effect class."""

    kind: Literal["ToolDescriptor"] = "ToolDescriptor"
    spec: ToolDescriptorSpec
    status: ToolDescriptorStatus | None = None


class McpServer(Resource):
    """A registered MCP server whose discovered tools back `mcp` descriptors once activated."""

    kind: Literal["McpServer"] = "McpServer"
    spec: McpServerSpec
    status: McpServerStatus | None = None


class ToolInvocation(Resource):
    """One tool call by an agent, walked through the governed pipeline to a receipt."""

    kind: Literal["ToolInvocation"] = "ToolInvocation"
    spec: ToolInvocationSpec
    status: ToolInvocationStatus | None = None


class ToolApproval(Resource):
    """A reviewer's decision on a gated invocation, bound to its exact request hash."""

    kind: Literal["ToolApproval"] = "ToolApproval"
    spec: ToolApprovalSpec
    status: ToolApprovalStatus | None = None


class ToolPolicy(Resource):
    """Tenant policy for the namespace: tool lists, class ceiling, shell, spend, approvals."""

    kind: Literal["ToolPolicy"] = "ToolPolicy"
    spec: ToolPolicySpec
    status: ToolPolicyStatus | None = None


#: Every resource with its CRD naming: (model, spec model, status model, plural, short names).
RESOURCES: tuple[tuple[type[Resource], type[Model], type[Model], str, tuple[str, ...]], ...] = (
    (ToolDescriptor, ToolDescriptorSpec, ToolDescriptorStatus, "tooldescriptors", ("td", "tool")),
    (McpServer, McpServerSpec, McpServerStatus, "mcpservers", ("mcps",)),
    (ToolInvocation, ToolInvocationSpec, ToolInvocationStatus, "toolinvocations", ("ti", "tinv")),
    (ToolApproval, ToolApprovalSpec, ToolApprovalStatus, "toolapprovals", ("tapr",)),
    (ToolPolicy, ToolPolicySpec, ToolPolicyStatus, "toolpolicies", ("tpol",)),
)
