"""NetworkPolicy is really enforced (issue 2, item 3).

The test starts a TCP server on the node's own address (never any other
address), runs a long-lived pod and probes the server from inside it with
busybox nc: reachable without policy, unreachable under a default-deny egress
policy, reachable again once a policy allows exactly that address and port.
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from cluster_helpers import sandbox_container, wait_until

pytestmark = pytest.mark.cluster


class NodeServer:
    """A TCP server on the node address that answers 'pong' and records peers."""

    def __init__(self, host: str) -> None:
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind((host, 0))
        self.sock.listen(16)
        self.sock.settimeout(0.5)
        self.port = self.sock.getsockname()[1]
        self.peers: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while not self._stop.is_set():
            try:
                conn, addr = self.sock.accept()
            except OSError:
                continue
            with conn:
                self.peers.append(addr[0])
                conn.sendall(b"pong\n")

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
        self.sock.close()


@pytest.fixture
def node_server(node_ip: str) -> Iterator[NodeServer]:
    try:
        server = NodeServer(node_ip)
    except OSError as exc:
        pytest.skip(f"cannot listen on the node address {node_ip} from here: {exc}")
    try:
        yield server
    finally:
        server.close()


def _exec(core: Any, namespace: str, pod: str, command: list[str]) -> str:
    from kubernetes.stream import stream

    return str(
        stream(
            core.connect_get_namespaced_pod_exec,
            pod,
            namespace,
            command=command,
            stderr=True,
            stdout=True,
            stdin=False,
            tty=False,
            _request_timeout=30,
        )
    )


def _netpol(name: str, spec: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": {"name": name},
        "spec": spec,
    }


def test_default_deny_egress_blocks_node_server_until_allowed(
    api_client: Any, core: Any, namespace: str, node_ip: str, node_server: NodeServer
) -> None:
    from kubernetes import client

    net = client.NetworkingV1Api(api_client)
    pod = client.V1Pod(
        metadata=client.V1ObjectMeta(name="probe", labels={"app": "probe"}),
        spec=client.V1PodSpec(
            restart_policy="Never",
            automount_service_account_token=False,
            termination_grace_period_seconds=1,
            containers=[sandbox_container("main", ["/bin/sleep", "3600"])],
        ),
    )
    core.create_namespaced_pod(namespace, pod)

    def running() -> Any:
        p = core.read_namespaced_pod_status("probe", namespace)
        return p.status.pod_ip if p.status.phase == "Running" else None

    pod_ip = wait_until("pod probe to run", running, timeout=120)

    target = f"{node_ip} {node_server.port}"
    probe = ["/bin/sh", "-c", f"echo ping | timeout 5 nc -w 3 {target}; echo rc=$?"]

    def connects() -> bool:
        return "pong" in _exec(core, namespace, "probe", probe)

    # Without any policy the pod reaches the server: the path itself works.
    wait_until("the pod to reach the node server without a policy", connects, timeout=30)
    assert pod_ip in node_server.peers, (pod_ip, node_server.peers)

    # Default-deny egress: every connection attempt fails...
    net.create_namespaced_network_policy(
        namespace,
        _netpol("default-deny-egress", {"podSelector": {}, "policyTypes": ["Egress"]}),  # type: ignore[arg-type]  # the client sends a dict body as is
    )
    wait_until("default-deny egress to take effect", lambda: not connects(), timeout=60)
    seen = len(node_server.peers)
    for _ in range(3):
        out = _exec(core, namespace, "probe", probe)
        assert "pong" not in out, out
        time.sleep(0.5)
    assert len(node_server.peers) == seen, "a connection reached the server under default-deny"

    # ...until a policy allows exactly the node address and the server port.
    net.create_namespaced_network_policy(
        namespace,
        _netpol(  # type: ignore[arg-type]  # the client sends a dict body as is
            "allow-node-server",
            {
                "podSelector": {"matchLabels": {"app": "probe"}},
                "policyTypes": ["Egress"],
                "egress": [
                    {
                        "to": [{"ipBlock": {"cidr": f"{node_ip}/32"}}],
                        "ports": [{"protocol": "TCP", "port": node_server.port}],
                    }
                ],
            },
        ),
    )
    wait_until("the allow policy to take effect", connects, timeout=60)
    assert node_server.peers[-1] == pod_ip

    # Another port on the same address stays blocked.
    other = NodeServer(node_ip)
    try:
        out = _exec(
            core,
            namespace,
            "probe",
            ["/bin/sh", "-c", f"echo ping | timeout 5 nc -w 3 {node_ip} {other.port}; echo rc=$?"],
        )
        assert "pong" not in out, out
        assert not other.peers
    finally:
        other.close()
