"""Fixtures for the cluster integration tests (issue 2).

They run against whatever cluster KUBECONFIG points at (default: this
checkout's .cluster/kubeconfig, written by `make cluster-up`). Without a
reachable cluster they are skipped, unless TOOLADAPTER_REQUIRE_CLUSTER=1 (or
CI=true), where they fail instead.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from cluster_helpers import NS_LABEL, kubeconfig_path, require_cluster, wait_until


@pytest.fixture(scope="session")
def api_client() -> Any:
    kubernetes = pytest.importorskip("kubernetes")
    path = kubeconfig_path()
    if not path.is_file():
        msg = f"no kubeconfig at {path}: run `make cluster-up`"
        if require_cluster():
            pytest.fail(msg)
        pytest.skip(msg)
    client = kubernetes.config.new_client_from_config(config_file=str(path))
    try:
        kubernetes.client.VersionApi(client).get_code(_request_timeout=10)
    except Exception as exc:
        msg = f"cluster of {path} is not reachable: {exc}"
        if require_cluster():
            pytest.fail(msg)
        pytest.skip(msg)
    return client


@pytest.fixture(scope="session")
def core(api_client: Any) -> Any:
    from kubernetes import client

    return client.CoreV1Api(api_client)


@pytest.fixture(scope="session")
def batch(api_client: Any) -> Any:
    from kubernetes import client

    return client.BatchV1Api(api_client)


@pytest.fixture(scope="session")
def node(core: Any) -> Any:
    nodes = core.list_node().items
    assert nodes, "the cluster has no node"
    return nodes[0]


@pytest.fixture(scope="session")
def node_ip(node: Any) -> str:
    env = os.environ.get("TOOLADAPTER_NODE_IP")
    if env:
        return env
    for addr in node.status.addresses or []:
        if addr.type == "InternalIP":
            return str(addr.address)
    pytest.fail("the node has no InternalIP address")


@pytest.fixture
def namespace(core: Any, request: pytest.FixtureRequest) -> Iterator[str]:
    """A fresh namespace per test, deleted afterwards (without waiting)."""
    from kubernetes import client

    stem = request.node.name.removeprefix("test_")[:30].lower().replace("_", "-")
    stem = "".join(c for c in stem if c.isalnum() or c == "-").strip("-")
    name = f"ta-it-{stem}-{uuid.uuid4().hex[:6]}"
    core.create_namespace(
        client.V1Namespace(metadata=client.V1ObjectMeta(name=name, labels={NS_LABEL: name}))
    )
    wait_until(
        f"default service account in {name}",
        lambda: core.read_namespaced_service_account("default", name),
        timeout=30,
    )
    try:
        yield name
    finally:
        try:
            core.delete_namespace(name, grace_period_seconds=0)
        except Exception:  # already gone, or the cluster went away
            pass
