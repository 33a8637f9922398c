"""The five resources of tooladapter as pydantic v2 models: the one source of truth.

The CRDs in `crds/` are generated from these models (`make crds`, see `crdgen`), so a field
added here appears in the API server's schema. Python attributes are snake_case; the wire
names are camelCase, as Kubernetes does. A raw body from the API is parsed once at the edge
(`ToolInvocation.model_validate(body)`) and typed data travels inward.

`json_schema_extra` keys starting with `x-kubernetes-` pass through to the CRD untouched:
that is how CEL rules, preserve-unknown-fields and list types reach the API server.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError
from pydantic.alias_generators import to_camel
from pydantic.config import JsonDict

from .enums import (
    ApprovalDecision,
    BlockAction,
    EgressVerdict,
    FailureClass,
    InvocationState,
    McpServerPhase,
    RiskClass,
    SandboxKind,
    SideEffectClass,
    Stage,
    StageOutcome,
    ToolKind,
    UnlistedAction,
)

#: Free-form JSON subtrees (schemas, arguments, results) keep unknown fields.
FREE_FORM: dict[str, Any] = {"x-kubernetes-preserve-unknown-fields": True}

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
    )

    def wire(self) -> dict[str, Any]:
        """The JSON-ready, camelCase form without unset optionals."""
        return self.model_dump(by_alias=True, exclude_none=True, mode="json")


class Condition(Model):
    type: str
    status: Literal["True", "False", "Unknown"]
    reason: str = ""
    message: str = ""
    last_transition_time: str | None = None
    observed_generation: int | None = None


# --------------------------------------------------------------------------- descriptor


class SecretDependency(Model):
    secret_name: str = Field(min_length=1, max_length=253)
    keys: list[str] = Field(min_length=1, description="Only these keys are brokered.")


class ServiceAccountIdentity(Model):
    """Ask for a TokenRequest-bound token of this ServiceAccount, expiring with the call."""

    service_account_name: str = Field(min_length=1, max_length=253)
    audiences: list[str] = Field(default_factory=list)


class Authorization(Model):
    # The reference's `scopes`/`roles` are not here: nothing could enforce them yet, and a
    # field that looks enforced but is not is worse than none. Who may call a tool is RBAC
    # (`invoke` on tooldescriptors/<toolId>).
    kubernetes_identity: ServiceAccountIdentity | None = None


class RetryPolicy(Model):
    """Tool-level retries apply only to calls that provably had no effect: nothing left the
    operator (connection refused, the sandbox Job refused by the API server). Never for an
    Uncertain call, never after a request was sent."""

    max_attempts: int = Field(default=1, ge=1, le=10)
    backoff_seconds: int = Field(default=0, ge=0, le=3600)


class RateLimits(Model):
    """Per tool and tenant (and per caller where a ToolPolicy says so), counted when a call
    starts executing; a call over a limit is Denied `rate-limited` with retryAfterSeconds."""

    per_minute: int | None = Field(default=None, ge=1)
    concurrency: int | None = Field(default=None, ge=1)


class AuditRequirements(Model):
    arguments_hash: bool = True
    output_hash: bool = True
    command_line: bool = True


class ResourceQuantities(Model):
    cpu: str | None = None
    memory: str | None = None


class Resources(Model):
    requests: ResourceQuantities = Field(default_factory=ResourceQuantities)
    limits: ResourceQuantities = Field(default_factory=ResourceQuantities)


class SecretKeyRef(Model):
    name: str = Field(min_length=1)
    key: str = Field(min_length=1)


class EgressCredential(Model):
    """A header the egress proxy adds to requests for `host`: the sandbox never holds it."""

    host: str = Field(
        min_length=1,
        max_length=260,
        description="Host name (exact or `*.suffix`), optionally `:port`, as in `allow`; the "
        "sandbox sends plain `http://host/...` to the proxy, which speaks verified TLS upstream.",
    )
    header: str = Field(default="Authorization", min_length=1, max_length=128)
    scheme: str = Field(
        default="Bearer", max_length=64, description="Prefix of the header value; may be empty."
    )
    secret_key_ref: SecretKeyRef


class Egress(Model):
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
    kind: SandboxKind = SandboxKind.CONTAINER
    image: str = "localhost/tooladapter-sandbox:dev"
    command: list[str] = Field(default_factory=list)
    resources: Resources = Field(default_factory=Resources)
    runtime_class_name: str | None = Field(
        default=None,
        description="RuntimeClass of the pod; when unset, the one TOOLADAPTER_RUNTIME_CLASSES "
        "maps `kind` to (Container: the node's default).",
    )
    workspace_size_limit: str = "64Mi"
    pool_id: str = "default"
    egress: Egress = Field(default_factory=Egress)


class ShellSpec(Model):
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
    method: Literal["GET", "POST", "PUT", "PATCH", "DELETE", "HEAD"] = "GET"
    url: str = Field(min_length=1, description="May hold {name} placeholders from arguments.")
    headers: dict[str, str] = Field(default_factory=dict)
    body: str | None = None
    allowed_hosts: list[str] = Field(
        default_factory=list,
        description="Hosts (host or host:port) the URL may name. An IP literal here also "
        "allows connecting to that address when it is loopback, private or link-local; a "
        "host name never does.",
    )


class McpBinding(Model):
    server: str = Field(min_length=1, description="McpServer name in the same namespace.")
    tool: str = Field(min_length=1)
    pinned_digest: str = Field(pattern=SHA256_REF_PATTERN)


class NativeSpec(Model):
    name: Literal["list-tools", "read-configmap"]


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


def _requires_block(kind: ToolKind, field: str, extra: str = "") -> JsonDict:
    """A CEL rule: a descriptor of `kind` must carry its kind-specific block `field`."""
    return {
        "rule": f"self.kind != '{kind.value}' || "
        + (f"(has(self.{field}){extra})" if extra else f"has(self.{field})"),
        "message": f"spec.{field} is required when kind is {kind.value}",
        "fieldPath": f".{field}",
        "reason": "FieldValueRequired",
    }


class ToolDescriptorSpec(Model):
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
    version: str = Field(pattern=VERSION_PATTERN, max_length=VERSION_MAX)
    kind: ToolKind
    description: str = ""
    release_id: str = ""
    input_schema: dict[str, Any] = Field(
        default_factory=lambda: {"type": "object"}, json_schema_extra=FREE_FORM
    )
    output_schema: dict[str, Any] | None = Field(default=None, json_schema_extra=FREE_FORM)
    side_effect_class: SideEffectClass
    risk_class: RiskClass | None = None
    authorization: Authorization = Field(default_factory=Authorization)
    secret_dependencies: list[SecretDependency] = Field(default_factory=list)
    timeout_seconds: int = Field(default=DEFAULT_TIMEOUT_SECONDS, ge=1, le=86_400)
    max_result_bytes: int = Field(default=DEFAULT_MAX_RESULT_BYTES, ge=1024, le=64 * 1_048_576)
    retry_policy: RetryPolicy = Field(default_factory=RetryPolicy)
    rate_limits: RateLimits = Field(default_factory=RateLimits)
    audit_requirements: AuditRequirements = Field(default_factory=AuditRequirements)
    sandbox: SandboxSpec | None = None
    shell: ShellSpec | None = None
    http: HttpSpec | None = None
    mcp: McpBinding | None = None
    native: NativeSpec | None = None
    retired: bool = False

    @property
    def sandbox_spec(self) -> SandboxSpec | None:
        """The sandbox a shell or container tool runs in: a shell tool without a `sandbox`
        block gets the default one (no egress, default limits); other kinds get none."""
        if self.kind == ToolKind.SHELL:
            return self.sandbox or SandboxSpec()
        if self.kind == ToolKind.CONTAINER:
            return self.sandbox
        return None


class ToolDescriptorStatus(Model):
    active: bool = False
    healthy: bool = False
    schema_digest: str | None = None
    message: str | None = None
    conditions: list[Condition] = Field(default_factory=list)
    observed_generation: int | None = None


# --------------------------------------------------------------------------- MCP server


class McpCredentials(Model):
    secret_key_ref: SecretKeyRef
    header: str = "Authorization"
    scheme: str = Field(default="Bearer", description="Prefix of the header value; may be empty.")


class McpProbe(Model):
    interval_seconds: int = Field(default=30, ge=1, le=3600)
    timeout_seconds: int = Field(default=10, ge=1, le=300)
    failure_threshold: int = Field(default=3, ge=1, le=100)


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
    transport: Literal["streamable-http"] = "streamable-http"
    credentials: McpCredentials | None = None
    activated: bool = Field(
        default=False,
        description="Set by a platform admin to activate; the credentials are sent only to "
        "an activated server.",
    )
    retired: bool = False
    probe: McpProbe = Field(default_factory=McpProbe)
    allowed_cidrs: list[Annotated[str, Field(max_length=64, json_schema_extra=_CIDR)]] = Field(
        default_factory=list,
        max_length=32,
        description="Non-public networks the server may be reached at (loopback, private, "
        "link-local: a server in the cluster or on this machine), e.g. 10.96.0.0/12 or "
        "127.0.0.1/32; public addresses need no entry.",
    )


class McpToolInfo(Model):
    name: str
    title: str | None = None
    description: str = ""
    digest: str
    annotations: dict[str, Any] | None = Field(default=None, json_schema_extra=FREE_FORM)


class McpResourceInfo(Model):
    uri: str
    name: str = ""
    description: str = ""


class McpPromptInfo(Model):
    name: str
    description: str = ""


class McpToolBinding(Model):
    descriptor: str
    tool: str
    bound: bool
    reason: str = ""


class McpProbeResult(Model):
    time: str
    ok: bool
    message: str = ""


class McpServerStatus(Model):
    phase: McpServerPhase = McpServerPhase.REGISTERED
    #: The url a probe without credentials reached (it answered, or asked for credentials
    #: with 401): the credentials are sent only to this url, and only once activated.
    verified_url: str | None = None
    protocol_version: str | None = None
    server_name: str | None = None
    server_version: str | None = None
    server_digest: str | None = None
    tools: list[McpToolInfo] = Field(default_factory=list)
    resources: list[McpResourceInfo] = Field(default_factory=list)
    prompts: list[McpPromptInfo] = Field(default_factory=list)
    bindings: list[McpToolBinding] = Field(default_factory=list)
    shadowing: list[str] = Field(default_factory=list)
    last_probe: McpProbeResult | None = None
    consecutive_failures: int = 0
    conditions: list[Condition] = Field(default_factory=list)
    observed_generation: int | None = None


# --------------------------------------------------------------------------- invocation


class ToolRef(Model):
    id: str = Field(pattern=TOOL_ID_PATTERN, max_length=TOOL_ID_MAX)
    version: str = Field(pattern=VERSION_PATTERN, max_length=VERSION_MAX)


class Caller(Model):
    kind: Literal["agent", "user", "service"] = "agent"
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
    arguments: dict[str, Any] = Field(default_factory=dict, json_schema_extra=FREE_FORM)
    caller: Caller
    run_id: str | None = Field(default=None, max_length=128)
    attempt_id: str | None = Field(default=None, max_length=128)
    fencing_token: int | None = Field(
        default=None,
        ge=0,
        # RFC 8785 (receipts, hashes) takes integers up to 2^53 - 1 only.
        le=2**53 - 1,
    )
    idempotency_key: str | None = Field(default=None, min_length=1, max_length=256)
    environment_id: str | None = Field(default=None, max_length=128)
    interrupt: bool = False


class StageEntry(Model):
    stage: Stage
    outcome: StageOutcome
    time: str
    detail: str = ""


class ApprovalBinding(Model):
    name: str
    reviewer: str
    bound_at: str
    request_hash: str
    descriptor_digest: str | None = None
    tool_version: str


class LeaseLimits(Model):
    cpu: str | None = None
    memory: str | None = None
    timeout_seconds: int
    egress_allow: list[str] = Field(default_factory=list)


class SandboxLease(Model):
    lease_id: str
    kind: SandboxKind
    pool_id: str
    workspace_ref: str | None = None
    limits: LeaseLimits
    credential_expiry: str | None = None
    leased_at: str
    released_at: str | None = None
    job_name: str | None = None
    network_policy_name: str | None = None
    secret_name: str | None = None
    #: The RuntimeClass the sandbox pod runs with (None: the node's default runtime).
    runtime_class: str | None = None
    #: `address:port` of the egress proxy the pod was pointed at (None: no host egress).
    egress_proxy: str | None = None


class EgressRecord(Model):
    """One connection of a sandbox through the egress proxy, as the proxy recorded it."""

    host: str
    port: int
    method: str
    verdict: EgressVerdict
    reason: str = ""
    bytes_up: int = 0
    bytes_down: int = 0
    at: str | None = None


class InvocationResult(Model):
    """A sanitized result, inline when small; the whole result is at `resultRef`."""

    provenance: Literal["tool-result"] = "tool-result"
    content: str = ""
    structured_content: dict[str, Any] | None = Field(default=None, json_schema_extra=FREE_FORM)
    truncated: bool = False
    inline: bool = True
    original_bytes: int = 0
    original_sha256: str | None = None
    redactions: list[str] = Field(default_factory=list)
    exit_code: int | None = None


class ReceiptSummary(Model):
    schema_: str = Field(default="tool-invocation-v1", alias="schema")
    state: InvocationState
    effective_class: SideEffectClass | None = None
    request_hash: str | None = None
    result_hash: str | None = None
    approval_id: str | None = None
    policy_decision_id: str | None = None
    effect_confirmed: bool | None = None
    written_at: str


class EffectConfirmation(Model):
    """Patched onto status by a person with the Operator role for an Uncertain effect."""

    effect_happened: bool
    confirmed_by: str = Field(min_length=1)
    evidence: str = Field(min_length=1, max_length=4096)
    confirmed_at: str | None = None
    recorded: bool = False


class ExecutionRecord(Model):
    """What the operator needs to follow an execution after a restart."""

    kind: ToolKind
    started_at: str
    job_name: str | None = None
    #: The argv a shell or container tool runs (after the shell check), for the receipt.
    command_line: list[str] = Field(default_factory=list)
    #: The operator process that claimed the execution (one claim per invocation).
    holder: str | None = None
    #: Attempts made under the descriptor's retryPolicy (1: no retry so far).
    attempts: int = 1


class ToolInvocationStatus(Model):
    state: InvocationState = InvocationState.RECEIVED
    message: str | None = None
    request_hash: str | None = None
    #: sha256 of the descriptor spec the call was validated against (see `descriptor_digest`).
    descriptor_digest: str | None = None
    declared_class: SideEffectClass | None = None
    effective_class: SideEffectClass | None = None
    policy_decision_id: str | None = None
    policy_reasons: list[str] = Field(default_factory=list)
    approval: ApprovalBinding | None = None
    sandbox_lease: SandboxLease | None = None
    execution: ExecutionRecord | None = None
    result: InvocationResult | None = None
    result_ref: str | None = None
    result_hash: str | None = None
    receipt: ReceiptSummary | None = None
    receipt_ref: str | None = None
    audit_ref: str | None = None
    failure_class: FailureClass | None = None
    denied_stage: Stage | None = None
    #: A block-listed shell command escalated by policy needs an approval whatever its class.
    approval_forced: bool | None = None
    #: When the wait for an approval began (its timeout counts from here, across restarts).
    approval_requested_at: str | None = None
    #: Denied `rate-limited`: when a new call may fit again.
    retry_after_seconds: int | None = None
    stages: list[StageEntry] = Field(default_factory=list)
    started_at: str | None = None
    ended_at: str | None = None
    duplicate_of: str | None = None
    effect_confirmation: EffectConfirmation | None = None
    #: Connections through the egress proxy (bounded; the receipt's `egress` list).
    egress: list[EgressRecord] = Field(default_factory=list)
    observed_generation: int | None = None


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
    invocation_uid: str | None = Field(
        default=None,
        max_length=64,
        description="The invocation's metadata.uid; when set, the approval binds only to it "
        "(a deleted and recreated invocation of the same name has another uid).",
    )
    request_hash: str = Field(pattern=SHA256_REF_PATTERN, max_length=SHA256_REF_MAX)
    descriptor_digest: str = Field(
        pattern=SHA256_REF_PATTERN,
        max_length=SHA256_REF_MAX,
        description="The invocation's status.descriptorDigest: the approval binds only while "
        "the tool's descriptor is exactly the one the reviewer saw.",
    )
    tool_version: str = Field(pattern=VERSION_PATTERN, max_length=VERSION_MAX)
    decision: ApprovalDecision
    reviewer: str = Field(min_length=1, max_length=253)
    reviewer_groups: list[Annotated[str, Field(min_length=1, max_length=253)]] = Field(
        default_factory=list,
        max_length=64,
        description="Groups the reviewer claims; admission checks the creator is in each.",
    )
    comment: str = Field(default="", max_length=4096)
    expires_at: str | None = Field(
        default=None,
        max_length=64,
        description="RFC 3339 time.",
        json_schema_extra={"format": "date-time"},
    )


class ToolApprovalStatus(Model):
    bound: bool = False
    bound_to: str | None = None
    #: The uid of the invocation it bound to: approvals are single-use per invocation object.
    bound_uid: str | None = None
    bound_at: str | None = None
    reason: str | None = None


# --------------------------------------------------------------------------- policy


class ToolVersionRule(Model):
    id: str = Field(description="Tool id, or * for every tool.")
    versions: str = Field(default="", description="A version range, e.g. '>=1.0,<2'.")
    reason: str = ""


class ToolLists(Model):
    allow: list[ToolVersionRule] | None = Field(
        default=None, description="When set, only these tools may run in the namespace."
    )
    deny: list[ToolVersionRule] = Field(default_factory=list)


class RateLimitPolicy(Model):
    per_caller: bool = Field(
        default=False,
        description="Count descriptors' rateLimits per caller as well as per namespace.",
    )


class ShellPolicy(Model):
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
    allow: list[str] | None = Field(
        default=None,
        description="Narrows every sandbox's egress allow-list: an entry survives only when "
        "one of these covers it (a host, `*.suffix` or CIDR entry; a port must match).",
    )


class SpendPolicy(Model):
    argument: str = Field(default="amount", description="Argument holding the amount.")
    threshold: float = Field(default=0, ge=0)
    prohibited: bool = False


class ApprovalPolicy(Model):
    timeout_seconds: int = Field(default=3600, ge=1, le=7 * 86_400)
    reviewer_groups: list[str] = Field(default_factory=list)
    production_reviewer_groups: list[str] = Field(default_factory=list)


class ArgumentCondition(Model):
    tool: str = "*"
    path: str = Field(description="JSON pointer into the arguments, e.g. /target/env.")
    operator: Literal["equals", "notEquals", "in", "matches", "greaterThan", "lessThan", "exists"]
    value: Any = Field(default=None, json_schema_extra=FREE_FORM)
    effect: Literal["deny", "requireApproval"] = "deny"
    reason: str = ""


class ToolPolicySpec(Model):
    tools: ToolLists = Field(default_factory=ToolLists)
    max_class: SideEffectClass | None = None
    shell: ShellPolicy = Field(default_factory=ShellPolicy)
    spend: SpendPolicy | None = None
    approval: ApprovalPolicy | None = None
    rate_limits: RateLimitPolicy = Field(default_factory=RateLimitPolicy)
    egress: EgressPolicy = Field(default_factory=EgressPolicy)
    conditions: list[ArgumentCondition] = Field(default_factory=list)


class ToolPolicyStatus(Model):
    valid: bool = False
    rules: list[str] = Field(default_factory=list)
    message: str | None = None
    observed_generation: int | None = None


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
