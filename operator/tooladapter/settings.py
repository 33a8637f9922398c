"""Operator settings, one frozen dataclass read once from the environment at start-up.

Every knob has a production-sensible default; the environment names are documented in
docs/operations/configuration.md.
"""

from __future__ import annotations

import fnmatch
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal, TypeVar

from tooladapter.egress.core.cidr_bounds import CidrBounds
from tooladapter.egress.core.rules import REFERENCE_DEFAULT_ALLOW
from tooladapter.enums import ArtifactBackend, EventLevel
from tooladapter.mcp.core.approvals import BadPublicUrl, checked_public_url
from tooladapter.model import DEFAULT_MAX_RESULT_BYTES, DEFAULT_TIMEOUT_SECONDS


def _int(name: str, default: int) -> int:
    raw = os.environ.get(name)
    if raw is None or raw == "":
        return default
    try:
        return int(raw)
    except ValueError as exc:
        raise ValueError(f"environment variable {name}={raw!r} is not an integer") from exc


def _at_least(name: str, default: int, minimum: int) -> int:
    value = _int(name, default)
    if value < minimum:
        raise ValueError(f"environment variable {name}={value} is below its minimum {minimum}")
    return value


def _bool(name: str, default: bool) -> bool:
    raw = os.environ.get(name, "").strip().lower()
    if raw == "":
        return default
    if raw in ("1", "true", "on", "yes"):
        return True
    if raw in ("0", "false", "off", "no"):
        return False
    raise ValueError(f"environment variable {name}={raw!r} is not a boolean (true/false)")


def _list(name: str, default: tuple[str, ...]) -> tuple[str, ...]:
    raw = os.environ.get(name)
    if raw is None:
        return default
    return tuple(part.strip() for part in raw.split(",") if part.strip())


_QUANTITY = re.compile(r"^[0-9]+(\.[0-9]+)?(Ki|Mi|Gi|Ti|k|M|G|T)?$")


def _quantity(name: str, default: str) -> str:
    raw = os.environ.get(name, "").strip()
    if not raw:
        return default
    if not _QUANTITY.match(raw):
        raise ValueError(f"environment variable {name}={raw!r} is not a storage quantity (1Gi)")
    return raw


def _port(name: str, default: int) -> int:
    value = _int(name, default)
    if not 0 <= value <= 65535:
        raise ValueError(f"environment variable {name}={value} is not a port (0-65535)")
    return value


def _namespaced(name: str) -> str | None:
    """`namespace/name`, or None when unset."""
    raw = os.environ.get(name, "").strip()
    if not raw:
        return None
    namespace, _, obj = raw.partition("/")
    if not namespace or not obj or "/" in obj:
        raise ValueError(f"{name} must be namespace/name, not {raw!r}")
    return raw


def _path(name: str) -> Path | None:
    raw = os.environ.get(name, "").strip()
    return Path(raw) if raw else None


def _public_url(name: str) -> str | None:
    raw = os.environ.get(name, "").strip()
    if not raw:
        return None
    try:
        return checked_public_url(raw)
    except BadPublicUrl as exc:
        raise ValueError(f"environment variable {name}: {exc}") from None


def _pairs(name: str, default: tuple[tuple[str, str], ...]) -> tuple[tuple[str, str], ...]:
    raw = os.environ.get(name)
    if raw is None:
        return default
    pairs = []
    for part in _list(name, ()):
        key, sep, value = part.partition("=")
        if not sep or not key.strip() or not value.strip():
            raise ValueError(f"environment variable {name}: {part!r} is not key=value")
        pairs.append((key.strip(), value.strip()))
    return tuple(pairs)


_E = TypeVar("_E", ArtifactBackend, EventLevel)


def _choice(name: str, default: _E) -> _E:
    raw = os.environ.get(name, "").strip().lower()
    if raw == "":
        return default
    kind = type(default)
    try:
        return kind(raw)
    except ValueError:
        allowed = "|".join(kind)
        raise ValueError(f"environment variable {name}={raw!r} is not one of {allowed}") from None


def _endpoint(name: str) -> str | None:
    raw = os.environ.get(name, "").strip()
    if raw and not raw.startswith(("https://", "http://")):
        raise ValueError(f"environment variable {name}={raw!r} is not an http(s) URL")
    return raw or None


def _cidr_mode(name: str, default: Literal["allow", "forbid"]) -> Literal["allow", "forbid"]:
    value = (os.environ.get(name) or default).strip().lower()
    if value not in ("allow", "forbid"):
        raise ValueError(f"{name} must be allow or forbid, not {value!r}")
    return "forbid" if value == "forbid" else "allow"


def _prefix(name: str, default: int, bits: int) -> int:
    value = _int(name, default)
    if not 1 <= value <= bits:
        raise ValueError(f"{name} must be a prefix length from 1 to {bits}, not {value}")
    return value


@dataclass(frozen=True)
class EgressSettings:
    """The egress proxy (`python -m tooladapter egress-proxy`) and how leases reach it."""

    #: Port the proxy listens on, and the port pods are pointed at.
    proxy_port: int = 3128
    #: Address the proxy binds (default: every address; the lease's NetworkPolicy decides
    #: which pods reach it, and the token which lease they act for).
    listen: str = "0.0.0.0"  # noqa: S104
    #: False when no proxy runs (the chart's `egressProxy.enabled: false`): leases then get
    #: no proxy, and host names stay unreachable (fail closed).
    proxy_enabled: bool = True
    #: Address pods are given in HTTP(S)_PROXY (host mode: the node's default-route address;
    #: in the cluster: the proxy Service's ClusterIP, since sandboxes have no DNS).
    proxy_address: str | None = None
    #: In the cluster, when `proxy_address` is unset: the proxy Service's name in
    #: `namespace`, whose ClusterIP the operator reads at start-up (the chart sets it).
    proxy_service: str | None = None
    #: In the cluster: the proxy pods' labels ("k=v,..."); the lease's NetworkPolicy selects
    #: them in `namespace` instead of allowing `proxy_address`.
    proxy_pod_labels: tuple[tuple[str, str], ...] = ()
    #: Where lease grants and connection records live: a namespace of their own, where the
    #: proxy's Role lets it read Secrets, and nothing else is kept (the page's session key,
    #: S3 credentials and TLS keys stay in the operator's namespace, out of its reach).
    namespace: str = "tooladapter-egress"
    #: Where the proxy's pods and Service run (the lease NetworkPolicy selects the pods
    #: there; the Service's ClusterIP is read there); None: `namespace`.
    proxy_namespace: str | None = None
    #: A sandbox's allow-list when its descriptor sets none (reference: DefaultEgressAllowList).
    default_allow: tuple[str, ...] = REFERENCE_DEFAULT_ALLOW
    #: Names the proxy resolves to fixed addresses ("name=address,..."), for tests; those
    #: addresses skip the non-public check, and such names never go to DNS.
    hosts: str = ""
    #: Cluster ranges (pod and service CIDRs) the proxy treats as non-public, and every
    #: lease's NetworkPolicy excepts from the ipBlocks that contain them.
    cluster_cidrs: tuple[str, ...] = ()
    #: Descriptor CIDRs (`sandbox.egress.allow`, IP literals of `http.allowedHosts`):
    #: `allow` up to the prefixes below, or `forbid` cluster-wide.
    descriptor_cidrs: Literal["allow", "forbid"] = "allow"
    #: The widest CIDR a descriptor may allow, per family (a shorter prefix is refused).
    descriptor_cidr_min_prefix_v4: int = 24
    descriptor_cidr_min_prefix_v6: int = 64
    #: Extra CA bundle the proxy trusts for TLS upstreams of credentialed hosts.
    ca_file: str | None = None
    #: Port of the proxy's /metrics; 0 disables it.
    metrics_port: int = 9465
    #: Seconds a connection may stay idle (no byte either way) before the proxy closes it.
    idle_seconds: int = 300

    @property
    def pods_namespace(self) -> str:
        """The namespace of the proxy's pods and Service."""
        return self.proxy_namespace or self.namespace

    @property
    def cidr_bounds(self) -> CidrBounds:
        return CidrBounds(
            self.descriptor_cidrs,
            self.descriptor_cidr_min_prefix_v4,
            self.descriptor_cidr_min_prefix_v6,
        )

    @classmethod
    def from_env(cls) -> EgressSettings:
        base = cls()
        labels = _pairs("TOOLADAPTER_EGRESS_PROXY_POD_LABELS", ())
        return cls(
            proxy_port=_at_least("TOOLADAPTER_EGRESS_PROXY_PORT", base.proxy_port, 1),
            listen=os.environ.get("TOOLADAPTER_EGRESS_PROXY_LISTEN") or base.listen,
            proxy_enabled=_bool("TOOLADAPTER_EGRESS_PROXY_ENABLED", base.proxy_enabled),
            proxy_address=os.environ.get("TOOLADAPTER_EGRESS_PROXY_ADDRESS") or None,
            proxy_service=os.environ.get("TOOLADAPTER_EGRESS_PROXY_SERVICE") or None,
            proxy_pod_labels=labels,
            namespace=os.environ.get("TOOLADAPTER_EGRESS_NAMESPACE") or base.namespace,
            proxy_namespace=os.environ.get("TOOLADAPTER_EGRESS_PROXY_NAMESPACE") or None,
            default_allow=_list("TOOLADAPTER_DEFAULT_EGRESS_ALLOW", base.default_allow),
            hosts=os.environ.get("TOOLADAPTER_EGRESS_HOSTS", ""),
            cluster_cidrs=_list("TOOLADAPTER_EGRESS_CLUSTER_CIDRS", ()),
            descriptor_cidrs=_cidr_mode("TOOLADAPTER_DESCRIPTOR_CIDRS", base.descriptor_cidrs),
            descriptor_cidr_min_prefix_v4=_prefix(
                "TOOLADAPTER_DESCRIPTOR_CIDR_MIN_PREFIX_IPV4", 24, 32
            ),
            descriptor_cidr_min_prefix_v6=_prefix(
                "TOOLADAPTER_DESCRIPTOR_CIDR_MIN_PREFIX_IPV6", 64, 128
            ),
            ca_file=os.environ.get("TOOLADAPTER_EGRESS_CA_FILE") or None,
            metrics_port=_int("TOOLADAPTER_EGRESS_METRICS_PORT", base.metrics_port),
            idle_seconds=_at_least("TOOLADAPTER_EGRESS_IDLE_SECONDS", base.idle_seconds, 1),
        )


@dataclass(frozen=True)
class Settings:
    #: Where receipts and results are stored by content hash: `file` (under
    #: `artifact_dir`) or `s3` (the `s3_*` bucket; credentials from the environment's
    #: AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY, never settings).
    artifact_backend: ArtifactBackend = ArtifactBackend.FILE
    #: The file backend's directory (a PVC when in-cluster).
    artifact_dir: Path = field(default_factory=lambda: Path.home() / ".tooladapter" / "artifacts")
    #: The s3 backend's endpoint URL (None: AWS's own for `s3_region`), bucket, key
    #: prefix (a folder: a trailing `/` is implied), region and addressing.
    s3_endpoint: str | None = None
    s3_bucket: str = ""
    s3_prefix: str = ""
    s3_region: str = "us-east-1"
    s3_path_style: bool = False
    #: Port of the Prometheus /metrics endpoint; 0 disables it.
    metrics_port: int = 9464
    #: Timeout when a descriptor sets none (reference: Tools:Execution:DefaultTimeoutSeconds).
    default_timeout_seconds: int = DEFAULT_TIMEOUT_SECONDS
    #: Upper bound of any result (reference: Tools:Execution:MaxResultBytes).
    max_result_bytes: int = DEFAULT_MAX_RESULT_BYTES
    #: Results up to this size are also inlined in status.result; bigger ones only by ref.
    inline_result_bytes: int = 16_384
    #: Image of shell tools when the descriptor names none.
    sandbox_image: str = "localhost/tooladapter-sandbox:dev"
    #: Pull policy of sandbox pods (the local cluster imports its images; `Always` when
    #: they come from a registry and every run must pull).
    image_pull_policy: str = "IfNotPresent"
    #: Names of pull Secrets ("a,b") every sandbox pod lists in imagePullSecrets. Each
    #: tenant namespace must hold them itself: the operator never copies Secrets between
    #: namespaces (a pod naming a missing one still pulls anonymously).
    image_pull_secrets: tuple[str, ...] = ()
    #: Period of the uncertain-effect reconciler and the sandbox reaper.
    reconcile_interval_seconds: int = 30
    #: Jobs and NetworkPolicies of ended calls are kept this long for inspection, then reaped.
    sandbox_retain_seconds: int = 60
    #: Finished invocations are deleted this long after they ended (0 keeps them forever);
    #: never an unconfirmed Uncertain one. Their receipts stay in the artifact store.
    retention_seconds: int = 7 * 86_400
    #: Retention's deletions per second at most (0: no bound): above the sustained call
    #: rate, so storage stays bounded, and paced, so a backlog never arrives as a burst.
    retention_deletes_per_second: int = 200
    #: An idempotency claim (and so its key) is kept this long after its winner ended (0:
    #: forever); it keeps the winner's receiptRef for duplicates.
    idempotency_retention_seconds: int = 86_400
    #: Approval wait when no ToolPolicy sets one.
    default_approval_timeout_seconds: int = 3600
    #: How long a sandboxed call waits in Brokered for its namespace's ResourceQuotas to
    #: admit its Job and pod (checked before any effect); then it ends Failed `transient`.
    capacity_wait_seconds: int = 120
    #: Invocations evaluated or executed at once (`inflight`); more wait in a queue per
    #: namespace, served round-robin. A call waiting for an approval or an idempotency
    #: winner holds no slot.
    max_calls_in_flight: int = 16
    #: Events posted per call: `actionable` (denials, approvals, uncertain effects, failures:
    #: someone acts on them) or `all` (also a ToolInvoked event per finished call; the
    #: per-call record is the receipt, `status.receiptRef`, either way).
    events: EventLevel = EventLevel.ACTIONABLE
    #: Hosts (names, addresses or CIDRs) http tools may never reach, even when a
    #: descriptor allow-lists them: cloud metadata services hand out node credentials.
    blocked_http_hosts: tuple[str, ...] = ("169.254.169.254", "metadata.google.internal")

    #: Gate every sandbox on proof that its NetworkPolicy is enforced (see pipeline.sandbox).
    network_gate: bool = True
    #: Address pods use to reach the operator's canary listener (default: this host's
    #: default-route address, or POD_IP in-cluster) and its port (0: any free port).
    canary_host: str | None = None
    canary_port: int = 0
    #: Write status at every state change, not only before waits, effects and the end.
    write_every_state: bool = False
    #: Seconds an allowed SubjectAccessReview answer is reused (0: review every call).
    authz_cache_seconds: int = 2
    #: Namespace globs this operator serves (empty: all); kopf watches only these.
    namespaces: tuple[str, ...] = ()
    #: Hold a Lease per served namespace set (`kube.leases`): a second operator for the
    #: same namespaces waits as a standby instead of processing every call a second time.
    leader_election: bool = True
    #: Namespace of the leadership Leases (manifests/namespace.yaml creates it).
    lease_namespace: str = "tooladapter-system"
    #: leaseDurationSeconds: a standby takes over this long after the leader stopped
    #: renewing; the leader stops acting after two thirds of it without a renewal.
    lease_seconds: int = 15
    #: Port of `/healthz` and `/readyz`, served from start-up in every role (a standby
    #: too, unlike kopf's own liveness endpoint); 0 disables it (host processes).
    health_port: int = 0

    #: RuntimeClass of each sandbox kind without a `runtimeClassName` ("Kind=class" pairs;
    #: Container maps to none: the node's default runtime).
    runtime_classes: tuple[tuple[str, str], ...] = (("GVisor", "gvisor"), ("Kata", "kata"))
    #: Egress by host name through the egress proxy.
    egress: EgressSettings = field(default_factory=EgressSettings)

    #: An attempt's workspace (`sandbox.workspace: attempt`) is released after this long
    #: without a call (its pod and its volume are deleted).
    workspace_idle_seconds: int = 1800
    #: Size of an attempt's workspace volume (also its pod's ephemeral-storage request and
    #: limit, so a namespace's ResourceQuota bounds the workspaces it holds).
    workspace_size: str = "1Gi"
    #: Workspaces a namespace may hold at once: the first call of one more attempt fails
    #: (nothing started) until one is released, so an agent inventing attemptIds cannot
    #: fill the nodes other tenants share (a ResourceQuota bounds them further).
    workspaces_per_namespace: int = 16
    #: Ready sandboxes kept per namespace and sandbox profile (image, RuntimeClass,
    #: resources) once a call of that profile was seen; 0: no pools (every call that is not
    #: an attempt's runs in a Job of its own).
    warm_pool_size: int = 0
    #: A pool with no call of its profile for this long is drained (its pods deleted).
    warm_pool_idle_seconds: int = 600
    #: How long a new warm pod (a pool's, or a new workspace's) may take to be ready.
    warm_start_seconds: int = 120

    #: Port of the HTTP API and MCP endpoint (`tooladapter.gateway`); 0 disables it. Every
    #: replica serves it, a standby included: it keeps no state of its own.
    gateway_port: int = 8080
    #: Address the gateway binds.
    gateway_host: str = "0.0.0.0"  # noqa: S104 - a Service in front of every replica
    #: PEM certificate chain and key: the gateway speaks TLS when both are set.
    gateway_tls_cert: Path | None = None
    gateway_tls_key: Path | None = None
    #: Audiences a caller's token must carry (TokenReview); empty: the API server's default.
    gateway_audiences: tuple[str, ...] = ()
    #: How long a tools/call waits for an approval before answering "still pending".
    gateway_approval_wait_seconds: int = 300
    #: The gateway's address as people reach it (e.g. https://tools.example.com): the base of
    #: the reviewers' page links MCP clients get for a gated call (URL elicitation). Unset:
    #: no links (the host a client sent is never trusted to build one); such calls are held
    #: and answered as still pending, as for a client that cannot open a URL.
    gateway_public_url: str | None = None
    #: Fair doors (`gateway.doors`): requests one caller / one namespace may have in
    #: progress at once, and live streams (the page's live updates) plus MCP follows of a
    #: call; beyond them 429 with `Retry-After`. A caller's requests must stay below the
    #: caller pool's connections (`gateway_connections`) so one caller cannot take it.
    gateway_caller_requests: int = 32
    gateway_namespace_requests: int = 64
    gateway_caller_streams: int = 16
    gateway_namespace_streams: int = 48
    #: Connections of the caller pool for requests, and of the separate one for watches.
    gateway_connections: int = 100
    gateway_stream_connections: int = 100
    #: Total timeout of every API request the gateway makes (a watch: its own length + 30 s).
    gateway_api_timeout_seconds: int = 30
    #: A token the API server rejected is answered 401 from memory this long (by sha256).
    gateway_rejected_token_seconds: int = 10
    #: Failed authentications per client address: a burst, then so many a minute (429).
    gateway_auth_failures_burst: int = 20
    gateway_auth_failures_per_minute: int = 30
    #: Addresses or CIDRs of reverse proxies whose `X-Forwarded-For` names the client
    #: (for the failed-authentication limit); empty: the peer address is the client's.
    gateway_trusted_proxies: tuple[str, ...] = ()
    #: Wrap a tool's text in MCP results between `<tool-result id=NONCE>` delimiters (a
    #: descriptor's `resultDelimiters` overrides it). On by default: the model reading the
    #: result then sees where the tool's data ends, and a tool cannot close it early.
    result_delimiters: bool = True
    #: A file of at least 32 random bytes sealing the reviewers' page session cookies
    #: (every replica behind one Service needs the same); unset: a key per process.
    ui_session_key_file: Path | None = None
    #: `namespace/name` of a Secret holding that key (key `session-key`), which the gateway
    #: creates with a random key when it is absent (the chart's way: a rendered chart holds
    #: no key, so `helm template | kubectl apply` never rotates it). Wins over the file.
    ui_session_secret: str | None = None
    #: How long a sign-in to the reviewers' page lasts (the token's own expiry still ends it).
    ui_session_seconds: int = 8 * 3600
    #: A trusted TLS-terminating proxy is in front of a plain-HTTP gateway: the page's
    #: cookies are `Secure` and `__Host-` prefixed as when the gateway speaks TLS itself.
    ui_behind_tls_proxy: bool = False
    #: `namespace/name` of the Secret holding the receipt signing keys (Ed25519), made by
    #: the operator with one fresh key when absent; only the operator may read it.
    receipt_signing_secret: str = "tooladapter-system/tooladapter-receipt-signing"  # noqa: S105
    #: `namespace/name` of the ConfigMap where the operator publishes the public receipt
    #: keys and their validity periods (also served at the gateway's `GET /receipt-keys`).
    receipt_keys_config_map: str = "tooladapter-system/tooladapter-receipt-keys"
    #: `namespace/name` of the ConfigMap where the operator publishes each namespace
    #: incarnation's receipt chain head (`<namespace>.<uid>` = `SEQ:sha256:<hex>`).
    receipt_heads_config_map: str = "tooladapter-system/tooladapter-receipt-heads"
    #: How often moved chain heads are published (one read and one write of that
    #: ConfigMap per period at most, never one per call).
    receipt_heads_publish_seconds: int = 10
    #: URL the reference's integration events are POSTed to as CloudEvents 1.0 (structured
    #: mode), at least once, from the outbox in the artifact store; unset: none are sent.
    event_sink: str | None = None
    #: The events' `source` prefix (`<prefix>/namespaces/<namespace>`).
    event_source: str = "/tooladapter"
    #: A CA bundle (PEM file) the event sink's TLS certificate must chain to; unset: the
    #: system's.
    event_sink_ca_file: Path | None = None
    #: A file holding the bearer token sent to the event sink (a mounted Secret; read at
    #: each delivery round, never logged); unset: no Authorization header.
    event_sink_token_file: Path | None = None

    def serves(self, namespace: str) -> bool:
        return not self.namespaces or any(
            fnmatch.fnmatchcase(namespace, p) for p in self.namespaces
        )

    @classmethod
    def from_env(cls) -> Settings:
        base = cls()
        backend = _choice("TOOLADAPTER_ARTIFACT_BACKEND", base.artifact_backend)
        bucket = os.environ.get("TOOLADAPTER_S3_BUCKET", "").strip()
        if backend == ArtifactBackend.S3 and not bucket:
            # Fail closed: receipts must go somewhere durable that was chosen, not a default.
            raise ValueError("TOOLADAPTER_ARTIFACT_BACKEND=s3 needs TOOLADAPTER_S3_BUCKET")
        return cls(
            artifact_backend=backend,
            s3_endpoint=_endpoint("TOOLADAPTER_S3_ENDPOINT"),
            s3_bucket=bucket,
            s3_prefix=os.environ.get("TOOLADAPTER_S3_PREFIX", "").strip(),
            s3_region=os.environ.get("TOOLADAPTER_S3_REGION", "").strip() or base.s3_region,
            s3_path_style=_bool("TOOLADAPTER_S3_PATH_STYLE", base.s3_path_style),
            artifact_dir=Path(os.environ.get("TOOLADAPTER_ARTIFACT_DIR", str(base.artifact_dir))),
            metrics_port=_int("TOOLADAPTER_METRICS_PORT", base.metrics_port),
            default_timeout_seconds=_int(
                "TOOLADAPTER_DEFAULT_TIMEOUT_SECONDS", base.default_timeout_seconds
            ),
            max_result_bytes=_int("TOOLADAPTER_MAX_RESULT_BYTES", base.max_result_bytes),
            inline_result_bytes=_int("TOOLADAPTER_INLINE_RESULT_BYTES", base.inline_result_bytes),
            sandbox_image=os.environ.get("TOOLADAPTER_SANDBOX_IMAGE", base.sandbox_image),
            image_pull_policy=os.environ.get(
                "TOOLADAPTER_IMAGE_PULL_POLICY", base.image_pull_policy
            ),
            image_pull_secrets=_list("TOOLADAPTER_IMAGE_PULL_SECRETS", base.image_pull_secrets),
            reconcile_interval_seconds=_int(
                "TOOLADAPTER_RECONCILE_INTERVAL_SECONDS", base.reconcile_interval_seconds
            ),
            sandbox_retain_seconds=_int(
                "TOOLADAPTER_SANDBOX_RETAIN_SECONDS", base.sandbox_retain_seconds
            ),
            retention_seconds=_at_least("TOOLADAPTER_RETENTION_SECONDS", base.retention_seconds, 0),
            retention_deletes_per_second=_at_least(
                "TOOLADAPTER_RETENTION_DELETES_PER_SECOND", base.retention_deletes_per_second, 0
            ),
            idempotency_retention_seconds=_at_least(
                "TOOLADAPTER_IDEMPOTENCY_RETENTION_SECONDS", base.idempotency_retention_seconds, 0
            ),
            default_approval_timeout_seconds=_int(
                "TOOLADAPTER_APPROVAL_TIMEOUT_SECONDS", base.default_approval_timeout_seconds
            ),
            capacity_wait_seconds=_at_least(
                "TOOLADAPTER_CAPACITY_WAIT_SECONDS", base.capacity_wait_seconds, 0
            ),
            max_calls_in_flight=_at_least(
                "TOOLADAPTER_MAX_CALLS_IN_FLIGHT", base.max_calls_in_flight, 1
            ),
            events=_choice("TOOLADAPTER_EVENTS", base.events),
            write_every_state=_bool("TOOLADAPTER_WRITE_EVERY_STATE", base.write_every_state),
            authz_cache_seconds=_int("TOOLADAPTER_AUTHZ_CACHE_SECONDS", base.authz_cache_seconds),
            namespaces=_list("TOOLADAPTER_NAMESPACES", ()),
            network_gate=_bool("TOOLADAPTER_NETWORK_GATE", base.network_gate),
            canary_host=os.environ.get("TOOLADAPTER_CANARY_HOST") or os.environ.get("POD_IP"),
            canary_port=_int("TOOLADAPTER_CANARY_PORT", base.canary_port),
            blocked_http_hosts=_list("TOOLADAPTER_BLOCKED_HTTP_HOSTS", base.blocked_http_hosts),
            runtime_classes=_pairs("TOOLADAPTER_RUNTIME_CLASSES", base.runtime_classes),
            leader_election=_bool("TOOLADAPTER_LEADER_ELECTION", base.leader_election),
            lease_namespace=os.environ.get("TOOLADAPTER_LEASE_NAMESPACE") or base.lease_namespace,
            lease_seconds=_at_least("TOOLADAPTER_LEASE_SECONDS", base.lease_seconds, 3),
            gateway_port=_port("TOOLADAPTER_GATEWAY_PORT", base.gateway_port),
            gateway_host=os.environ.get("TOOLADAPTER_GATEWAY_HOST") or base.gateway_host,
            gateway_tls_cert=_path("TOOLADAPTER_GATEWAY_TLS_CERT"),
            gateway_tls_key=_path("TOOLADAPTER_GATEWAY_TLS_KEY"),
            gateway_audiences=_list("TOOLADAPTER_GATEWAY_AUDIENCES", base.gateway_audiences),
            gateway_approval_wait_seconds=_at_least(
                "TOOLADAPTER_GATEWAY_APPROVAL_WAIT_SECONDS", base.gateway_approval_wait_seconds, 0
            ),
            gateway_public_url=_public_url("TOOLADAPTER_GATEWAY_PUBLIC_URL"),
            gateway_caller_requests=_at_least(
                "TOOLADAPTER_GATEWAY_CALLER_REQUESTS", base.gateway_caller_requests, 1
            ),
            gateway_namespace_requests=_at_least(
                "TOOLADAPTER_GATEWAY_NAMESPACE_REQUESTS", base.gateway_namespace_requests, 1
            ),
            gateway_caller_streams=_at_least(
                "TOOLADAPTER_GATEWAY_CALLER_STREAMS", base.gateway_caller_streams, 1
            ),
            gateway_namespace_streams=_at_least(
                "TOOLADAPTER_GATEWAY_NAMESPACE_STREAMS", base.gateway_namespace_streams, 1
            ),
            gateway_connections=_at_least(
                "TOOLADAPTER_GATEWAY_CONNECTIONS", base.gateway_connections, 1
            ),
            gateway_stream_connections=_at_least(
                "TOOLADAPTER_GATEWAY_STREAM_CONNECTIONS", base.gateway_stream_connections, 1
            ),
            gateway_api_timeout_seconds=_at_least(
                "TOOLADAPTER_GATEWAY_API_TIMEOUT_SECONDS", base.gateway_api_timeout_seconds, 1
            ),
            gateway_rejected_token_seconds=_at_least(
                "TOOLADAPTER_GATEWAY_REJECTED_TOKEN_SECONDS",
                base.gateway_rejected_token_seconds,
                0,
            ),
            gateway_auth_failures_burst=_at_least(
                "TOOLADAPTER_GATEWAY_AUTH_FAILURES_BURST", base.gateway_auth_failures_burst, 0
            ),
            gateway_auth_failures_per_minute=_at_least(
                "TOOLADAPTER_GATEWAY_AUTH_FAILURES_PER_MINUTE",
                base.gateway_auth_failures_per_minute,
                1,
            ),
            gateway_trusted_proxies=_list(
                "TOOLADAPTER_GATEWAY_TRUSTED_PROXIES", base.gateway_trusted_proxies
            ),
            result_delimiters=_bool("TOOLADAPTER_RESULT_DELIMITERS", base.result_delimiters),
            ui_session_key_file=_path("TOOLADAPTER_UI_SESSION_KEY_FILE"),
            ui_session_secret=_namespaced("TOOLADAPTER_UI_SESSION_SECRET"),
            ui_session_seconds=_at_least(
                "TOOLADAPTER_UI_SESSION_SECONDS", base.ui_session_seconds, 60
            ),
            ui_behind_tls_proxy=_bool("TOOLADAPTER_UI_BEHIND_TLS_PROXY", base.ui_behind_tls_proxy),
            receipt_signing_secret=_namespaced("TOOLADAPTER_RECEIPT_SIGNING_SECRET")
            or base.receipt_signing_secret,
            receipt_keys_config_map=_namespaced("TOOLADAPTER_RECEIPT_KEYS_CONFIGMAP")
            or base.receipt_keys_config_map,
            receipt_heads_config_map=_namespaced("TOOLADAPTER_RECEIPT_HEADS_CONFIGMAP")
            or base.receipt_heads_config_map,
            receipt_heads_publish_seconds=_at_least(
                "TOOLADAPTER_RECEIPT_HEADS_PUBLISH_SECONDS", base.receipt_heads_publish_seconds, 1
            ),
            event_sink=_endpoint("TOOLADAPTER_EVENT_SINK"),
            event_source=os.environ.get("TOOLADAPTER_EVENT_SOURCE", "").strip()
            or base.event_source,
            event_sink_ca_file=_path("TOOLADAPTER_EVENT_SINK_CA_FILE"),
            event_sink_token_file=_path("TOOLADAPTER_EVENT_SINK_TOKEN_FILE"),
            egress=EgressSettings.from_env(),
            workspace_idle_seconds=_at_least(
                "TOOLADAPTER_WORKSPACE_IDLE_SECONDS", base.workspace_idle_seconds, 1
            ),
            workspace_size=_quantity("TOOLADAPTER_WORKSPACE_SIZE", base.workspace_size),
            workspaces_per_namespace=_at_least(
                "TOOLADAPTER_WORKSPACES_PER_NAMESPACE", base.workspaces_per_namespace, 1
            ),
            warm_pool_size=_at_least("TOOLADAPTER_WARM_POOL_SIZE", base.warm_pool_size, 0),
            warm_pool_idle_seconds=_at_least(
                "TOOLADAPTER_WARM_POOL_IDLE_SECONDS", base.warm_pool_idle_seconds, 1
            ),
            warm_start_seconds=_at_least(
                "TOOLADAPTER_WARM_START_SECONDS", base.warm_start_seconds, 1
            ),
            health_port=_port("TOOLADAPTER_HEALTH_PORT", base.health_port),
        )

    def __post_init__(self) -> None:
        if (self.gateway_tls_cert is None) != (self.gateway_tls_key is None):
            raise ValueError(
                "TOOLADAPTER_GATEWAY_TLS_CERT and TOOLADAPTER_GATEWAY_TLS_KEY go together: "
                "set both for TLS, or neither"
            )
