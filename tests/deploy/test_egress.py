"""Issue 14 in the cluster: sandboxes reach allow-listed host names through the chart's egress
proxy (its own Deployment and Service), at the Service's ClusterIP the operator read at
start-up, and nothing else.

The proxy resolves the test host name to a server on the node's address through the chart's
`egressProxy.hosts` (TOOLADAPTER_EGRESS_HOSTS); this module sets it on the release for its
tests (a `helm upgrade --reuse-values`, which rolls only the proxy pods) and puts the old
value back after them.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from typing import Any, cast

import pytest
from kubernetes import client

from tests.deploy.release import Release, run
from tests.integration.objects import Agent, descriptor, get, pretty, status_of
from tests.integration.servers import Recorder
from tooladapter.devtools import Namespace, node_ip, wait_for
from tooladapter.receipts.core.check import parse_receipt

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(600)]

API = "api.example.test"
ARTIFACTS = "/var/lib/tooladapter/artifacts"


def set_hosts(release: Release, hosts: str) -> None:
    release.upgrade(f"--set-string=egressProxy.hosts={hosts}")


@pytest.fixture(scope="module")
def proxy(release: Release) -> Iterator[dict[str, Any]]:
    """The release's proxy Service, its pods resolving API to the node's address."""
    values = release.values()["egressProxy"]
    assert values["enabled"], "the chart runs the egress proxy by default"
    before = str(values.get("hosts") or "")
    wanted = f"{API}={node_ip()}"
    if before != wanted:
        set_hosts(release, wanted)
    core = client.CoreV1Api(release.api)
    try:
        service = core.read_namespaced_service(f"{release.prefix}-egress-proxy", release.namespace)
        yield dict(release.api.sanitize_for_serialization(service)["spec"])
    finally:
        if before != wanted:
            set_hosts(release, before)


def fetch_tool(api: client.ApiClient, namespace: str, tool_id: str, **spec: Any) -> None:
    descriptor(
        api,
        namespace,
        tool_id,
        side_effect_class="sandbox",
        timeoutSeconds=90,
        wait_active=False,
        **spec,
    )
    name = f"{tool_id}-1-0-0"
    wait_for(
        lambda: (get(api, namespace, "tooldescriptors", name).get("status") or {}).get("active"),
        timeout=120,
        what=f"{tool_id} active (the release's operator reconciled it)",
    )


def receipt(release: Release, status: dict[str, Any]) -> dict[str, Any]:
    """The stored receipt, read in an operator pod (every replica mounts the store)."""
    digest = status["receiptRef"].split(":")[1]
    path = f"{ARTIFACTS}/sha256/{digest[:2]}/{digest}"
    pod = release.pods()[0].metadata.name
    code = f"import sys; sys.stdout.write(open({path!r}, encoding='utf-8').read())"
    text = run(
        "kubectl", "exec", "-n", release.namespace, pod, "-c", "operator", "--",
        "/usr/bin/python3", "-c", code,
    )  # fmt: skip
    assert hashlib.sha256(text.encode()).hexdigest() == digest
    stored = parse_receipt(text.encode())  # a signed receipt's predicate
    assert stored is not None, text[:200]
    return stored


def explain(release: Release, status: dict[str, Any]) -> str:
    """The status with the proxy pods' log tails (a failure's evidence)."""
    core = client.CoreV1Api(release.api)
    pods = core.list_namespaced_pod(
        release.namespace,
        label_selector=f"app.kubernetes.io/instance={release.name},"
        "app.kubernetes.io/component=egress-proxy",
    ).items
    logs = [
        f"--- {p.metadata.name} ---\n"
        + core.read_namespaced_pod_log(cast(str, p.metadata.name), release.namespace, tail_lines=30)
        for p in pods
    ]
    return pretty(status) + "\n" + "\n".join(logs)


def verdicts(status: dict[str, Any]) -> list[tuple[str, int, str]]:
    return [(r["host"], r["port"], r["verdict"]) for r in status.get("egress") or []]


def test_a_shell_tool_fetches_an_allowed_host_through_the_proxy_service(
    api: client.ApiClient,
    release: Release,
    tenant: Namespace,
    server: Recorder,
    proxy: dict[str, Any],
) -> None:
    port = server.port
    fetch_tool(
        api,
        tenant.name,
        "fetch",
        kind="shell",
        inputSchema={
            "type": "object",
            "properties": {"command": {"type": "string"}},
            "required": ["command"],
        },
        shell={"allow": ["curl"]},
        sandbox={
            "resources": {"limits": {"cpu": "500m", "memory": "64Mi"}},
            "egress": {"allow": [f"{API}:{port}"]},
        },
    )
    agent = Agent.create(api, tenant.name, "agent-1", role=f"{release.prefix}-requester")
    agent.grant(["fetch"], ["sandbox"])

    name = agent.invoke("fetch", {"command": f"curl -sS -m 30 http://{API}:{port}/by-name"})
    status = status_of(agent.wait(name, timeout=180))

    assert status["state"] == "Observed", explain(release, status)
    assert json.loads(status["result"]["content"])["greeting"] == "hello from the node"
    assert server.hits["/by-name"] == 1
    # The pod was given the Service's ClusterIP (never an operator pod's own address) ...
    endpoint = f"{proxy['clusterIP']}:{proxy['ports'][0]['port']}"
    assert status["sandboxLease"]["egressProxy"] == endpoint
    # ... and its policy admits the proxy pods by label in the release namespace: the
    # connection to the ClusterIP passed it after being translated to a proxy pod.
    policy = client.NetworkingV1Api(api).read_namespaced_network_policy(
        status["sandboxLease"]["networkPolicyName"], tenant.name
    )
    peers = [peer for rule in policy.spec.egress for peer in rule.to or []]
    selected = [p for p in peers if p.pod_selector is not None]
    assert [p.pod_selector.match_labels for p in selected] == [proxy["selector"]]
    assert selected[0].namespace_selector.match_labels == {
        "kubernetes.io/metadata.name": release.namespace
    }
    (record,) = status["egress"]
    assert (record["host"], record["port"], record["verdict"]) == (API, port, "allowed")
    assert record["bytesUp"] > 0 and record["bytesDown"] > 0
    assert receipt(release, status)["egress"] == status["egress"]


def test_a_host_off_the_list_is_refused_and_a_direct_connection_gets_nowhere(
    api: client.ApiClient,
    release: Release,
    tenant: Namespace,
    server: Recorder,
    proxy: dict[str, Any],
) -> None:
    node, port = node_ip(), server.port
    gateway = api.sanitize_for_serialization(
        client.CoreV1Api(api).read_namespaced_service(
            f"{release.prefix}-gateway", release.namespace
        )
    )["spec"]
    around = f"{gateway['clusterIP']}:{gateway['ports'][0]['port']}"
    # A platform's fixed script: through the proxy to a host not listed; then past the
    # proxy to the node's server and to another Service's ClusterIP.
    script = (
        f"curl -s -m 20 -o /dev/null -w 'listed=%{{http_code}}\\n' "
        f"http://other.example.test:{port}/not-listed; "
        f'curl -s -m 5 --noproxy "*" http://{node}:{port}/direct; echo "direct=$?"; '
        f'curl -s -m 5 --noproxy "*" http://{around}/; echo "service=$?"; echo done'
    )
    fetch_tool(
        api,
        tenant.name,
        "attempts",
        kind="container",
        inputSchema={"type": "object"},
        sandbox={
            "command": ["/bin/sh", "-c", script],
            "resources": {"limits": {"cpu": "500m", "memory": "64Mi"}},
            "egress": {"allow": [f"{API}:{port}"]},
        },
    )
    agent = Agent.create(api, tenant.name, "agent-1", role=f"{release.prefix}-requester")
    agent.grant(["attempts"], ["sandbox"])

    status = status_of(agent.wait(agent.invoke("attempts", {}), timeout=180))

    assert status["state"] == "Observed", explain(release, status)
    content = status["result"]["content"]
    print(f"\nattempts: {content.strip()!r}")
    assert "done" in content, content
    assert "listed=403" in content, content
    assert "direct=0" not in content and "direct=" in content, content
    assert "service=0" not in content and "service=" in content, content
    assert server.hits["/not-listed"] == 0 and server.hits["/direct"] == 0
    assert ("other.example.test", port, "not-allowed") in verdicts(status), explain(release, status)
    assert receipt(release, status)["egress"] == status["egress"]
