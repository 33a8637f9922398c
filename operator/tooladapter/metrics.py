"""The reference's six metrics, as Prometheus instruments (three here, three counted).

Names follow Prometheus conventions (`tooladapter_*`), dimensions follow the reference
(`connectsoft.factory.tools.*`). Labels never carry arguments or results, and no label
value comes from what a caller typed: `tenant` is a namespace the operator serves (an
invocation exists there), `tool` a tool id of a descriptor in the catalog (else
`UNKNOWN_TOOL`), every other label a value of a fixed enum. Cardinality bounds (N: the
namespaces served, T: the tool ids of their descriptors, counters keep what they saw):

- invocations: N x (T+1) x 6 classes x 7 states x failure classes (in practice a tool
  ends in few of them); latency: (T+1) x 5 kinds (x 14 buckets); duplicates: N x 7 states;
  sandbox seconds: N; denials: N x stages x failure classes; artifact store errors: kinds
  of artifact; the gateway's reviews: 3; its refusals: 5; egress connections: N x verdicts;
  MCP servers up / probe failures: the McpServer objects; the census gauges (`census.py`)
  and calls queued (`inflight.py`): N x a fixed enum, recomputed at each scrape.
"""

from __future__ import annotations

from prometheus_client import REGISTRY, Counter, Gauge, Histogram, start_http_server
from prometheus_client.registry import Collector

#: The `tool` label of a call naming a tool no descriptor in its namespace has.
UNKNOWN_TOOL = "unknown"

INVOCATIONS = Counter(
    "tooladapter_invocations",
    "Invocations by outcome (failure_class tool-error or output-invalid on an Observed call: "
    "the tool ran and answered with an error; empty: no failure). Duplicates are not counted.",
    ["tenant", "tool", "effective_class", "state", "failure_class"],
)
DUPLICATES = Counter(
    "tooladapter_duplicates",
    "Calls that carried an idempotency key already claimed by an earlier call of the same "
    "request: they ended in that call's state, ran nothing, and are counted only here.",
    ["tenant", "state"],
)
LATENCY = Histogram(
    "tooladapter_latency_seconds",
    "Pipeline and execution latency, from creation to the terminal state.",
    ["tool", "kind"],
    buckets=(0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300),
)
SANDBOX_SECONDS = Counter(
    "tooladapter_sandbox_seconds",
    "Seconds sandboxes ran their tool, per tenant, on the operator's own clock to the "
    "millisecond (from the tool's container started, past an init container's network "
    "gate or with the gate's probe where it runs in that container, or the exec in a warm "
    "pod, to "
    "the end seen; a call killed at its deadline counts its whole run): the reference's "
    "SandboxMinutes usage meter, counted when the call ends, the receipt's usage too.",
    ["tenant"],
)
DENIALS = Counter(
    "tooladapter_denials",
    "Denials by stage.",
    ["tenant", "stage", "reason"],
)
DATAFLOW_GATED = Counter(
    "tooladapter_dataflow_gated",
    "Sink calls the data-flow rule gated (their scopes held private and untrusted results), "
    "by what the policy said: approve (the call waited) or deny.",
    ["tenant", "action"],
)
DATAFLOW_LABELS_DEFERRED = Counter(
    "tooladapter_dataflow_labels_deferred",
    "Ended calls whose data-flow labels could not be written to their scopes' stores at "
    "their end: the call ended anyway, its labels pending (`status.dataFlow.pending`), "
    "counted by the gate meanwhile and written by a retry.",
    ["tenant"],
)
DATAFLOW_LABELS_PENDING = Gauge(
    "tooladapter_dataflow_labels_pending",
    "Ended calls whose data-flow labels wait for a retry of their write (this process).",
)
ARTIFACT_STORE_ERRORS = Counter(
    "tooladapter_artifact_store_errors",
    "Puts the artifact store refused or never answered (each is retried until stored).",
    ["artifact"],
)
#: Not one of the reference's: what the gateway asked the API server to review, by kind
#: (tokenreview, subjectaccessreview, selfsubjectrulesreview: three series at most), so the
#: cost of authenticating and authorizing callers can be read (`kube.callers.Reviews`).
GATEWAY_REVIEWS = Counter(
    "tooladapter_gateway_reviews",
    "Reviews the gateway asked the API server for (TokenReview, SubjectAccessReview, "
    "SelfSubjectRulesReview), by kind.",
    ["kind"],
)
#: Requests the gateway refused with 429 (`gateway.doors`), by which cap was full: one of
#: caller-requests, namespace-requests, caller-streams, namespace-streams,
#: auth-failures (five series at most).
GATEWAY_REFUSED = Counter(
    "tooladapter_gateway_refused",
    "Requests the gateway answered 429 because a fair-doors cap was full, by cap.",
    ["cap"],
)
#: The gauges (uncertain, approvals waiting, open sandboxes) are counted from the watch's
#: view of every invocation when scraped: see `tooladapter.census`.

#: Not one of the reference's: which replica acts. Summed over the replicas of one
#: namespace set it is 1 (0 during a takeover). Every replica serves /metrics.
LEADING = Gauge(
    "tooladapter_leading",
    "1 while this process holds its namespace set's leadership Lease and handles calls.",
)


class MetricsPortTaken(OSError):
    """The metrics port cannot be bound: say which, in one line."""

    def __init__(self, port: int, cause: OSError) -> None:
        super().__init__(
            f"cannot serve metrics on port {port} (TOOLADAPTER_METRICS_PORT): "
            f"{cause.strerror or cause}; another process holds it: stop it, or set "
            "TOOLADAPTER_METRICS_PORT to a free port (0 disables metrics)"
        )
        self.port = port


_listening: set[int] = set()


def listen(port: int) -> None:
    """Serve /metrics on `port` (0: not at all); once per port. `MetricsPortTaken` when
    another process holds it. The launcher binds it before kopf starts, so a taken port is
    one error line, not a start-up handler retried with a traceback each time."""
    if not port or port in _listening:
        return
    try:
        start_http_server(port)
    except OSError as exc:
        raise MetricsPortTaken(port, exc) from None
    _listening.add(port)


def serve(port: int, *collectors: Collector) -> None:
    """Expose /metrics on `port` (0 disables), with `collectors` registered beside ours."""
    for collector in collectors:
        REGISTRY.register(collector)
    listen(port)


#: Not one of the reference's: whether each admission policy and binding this release ships
#: is in the cluster as shipped (`identity`); while one is 0 no call passes validation.
#: One series per shipped object (18), named by the release's own names.
ADMISSION_INTACT = Gauge(
    "tooladapter_admission_intact",
    "1 while the admission policy or binding is in the cluster as shipped; 0 while it is "
    "missing, changed or cannot be read (no call passes validation meanwhile).",
    ["kind", "name"],
)


#: Counted by the egress proxy's own process (`tooladapter.egress`), on its /metrics port.
EGRESS_CONNECTIONS = Counter(
    "tooladapter_egress_connections",
    "Connections through the egress proxy by verdict (tenant: the lease's namespace).",
    ["tenant", "verdict"],
)


#: Integration events (`outbox`): what waits for the sink, and how deliveries go.
EVENT_OUTBOX_DEPTH = Gauge(
    "tooladapter_event_outbox_depth",
    "Integration events (and receipt chain links) not yet delivered to the event sink.",
)
EVENT_DELIVERIES = Counter(
    "tooladapter_event_deliveries",
    "Integration event deliveries: `delivered` events, `failed` rounds (the sink refused or "
    "could not be reached; retried with backoff).",
    ["result"],
)
SETTINGS_RELOADS = Counter(
    "tooladapter_settings_reloads",
    "Readings of the settings ConfigMap that changed a reloadable setting in force.",
)
SETTINGS_REJECTED = Counter(
    "tooladapter_settings_rejected",
    "Values of the settings ConfigMap that did not parse: the value in force stayed (its "
    "Event on the ConfigMap says why). `setting` is a reloadable variable's name.",
    ["setting"],
)

#: Not one of the reference's: what idle warm sandboxes hold of the cluster, counted at
#: each upkeep round over the warm pods of the namespaces this replica serves (`kind`:
#: `pool`, a pool's ready or starting pod; `workspace`, an attempt's workspace with no call
#: running; two series per gauge). Requests are the pods' own (sized for idle).
WARM_IDLE_PODS = Gauge(
    "tooladapter_warm_idle_pods",
    "Warm sandbox pods holding no call: pool pods and idle attempt workspaces.",
    ["kind"],
)
WARM_IDLE_CPU = Gauge(
    "tooladapter_warm_idle_cpu_request_cores",
    "CPU the idle warm sandbox pods request of their nodes, in cores.",
    ["kind"],
)
WARM_IDLE_MEMORY = Gauge(
    "tooladapter_warm_idle_memory_request_bytes",
    "Memory the idle warm sandbox pods request of their nodes, in bytes.",
    ["kind"],
)
#: Pods deleted so that a waiting call could get capacity (`reason`: `quota` or
#: `unschedulable`; `kind`: `pool` or `workspace`).
WARM_GAVE_WAY = Counter(
    "tooladapter_warm_gave_way",
    "Idle warm sandbox pods deleted to make room for a call that waited for capacity.",
    ["kind", "reason"],
)

#: Not one of the reference's: what the operator asks of the API server (`kube.metering`),
#: so a call's cost is attributed on a shared cluster. Bounded: the verbs (GET, LIST, WATCH,
#: POST, PUT, PATCH, DELETE) x the resources the operator uses.
API_REQUESTS = Counter(
    "tooladapter_api_requests",
    "Requests the operator sent the API server, by verb (GET one object, LIST, WATCH, "
    "POST, PUT, PATCH, DELETE) and resource (with its subresource, e.g. "
    "toolinvocations/status).",
    ["verb", "resource"],
)
