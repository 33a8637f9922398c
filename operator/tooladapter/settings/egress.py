"""The egress proxy's settings, shared by the operator (which grants leases) and the proxy
process (which enforces them): both read the same variables.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from tooladapter.egress.core.rules import REFERENCE_DEFAULT_ALLOW
from tooladapter.settings import environ as env
from tooladapter.settings.variables import FromEnv, setting


@dataclass(frozen=True)
class EgressSettings(FromEnv):
    """The egress proxy (`python -m tooladapter egress-proxy`) and how leases reach it."""

    #: Port the proxy listens on, and the port pods are pointed at.
    proxy_port: int = setting("TOOLADAPTER_EGRESS_PROXY_PORT", env.at_least(1), 3128)
    #: Address the proxy binds (default: every address; the lease's NetworkPolicy decides
    #: which pods reach it, and the token which lease they act for).
    listen: str = setting("TOOLADAPTER_EGRESS_PROXY_LISTEN", env.text, "0.0.0.0")  # noqa: S104
    #: False when no proxy runs (the chart's `egressProxy.enabled: false`): leases then get
    #: no proxy, and host names stay unreachable (fail closed).
    proxy_enabled: bool = setting("TOOLADAPTER_EGRESS_PROXY_ENABLED", env.boolean, True)
    #: Address pods are given in HTTP(S)_PROXY (host mode: the node's default-route address;
    #: in the cluster: the proxy Service's ClusterIP, since sandboxes have no DNS).
    proxy_address: str | None = setting("TOOLADAPTER_EGRESS_PROXY_ADDRESS", env.text, None)
    #: In the cluster, when `proxy_address` is unset: the proxy Service's name in
    #: `namespace`, whose ClusterIP the operator reads at start-up (the chart sets it).
    proxy_service: str | None = setting("TOOLADAPTER_EGRESS_PROXY_SERVICE", env.text, None)
    #: In the cluster: the proxy pods' labels ("k=v,..."); the lease's NetworkPolicy selects
    #: them in `namespace` instead of allowing `proxy_address`.
    proxy_pod_labels: tuple[tuple[str, str], ...] = setting(
        "TOOLADAPTER_EGRESS_PROXY_POD_LABELS", env.pairs, ()
    )
    #: Where lease grants and connection records live: a namespace of their own, where the
    #: proxy's Role lets it read Secrets, and nothing else is kept (the page's session key,
    #: S3 credentials and TLS keys stay in the operator's namespace, out of its reach).
    namespace: str = setting("TOOLADAPTER_EGRESS_NAMESPACE", env.text, "tooladapter-egress")
    #: Where the proxy's pods and Service run (the lease NetworkPolicy selects the pods
    #: there; the Service's ClusterIP is read there); None: `namespace`.
    proxy_namespace: str | None = setting("TOOLADAPTER_EGRESS_PROXY_NAMESPACE", env.text, None)
    #: A sandbox's allow-list when its descriptor sets none (reference: DefaultEgressAllowList).
    #: An approved call whose list widened since its approval is Denied at the re-check.
    default_allow: tuple[str, ...] = setting(
        "TOOLADAPTER_DEFAULT_EGRESS_ALLOW", env.listed, REFERENCE_DEFAULT_ALLOW, reloadable=True
    )
    #: Names the proxy and http tools resolve to fixed addresses ("name=address,..."), for
    #: tests; those addresses skip the non-public check, and such names never go to DNS.
    hosts: str = setting("TOOLADAPTER_EGRESS_HOSTS", env.verbatim, "")
    #: Hosts of OAuth 2.0 token endpoints (`oauth2ClientCredentials`, `tokenExchange`) that
    #: may resolve to non-public addresses (an issuer inside the cluster); any other
    #: issuer's host must resolve to public addresses, since the operator posts client
    #: secrets there.
    trusted_issuers: tuple[str, ...] = setting("TOOLADAPTER_TRUSTED_ISSUERS", env.listed, ())
    #: Cluster ranges (pod and service CIDRs) the proxy treats as non-public, and every
    #: lease's NetworkPolicy excepts from the ipBlocks that contain them.
    cluster_cidrs: tuple[str, ...] = setting("TOOLADAPTER_EGRESS_CLUSTER_CIDRS", env.listed, ())
    #: Descriptor CIDRs (`sandbox.egress.allow`, IP literals of `http.allowedHosts`):
    #: `allow` up to the prefixes below, or `forbid` cluster-wide.
    descriptor_cidrs: Literal["allow", "forbid"] = setting(
        "TOOLADAPTER_DESCRIPTOR_CIDRS", env.cidr_mode, "allow"
    )
    #: The widest CIDR a descriptor may allow, per family (a shorter prefix is refused).
    descriptor_cidr_min_prefix_v4: int = setting(
        "TOOLADAPTER_DESCRIPTOR_CIDR_MIN_PREFIX_IPV4", env.prefix(32), 24
    )
    descriptor_cidr_min_prefix_v6: int = setting(
        "TOOLADAPTER_DESCRIPTOR_CIDR_MIN_PREFIX_IPV6", env.prefix(128), 64
    )
    #: Extra CA bundle trusted, besides the system's, for TLS upstreams of credentialed
    #: hosts (the proxy) and the https servers http tools call.
    ca_file: str | None = setting("TOOLADAPTER_EGRESS_CA_FILE", env.text, None)
    #: Port of the proxy's /metrics; 0 disables it.
    metrics_port: int = setting("TOOLADAPTER_EGRESS_METRICS_PORT", env.integer, 9465)
    #: Seconds a connection may stay idle (no byte either way) before the proxy closes it.
    idle_seconds: int = setting("TOOLADAPTER_EGRESS_IDLE_SECONDS", env.at_least(1), 300)
