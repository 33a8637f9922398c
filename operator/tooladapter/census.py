"""The gauges as counts over the watch's view of every invocation, never running sums.

`tooladapter_uncertain`, `tooladapter_approvals_waiting` and `tooladapter_sandboxes_open`
were incremented and decremented in memory, so a restarted operator reset them and a
double decrement drove them negative. The census keeps one small row per invocation from
its watch events (a restart's listing rebuilds it) and the gauges are counted from it when
Prometheus scrapes: a restarted operator reports the same numbers as before.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from .enums import InvocationState


@dataclass(frozen=True)
class Row:
    namespace: str
    state: InvocationState
    effective_class: str
    #: Kind of the sandbox lease while it is open (None: no lease, or released).
    open_sandbox: str | None
    #: Uncertain and no person has recorded what happened yet.
    unconfirmed: bool


def row_of(body: Mapping[str, Any]) -> Row:
    status = body.get("status") or {}
    state = InvocationState(status.get("state") or InvocationState.RECEIVED)
    lease = status.get("sandboxLease") or {}
    confirmation = status.get("effectConfirmation") or {}
    return Row(
        namespace=body["metadata"]["namespace"],
        state=state,
        effective_class=str(status.get("effectiveClass") or ""),
        open_sandbox=str(lease.get("kind")) if lease and not lease.get("releasedAt") else None,
        unconfirmed=state == InvocationState.UNCERTAIN and not confirmation.get("recorded"),
    )


class Census(Collector):
    def __init__(self) -> None:
        self.rows: dict[str, Row] = {}

    def update(self, event_type: str | None, body: Mapping[str, Any]) -> None:
        uid = body["metadata"]["uid"]
        if event_type == "DELETED":
            self.rows.pop(uid, None)
        else:
            self.rows[uid] = row_of(body)

    def collect(self) -> Iterator[GaugeMetricFamily]:
        uncertain: Counter[str] = Counter()
        waiting: Counter[tuple[str, ...]] = Counter()
        sandboxes: Counter[tuple[str, ...]] = Counter()
        for row in self.rows.values():
            if row.unconfirmed:
                uncertain[row.namespace] += 1
            if row.state == InvocationState.AWAITING_APPROVAL:
                waiting[(row.namespace, row.effective_class)] += 1
            if row.open_sandbox is not None:
                sandboxes[(row.namespace, row.open_sandbox)] += 1
        yield _family(
            "tooladapter_uncertain",
            "Invocations awaiting effect confirmation.",
            ["tenant"],
            {(ns,): n for ns, n in uncertain.items()},
        )
        yield _family(
            "tooladapter_approvals_waiting",
            "Gated calls waiting for approval.",
            ["tenant", "effective_class"],
            dict(waiting),
        )
        yield _family(
            "tooladapter_sandboxes_open",
            "Open sandbox leases.",
            ["tenant", "kind"],
            dict(sandboxes),
        )


def _family(
    name: str, documentation: str, labels: list[str], counts: Mapping[tuple[str, ...], int]
) -> GaugeMetricFamily:
    family = GaugeMetricFamily(name, documentation, labels=labels)
    for values, count in sorted(counts.items()):
        family.add_metric(list(values), count)
    return family
