"""Issue 41: a warm pod gated in its own container is Ready (so handed to a call) only once
its egress rules are enforced, proven inside it, on the real kubelet and kube-router.

The pods are the operator's own (`build_warm_pod`, the sandbox image as both the tool's and
the gate's), created in namespaces outside every operator's scope; the canary is a listener
on the node, as the operator's is.
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client

from tests.integration.servers import Recorder, recording_server
from tooladapter.devtools import SESSION, Namespace, node_ip, wait_for
from tooladapter.model import ResourceQuantities, Resources, SandboxSpec
from tooladapter.sandbox.podspec import GATE_ATTEMPTS
from tooladapter.sandbox.warm import STATE_POOL, build_warm_pod, pod_ready, profile_for
from tooladapter.settings import Settings

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(300)]

IMAGE = Settings().sandbox.image
#: The gate's tries in these pods: about three seconds of a canary that answers.
ATTEMPTS = 20


@pytest.fixture(scope="module")
def canary() -> Iterator[Recorder]:
    with recording_server(node_ip()) as listener:
        yield listener


def warm_pod(namespace: str, canary: Recorder) -> dict[str, Any]:
    profile = profile_for(
        SandboxSpec(resources=Resources(limits=ResourceQuantities(cpu="100m", memory="64Mi"))),
        image=IMAGE,
        runtime_class=None,
        workspace_size="64Mi",
        image_pull_policy="IfNotPresent",
    )
    pod = build_warm_pod(
        namespace=namespace,
        profile=profile,
        network_gate=(canary.host, canary.port),
        gate_image=IMAGE,
        state=STATE_POOL,
    )
    (container,) = pod["spec"]["containers"]
    assert "initContainers" not in pod["spec"] and "startupProbe" in container
    command = container["command"]
    command[command.index(str(GATE_ATTEMPTS))] = str(ATTEMPTS)
    return pod


def create(core: client.CoreV1Api, namespace: str, pod: dict[str, Any]) -> str:
    made = core.create_namespaced_pod(namespace, pod)  # type: ignore[arg-type]  # a dict body is sent as is
    return str(made.metadata.name)


def read(core: client.CoreV1Api, namespace: str, name: str) -> dict[str, Any]:
    found: dict[str, Any] = core.api_client.sanitize_for_serialization(
        core.read_namespaced_pod(name, namespace)
    )
    return found


def test_a_warm_pod_whose_egress_is_not_enforced_is_never_ready(
    api: client.ApiClient, canary: Recorder
) -> None:
    """No NetworkPolicy selects the pod: the canary answers, the gate never passes, the
    holder never starts, and the pod ends without ever having been Ready."""
    core = client.CoreV1Api(api)
    ns = Namespace(api, prefix=f"{SESSION}wg")
    try:
        name = create(core, ns.name, warm_pod(ns.name, canary))
        seen_ready: list[bool] = []

        def ended() -> bool:
            pod = read(core, ns.name, name)
            seen_ready.append(pod_ready(pod))
            return (pod.get("status") or {}).get("phase") in ("Failed", "Succeeded")

        wait_for(ended, timeout=180, interval=0.2, what="the ungated warm pod ended")
        pod = read(core, ns.name, name)
        assert pod["status"]["phase"] == "Failed"
        assert not any(seen_ready), "a warm pod was Ready with its canary still reachable"
        (state,) = pod["status"]["containerStatuses"]
        assert state["started"] is False
        assert state["state"]["terminated"]["exitCode"] == 1
        logs = core.read_namespaced_pod_log(name, ns.name)
        assert "egress policy not enforced" in logs
        assert canary.hits  # the gate did reach the canary: the probe was real
    finally:
        ns.delete()


def test_a_warm_pod_under_a_policy_that_cuts_the_canary_off_becomes_ready(
    api: client.ApiClient, canary: Recorder
) -> None:
    core = client.CoreV1Api(api)
    ns = Namespace(api, prefix=f"{SESSION}wg")
    try:
        client.NetworkingV1Api(api).create_namespaced_network_policy(
            ns.name,
            {  # type: ignore[arg-type]  # a dict body is sent as is
                "metadata": {"name": "no-egress"},
                "spec": {"podSelector": {}, "policyTypes": ["Egress"], "egress": []},
            },
        )
        name = create(core, ns.name, warm_pod(ns.name, canary))
        wait_for(
            lambda: pod_ready(read(core, ns.name, name)),
            timeout=180,
            interval=0.2,
            what="the gated warm pod Ready",
        )
        pod = read(core, ns.name, name)
        (state,) = pod["status"]["containerStatuses"]
        assert state["started"] is True and "running" in state["state"]
        # The gate marked its pass, and PID 1 is the holder now, not the gate's shell.
        out = subprocess.run(
            ["kubectl", "exec", "-n", ns.name, name, "-c", "tool", "--", "/bin/sh", "-c",
             "ls /tooladapter; tr '\\0' ' ' < /proc/1/cmdline"],
            capture_output=True, text=True, timeout=60, check=True,
        ).stdout  # fmt: skip
        assert "gate-passed" in out
        assert "sleep 3600" in out and "reachable" not in out
    finally:
        ns.delete()
