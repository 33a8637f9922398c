"""ToolInvocation: one tool call by an agent, walked through the governed pipeline.

The spec is what the agent asked (immutable but `interrupt`); the status is the operator's
record of the walk: stages, the bound approval, the sandbox lease, the result and the receipt.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import ConfigDict, Field

from tooladapter.enums import (
    EgressVerdict,
    FailureClass,
    InvocationState,
    SandboxKind,
    SandboxStart,
    SideEffectClass,
    Stage,
    StageOutcome,
    ToolKind,
)
from tooladapter.model.base import FREE_FORM, FREE_FORM_ATOMIC, Model, Resource, no_crd_default
from tooladapter.model.common import (
    TOOL_ID_MAX,
    TOOL_ID_PATTERN,
    VERSION_MAX,
    VERSION_PATTERN,
    Condition,
)
from tooladapter.model.dataflow import DataFlowRecord
from tooladapter.model.preview import InvocationPreview


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
    """Immutable once created, except `interrupt` and `releaseWorkspace`, which may only go
    from false to true."""

    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                {
                    "rule": "!has(self.releaseWorkspace) || !self.releaseWorkspace || "
                    "(has(self.attemptId) && size(self.attemptId) > 0)",
                    "message": "spec.releaseWorkspace needs spec.attemptId: the attempt "
                    "whose workspace it releases",
                    "fieldPath": ".releaseWorkspace",
                }
            ]
        }
    )

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
    """Set to true to stop the call (may change after create, never back to false)."""
    release_workspace: bool = False
    """Set to true (at create, or later by the caller) to release the attempt's workspace
    (spec.attemptId: its pod and volume deleted) once this call has ended: what `tooladapter
    workspace release` does without a gateway or pod rights. Never back to false; the
    operator records when in status.workspaceReleasedAt."""
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
    lists_digest: str | None = None
    """The digest of the shell and egress lists its call was approved with
    (status.approvedLists): what the reviewer approved stays what runs."""


class ApprovedLists(Model):
    """The effective shell and egress lists of a gated call when its approval was asked for:
    what its reviewer approves. The re-check right before the call acts denies it when any
    of them has widened since (an allow or egress entry added, a block pattern removed)."""

    shell_allow: list[str] | None = None
    """The shell allow list in force (the descriptor's, else the operator's default);
    absent: not a shell tool."""
    shell_allow_narrowing: list[str] | None = None
    """The policies' shell allow lists (their union), which narrow it; absent: none does."""
    shell_block: list[str] | None = None
    """Every block pattern: the operator's default, the tool's, the policies'; absent: not
    a shell tool."""
    egress_allow: list[str] | None = None
    """The sandbox's egress allow list, narrowed by the policies; absent: no sandbox."""
    digest: str
    """sha256 of the RFC 8785 JSON of the lists above."""


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
    """When the connection ended (RFC 3339); the last one's, for a folded record."""
    count: int = Field(default=1, ge=1)
    """How many connections the record stands for: more than 1 when the proxy folded
    connections beyond its per-lease caps into one record per verdict, host and port (their
    bytes summed), so no connection goes uncounted."""
    others: bool = False
    """The record counts connections to hosts beyond the proxy's fold cap (its host is
    empty): counted whole, never dropped."""


class CredentialUse(Model):
    """One credential a call carried (never its value): status and the receipt."""

    name: str
    """The entry of the descriptor's (or server's) `credentials`."""
    source: Literal[
        "secretKeyRef", "serviceAccountToken", "oauth2ClientCredentials", "tokenExchange"
    ]
    """Where the value came from."""
    hosts: list[str] = Field(default_factory=list)
    """Where it went: the hosts whose requests carry it (HTTP injection)."""
    file: str | None = None
    """Where it went: the read-only file a container tool's command reads."""
    expires_at: str | None = None
    """A token's expiry (RFC 3339; for an issuer's token, as the issuer said)."""
    token_url: str | None = None
    """An issued token: the issuer's token endpoint."""
    scopes: list[str] | None = None
    """An issued token: the scopes the issuer granted (as asked when it did not say)."""
    audience: str | None = None
    """An issued token: the audience asked for."""
    subject: str | None = None
    """An exchanged token: on whose behalf (the caller's ServiceAccount)."""
    revoked: bool | None = None
    """An issued token with a revocation endpoint: whether the issuer confirmed its
    revocation at the call's end (false: it did not answer in time, or refused)."""


class EgressUse(Model):
    """The connections of one verdict, host and port, as counted over every record of the
    lease (status and receipt; the whole list is at egressRecordsRef)."""

    host: str = Field(default="", json_schema_extra=no_crd_default)
    """The host; empty on an `others` row."""
    port: int | None = None
    """Its port (none on an `others` row)."""
    verdict: EgressVerdict
    """What the proxy decided: `allowed` rows count connections that went out."""
    reason: str = Field(default="", json_schema_extra=no_crd_default)
    """The first refusal's reason, for a refused row."""
    connections: int = 0
    """How many connections (or refused requests) the row counts."""
    bytes_up: int = 0
    """Bytes sent upstream, summed."""
    bytes_down: int = 0
    """Bytes sent back to the sandbox, summed."""
    others: bool = False
    """The row counts every host of its verdict beyond the listed ones, whole."""


class EgressRefusal(Model):
    """Connections of the sandbox that the egress proxy refused or could not make, as the
    agent reads them beside the tool's output (`status.result.egressRefused`): a tool that
    only says "CONNECT tunnel failed, response 502" did not reach its host, and this says
    why. Written by tooladapter from the proxy's records (`status.egress`), never by the
    tool; redacted and bounded like a message."""

    host: str = Field(default="", json_schema_extra=no_crd_default)
    """The host the sandbox asked for; empty on a row that counts every further host."""
    port: int | None = None
    """Its port."""
    verdict: EgressVerdict
    """What the proxy decided: not-allowed, ip-literal, private-address, sni-mismatch,
    upstream-failed (the name did not resolve, or the host could not be reached), ..."""
    reason: str = Field(default="", json_schema_extra=no_crd_default)
    """Why, in the proxy's words (e.g. `github.com did not resolve`)."""
    connections: int = 0
    """How many connections (or requests) it refused for that reason."""


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
    egress_refused: list[EgressRefusal] = Field(default_factory=list)
    """A sandboxed call's connections that the egress proxy refused or could not make, with
    the proxy's reason: tooladapter's record beside the tool's output (never part of
    `content`, its hash or its size)."""


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
    """How long the sandbox's tool ran, on the operator's own clock to the millisecond: from
    when it may start (its tool's container started, past an init container's network gate
    or with the gate's probe where it runs in that container, or the exec in a warm pod) to
    when its end was seen; a call killed at its deadline counts its whole run, and a tool
    that started counts at least 0.001. The one value tooladapter_sandbox_seconds_total and
    the receipt's usage meter."""


class ToolInvocationStatus(Model):
    """The call's walk through the pipeline, written by the operator."""

    state: InvocationState = InvocationState.RECEIVED
    """Received, Validated, Authorized, AwaitingApproval, Brokered, Executing, then one terminal
    state. Observed: the tool ran to its end and answered, whatever it said (result.isError
    marks its own error: a non-zero exit, an HTTP status >= 400, an MCP isError; its effect may
    have happened, never retry blindly). Failed: the tool provably never started acting (its
    request was not sent: not connected, or cut short before its last byte), or its effects
    are contained and the answer was lost: the only outcome safe to call again. Uncertain: it
    may have acted (its request's last byte was written) and the answer was lost, by a reset,
    a close, a timeout or a 502/504; an operator confirms it, and no new
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
    approved_lists: ApprovedLists | None = None
    """The shell and egress lists in force when the approval was asked for: a call whose
    lists widened since is Denied right before it acts."""
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
    workspace_released_at: str | None = None
    """When the operator released the attempt's workspace at spec.releaseWorkspace (RFC 3339;
    the workspace pods made before then were deleted)."""
    egress: list[EgressUse] = Field(default_factory=list)
    """Connections through the egress proxy counted per verdict, host and port: allowed
    hosts and refused ones listed separately and capped, each beyond its cap in one
    `others` row, so every connection and byte is counted and refusals never push an
    allowed connection out (the receipt's `egress`)."""
    credentials: list[CredentialUse] = Field(default_factory=list)
    """The credentials the call carried (`spec.credentials` of its descriptor): name, source
    kind, where each went, a token's expiry; never a value."""
    data_flow: DataFlowRecord | None = None
    """The data-flow rule's view of the call: the labels its result brings, the labels its
    scopes held with the calls that brought them, whether it is a sink, and why it was
    gated (`pipeline.dataflow`)."""
    egress_records_ref: str | None = None
    """The proxy's whole list of the lease's connection records in the artifact store
    (sha256:...), which the receipt references."""
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


class ToolInvocation(Resource):
    """One tool call by an agent, walked through the governed pipeline to a receipt."""

    kind: Literal["ToolInvocation"] = "ToolInvocation"
    spec: ToolInvocationSpec
    status: ToolInvocationStatus | None = None
