"""How many pods a warm pool should hold: a pure function of demand, idle time and caps.

A pool (one namespace, one sandbox profile) starts with one pod when a descriptor of its
profile becomes active in the namespace, grows with its recent use, and shrinks to zero
once nothing used it for `idle_seconds`. A call borrows a pod and, ending cleanly, hands it
back for its caller's next call (`sandbox.warm.POOL_RUN_SCRIPT`), so the pool holds as
many pods as its calls ran at once lately, and one spare. It never grows past its own
bound (`most`), the cluster-wide room left for pool pods (`room`), or what the
namespace's ResourceQuotas can give without taking the share a call could need
(`quota_room`): pool pods go first.

`quota_room` reads each ResourceQuota's `hard` and `used` and adds a pool pod's amounts
and one call's (the reserve) on top. It is deliberately coarse: every quota counts, scoped
or not, so a pool may stay smaller than it could, never larger. A call's own admission is
still asked of the API server (`kube.capacity`), never decided here.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import NamedTuple

from tooladapter.sandbox.warm import quantity_value

#: Calls in this many seconds count as recent demand: a burst's pods are kept for two
#: minutes after it, so bursts a little apart find them ready, and a small node is not kept
#: busy deleting pods and starting them again (an idle runc pod holds 10m of CPU and 32Mi).
DEMAND_WINDOW_SECONDS = 120.0
#: Pods a pool holds beyond the most calls it ran at once lately: the next caller's (a
#: handed-back pod serves only its own caller), and the next call while a pod comes back.
SPARE_PODS = 1


class Use(NamedTuple):
    """One call of the pool: when it came (monotonic seconds), and how many of the pool's
    calls were in flight then, itself included."""

    at: float
    in_flight: int = 1


@dataclass(frozen=True)
class PoolDemand:
    """What a pool saw (monotonic seconds): when a descriptor of its profile became active
    (or the pool was adopted after a restart), and the times of its recent calls."""

    started_at: float | None = None
    uses: tuple[Use, ...] = ()

    def last_seen(self) -> float | None:
        times = [t for t in (self.started_at, *(u.at for u in self.uses)) if t is not None]
        return max(times) if times else None


@dataclass(frozen=True)
class PoolBounds:
    """The bounds of one pool: `most` pods (TOOLADAPTER_WARM_POOL_SIZE; 0: no pools), zero
    after `idle_seconds` without a call (TOOLADAPTER_WARM_POOL_IDLE_SECONDS)."""

    most: int
    idle_seconds: float
    window_seconds: float = DEMAND_WINDOW_SECONDS


def recent_peak(demand: PoolDemand, now: float, window_seconds: float) -> int:
    """The most calls the pool ran at once in the window (0: no call)."""
    recent = (u.in_flight for u in demand.uses if now - window_seconds <= u.at <= now)
    return max(recent, default=0)


def desired_size(
    demand: PoolDemand,
    now: float,
    bounds: PoolBounds,
    *,
    room: int,
    quota_room: int | None = None,
    pressured: bool = False,
) -> int:
    """The pods the pool should hold now (ready, starting, or serving a call). `room`: the pods the
    cluster-wide cap leaves this pool (its own pods included); `quota_room`: the pods the
    namespace's quotas leave it (None: no quota); `pressured`: a call of the namespace
    waits for capacity, so pools give way (zero)."""
    last = demand.last_seen()
    if bounds.most <= 0 or pressured or last is None or now - last > bounds.idle_seconds:
        return 0
    wanted = SPARE_PODS + recent_peak(demand, now, bounds.window_seconds)
    limits = [bounds.most, max(room, 0)]
    if quota_room is not None:
        limits.append(max(quota_room, 0))
    return max(0, min(wanted, *limits))


def trim_uses(uses: Iterable[Use], now: float, keep_seconds: float) -> tuple[Use, ...]:
    """The uses still worth keeping (newer than `keep_seconds`), the newest last."""
    return tuple(sorted(u for u in uses if now - u.at <= keep_seconds))


# ---------------------------------------------------------------------- quotas

#: The quota names a pod's CPU and memory count under (`requests.x`, bare `x`, `limits.x`).
_COMPUTE = ("cpu", "memory", "ephemeral-storage")


def pod_amounts(resources: Mapping[str, Mapping[str, str]]) -> dict[str, Decimal]:
    """What one pod of these `resources` counts against a ResourceQuota's `hard` names:
    `pods`, `count/pods`, `requests.<r>` and `<r>`, `limits.<r>` (a request defaults to its
    limit, as Kubernetes does for a container with limits only)."""
    requests = resources.get("requests") or {}
    limits = resources.get("limits") or {}
    amounts: dict[str, Decimal] = {"pods": Decimal(1), "count/pods": Decimal(1)}
    for name in {*requests, *limits}:
        request = quantity_value(requests.get(name) or limits.get(name) or "")
        limit = quantity_value(limits.get(name) or "")
        if request is not None:
            amounts[f"requests.{name}"] = request
            if name in _COMPUTE:
                amounts[name] = request
        if limit is not None:
            amounts[f"limits.{name}"] = limit
    return amounts


def quota_room(
    quotas: Sequence[Mapping[str, Mapping[str, str]]],
    pool_pod: Mapping[str, Decimal],
    reserve: Mapping[str, Decimal],
) -> int | None:
    """How many more pool pods the quotas admit while still admitting one call (`reserve`)
    after them; None when no quota limits anything a pod counts against. Each quota is its
    status: `{"hard": {...}, "used": {...}}`."""
    room: int | None = None
    for quota in quotas:
        hard = quota.get("hard") or {}
        used = quota.get("used") or {}
        for name, limit_text in hard.items():
            per_pod = pool_pod.get(name, Decimal(0))
            needed = reserve.get(name, Decimal(0))
            if per_pod == 0 and needed == 0:
                continue
            limit = quantity_value(limit_text)
            if limit is None:
                continue
            taken = quantity_value(used.get(name) or "0") or Decimal(0)
            left = limit - taken - needed
            fits = 0 if left < 0 else (math.inf if per_pod == 0 else int(left // per_pod))
            if fits != math.inf:
                room = int(fits) if room is None else min(room, int(fits))
    return room


__all__ = [
    "DEMAND_WINDOW_SECONDS",
    "SPARE_PODS",
    "PoolBounds",
    "PoolDemand",
    "Use",
    "desired_size",
    "pod_amounts",
    "pod_requests",
    "quota_room",
    "recent_peak",
    "trim_uses",
]


def pod_requests(pod: Mapping[str, object]) -> tuple[Decimal, Decimal]:
    """(CPU cores, memory bytes) a pod's containers request of its node (init containers
    run before and hold nothing once the pod is up)."""
    spec = pod.get("spec")
    containers = spec.get("containers") if isinstance(spec, Mapping) else None
    cpu = memory = Decimal(0)
    for container in containers if isinstance(containers, list) else []:
        requests = ((container or {}).get("resources") or {}).get("requests") or {}
        cpu += quantity_value(str(requests.get("cpu") or "0")) or Decimal(0)
        memory += quantity_value(str(requests.get("memory") or "0")) or Decimal(0)
    return cpu, memory
