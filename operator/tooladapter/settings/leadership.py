"""One active operator per served namespace set: the leadership Leases."""

from __future__ import annotations

from dataclasses import dataclass

from tooladapter.settings import environ as env
from tooladapter.settings.variables import FromEnv, setting


@dataclass(frozen=True)
class LeadershipSettings(FromEnv):
    """Leader election (`kube.leases`, `handlers.leadership`)."""

    #: Hold a Lease per served namespace set (`kube.leases`): a second operator for the
    #: same namespaces waits as a standby instead of processing every call a second time.
    enabled: bool = setting("TOOLADAPTER_LEADER_ELECTION", env.boolean, True)
    #: Namespace of the leadership Leases (manifests/namespace.yaml creates it).
    lease_namespace: str = setting("TOOLADAPTER_LEASE_NAMESPACE", env.text, "tooladapter-system")
    #: leaseDurationSeconds: a standby takes over this long after the leader stopped
    #: renewing; the leader stops acting after two thirds of it without a renewal.
    lease_seconds: int = setting("TOOLADAPTER_LEASE_SECONDS", env.at_least(3), 15)
