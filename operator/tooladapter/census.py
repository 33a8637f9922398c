"""The gauges as counts over the watch's view of every invocation, never running sums.

`tooladapter_uncertain`, `tooladapter_approvals_waiting` and `tooladapter_sandboxes_open`
were incremented and decremented in memory, so a restarted operator reset them and a
double decrement drove them negative. The census keeps one small row per invocation from
its watch events (a restart's listing rebuilds it) and the gauges are counted from it when
Prometheus scrapes: a restarted operator reports the same numbers as before.

Ages (the oldest approval wait, the oldest call not yet begun) and overdue sandbox leases are
computed at the scrape from times the rows keep, so the alerts in `hack/monitoring/` see them
grow while nothing changes on the watch.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from tooladapter.enums import InvocationState
from tooladapter.pipeline.retention import retainable_since
from tooladapter.timeutil import parse_time


@dataclass(frozen=True, slots=True)
class Row:
    namespace: str
    state: InvocationState
    effective_class: str
    #: Kind of the sandbox lease while it is open (None: no lease, or released).
    open_sandbox: str | None
    #: Uncertain and no person has recorded what happened yet.
    unconfirmed: bool
    #: Since when (epoch seconds) the call has been waiting: for an approval while
    #: AwaitingApproval, since its creation while Received (nothing written yet).
    waiting_since: float | None = None
    #: When the open sandbox lease's timeout passes (epoch seconds).
    lease_deadline: float | None = None
    name: str = ""
    #: When the retention clock of a finished call started (epoch seconds; None: kept
    #: whatever its age, `pipeline.retention.retainable_since`): retention's candidates.
    ended_at: float | None = None
    #: The version the watch last saw: retention deletes only that version.
    resource_version: str = ""
    #: status.effectHash, else (calls stored before it) status.requestHash: an unconfirmed
    #: Uncertain call blocks new calls that would do the same (`pipeline.effect`).
    request_hash: str = ""
    #: status.duplicateOf: the first call whose outcome this one carries (ran nothing).
    duplicate_of: str = ""


def _epoch(text: object) -> float | None:
    if not isinstance(text, str) or not text:
        return None
    try:
        return parse_time(text).timestamp()
    except ValueError:
        return None


def blocks_retries(body: Mapping[str, Any]) -> bool:
    """An Uncertain call no person has confirmed yet (a duplicate never: its first call
    is the one confirmed): no new call of its request may run."""
    status = body.get("status") or {}
    return (
        status.get("state") == InvocationState.UNCERTAIN
        and not (status.get("effectConfirmation") or {}).get("recorded")
        and not status.get("duplicateOf")
    )


def row_of(body: Mapping[str, Any]) -> Row:
    status = body.get("status") or {}
    state = InvocationState(status.get("state") or InvocationState.RECEIVED)
    lease = status.get("sandboxLease") or {}
    open_sandbox = str(lease.get("kind")) if lease and not lease.get("releasedAt") else None
    waiting_since = None
    if state == InvocationState.AWAITING_APPROVAL:
        waiting_since = _epoch(status.get("approvalRequestedAt"))
    if state == InvocationState.RECEIVED or waiting_since is None:
        waiting_since = _epoch(body["metadata"].get("creationTimestamp"))
    deadline = None
    if open_sandbox is not None:
        leased = _epoch(lease.get("leasedAt"))
        timeout = (lease.get("limits") or {}).get("timeoutSeconds")
        if leased is not None and isinstance(timeout, int):
            deadline = leased + timeout
    return Row(
        namespace=body["metadata"]["namespace"],
        state=state,
        effective_class=str(status.get("effectiveClass") or ""),
        open_sandbox=open_sandbox,
        unconfirmed=blocks_retries(body),
        waiting_since=waiting_since,
        lease_deadline=deadline,
        name=str(body["metadata"].get("name") or ""),
        ended_at=_epoch(retainable_since(status)),
        resource_version=str(body["metadata"].get("resourceVersion") or ""),
        request_hash=str(status.get("effectHash") or status.get("requestHash") or ""),
        duplicate_of=str(status.get("duplicateOf") or ""),
    )


@dataclass(frozen=True, slots=True)
class Candidate:
    """A stored invocation retention may delete, as the watch last saw it."""

    uid: str
    namespace: str
    name: str
    resource_version: str
    ended_at: float


class Census(Collector):
    def __init__(self, clock: Callable[[], float] = time.time) -> None:
        self.rows: dict[str, Row] = {}
        self.clock = clock
        #: (namespace, requestHash) -> {uid: name} of the unconfirmed Uncertain calls.
        self.unconfirmed: dict[tuple[str, str], dict[str, str]] = {}
        #: Set once the first listing is in: before it, an Uncertain call on a later page
        #: may be missing, and no call may be judged against an incomplete view.
        self.synced = asyncio.Event()

    def update(self, event_type: str | None, body: Mapping[str, Any]) -> None:
        uid = body["metadata"]["uid"]
        old = self.rows.pop(uid, None) if event_type == "DELETED" else self.rows.get(uid)
        if old is not None and old.unconfirmed:
            held = self.unconfirmed.get((old.namespace, old.request_hash))
            if held is not None:
                held.pop(uid, None)
                if not held:
                    del self.unconfirmed[(old.namespace, old.request_hash)]
        if event_type == "DELETED":
            return
        row = self.rows[uid] = row_of(body)
        if row.unconfirmed and row.request_hash:
            self.unconfirmed.setdefault((row.namespace, row.request_hash), {})[uid] = row.name

    def unconfirmed_with(self, namespace: str, *hashes: str | None) -> list[str]:
        """The names of the Uncertain, unconfirmed calls with one of these effect (or, for
        calls stored before effect hashes, request) hashes, as the watch last saw them:
        while there is one, no new call that does the same runs
        (`flow.admission.check_unconfirmed`)."""
        names: set[str] = set()
        for hashed in hashes:
            if hashed:
                names.update(self.unconfirmed.get((namespace, hashed), {}).values())
        return sorted(names)

    def names(self) -> set[tuple[str, str]]:
        """(namespace, name) of every invocation the watch last saw stored."""
        return {(row.namespace, row.name) for row in self.rows.values()}

    def duplicates_of(self, namespace: str, name: str) -> list[str]:
        """The calls that carry `name`'s outcome as its duplicates."""
        return sorted(
            row.name
            for row in self.rows.values()
            if row.namespace == namespace and row.duplicate_of == name
        )

    def ended_before(self, moment: float) -> list[Candidate]:
        """Finished calls whose retention clock started before `moment` (never an
        unconfirmed Uncertain one, nor one without its receipt), oldest first, each with the
        version the watch saw: retention deletes exactly that version or nothing."""
        due = [
            Candidate(uid, row.namespace, row.name, row.resource_version, row.ended_at)
            for uid, row in self.rows.items()
            if row.ended_at is not None and row.ended_at < moment
        ]
        due.sort(key=lambda c: c.ended_at)
        return due

    def collect(self) -> Iterator[GaugeMetricFamily]:
        now = self.clock()
        uncertain: Counter[str] = Counter()
        waiting: Counter[tuple[str, ...]] = Counter()
        sandboxes: Counter[tuple[str, ...]] = Counter()
        overdue: Counter[tuple[str, ...]] = Counter()
        pending: Counter[tuple[str, ...]] = Counter()
        oldest_wait: dict[tuple[str, ...], float] = {}
        oldest_pending: dict[tuple[str, ...], float] = {}
        for row in self.rows.values():
            tenant = (row.namespace,)
            if row.unconfirmed:
                uncertain[row.namespace] += 1
            if row.state == InvocationState.AWAITING_APPROVAL:
                waiting[(row.namespace, row.effective_class)] += 1
                _oldest(oldest_wait, tenant, row.waiting_since, now)
            if row.state == InvocationState.RECEIVED:
                pending[tenant] += 1
                _oldest(oldest_pending, tenant, row.waiting_since, now)
            if row.open_sandbox is not None:
                sandboxes[(row.namespace, row.open_sandbox)] += 1
                if row.lease_deadline is not None and row.lease_deadline < now:
                    overdue[(row.namespace, row.open_sandbox)] += 1
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
        yield _family(
            "tooladapter_approval_wait_oldest_seconds",
            "How long the longest-waiting gated call has waited for an approval.",
            ["tenant"],
            oldest_wait,
        )
        yield _family(
            "tooladapter_sandboxes_overdue",
            "Open sandbox leases past their timeout (leasedAt + timeoutSeconds).",
            ["tenant", "kind"],
            dict(overdue),
        )
        yield _family(
            "tooladapter_pending",
            "Invocations created and not yet begun (no state written: Received).",
            ["tenant"],
            dict(pending),
        )
        yield _family(
            "tooladapter_pending_oldest_seconds",
            "Age of the oldest invocation not yet begun (Received).",
            ["tenant"],
            oldest_pending,
        )


def _oldest(
    ages: dict[tuple[str, ...], float], key: tuple[str, ...], since: float | None, now: float
) -> None:
    if since is not None:
        ages[key] = max(ages.get(key, 0.0), max(now - since, 0.0))


def _family(
    name: str,
    documentation: str,
    labels: list[str],
    counts: Mapping[tuple[str, ...], float],
) -> GaugeMetricFamily:
    family = GaugeMetricFamily(name, documentation, labels=labels)
    for values, count in sorted(counts.items()):
        family.add_metric(list(values), count)
    return family
