"""Issue 41: how many pods a warm pool holds, as a pure function of demand, idle time and
caps (`sandbox.pool_sizing`)."""

from __future__ import annotations

from decimal import Decimal

from tooladapter.sandbox.pool_sizing import (
    PoolBounds,
    PoolDemand,
    Use,
    desired_size,
    pod_amounts,
    pod_requests,
    quota_room,
    trim_uses,
)

BOUNDS = PoolBounds(most=8, idle_seconds=600, window_seconds=30)


def test_a_pool_starts_with_one_pod_when_its_descriptor_becomes_active() -> None:
    assert desired_size(PoolDemand(started_at=100.0), 110.0, BOUNDS, room=16) == 1


def test_a_pool_nobody_asked_for_holds_nothing() -> None:
    assert desired_size(PoolDemand(), 110.0, BOUNDS, room=16) == 0


def test_a_pool_holds_the_most_calls_it_ran_at_once_lately_and_one_spare() -> None:
    # A call borrows a pod and hands it back (recycled), so calls one after another need
    # the pod they use and one spare, however many they are.
    one = PoolDemand(started_at=0.0, uses=(Use(100.0, 1),))
    assert desired_size(one, 101.0, BOUNDS, room=16) == 2
    in_a_row = PoolDemand(started_at=0.0, uses=tuple(Use(100.0 + i / 2, 1) for i in range(20)))
    assert desired_size(in_a_row, 111.0, BOUNDS, room=16) == 2
    burst = PoolDemand(started_at=0.0, uses=(Use(100.0, 1), Use(100.1, 5), Use(100.2, 3)))
    assert desired_size(burst, 103.0, BOUNDS, room=16) == 6
    crowd = PoolDemand(started_at=0.0, uses=(Use(100.0, 20),))
    assert desired_size(crowd, 103.0, BOUNDS, room=16) == 8  # its bound


def test_calls_older_than_the_window_no_longer_count() -> None:
    demand = PoolDemand(started_at=0.0, uses=(Use(100.0, 5), Use(101.0, 2)))
    assert desired_size(demand, 130.5, BOUNDS, room=16) == 3
    assert desired_size(demand, 140.0, BOUNDS, room=16) == 1


def test_a_pool_shrinks_to_zero_once_idle() -> None:
    demand = PoolDemand(started_at=0.0, uses=(Use(100.0),))
    assert desired_size(demand, 700.0, BOUNDS, room=16) == 1
    assert desired_size(demand, 700.5, BOUNDS, room=16) == 0


def test_the_cluster_wide_cap_and_the_quota_bound_the_pool() -> None:
    demand = PoolDemand(started_at=0.0, uses=(Use(100.0, 3), Use(101.0, 4)))
    assert desired_size(demand, 103.0, BOUNDS, room=2) == 2
    assert desired_size(demand, 103.0, BOUNDS, room=-3) == 0
    assert desired_size(demand, 103.0, BOUNDS, room=16, quota_room=1) == 1
    assert desired_size(demand, 103.0, BOUNDS, room=16, quota_room=0) == 0


def test_pools_give_way_while_a_call_waits_and_size_zero_turns_them_off() -> None:
    demand = PoolDemand(started_at=100.0)
    assert desired_size(demand, 101.0, BOUNDS, room=16, pressured=True) == 0
    off = PoolBounds(most=0, idle_seconds=600)
    assert desired_size(demand, 101.0, off, room=16) == 0


def test_old_uses_are_trimmed() -> None:
    uses = (Use(1.0), Use(50.0, 3), Use(100.0, 2))
    assert trim_uses(uses, 120.0, 60.0) == (Use(100.0, 2),)


IDLE = {"requests": {"cpu": "10m", "memory": "32Mi"}, "limits": {"cpu": "500m", "memory": "256Mi"}}
CALL = {"limits": {"cpu": "500m", "memory": "256Mi"}}


def test_a_pods_amounts_are_named_as_quotas_name_them() -> None:
    amounts = pod_amounts(CALL)
    assert amounts["pods"] == 1
    assert amounts["requests.cpu"] == Decimal("0.5")  # a request defaults to its limit
    assert amounts["cpu"] == Decimal("0.5")
    assert amounts["limits.memory"] == 256 * 1024 * 1024


def test_pool_pods_never_take_the_share_one_call_needs() -> None:
    # 2 CPU of requests, 1 used: one call (0.5) must still fit, so 0.5 is left for pool pods
    # of 10m each: 50 of them.
    quotas = [{"hard": {"requests.cpu": "2"}, "used": {"requests.cpu": "1"}}]
    assert quota_room(quotas, pod_amounts(IDLE), pod_amounts(CALL)) == 50
    # Limits count too: 1 CPU of limits left, the call takes 0.5, a pool pod 0.5.
    quotas = [{"hard": {"limits.cpu": "2"}, "used": {"limits.cpu": "1"}}]
    assert quota_room(quotas, pod_amounts(IDLE), pod_amounts(CALL)) == 1
    # A pod count: 3 of 4 used, the last is the call's.
    quotas = [{"hard": {"pods": "4"}, "used": {"pods": "3"}}]
    assert quota_room(quotas, pod_amounts(IDLE), pod_amounts(CALL)) == 0
    # Already short for the call itself: no pool pod at all.
    quotas = [{"hard": {"limits.cpu": "1"}, "used": {"limits.cpu": "0.8"}}]
    assert quota_room(quotas, pod_amounts(IDLE), pod_amounts(CALL)) == 0


def test_quotas_that_count_nothing_a_pod_holds_leave_the_pool_unbounded() -> None:
    quotas = [{"hard": {"count/jobs.batch": "5"}, "used": {}}]
    assert quota_room(quotas, pod_amounts(IDLE), pod_amounts(CALL)) is None
    assert quota_room([], pod_amounts(IDLE), pod_amounts(CALL)) is None


def test_the_tightest_quota_decides() -> None:
    quotas = [
        {"hard": {"pods": "10"}, "used": {"pods": "0"}},
        {"hard": {"requests.memory": "1Gi"}, "used": {"requests.memory": "512Mi"}},
    ]
    # 1Gi - 512Mi - 256Mi (the call) = 256Mi: eight pods of 32Mi.
    assert quota_room(quotas, pod_amounts(IDLE), pod_amounts(CALL)) == 8


def test_a_pods_requests_are_summed_over_its_containers() -> None:
    pod = {
        "spec": {
            "containers": [
                {"resources": {"requests": {"cpu": "10m", "memory": "32Mi"}}},
                {"resources": {"requests": {"cpu": "5m"}}},
            ],
            "initContainers": [{"resources": {"requests": {"cpu": "1"}}}],
        }
    }
    assert pod_requests(pod) == (Decimal("0.015"), Decimal(32 * 1024 * 1024))
