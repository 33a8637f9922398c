"""Pure builders of the Kubernetes objects of one sandbox lease: Job, NetworkPolicy, Secret.

They return plain dicts and call nothing, so every security property of a sandbox (no
retry, no shell string, restricted pod security, default-deny network) is unit-tested
without a cluster; `tooladapter.kube.sandbox` only sends what these build.

Kubernetes Jobs are not at-most-once by themselves, so the Job also carries
backoffLimit 0, podReplacementPolicy Failed and a podFailurePolicy that fails the whole
Job on any non-zero exit and on disruption: Kubernetes never starts a second pod.
"""

from __future__ import annotations

import ipaddress
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from tooladapter.egress.core.addresses import IPNetwork
from tooladapter.egress.core.cidr_bounds import ip_block
from tooladapter.egress.core.lease import ca_pod_env, ca_pod_volume
from tooladapter.model import CREDENTIAL_MOUNT_ROOT, Credential, SandboxSpec
from tooladapter.naming import (
    ANNOTATION_ARGUMENTS,
    ANNOTATION_INVOCATION,
    ANNOTATION_LEASE,
    LABEL_INVOCATION_UID,
    LABEL_MANAGED_BY,
    MANAGED_BY,
    LeaseNames,
)
from tooladapter.sandbox.podspec import (
    CONTAINER_NAME,
    TOOLADAPTER_DIR,
    TOOLADAPTER_VOLUME,
    gated_command,
    home_volume,
    restricted_pod_spec,
    sandbox_env,
    tool_container,
    volume_mounts,
    workspace_volume,
)

ARGUMENTS_FILE = f"{TOOLADAPTER_DIR}/arguments.json"


@dataclass(frozen=True)
class ProxyPeer:
    """The egress proxy as a lease's pod reaches it: `address:port` in its HTTP(S)_PROXY
    (an address: the pod has no DNS), and in its NetworkPolicy either that address (host
    mode: the node's) or, in the cluster, the proxy pods by label in their namespace (a
    policy cannot name a Service IP; the Service's address is translated to a pod's before
    the policy is applied)."""

    address: str
    port: int
    namespace: str | None = None
    pod_labels: tuple[tuple[str, str], ...] = ()

    @property
    def endpoint(self) -> str:
        return (
            f"[{self.address}]:{self.port}"
            if ":" in self.address
            else f"{self.address}:{self.port}"
        )

    @property
    def url_address(self) -> str:
        return self.address

    def rule(self) -> dict[str, Any]:
        ports = [{"protocol": "TCP", "port": self.port}]
        if self.pod_labels:
            peer: dict[str, Any] = {"podSelector": {"matchLabels": dict(self.pod_labels)}}
            if self.namespace:
                peer["namespaceSelector"] = {
                    "matchLabels": {"kubernetes.io/metadata.name": self.namespace}
                }
            return {"to": [peer], "ports": ports}
        bits = 128 if ":" in self.address else 32
        return {"to": [{"ipBlock": {"cidr": f"{self.address}/{bits}"}}], "ports": ports}


def owner_reference(*, api_version: str, kind: str, name: str, uid: str) -> dict[str, Any]:
    return {
        "apiVersion": api_version,
        "kind": kind,
        "name": name,
        "uid": uid,
        "controller": True,
        "blockOwnerDeletion": False,
    }


def labels_for(uid: str) -> dict[str, str]:
    return {LABEL_MANAGED_BY: MANAGED_BY, LABEL_INVOCATION_UID: uid}


def network_gate_for(
    canary: tuple[str, int] | None, egress_allow: list[str]
) -> tuple[str, int] | None:
    """The canary a pod must find unreachable before its tool runs.

    An allowed CIDR that covers the canary's address is let out on every port but the
    canary's (see `build_network_policy`), so the canary still proves the policy is
    enforced: every sandbox is gated, whatever its allow-list.
    """
    return canary


def _covers(cidr: str, address: str) -> bool:
    try:
        return ipaddress.ip_address(address) in ipaddress.ip_network(cidr)
    except ValueError:
        return False


def _all_ports_but(port: int) -> list[dict[str, Any]]:
    """NetworkPolicy ports: every TCP port except `port` (endPort ranges), all UDP/SCTP."""
    ranges = [(1, port - 1), (port + 1, 65535)]
    tcp = [
        {"protocol": "TCP", "port": low, **({"endPort": high} if high > low else {})}
        for low, high in ranges
        if low <= high
    ]
    return [*tcp, {"protocol": "UDP"}, {"protocol": "SCTP"}]


def split_egress(allow: list[str]) -> tuple[list[str], list[str]]:
    """Split an egress allow-list into CIDRs (NetworkPolicy) and host names (proxy)."""
    cidrs: list[str] = []
    hosts: list[str] = []
    for entry in allow:
        try:
            cidrs.append(str(ipaddress.ip_network(entry, strict=False)))
        except ValueError:
            hosts.append(entry)
    return cidrs, hosts


def build_network_policy(
    *,
    namespace: str,
    uid: str,
    owner: dict[str, Any],
    egress_allow: list[str],
    canary: tuple[str, int] | None = None,
    proxy: ProxyPeer | None = None,
    cluster: Sequence[IPNetwork] = (),
) -> dict[str, Any]:
    """Default-deny ingress and egress for the lease's pod; CIDR entries are let out,
    except link-local, loopback, metadata and the `cluster` ranges strictly inside them
    (`cidr_bounds.ip_block`).

    A CIDR that covers the `canary` (the operator's listener the network gate must find
    unreachable) is let out on every port but the canary's TCP port, so the gate still
    proves enforcement before the tool runs. Host names are not expressible in a
    NetworkPolicy: they go through the egress `proxy`, the one other peer (its TCP port
    only). No DNS: the proxy resolves, so UDP and TCP 53 stay closed to every address.
    """
    cidrs, _hosts = split_egress(egress_allow)
    names = LeaseNames.for_uid(uid)
    covering = [c for c in cidrs if canary and _covers(c, canary[0])]
    plain = [c for c in cidrs if c not in covering]
    egress: list[dict[str, Any]] = []
    if plain:
        egress.append({"to": [ip_block(cidr, cluster) for cidr in plain]})
    if covering and canary is not None:
        egress.append(
            {
                "to": [ip_block(cidr, cluster) for cidr in covering],
                "ports": _all_ports_but(canary[1]),
            }
        )
    if proxy is not None:
        egress.append(proxy.rule())
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": {
            "name": names.network_policy,
            "namespace": namespace,
            "labels": labels_for(uid),
            "ownerReferences": [owner],
        },
        "spec": {
            "podSelector": {"matchLabels": {LABEL_INVOCATION_UID: uid}},
            "policyTypes": ["Ingress", "Egress"],
            "ingress": [],
            "egress": egress,
        },
    }


def build_secret(
    *, namespace: str, uid: str, owner: dict[str, Any], data_b64: dict[str, str]
) -> dict[str, Any]:
    """The ephemeral Secret of a lease: only the brokered keys, owned by the invocation."""
    names = LeaseNames.for_uid(uid)
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "type": "Opaque",
        "metadata": {
            "name": names.secret,
            "namespace": namespace,
            "labels": labels_for(uid),
            "ownerReferences": [owner],
        },
        "data": data_b64,
    }


def _resources(sandbox: SandboxSpec) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for part in ("requests", "limits"):
        quantities = getattr(sandbox.resources, part)
        values = {k: v for k, v in (("cpu", quantities.cpu), ("memory", quantities.memory)) if v}
        # Extended resources (nvidia.com/gpu) pass through as given: the scheduler places
        # the pod on a node that has them (the model checked names and whole quantities).
        values.update(quantities.extended)
        if values:
            out[part] = values
    return out


def runtime_class_for(sandbox: SandboxSpec, by_kind: Mapping[str, str]) -> str | None:
    """The RuntimeClass a sandbox's pod runs with: `runtimeClassName` when set, else the
    one mapped to its kind (`TOOLADAPTER_RUNTIME_CLASSES`); None: the node's default."""
    return sandbox.runtime_class_name or by_kind.get(sandbox.kind.value) or None


def egress_ca_trust(
    uid: str, mounts: list[dict[str, Any]], volumes: list[dict[str, Any]]
) -> list[dict[str, Any]]:
    """Mount the lease's trust bundle and wgetrc (public: the system CAs and the lease CA's
    certificate, from the proxy Secret) and return the variables naming them, so curl, wget,
    git and Python trust the proxy's https for the credential hosts unmodified."""
    volume, mount = ca_pod_volume(uid)
    volumes.append(volume)
    mounts.append(mount)
    return ca_pod_env()


def build_job(
    *,
    namespace: str,
    uid: str,
    invocation_name: str,
    owner: dict[str, Any],
    sandbox: SandboxSpec,
    image: str,
    argv: list[str],
    arguments: dict[str, Any],
    timeout_seconds: int,
    lease_id: str,
    job_deadline_seconds: int | None = None,
    image_pull_policy: str = "IfNotPresent",
    image_pull_secrets: list[str] | None = None,
    credential_files: list[Credential] | None = None,
    network_gate: tuple[str, int] | None = None,
    gate_image: str | None = None,
    runtime_class: str | None = None,
    extra_env: list[dict[str, Any]] | None = None,
    egress_ca: bool = False,
) -> dict[str, Any]:
    """The Job of one sandboxed call. `argv` is exec'd as is: never joined into a string.

    `runtime_class` is the pod's RuntimeClass (see `runtime_class_for`); `extra_env` the
    egress proxy's variables (`egress_lease.proxy_env`); `image_pull_secrets` names Secrets
    of the call's namespace (never copied there by the operator); `egress_ca`: the lease
    has a CA (HTTP credentials), whose bundle the pod trusts (`egress_ca_trust`).

    `network_gate` (the canary) holds the tool until the pod's NetworkPolicy is enforced:
    in the tool's container before its argv is exec'd when the tool's image is
    `gate_image`, else in an init container of `gate_image`.

    The tool's timeout is the pod's own activeDeadlineSeconds, which the kubelet counts
    from the pod's start on its node: a pod waiting for the scheduler uses none of it.
    The Job's (`job_deadline_seconds`, default the timeout) bounds the wait and the start
    too, a backstop for when the operator is not there to give up on an unschedulable
    pod (`executors.sandbox.job_deadline`)."""
    names = LeaseNames.for_uid(uid)
    labels = labels_for(uid)
    mounts = volume_mounts(tooladapter_read_only=True)
    volumes: list[dict[str, Any]] = [
        workspace_volume(sandbox.workspace_size_limit),
        home_volume(sandbox.workspace_size_limit),
        {
            # The downward API carries the arguments: no extra object, and the file is
            # exactly the validated JSON, never a command line.
            "name": TOOLADAPTER_VOLUME,
            "downwardAPI": {
                "items": [
                    {
                        "path": "arguments.json",
                        "fieldRef": {
                            "fieldPath": f"metadata.annotations['{ANNOTATION_ARGUMENTS}']"
                        },
                    }
                ]
            },
        },
    ]
    # Each credential file is a key of the lease's Secret, at the path `inject.file`
    # names below the read-only mount root (`model.credentials`).
    items = [
        {"key": f"file-{c.name}", "path": (c.inject.file or "")[len(CREDENTIAL_MOUNT_ROOT) + 1 :]}
        for c in (credential_files or [])
        if c.inject.file is not None
    ]
    if items:
        mounts.append({"name": "credentials", "mountPath": CREDENTIAL_MOUNT_ROOT, "readOnly": True})
        volumes.append(
            {
                "name": "credentials",
                "secret": {"secretName": names.secret, "items": items, "defaultMode": 0o440},
            }
        )
    ca_env = egress_ca_trust(uid, mounts, volumes) if egress_ca else []
    # The gate runs in the tool's own container where its image is the gate's (one
    # container start fewer, `podspec.GATE_EXEC`); any other image keeps the init container.
    inline_gate = network_gate is not None and bool(argv) and (gate_image or image) == image
    container = tool_container(
        image=image,
        image_pull_policy=image_pull_policy,
        command=gated_command(network_gate, argv)
        if inline_gate and network_gate is not None
        else argv,
        env=[
            *sandbox_env(),
            {"name": "TOOLADAPTER_ARGUMENTS", "value": ARGUMENTS_FILE},
            *(extra_env or []),
            *ca_env,
        ],
        resources=_resources(sandbox),
        mounts=mounts,
    )
    container["terminationMessagePolicy"] = "File"
    pod_spec = restricted_pod_spec(
        container=container,
        volumes=volumes,
        grace_seconds=5,
        network_gate=None if inline_gate else network_gate,
        gate_image=gate_image or image,
        image_pull_policy=image_pull_policy,
        runtime_class=runtime_class,
        image_pull_secrets=image_pull_secrets or (),
    )
    annotations = {
        ANNOTATION_INVOCATION: invocation_name,
        ANNOTATION_LEASE: lease_id,
    }
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": names.job,
            "namespace": namespace,
            "labels": labels,
            "annotations": annotations,
            "ownerReferences": [owner],
        },
        "spec": {
            "backoffLimit": 0,
            "completions": 1,
            "parallelism": 1,
            "activeDeadlineSeconds": job_deadline_seconds or timeout_seconds,
            "podReplacementPolicy": "Failed",
            "podFailurePolicy": {
                "rules": [
                    {"action": "FailJob", "onPodConditions": [{"type": "DisruptionTarget"}]},
                    {
                        "action": "FailJob",
                        "onExitCodes": {
                            "containerName": CONTAINER_NAME,
                            "operator": "NotIn",
                            "values": [0],
                        },
                    },
                ]
            },
            "template": {
                "metadata": {
                    "labels": labels,
                    "annotations": {
                        **annotations,
                        ANNOTATION_ARGUMENTS: json.dumps(arguments, separators=(",", ":")),
                    },
                },
                "spec": {**pod_spec, "activeDeadlineSeconds": timeout_seconds},
            },
        },
    }
