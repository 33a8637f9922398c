"""One active operator per served namespace set: the leadership Leases."""

from __future__ import annotations

import os
from dataclasses import dataclass

from tooladapter.settings import environ as env


@dataclass(frozen=True)
class LeadershipSettings:
    """Leader election (`kube.leases`, `handlers.leadership`)."""

    #: Hold a Lease per served namespace set (`kube.leases`): a second operator for the
    #: same namespaces waits as a standby instead of processing every call a second time.
    enabled: bool = True
    #: Namespace of the leadership Leases (manifests/namespace.yaml creates it).
    lease_namespace: str = "tooladapter-system"
    #: leaseDurationSeconds: a standby takes over this long after the leader stopped
    #: renewing; the leader stops acting after two thirds of it without a renewal.
    lease_seconds: int = 15

    @classmethod
    def from_env(cls) -> LeadershipSettings:
        base = cls()
        return cls(
            enabled=env.boolean("TOOLADAPTER_LEADER_ELECTION", base.enabled),
            lease_namespace=os.environ.get("TOOLADAPTER_LEASE_NAMESPACE") or base.lease_namespace,
            lease_seconds=env.at_least("TOOLADAPTER_LEASE_SECONDS", base.lease_seconds, 3),
        )
