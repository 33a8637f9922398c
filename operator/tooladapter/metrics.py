"""The reference's six metrics, as Prometheus instruments.

Names follow Prometheus conventions (`tooladapter_*`), dimensions follow the reference
(`connectsoft.factory.tools.*`). Labels never carry arguments or results.
"""

from __future__ import annotations

from prometheus_client import Counter, Gauge, Histogram, start_http_server

INVOCATIONS = Counter(
    "tooladapter_invocations",
    "Invocations by outcome.",
    ["tenant", "tool", "effective_class", "state"],
)
LATENCY = Histogram(
    "tooladapter_latency_seconds",
    "Pipeline and execution latency, from creation to the terminal state.",
    ["tool", "kind"],
    buckets=(0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300),
)
DENIALS = Counter(
    "tooladapter_denials",
    "Denials by stage.",
    ["tenant", "stage", "reason"],
)
UNCERTAIN = Gauge(
    "tooladapter_uncertain",
    "Invocations awaiting effect confirmation.",
    ["tenant"],
)
APPROVALS_WAITING = Gauge(
    "tooladapter_approvals_waiting",
    "Gated calls waiting for approval.",
    ["tenant", "effective_class"],
)
SANDBOXES_OPEN = Gauge(
    "tooladapter_sandboxes_open",
    "Open sandbox leases.",
    ["tenant", "kind"],
)


def serve(port: int) -> None:
    """Expose /metrics on `port` (0 disables)."""
    if port:
        start_http_server(port)
