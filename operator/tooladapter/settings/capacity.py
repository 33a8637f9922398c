"""How many calls run at once, and how long one waits for its namespace's quota."""

from __future__ import annotations

from dataclasses import dataclass

from tooladapter.settings import environ as env
from tooladapter.settings.variables import FromEnv, setting


@dataclass(frozen=True)
class CapacitySettings(FromEnv):
    """The in-flight bound (`tooladapter.inflight`) and the quota wait (`flow.capacity`)."""

    #: Invocations evaluated or executed at once (`inflight`); more wait in a queue per
    #: namespace, served round-robin. A call waiting for an approval or an idempotency
    #: winner holds no slot.
    calls_in_flight: int = setting("TOOLADAPTER_MAX_CALLS_IN_FLIGHT", env.at_least(1), 16)
    #: How long a sandboxed call waits in Brokered for its namespace's ResourceQuotas to
    #: admit its Job and pod (checked before any effect), and how long its Job's pod may
    #: then stay unschedulable (no node has room); then it ends Failed `transient`.
    wait_seconds: int = setting("TOOLADAPTER_CAPACITY_WAIT_SECONDS", env.at_least(0), 120)
