"""Capacity within budget on the real cluster: a sandboxed call whose namespace's
ResourceQuota is used up waits in Brokered (its message naming the quota) and runs once
when the quota frees up; one that never gets capacity ends Failed `transient` without a Job.

The second test's operator (a short TOOLADAPTER_CAPACITY_WAIT_SECONDS) serves
`cap-<SESSION>-*`, out of the session operator's scope."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import pytest
from kubernetes import client

from tests.integration.conftest import Configured
from tests.integration.objects import Agent, get, jobs_of, pretty, shell_tool, status_of
from tooladapter.devtools import Namespace, wait_for
from tooladapter.naming import LABEL_INVOCATION_UID

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(300)]

QUOTA = "pod-budget"
#: The budget of the short-wait operator: long enough to see the wait, short for the suite.
SHORT_WAIT_SECONDS = 4


@pytest.fixture(scope="module")
def short_wait(configured: Callable[[Mapping[str, str]], Configured]) -> Configured:
    return configured({"TOOLADAPTER_CAPACITY_WAIT_SECONDS": str(SHORT_WAIT_SECONDS)})


def use_up_pods(api: client.ApiClient, namespace: str) -> str:
    """A quota of one pod in `namespace`, taken by a sleeping pod; the pod's name."""
    core = client.CoreV1Api(api)
    core.create_namespaced_resource_quota(
        namespace,
        {"metadata": {"name": QUOTA}, "spec": {"hard": {"pods": "1"}}},  # type: ignore[arg-type]  # the client sends a dict body as is
    )
    # The quota admits pods only once its controller has computed its usage.
    wait_for(
        lambda: core.read_namespaced_resource_quota(QUOTA, namespace).status.hard or {},
        timeout=60,
        what=f"quota {QUOTA} computed",
    )
    blocker = core.create_namespaced_pod(
        namespace,
        {  # type: ignore[arg-type]  # the client sends a dict body as is
            "metadata": {"name": "blocker"},
            "spec": {
                "restartPolicy": "Never",
                "terminationGracePeriodSeconds": 0,
                "securityContext": {
                    "runAsNonRoot": True,
                    "runAsUser": 65534,
                    "seccompProfile": {"type": "RuntimeDefault"},
                },
                "containers": [
                    {
                        "name": "sleep",
                        "image": "localhost/tooladapter-sandbox:dev",
                        "imagePullPolicy": "IfNotPresent",
                        "command": ["sleep", "3600"],
                        "securityContext": {
                            "allowPrivilegeEscalation": False,
                            "capabilities": {"drop": ["ALL"]},
                        },
                    }
                ],
            },
        },
    )

    def used() -> bool:
        quota = core.read_namespaced_resource_quota(QUOTA, namespace)
        return (quota.status.used or {}).get("pods") == "1"

    wait_for(used, timeout=60, what=f"quota {QUOTA} used up")
    return str(blocker.metadata.name)


def pods_of(api: client.ApiClient, namespace: str, uid: str) -> list[Any]:
    return list(
        client.CoreV1Api(api)
        .list_namespaced_pod(namespace, label_selector=f"{LABEL_INVOCATION_UID}={uid}")
        .items
    )


def test_a_call_waits_for_its_quota_and_runs_once_when_it_frees_up(
    api: client.ApiClient, ns: Namespace, agent: Agent
) -> None:
    shell_tool(api, ns.name, "sh")
    agent.grant(["sh"], ["sandbox"])
    blocker = use_up_pods(api, ns.name)

    name = agent.invoke("sh", {"command": "echo ran once"})
    waiting = status_of(agent.wait(name, states={"Brokered"}, timeout=60))
    assert QUOTA in (waiting.get("message") or ""), pretty(waiting)
    assert "waiting up to 120s for capacity" in waiting["message"]
    assert jobs_of(api, ns.name) == []  # nothing created while it waits

    client.CoreV1Api(api).delete_namespaced_pod(blocker, ns.name, grace_period_seconds=0)
    done = agent.wait(name, timeout=120)
    status = status_of(done)
    assert status["state"] == "Observed", pretty(status)
    assert status["result"]["content"].strip() == "ran once"
    assert not status.get("message")
    stages = [(s["stage"], s["outcome"]) for s in status["stages"]]
    assert stages.index(("sandbox", "waiting")) < stages.index(("recheck", "passed"))
    assert stages.index(("recheck", "passed")) < stages.index(("execute", "started"))
    # Exactly one Job, with exactly one pod, ran for it.
    uid = done["metadata"]["uid"]
    assert len(jobs_of(api, ns.name)) == 1
    assert len(pods_of(api, ns.name, uid)) == 1


def test_a_call_that_never_gets_its_quota_fails_transient_without_a_job(
    api: client.ApiClient, short_wait: Configured
) -> None:
    ns = short_wait.namespace(api)
    try:
        agent = Agent.create(api, ns.name, "agent-1")
        shell_tool(api, ns.name, "sh")
        agent.grant(["sh"], ["sandbox"])
        use_up_pods(api, ns.name)

        name = agent.invoke("sh", {"command": "echo never"})
        status = status_of(agent.wait(name, timeout=90))
        assert (status["state"], status.get("failureClass")) == ("Failed", "transient"), pretty(
            status
        )
        assert f"no capacity within {SHORT_WAIT_SECONDS}s" in status["message"]
        assert QUOTA in status["message"]
        stages = [(s["stage"], s["outcome"]) for s in status["stages"]]
        assert ("sandbox", "waiting") in stages and ("execute", "started") not in stages
        assert jobs_of(api, ns.name) == []
        # The object says the same later: it never moved past Brokered.
        stored = get(api, ns.name, "toolinvocations", name)
        assert status_of(stored)["state"] == "Failed"
    finally:
        ns.delete()


def test_a_call_whose_pod_is_never_scheduled_fails_transient_naming_the_scheduler(
    api: client.ApiClient, short_wait: Configured
) -> None:
    """More CPU than the node has: the pod stays Pending (Unschedulable); after the
    capacity wait the call ends Failed transient saying it never started, its Job deleted,
    never "ran past its timeout" (the tool's timeout starts on the node)."""
    ns = short_wait.namespace(api)
    try:
        agent = Agent.create(api, ns.name, "agent-1")
        shell_tool(api, ns.name, "sh", cpu="64", cpu_request="64")
        agent.grant(["sh"], ["sandbox"])

        name = agent.invoke("sh", {"command": "echo never"})
        done = agent.wait(name, timeout=90)
        status = status_of(done)
        assert (status["state"], status.get("failureClass")) == ("Failed", "transient"), pretty(
            status
        )
        message = status["message"]
        assert "Unschedulable" in message and "Insufficient cpu" in message, message
        assert "never started" in message and "timeout" not in message, message
        stages = [(s["stage"], s["outcome"], s.get("detail") or "") for s in status["stages"]]
        waits = [d for stage, outcome, d in stages if (stage, outcome) == ("sandbox", "waiting")]
        assert any("Insufficient cpu" in d for d in waits), pretty(status)
        # Nothing can start later: the Job and its pod are gone.
        uid = done["metadata"]["uid"]
        wait_for(lambda: not jobs_of(api, ns.name), timeout=60, what="the Job deleted")
        wait_for(lambda: not pods_of(api, ns.name, uid), timeout=60, what="its pod deleted")
    finally:
        ns.delete()
