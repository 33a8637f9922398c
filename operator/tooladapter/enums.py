"""The closed vocabularies of tooladapter, as string enums.

String enums serialise as their plain values, so the same names appear in CRDs, status,
receipts, events and metrics labels.
"""

from __future__ import annotations

from enum import StrEnum


class ToolKind(StrEnum):
    NATIVE = "native"
    MCP = "mcp"
    SHELL = "shell"
    CONTAINER = "container"
    HTTP = "http"


class SideEffectClass(StrEnum):
    """Declared or effective side-effect class; `rank` orders them for "never lower"."""

    READ = "read"
    SANDBOX = "sandbox"
    SHARED_WRITE = "shared-write"
    EXTERNAL = "external"
    PRODUCTION = "production"
    SPEND = "spend"

    @property
    def rank(self) -> int:
        return _CLASS_RANK[self]

    @classmethod
    def highest(cls, *classes: SideEffectClass) -> SideEffectClass:
        return max(classes, key=lambda c: c.rank)

    @property
    def effects_contained(self) -> bool:
        """The one rule behind Failed vs Uncertain: a read tool has no effect and a sandbox
        tool only one inside its own throwaway sandbox, so an unconfirmed end of either is
        Failed (safe to retry); any other class may have changed the world: Uncertain."""
        return self in _CONTAINED_CLASSES


class Transmission(StrEnum):
    """How far a request (or a sandbox's run) got before something broke: what decides
    whether it was sent (`executors.sending`).

    For a request: nothing written (not connected, or connected with not a byte of it
    written), part of it written, its last byte written, its answer begun. For a sandbox:
    no Job or no pod (nothing written), the pod scheduled or its tool running (written: the
    tool may have started), its end recorded (answered)."""

    NOT_WRITTEN = "not-written"
    PARTLY_WRITTEN = "partly-written"
    WRITTEN = "written"
    ANSWERED = "answered"

    @property
    def sent(self) -> bool:
        """Its last byte was written: whoever received it may have acted on it. A request
        cut short cannot be acted on (a server does not process an incomplete message)."""
        return self in (Transmission.WRITTEN, Transmission.ANSWERED)


# spend is financial: ranked beside production so nothing "raises" spend to a lower class.
_CLASS_RANK = {
    SideEffectClass.READ: 0,
    SideEffectClass.SANDBOX: 1,
    SideEffectClass.SHARED_WRITE: 2,
    SideEffectClass.EXTERNAL: 3,
    SideEffectClass.PRODUCTION: 4,
    SideEffectClass.SPEND: 5,
}

_CONTAINED_CLASSES = frozenset({SideEffectClass.READ, SideEffectClass.SANDBOX})

#: Classes that execute only with a bound approval (spend only above the policy threshold).
GATED_CLASSES = frozenset(
    {SideEffectClass.SHARED_WRITE, SideEffectClass.EXTERNAL, SideEffectClass.PRODUCTION}
)


class RiskClass(StrEnum):
    """The original design's risk table (reference: "Risk classes")."""

    READ_ONLY = "READ_ONLY"
    SANDBOX_WORK = "SANDBOX_WORK"
    REVERSIBLE_WRITE = "REVERSIBLE_WRITE"
    EXTERNAL_EFFECT = "EXTERNAL_EFFECT"
    IRREVERSIBLE_WRITE = "IRREVERSIBLE_WRITE"
    PRODUCTION = "PRODUCTION"
    SECURITY_SENSITIVE = "SECURITY_SENSITIVE"
    FINANCIAL = "FINANCIAL"


#: The side-effect class each risk class maps onto (reference table).
RISK_TO_CLASS = {
    RiskClass.READ_ONLY: SideEffectClass.READ,
    RiskClass.SANDBOX_WORK: SideEffectClass.SANDBOX,
    RiskClass.REVERSIBLE_WRITE: SideEffectClass.SHARED_WRITE,
    RiskClass.EXTERNAL_EFFECT: SideEffectClass.EXTERNAL,
    RiskClass.IRREVERSIBLE_WRITE: SideEffectClass.PRODUCTION,
    RiskClass.PRODUCTION: SideEffectClass.PRODUCTION,
    RiskClass.SECURITY_SENSITIVE: SideEffectClass.PRODUCTION,
    RiskClass.FINANCIAL: SideEffectClass.SPEND,
}


class InvocationState(StrEnum):
    RECEIVED = "Received"
    VALIDATED = "Validated"
    AUTHORIZED = "Authorized"
    AWAITING_APPROVAL = "AwaitingApproval"
    BROKERED = "Brokered"
    EXECUTING = "Executing"
    OBSERVED = "Observed"
    FAILED = "Failed"
    UNCERTAIN = "Uncertain"
    CANCELLED = "Cancelled"
    DENIED = "Denied"
    #: A dry run (`spec.dryRun`) ends here: evaluated, never executed (`status.preview`).
    PREVIEWED = "Previewed"

    @property
    def terminal(self) -> bool:
        return self in TERMINAL_STATES


TERMINAL_STATES = frozenset(
    {
        InvocationState.OBSERVED,
        InvocationState.FAILED,
        InvocationState.UNCERTAIN,
        InvocationState.CANCELLED,
        InvocationState.DENIED,
        InvocationState.PREVIEWED,
    }
)


class InterruptStanding(StrEnum):
    """Where a request to interrupt a call stands (`pipeline.interrupts`)."""

    #: Not yet asked and not ended: `spec.interrupt` is set now.
    REQUESTED = "requested"
    #: Asked already (by anyone) and not ended yet: nothing more to write.
    ALREADY_REQUESTED = "already-requested"
    #: The call is in a terminal state: an interrupt changes nothing (409 at the gateway).
    ENDED = "ended"


class PreviewVerdict(StrEnum):
    """What a real call with the same spec would do now (`status.preview.verdict`)."""

    WOULD_RUN = "would-run"
    WOULD_AWAIT_APPROVAL = "would-await-approval"
    WOULD_BE_DENIED = "would-be-denied"


class SandboxKind(StrEnum):
    NONE = "None"
    CONTAINER = "Container"
    GVISOR = "GVisor"
    KATA = "Kata"


class WorkspaceMode(StrEnum):
    """Whose `/workspace` a sandboxed call sees (`spec.sandbox.workspace`)."""

    #: A fresh one per call (an emptyDir of the call's own pod).
    CALL = "call"
    #: One per attempt: calls with the same attemptId, caller and namespace share it, one
    #: at a time, until it is released (idle or explicitly).
    ATTEMPT = "attempt"


class SandboxStart(StrEnum):
    """How a sandboxed call's pod came to be (receipt `sandbox.start`)."""

    #: A Job of its own, started for the call.
    COLD = "cold"
    #: A pod that was ready before the call: from a pool, or its attempt's workspace pod.
    WARM = "warm"


class EgressVerdict(StrEnum):
    """What the egress proxy decided about one connection of a sandbox (receipt, metrics)."""

    ALLOWED = "allowed"
    #: The host (or host:port) is on none of the lease's allow-list entries.
    NOT_ALLOWED = "not-allowed"
    #: An IP literal that no CIDR entry of the lease allows.
    IP_LITERAL = "ip-literal"
    #: The name resolved only to private, loopback, link-local, metadata or cluster addresses.
    PRIVATE_ADDRESS = "private-address"
    #: The TLS ClientHello named another host than CONNECT did (or none, or an encrypted one).
    SNI_MISMATCH = "sni-mismatch"
    #: No token, an unknown token, another lease's token, or a lease that has ended.
    UNAUTHORIZED = "unauthorized"
    #: Not a request the proxy speaks (a malformed head, a scheme other than http).
    BAD_REQUEST = "bad-request"
    #: Allowed, but the name did not resolve or the upstream could not be reached.
    UPSTREAM_FAILED = "upstream-failed"
    #: The lease already had the most connections open that one lease may hold.
    TOO_MANY_CONNECTIONS = "too-many-connections"


class FailureClass(StrEnum):
    VALIDATION = "validation"
    PERMISSION_DENIED = "permission-denied"
    POLICY_DENIED = "policy-denied"
    TRANSIENT = "transient"
    TIMEOUT = "timeout"
    OOM_KILLED = "oom-killed"
    TOOL_ERROR = "tool-error"
    OUTPUT_INVALID = "output-invalid"
    CREDENTIALS = "credentials"
    EFFECT_UNCONFIRMED = "effect-unconfirmed"
    #: An Uncertain call whose effect an operator confirmed as having happened.
    EFFECT_CONFIRMED = "effect-confirmed"
    #: An Uncertain call whose effect an operator confirmed as not having happened.
    EFFECT_DID_NOT_HAPPEN = "effect-did-not-happen"
    CANCELLED = "cancelled"
    #: A duplicate whose first call was deleted before it ended (no outcome to carry); any
    #: other duplicate carries its first call's outcome and `status.duplicateOf`.
    DUPLICATE = "duplicate"
    #: The same idempotency key (same caller) with another request: refused, as payment APIs do.
    KEY_REUSED = "key-reused"
    #: An identical request is Uncertain and unconfirmed: no new call runs until an operator
    #: confirms it (the reference: "an operator must confirm before any retry").
    UNCONFIRMED_EFFECT = "unconfirmed-effect"
    #: The tool version is retired (`spec.retired`): new calls and calls not yet Executing.
    RETIRED = "retired"
    #: An admission policy or binding the operator ships is missing or changed (or the
    #: call was created while one was): who created the call was not verified, so it runs
    #: nothing. An operational fault recorded as a refusal, on purpose (fail closed).
    ADMISSION_MISSING = "admission-missing"

    RATE_LIMITED = "rate-limited"
    INTERNAL = "internal"


class Stage(StrEnum):
    """Pipeline stages, in the order they are recorded in `status.stages`.

    The reference's ten stages, plus the ones Kubernetes needs: the idempotency claim and
    the fencing check (admission), the rate limit, and the re-check of everything that can
    change while a call waits, made right before it acts.
    """

    IDEMPOTENCY = "idempotency"
    FENCING = "fencing"
    VALIDATION = "validation"
    RATE_LIMIT = "rate-limit"
    PERMISSION = "permission"
    POLICY = "policy"
    CLASSIFICATION = "classification"
    APPROVAL = "approval"
    CREDENTIALS = "credentials"
    SANDBOX = "sandbox"
    RECHECK = "recheck"
    EXECUTE = "execute"
    SANITIZE = "sanitize"
    AUDIT = "audit"


class StageOutcome(StrEnum):
    """What one stage entry says happened."""

    PASSED = "passed"
    DENIED = "denied"
    DUPLICATE = "duplicate"
    WAITING = "waiting"
    BOUND = "bound"
    REJECTED = "rejected"
    NOT_REQUIRED = "not-required"
    BROKERED = "brokered"
    NONE = "none"
    LEASED = "leased"
    STARTED = "started"
    RETRY = "retry"
    DONE = "done"
    RECEIPT = "receipt"
    OBSERVED = "observed"
    FAILED = "failed"
    UNCERTAIN = "uncertain"
    CANCELLED = "cancelled"


class Resource(StrEnum):
    """The plural of every kind the operator reads or writes: one table, one spelling."""

    INVOCATIONS = "toolinvocations"
    DESCRIPTORS = "tooldescriptors"
    POLICIES = "toolpolicies"
    APPROVALS = "toolapprovals"
    MCP_SERVERS = "mcpservers"
    SIDE_EFFECT_CLASSES = "sideeffectclasses"


class BindCode(StrEnum):
    """Why an approval did or did not bind to an invocation (on the approval's status)."""

    BOUND = "bound"
    WRONG_INVOCATION = "wrong-invocation"
    REQUEST_HASH_MISMATCH = "request-hash-mismatch"
    DESCRIPTOR_CHANGED = "descriptor-changed"
    TOOL_VERSION_MISMATCH = "tool-version-mismatch"
    CREATOR_MISMATCH = "creator-mismatch"
    SELF_APPROVAL = "self-approval"
    REVIEWER_NOT_ALLOWED = "reviewer-not-allowed"
    ALREADY_USED = "already-used"
    INVALID_EXPIRY = "invalid-expiry"
    EXPIRED = "expired"
    REJECTED = "rejected"


class ApprovalDecision(StrEnum):
    APPROVED = "Approved"
    REJECTED = "Rejected"


class McpServerPhase(StrEnum):
    REGISTERED = "Registered"
    VERIFIED = "Verified"
    ACTIVE = "Active"
    DEGRADED = "Degraded"
    RETIRED = "Retired"


class InFlightPolicy(StrEnum):
    """What retiring a tool version does to its calls already Executing (calls not yet
    Executing are Denied `retired` either way)."""

    #: Let them run to their end.
    COMPLETE = "Complete"
    #: Interrupt them, settled by class as an interrupt is.
    CANCEL = "Cancel"


class EnvironmentClass(StrEnum):
    DEVELOPMENT = "development"
    STAGING = "staging"
    PRODUCTION = "production"


class BlockAction(StrEnum):
    """What a tenant policy does with a block-listed shell command."""

    DENY = "deny"
    ESCALATE = "escalate"


class UnlistedAction(StrEnum):
    """What a tenant policy does with a shell command that is on no allow list: escalate
    (raise it to shared-write, so it waits for an approval) or deny it."""

    ESCALATE = "escalate"
    DENY = "deny"


class DataLabel(StrEnum):
    """What a tool's results are, for the data-flow rule (`pipeline.dataflow`): `private`
    (tenant-private data) and `untrusted` (content from outside the tenant's control)."""

    PRIVATE = "private"
    UNTRUSTED = "untrusted"


class SinkMode(StrEnum):
    """`spec.dataFlow.sink` of a descriptor: `none` declares a tool that cannot send data
    out (allowed only with `sandbox.egress.allow: []`, never for http or mcp tools or
    classes external and above)."""

    NONE = "none"


class DataFlowScope(StrEnum):
    """Which calls' labels a call is judged by: `run` (its run and attempt; the caller's
    window when it names neither) or `caller` (every call of the caller in the window)."""

    RUN = "run"
    CALLER = "caller"


class ScopeKind(StrEnum):
    """What a data-flow scope collects: one run's calls (namespace, caller, runId), one
    attempt's (its workspace carries data between runs), or a caller's within the window."""

    RUN = "run"
    ATTEMPT = "attempt"
    CALLER = "caller"


class DataFlowAction(StrEnum):
    """What a sink call whose scopes hold both `private` and `untrusted` gets: an approval
    (`approve`), a denial (`deny`), or nothing (`allow`)."""

    APPROVE = "approve"
    DENY = "deny"
    ALLOW = "allow"


class OperatorRole(StrEnum):
    """What an operator process is doing, as its health endpoint reports it."""

    #: Connecting, or leading and priming its caches: not ready yet.
    STARTING = "starting"
    #: Waiting for the leadership Lease another process holds: ready to take over.
    STANDBY = "standby"
    #: Holding the Lease and handling calls.
    LEADING = "leading"


class ArtifactBackend(StrEnum):
    """Where receipts and results are stored (`TOOLADAPTER_ARTIFACT_BACKEND`)."""

    FILE = "file"
    S3 = "s3"


class EventLevel(StrEnum):
    """Which events a call posts (`TOOLADAPTER_EVENTS`)."""

    #: Only those someone acts on: denials, approval requests, uncertain effects, failures.
    ACTIONABLE = "actionable"
    #: Also ToolInvoked for every call that ended Observed.
    ALL = "all"


class ArtifactKind(StrEnum):
    """What a call stores in the artifact store (a label of its error metric)."""

    RESULT = "result"
    RECEIPT = "receipt"
    #: A named entry of the receipt index (artifacts/protocol `put_key`).
    INDEX = "index"


class AdmissionKind(StrEnum):
    """The kinds of the admission objects the operator ships and verifies."""

    POLICY = "ValidatingAdmissionPolicy"
    BINDING = "ValidatingAdmissionPolicyBinding"


class AdmissionFault(StrEnum):
    """What is wrong with one shipped admission object as the operator sees it."""

    MISSING = "missing"
    CHANGED = "changed"
    #: The operator could not read it (its listing failed): unknown counts as broken.
    UNREADABLE = "unreadable"
