"""Field types and bounds that several resources share.

A tool id, a version and a sha256 reference are named by descriptors, invocations and
approvals alike; a condition is on every status; a Secret key is read by a descriptor's
egress credentials and a server's credentials. One declaration each, so the CRDs agree.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from tooladapter.model.base import Model

#: Tool ids are RBAC resourceNames and appear in object names: DNS-label-like.
TOOL_ID_PATTERN = r"^[a-z0-9]([-a-z0-9._]{0,61}[a-z0-9])?$"
#: Semantic-version-like; compared with `packaging` version ranges in policies.
VERSION_PATTERN = r"^[0-9]+(\.[0-9]+){0,2}([-+][0-9A-Za-z.-]+)?$"
SHA256_REF_PATTERN = r"^sha256:[0-9a-f]{64}$"
#: Upper bounds matching the patterns above (the CRD's CEL cost estimator needs them).
TOOL_ID_MAX = 63
VERSION_MAX = 64
SHA256_REF_MAX = 71


class Condition(Model):
    """One observation of the object's state, in the Kubernetes conditions convention."""

    type: str
    """The condition's type, e.g. Ready, Finished, Succeeded."""
    status: Literal["True", "False", "Unknown"]
    """True, False or Unknown."""
    reason: str = ""
    """A CamelCase reason for the status."""
    message: str = ""
    """Why, in words."""
    last_transition_time: str | None = None
    """When the status last changed (RFC 3339)."""
    observed_generation: int | None = None
    """The metadata.generation the condition was computed for."""


class SecretKeyRef(Model):
    """One key of a Secret in the same namespace."""

    name: str = Field(min_length=1)
    """The Secret's name."""
    key: str = Field(min_length=1)
    """The key in the Secret."""
