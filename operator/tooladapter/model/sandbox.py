"""The sandbox block of a ToolDescriptor: the pod a shell or container tool runs in.

Its resources (cpu, memory, extended resources such as GPUs), its egress allow-list, and
whose workspace a call sees (the credentials a call carries are `model.credentials`).
"""

from __future__ import annotations

import re
from typing import Annotated, Any

from pydantic import ConfigDict, Field, model_validator
from pydantic.config import JsonDict

from tooladapter.enums import (
    SandboxKind,
    WorkspaceMode,
)
from tooladapter.model.base import Model

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


class Egress(Model):
    """Where the sandbox may connect (default: the operator's default list)."""

    allow: list[Annotated[str, Field(max_length=260)]] | None = Field(
        default=None,
        max_length=64,
        description="Host names (exact or `*.suffix`, optionally `:port`; through the egress "
        "proxy, port 443 for CONNECT and 80 for plain HTTP unless given) and CIDRs (in the "
        "lease's NetworkPolicy). Unset: the operator's default list "
        "(TOOLADAPTER_DEFAULT_EGRESS_ALLOW); `[]`: no egress.",
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
    until it is idle for TOOLADAPTER_WORKSPACE_IDLE_SECONDS or released). Not with credential
    files (`credentials[].inject.file`) or CIDR egress entries; HTTP credentials are injected
    by the egress proxy, outside the pod."""
    pool_id: str = "default"
    """The sandbox pool (recorded on the lease and the receipt)."""
    egress: Egress = Field(default_factory=Egress)
    """Where the sandbox may connect; a default-deny NetworkPolicy allows only these."""
