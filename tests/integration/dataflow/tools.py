"""The data-flow tests' tools: `crm` (private), `web` (untrusted), `send` (a sink), and
the calls that fill a run's scope."""

from __future__ import annotations

from kubernetes import client

from tests.integration.objects import Agent, descriptor, status_of
from tooladapter.devtools import Namespace

LOOPBACK = "127.0.0.1"
CUSTOMERS = "customers"


def publish_tools(api: client.ApiClient, ns: Namespace, agent: Agent, port: int) -> None:
    """`crm` reads a ConfigMap (private), `web` stands for attacker-written content
    (untrusted), `send` is an http tool of class read that can reach one host (a sink)."""
    client.CoreV1Api(api).create_namespaced_config_map(
        ns.name,
        {"metadata": {"name": CUSTOMERS}, "data": {"alice": "alice@example.com"}},  # type: ignore[arg-type]  # the client sends a dict body as is
    )
    rbac = client.RbacAuthorizationV1Api(api)
    rbac.create_namespaced_role(
        ns.name,
        {  # type: ignore[arg-type]  # the client sends a dict body as is
            "metadata": {"name": "read-customers"},
            "rules": [
                {
                    "apiGroups": [""],
                    "resources": ["configmaps"],
                    "verbs": ["get"],
                    "resourceNames": [CUSTOMERS],
                }
            ],
        },
    )
    rbac.create_namespaced_role_binding(
        ns.name,
        {  # type: ignore[arg-type]  # the client sends a dict body as is
            "metadata": {"name": "read-customers"},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "Role",
                "name": "read-customers",
            },
            "subjects": [{"kind": "ServiceAccount", "name": agent.name, "namespace": ns.name}],
        },
    )
    descriptor(
        api,
        ns.name,
        "crm",
        kind="native",
        native={"name": "read-configmap"},
        dataFlow={"labels": ["private"]},
    )
    descriptor(
        api,
        ns.name,
        "web",
        kind="native",
        native={"name": "list-tools"},
        dataFlow={"labels": ["untrusted"]},
    )
    descriptor(
        api,
        ns.name,
        "send",
        kind="http",
        inputSchema={"type": "object", "properties": {"q": {"type": "string"}}},
        http={
            "method": "GET",
            "url": f"http://{LOOPBACK}:{port}/send?q={{q}}",
            "allowedHosts": [f"{LOOPBACK}:{port}"],
        },
    )
    agent.grant(["crm", "web", "send"], ["read"])


def read_then_fetch(agent: Agent, run: str) -> tuple[str, str]:
    read = agent.invoke("crm", {"name": CUSTOMERS}, runId=run)
    assert status_of(agent.wait(read))["state"] == "Observed"
    fetch = agent.invoke("web", {}, runId=run)
    assert status_of(agent.wait(fetch))["state"] == "Observed"
    return read, fetch
