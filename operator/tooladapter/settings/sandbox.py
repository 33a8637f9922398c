"""Sandbox pods: their image, how it is pulled, where they run, and the network gate."""

from __future__ import annotations

from dataclasses import dataclass

from tooladapter.settings import environ as env
from tooladapter.settings.variables import FromEnv, setting


@dataclass(frozen=True)
class SandboxSettings(FromEnv):
    """The pods shell tools run in (`tooladapter.sandbox`, `executors.sandbox`)."""

    #: Image of shell tools when the descriptor names none.
    image: str = setting(
        "TOOLADAPTER_SANDBOX_IMAGE", env.verbatim, "localhost/tooladapter-sandbox:dev"
    )
    #: Pull policy of sandbox pods (the local cluster imports its images; `Always` when
    #: they come from a registry and every run must pull).
    image_pull_policy: str = setting("TOOLADAPTER_IMAGE_PULL_POLICY", env.verbatim, "IfNotPresent")
    #: Names of pull Secrets ("a,b") every sandbox pod lists in imagePullSecrets. Each
    #: tenant namespace must hold them itself: the operator never copies Secrets between
    #: namespaces (a pod naming a missing one still pulls anonymously).
    image_pull_secrets: tuple[str, ...] = setting("TOOLADAPTER_IMAGE_PULL_SECRETS", env.listed, ())
    #: Jobs and NetworkPolicies of ended calls are kept this long for inspection, then reaped.
    retain_seconds: int = setting("TOOLADAPTER_SANDBOX_RETAIN_SECONDS", env.integer, 60)
    #: RuntimeClass of each sandbox kind without a `runtimeClassName` ("Kind=class" pairs;
    #: Container maps to none: the node's default runtime).
    runtime_classes: tuple[tuple[str, str], ...] = setting(
        "TOOLADAPTER_RUNTIME_CLASSES", env.pairs, (("GVisor", "gvisor"), ("Kata", "kata"))
    )
    #: Gate every sandbox on proof that its NetworkPolicy is enforced (see pipeline.sandbox).
    network_gate: bool = setting("TOOLADAPTER_NETWORK_GATE", env.boolean, True)
    #: Address pods use to reach the operator's canary listener (default: this host's
    #: default-route address, or POD_IP in-cluster) and its port (0: any free port).
    canary_host: str | None = setting("TOOLADAPTER_CANARY_HOST", env.or_variable("POD_IP"), None)
    canary_port: int = setting("TOOLADAPTER_CANARY_PORT", env.integer, 0)
