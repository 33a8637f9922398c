"""Sandbox pods: their image, how it is pulled, where they run, and the network gate."""

from __future__ import annotations

import os
from dataclasses import dataclass

from tooladapter.settings import environ as env


@dataclass(frozen=True)
class SandboxSettings:
    """The pods shell tools run in (`tooladapter.sandbox`, `executors.sandbox`)."""

    #: Image of shell tools when the descriptor names none.
    image: str = "localhost/tooladapter-sandbox:dev"
    #: Pull policy of sandbox pods (the local cluster imports its images; `Always` when
    #: they come from a registry and every run must pull).
    image_pull_policy: str = "IfNotPresent"
    #: Names of pull Secrets ("a,b") every sandbox pod lists in imagePullSecrets. Each
    #: tenant namespace must hold them itself: the operator never copies Secrets between
    #: namespaces (a pod naming a missing one still pulls anonymously).
    image_pull_secrets: tuple[str, ...] = ()
    #: Jobs and NetworkPolicies of ended calls are kept this long for inspection, then reaped.
    retain_seconds: int = 60
    #: RuntimeClass of each sandbox kind without a `runtimeClassName` ("Kind=class" pairs;
    #: Container maps to none: the node's default runtime).
    runtime_classes: tuple[tuple[str, str], ...] = (("GVisor", "gvisor"), ("Kata", "kata"))
    #: Gate every sandbox on proof that its NetworkPolicy is enforced (see pipeline.sandbox).
    network_gate: bool = True
    #: Address pods use to reach the operator's canary listener (default: this host's
    #: default-route address, or POD_IP in-cluster) and its port (0: any free port).
    canary_host: str | None = None
    canary_port: int = 0

    @classmethod
    def from_env(cls) -> SandboxSettings:
        base = cls()
        return cls(
            image=os.environ.get("TOOLADAPTER_SANDBOX_IMAGE", base.image),
            image_pull_policy=os.environ.get(
                "TOOLADAPTER_IMAGE_PULL_POLICY", base.image_pull_policy
            ),
            image_pull_secrets=env.listed(
                "TOOLADAPTER_IMAGE_PULL_SECRETS", base.image_pull_secrets
            ),
            retain_seconds=env.integer("TOOLADAPTER_SANDBOX_RETAIN_SECONDS", base.retain_seconds),
            runtime_classes=env.pairs("TOOLADAPTER_RUNTIME_CLASSES", base.runtime_classes),
            network_gate=env.boolean("TOOLADAPTER_NETWORK_GATE", base.network_gate),
            canary_host=os.environ.get("TOOLADAPTER_CANARY_HOST") or os.environ.get("POD_IP"),
            canary_port=env.integer("TOOLADAPTER_CANARY_PORT", base.canary_port),
        )
