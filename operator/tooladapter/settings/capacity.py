"""How many calls run at once, and how long one waits for its namespace's quota."""

from __future__ import annotations

from dataclasses import dataclass

from tooladapter.settings import environ as env


@dataclass(frozen=True)
class CapacitySettings:
    """The in-flight bound (`tooladapter.inflight`) and the quota wait (`flow.capacity`)."""

    #: Invocations evaluated or executed at once (`inflight`); more wait in a queue per
    #: namespace, served round-robin. A call waiting for an approval or an idempotency
    #: winner holds no slot.
    calls_in_flight: int = 16
    #: How long a sandboxed call waits in Brokered for its namespace's ResourceQuotas to
    #: admit its Job and pod (checked before any effect); then it ends Failed `transient`.
    wait_seconds: int = 120

    @classmethod
    def from_env(cls) -> CapacitySettings:
        base = cls()
        return cls(
            calls_in_flight=env.at_least(
                "TOOLADAPTER_MAX_CALLS_IN_FLIGHT", base.calls_in_flight, 1
            ),
            wait_seconds=env.at_least("TOOLADAPTER_CAPACITY_WAIT_SECONDS", base.wait_seconds, 0),
        )
