"""The local cluster's add-ons (issue 15): Service proxying, cluster DNS,
default storage, helm.

kube-proxy makes ClusterIP Services reachable from pods and from the host;
CoreDNS answers cluster names and nothing else (it has no forward plugin); a
claim of the default StorageClass binds and keeps what a pod wrote; helm runs.
"""

from __future__ import annotations

import shutil
import subprocess
import urllib.request
import uuid
from typing import Any

import pytest
from cluster_helpers import REPO_ROOT, sandbox_container, wait_until

pytestmark = pytest.mark.cluster

DOMAIN = "cluster.local"


def _pod(name: str, container: Any, **spec: Any) -> Any:
    from kubernetes import client

    return client.V1Pod(
        metadata=client.V1ObjectMeta(name=name, labels={"app": name}),
        spec=client.V1PodSpec(
            restart_policy="Never",
            automount_service_account_token=False,
            termination_grace_period_seconds=1,
            containers=[container],
            **spec,
        ),
    )


def _finished(core: Any, namespace: str, name: str) -> Any:
    """The pod's phase once it has ended (Succeeded or Failed)."""
    phase = core.read_namespaced_pod_status(name, namespace).status.phase
    return phase if phase in ("Succeeded", "Failed") else None


def _run(core: Any, namespace: str, name: str, script: str, **spec: Any) -> tuple[str, str]:
    """Run script in a sandbox pod to its end; its phase and log."""
    core.create_namespaced_pod(
        namespace, _pod(name, sandbox_container("main", ["/bin/sh", "-c", script]), **spec)
    )
    phase = wait_until(f"pod {name} to finish", lambda: _finished(core, namespace, name), 180)
    return phase, core.read_namespaced_pod_log(name, namespace, container="main")


def _dns_service(core: Any) -> Any:
    return core.read_namespaced_service("kube-dns", "kube-system")


def test_pod_resolves_cluster_names_and_reaches_a_service_by_name(
    core: Any, namespace: str
) -> None:
    from kubernetes import client

    token = uuid.uuid4().hex
    server = sandbox_container(
        "main",
        [
            "/bin/sh",
            "-c",
            f"mkdir -p /tmp/www && echo {token} >/tmp/www/token && "
            "exec httpd -f -p 8080 -h /tmp/www",
        ],
    )
    server.ports = [client.V1ContainerPort(container_port=8080, name="http")]
    core.create_namespaced_pod(namespace, _pod("web", server))
    core.create_namespaced_service(
        namespace,
        client.V1Service(
            metadata=client.V1ObjectMeta(name="web"),
            spec=client.V1ServiceSpec(
                selector={"app": "web"},
                ports=[client.V1ServicePort(port=80, target_port="http")],
            ),
        ),
    )
    wait_until(
        "pod web to be ready",
        lambda: any(
            c.type == "Ready" and c.status == "True"
            for c in core.read_namespaced_pod_status("web", namespace).status.conditions or []
        ),
        timeout=120,
    )
    cluster_ip = core.read_namespaced_service("web", namespace).spec.cluster_ip
    api_ip = core.read_namespaced_service("kubernetes", "default").spec.cluster_ip

    # By the short name (the pod's search path) and by the full one; nc, as
    # the sandbox image's busybox wget crashes (with addresses too).
    get = "printf 'GET /token HTTP/1.0\\r\\n\\r\\n' | nc -w 10"

    def fetch(label: str, host: str) -> str:
        """Ask `host` until it answers the token, at most 30 times: the Service's rules
        follow its pod's readiness (its EndpointSlice, then the proxy's next sync, later on
        a busy node)."""
        return (
            f"for i in $(seq 30); do {label}=$({get} {host} 80 | tail -n 1); "
            f'[ "${label}" = {token} ] && break; sleep 1; done; echo {label}=${label}; '
        )

    phase, log = _run(
        core,
        namespace,
        "client",
        f"cat /etc/resolv.conf; nslookup kubernetes.default.svc.{DOMAIN}; nslookup web; "
        + fetch("short", "web")
        + fetch("full", f"web.{namespace}.svc.{DOMAIN}"),
    )
    assert phase == "Succeeded", log
    assert f"nameserver {_dns_service(core).spec.cluster_ip}" in log, log
    assert f"search {namespace}.svc.{DOMAIN} svc.{DOMAIN} {DOMAIN}" in log, log
    assert f"Address: {api_ip}\n" in log, log
    assert f"Address: {cluster_ip}\n" in log, log
    assert f"short={token}" in log, log
    assert f"full={token}" in log, log

    # From the host too (kube-proxy's OUTPUT rules).
    def from_host() -> str:
        with urllib.request.urlopen(f"http://{cluster_ip}/token", timeout=5) as resp:
            return str(resp.read().decode().strip())

    assert wait_until("the Service from the host", from_host, timeout=30) == token


def test_external_name_gets_an_answer_not_a_forward(core: Any, namespace: str) -> None:
    # The host resolves such names; CoreDNS must not ask anyone: it answers
    # SERVFAIL (no plugin serves the name) at once, not a timeout and not an
    # address. An unknown cluster name gets NXDOMAIN.
    dns_ip = _dns_service(core).spec.cluster_ip
    phase, log = _run(
        core,
        namespace,
        "lookup",
        f"nslookup pypi.org. {dns_ip} 2>&1; echo rc=$?; "
        f"nslookup nothing-here.default.svc.{DOMAIN} {dns_ip} 2>&1; echo rc=$?",
    )
    assert phase == "Succeeded", log
    external, cluster = log.split("rc=", 1)
    assert "SERVFAIL" in external, log
    assert "timed out" not in external, log
    assert "Name:" not in external, log  # an answer would name the host
    assert "NXDOMAIN" in cluster, log


def test_claim_of_default_storage_class_binds_and_keeps_data(core: Any, namespace: str) -> None:
    from kubernetes import client

    core.create_namespaced_persistent_volume_claim(
        namespace,
        client.V1PersistentVolumeClaim(
            metadata=client.V1ObjectMeta(name="data"),
            spec=client.V1PersistentVolumeClaimSpec(
                access_modes=["ReadWriteOnce"],
                resources=client.V1VolumeResourceRequirements(requests={"storage": "16Mi"}),
            ),
        ),
    )
    claim = client.V1PersistentVolumeClaimVolumeSource(claim_name="data")
    volumes = [client.V1Volume(name="data", persistent_volume_claim=claim)]
    token = uuid.uuid4().hex

    def with_mount(name: str, script: str) -> tuple[str, str]:
        container = sandbox_container("main", ["/bin/sh", "-c", script])
        container.volume_mounts = [client.V1VolumeMount(name="data", mount_path="/data")]
        core.create_namespaced_pod(namespace, _pod(name, container, volumes=volumes))
        phase = wait_until(f"pod {name} to finish", lambda: _finished(core, namespace, name), 180)
        return phase, core.read_namespaced_pod_log(name, namespace, container="main")

    phase, log = with_mount("writer", f"echo {token} >/data/token && echo wrote")
    assert (phase, log.strip()) == ("Succeeded", "wrote"), log
    pvc = core.read_namespaced_persistent_volume_claim("data", namespace)
    assert pvc.spec.storage_class_name == "local-path", pvc.spec
    assert pvc.status.phase == "Bound", pvc.status

    phase, log = with_mount("reader", "cat /data/token")
    assert (phase, log.strip()) == ("Succeeded", token), log


def test_helm_runs() -> None:
    helm = shutil.which("helm") or str(REPO_ROOT / ".cluster" / "bin" / "helm")
    result = subprocess.run(
        [helm, "version", "--short"], capture_output=True, text=True, timeout=30, check=False
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("v3."), result.stdout


def test_node_registry_serves_pushed_images_that_pods_pull(
    core: Any, namespace: str, node_ip: str
) -> None:
    """The node's registry (addons/registry.sh, issue 32): `make image-push` puts the sandbox
    image there, and a pod naming it with imagePullPolicy Always pulls it over plain HTTP."""
    registry = f"{node_ip}:5000"
    with urllib.request.urlopen(f"http://{registry}/v2/", timeout=5) as reply:
        assert reply.status == 200
    pushed = subprocess.run(
        ["make", "--no-print-directory", "image-push", "IMAGES=sandbox", f"REGISTRY={registry}"],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    assert pushed.returncode == 0, pushed.stderr[-2000:]
    (line,) = [x for x in pushed.stdout.splitlines() if x.startswith("pushed ")]
    image = line.split(" ", 1)[1]
    assert image.startswith(f"{registry}/tooladapter-sandbox:")

    token = uuid.uuid4().hex
    container = sandbox_container("main", ["/bin/sh", "-c", f"echo {token}"])
    container.image, container.image_pull_policy = image, "Always"
    core.create_namespaced_pod(namespace, _pod("pulled", container))
    phase = wait_until("pod pulled to finish", lambda: _finished(core, namespace, "pulled"), 180)
    log = core.read_namespaced_pod_log("pulled", namespace, container="main")
    assert (phase, log.strip()) == ("Succeeded", token), log
    events = core.list_namespaced_event(namespace, field_selector="involvedObject.name=pulled")
    reasons = {e.reason for e in events.items if f'"{image}"' in (e.message or "")}
    assert {"Pulling", "Pulled"} <= reasons, reasons
