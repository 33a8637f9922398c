"""`helm upgrade` with a changed value rolls the operator pods without losing a call."""

from __future__ import annotations

import pytest
from kubernetes import client

from tests.deploy.calls import Load, agent_for, check_once_each, effect_tool, wait_all_terminal
from tests.deploy.release import Release, token
from tests.integration.servers import Recorder
from tooladapter.devtools import Namespace, wait_for

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(900)]

CALLS = 40
RATE = 2.0


def _template_hash(release: Release) -> set[str]:
    return {p.metadata.labels.get("pod-template-hash", "") for p in release.pods()}


def test_helm_upgrade_with_a_changed_value_rolls_every_pod_and_loses_no_call(
    api: client.ApiClient, release: Release, tenant: Namespace, server: Recorder
) -> None:
    effect_tool(api, tenant.name, server)
    agent = agent_for(api, release, tenant.name)
    before = {p.metadata.name for p in release.pods()}
    hashes_before = _template_hash(release)
    retain = int(release.values()["settings"]["sandboxRetainSeconds"]) + 1

    load = Load(agent, CALLS, RATE, tag=f"u{token()}")
    load.start()
    wait_for(lambda: load.created() >= 5, timeout=60, what="the load under way")
    release.upgrade(f"--set=settings.sandboxRetainSeconds={retain}")
    load.join()

    replicas = int(release.values()["replicas"])
    release.wait_ready(replicas)
    after = release.pods()
    assert not before & {p.metadata.name for p in after}, "every pod was replaced"
    assert _template_hash(release).isdisjoint(hashes_before)
    for pod in after:
        env = {e.name: e.value for e in pod.spec.containers[0].env}
        assert env["TOOLADAPTER_SANDBOX_RETAIN_SECONDS"] == str(retain)

    objs = wait_all_terminal(agent, load.names)
    ident_of = {f"call-{load.ident(i)}": load.ident(i) for i in range(CALLS)}
    states = check_once_each(objs, server, ident_of)
    print(
        f"\nupgrade: {sorted(before)} -> {sorted(p.metadata.name for p in after)}; {dict(states)}"
    )
    assert len(objs) == CALLS

    # And the new pods serve: a call after the roll is Observed.
    last = agent.invoke("effect", {"id": f"after-{load.tag}"})
    assert agent.wait(last, timeout=120)["status"]["state"] == "Observed"
