"""The release runs images pulled from a registry (issue 32): `make image-push` put them in
the node's registry, the chart names them registry-qualified with `imagePullPolicy: Always`,
and the operator, the egress proxy and a sandbox Job each really pulled before serving."""

from __future__ import annotations

from typing import Any

import pytest
from kubernetes import client

from tests.deploy import registry as node_registry
from tests.deploy.release import Release
from tests.integration.objects import Agent, jobs_of, shell_tool
from tooladapter.devtools import Namespace, wait_for

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(600)]


def _pulls(api: client.ApiClient, namespace: str, image: str) -> dict[str, set[str]]:
    """Per pod: the kubelet's image events (Pulling, Pulled) that name `image`."""
    out: dict[str, set[str]] = {}
    events = client.CoreV1Api(api).list_namespaced_event(
        namespace, field_selector="involvedObject.kind=Pod"
    )
    ev: Any
    for ev in events.items:
        if ev.reason in ("Pulling", "Pulled") and f'"{image}"' in (ev.message or ""):
            out.setdefault(ev.involved_object.name, set()).add(ev.reason)
    return out


def _containers(pod: Any) -> list[Any]:
    return [*(pod.spec.init_containers or []), *pod.spec.containers]


def test_operator_proxy_and_sandbox_pull_from_the_registry_and_serve_a_call(
    api: client.ApiClient, release: Release, tenant: Namespace, registry: str | None
) -> None:
    if registry is None:
        pytest.skip("no registry (DEPLOY_TEST_REGISTRY=off, or not the local cluster)")
    refs = node_registry.images(registry)
    if not str(release.values()["image"]["repository"]).startswith(f"{registry}/"):
        pytest.skip("the release was not installed from the registry (DEPLOY_TEST_SKIP_DEPLOY)")
    core = client.CoreV1Api(api)

    # The operator and the egress proxy: registry-qualified, Always, and pulled.
    pods = core.list_namespaced_pod(
        release.namespace, label_selector=f"app.kubernetes.io/instance={release.name}"
    ).items
    by_component: dict[str, list[Any]] = {}
    pod: Any
    for pod in pods:
        component = (pod.metadata.labels or {}).get("app.kubernetes.io/component", "")
        by_component.setdefault(component, []).append(pod)
    assert by_component.get("operator") and by_component.get("egress-proxy"), sorted(by_component)
    pulled = _pulls(api, release.namespace, refs["operator"])
    for component in ("operator", "egress-proxy"):
        for pod in by_component[component]:
            for c in pod.spec.containers:
                assert (c.image, c.image_pull_policy) == (refs["operator"], "Always"), (
                    pod.metadata.name
                )
        assert any(
            "Pulled" in pulled.get(p.metadata.name, set()) for p in by_component[component]
        ), (component, pulled)

    # A sandbox Job pulls its image from the registry and the call is served. Warm pools are
    # on by the chart's defaults: a CIDR egress entry keeps this call on the Job path.
    since = node_registry.log_size()
    shell_tool(api, tenant.name, egress=["192.0.2.99/32"])
    agent = Agent.create(api, tenant.name, "agent-1", role=f"{release.prefix}-requester")
    agent.grant(["sh"], ["sandbox"])
    name = agent.invoke("sh", {"command": "echo pulled from the registry"})
    status = agent.wait(name, timeout=180)["status"]
    assert status["state"] == "Observed", status
    assert status["result"]["content"].strip() == "pulled from the registry"
    (job,) = jobs_of(api, tenant.name)
    for c in _containers(job.spec.template):
        assert (c.image, c.image_pull_policy) == (refs["sandbox"], "Always"), c.name
    sandbox_pulls = wait_for(
        lambda: _pulls(api, tenant.name, refs["sandbox"]) or None,
        timeout=30,
        what="the sandbox pod's Pulled events",
    )
    assert any("Pulled" in reasons for reasons in sandbox_pulls.values()), sandbox_pulls

    # On the local cluster the registry's own log shows containerd fetching the manifests.
    if node_registry.REGISTRY_LOG.is_file():
        assert node_registry.manifest_gets("tooladapter-operator")
        assert node_registry.manifest_gets("tooladapter-sandbox", since)
