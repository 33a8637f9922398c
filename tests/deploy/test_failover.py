"""Failover: the leader pod dies mid-load; a standby takes over, no call is lost and none
runs twice."""

from __future__ import annotations

import time
from typing import Any

import pytest
from kubernetes import client

from tests.deploy.calls import Load, agent_for, check_once_each, effect_tool, wait_all_terminal
from tests.deploy.release import Release, kill, token
from tests.integration.servers import Recorder
from tooladapter.devtools import Namespace, wait_for

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(900)]

CALLS = 40
RATE = 4.0
#: The issue's bound: a call made right after the leader died completes within this.
TAKEOVER_BOUND_SECONDS = 20


def test_killing_the_leader_mid_load_loses_no_call_and_runs_none_twice(
    api: client.ApiClient, release: Release, tenant: Namespace, server: Recorder
) -> None:
    effect_tool(api, tenant.name, server)
    agent = agent_for(api, release, tenant.name)
    leader = release.leader_pod()
    holder_before = (release.lease() or {})["holder"]
    restarts_before = leader.status.container_statuses[0].restart_count

    load = Load(agent, CALLS, RATE, tag=f"f{token()}")
    load.start()
    wait_for(lambda: load.created() >= CALLS // 4, timeout=60, what="a quarter of the load")
    how = kill(api, leader)
    killed_at = time.monotonic()

    # A call made right after the death: it completes once a standby leads.
    probe = agent.invoke("effect", {"id": f"probe-{load.tag}"}, name=f"probe-{load.tag}")

    def new_holder() -> dict[str, Any] | None:
        lease = release.lease()
        return lease if lease and lease["holder"] not in ("", holder_before) else None

    takeover = wait_for(
        new_holder,
        timeout=TAKEOVER_BOUND_SECONDS + 10,
        what="another process holding the Lease",
        interval=0.2,
    )
    took_over_after = time.monotonic() - killed_at
    probed = agent.wait(probe, timeout=TAKEOVER_BOUND_SECONDS + 30)
    probe_done_after = time.monotonic() - killed_at

    load.join()
    objs = wait_all_terminal(agent, load.names)
    ident_of = {f"call-{load.ident(i)}": load.ident(i) for i in range(CALLS)}
    states = check_once_each(objs, server, ident_of)

    print(
        f"\nfailover ({how}): {leader.metadata.name} killed after {CALLS // 4}+ of {CALLS} "
        f"calls; Lease taken over by {takeover['holder']} after {took_over_after:.1f}s; "
        f"a call made after the kill was {probed['status']['state']} after "
        f"{probe_done_after:.1f}s; terminal states {dict(states)}; "
        f"executions seen {server.total - 1} (each at most once)"
    )
    assert probed["status"]["state"] == "Observed", probed["status"]
    assert probe_done_after <= TAKEOVER_BOUND_SECONDS, (
        f"a call made right after the kill took {probe_done_after:.1f}s"
    )
    assert len(objs) == CALLS, "every call of the load exists"
    assert states["Observed"] >= CALLS - 5, f"more calls cut off than were in flight: {states}"
    # The killed container comes back in its pod, as a standby, and the release is whole.
    release.wait_ready(int(release.values()["replicas"]))
    if how.startswith("SIGKILL"):
        again = next(p for p in release.pods() if p.metadata.name == leader.metadata.name)
        assert again.status.container_statuses[0].restart_count == restarts_before + 1
