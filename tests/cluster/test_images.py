"""The images `make image` builds and the cluster imported run as they should: the
sandbox's curl and wget fetch by host name and go through a proxy, as uid 65532 from the
image's own config; the operator image starts the command line as uid 65532 and has no
shell. `TOOLADAPTER_SANDBOX_IMAGE` / `TOOLADAPTER_OPERATOR_IMAGE` test other tags."""

from __future__ import annotations

import os
import uuid
from typing import Any

import pytest
from cluster_helpers import SANDBOX_IMAGE, wait_until

pytestmark = pytest.mark.cluster

OPERATOR_IMAGE = os.environ.get("TOOLADAPTER_OPERATOR_IMAGE", "localhost/tooladapter-operator:dev")
SANDBOX = os.environ.get("TOOLADAPTER_SANDBOX_IMAGE", SANDBOX_IMAGE)

# Waits for a port to listen (busybox netstat), bounded; then the real checks. A proxy
# is a one-shot `nc -l` that records the request line the client sent it. The proxy
# variables as each client reads them: curl takes HTTPS_PROXY in either case but
# http_proxy only in lower case (httpoxy); GNU wget reads only lower case.
SANDBOX_SCRIPT = r"""
listening() { i=0; until netstat -ltn | grep -q ":$1 "; do
  i=$((i+1)); [ "$i" -gt 100 ] && { echo "port $1 never listened"; exit 1; }; sleep 0.1; done; }
proxy() { nc -l -p "$1" > "/workspace/proxy-$1" & listening "$1"; }
echo "uid=$(id -u)"
curl --version | head -n 1
wget --version | head -n 1
echo "cas=$(grep -c 'BEGIN CERTIFICATE' /etc/ssl/certs/ca-certificates.crt)"
mkdir -p /workspace/www && echo "served-$TOKEN" > /workspace/www/index.html
httpd -p 8080 -h /workspace/www && listening 8080
echo "wget-by-name=$(wget -q -O - "http://$(hostname):8080/")"
echo "curl-by-name=$(curl -fsS "http://$(hostname):8080/")"
proxy 3128; HTTPS_PROXY=http://127.0.0.1:3128 curl -s -m 3 https://example.invalid/c
echo "curl-https-proxy=$(head -n 1 /workspace/proxy-3128)"
proxy 3129; http_proxy=http://127.0.0.1:3129 curl -s -m 3 http://example.invalid/c
echo "curl-http-proxy=$(head -n 1 /workspace/proxy-3129)"
proxy 3130; https_proxy=http://127.0.0.1:3130 wget -q -T 3 -t 1 -O - https://example.invalid/w
echo "wget-https-proxy=$(head -n 1 /workspace/proxy-3130)"
proxy 3131; http_proxy=http://127.0.0.1:3131 wget -q -T 3 -t 1 -O - http://example.invalid/w
echo "wget-http-proxy=$(head -n 1 /workspace/proxy-3131)"
echo done
"""


def _container(name: str, image: str, **kwargs: Any) -> Any:
    """A restricted container that takes its user from the image: runAsNonRoot makes
    the kubelet refuse an image whose configured user is root."""
    from kubernetes import client

    resources = {"cpu": "250m", "memory": "128Mi"}
    return client.V1Container(
        name=name,
        image=image,
        image_pull_policy="Never",
        resources=client.V1ResourceRequirements(limits=resources, requests=resources),
        security_context=client.V1SecurityContext(
            run_as_non_root=True,
            read_only_root_filesystem=True,
            allow_privilege_escalation=False,
            capabilities=client.V1Capabilities(drop=["ALL"]),
            seccomp_profile=client.V1SeccompProfile(type="RuntimeDefault"),
        ),
        **kwargs,
    )


def _run_pod(core: Any, namespace: str, name: str, containers: list[Any]) -> dict[str, Any]:
    """Run a pod to the end; the terminated state of each container, by name."""
    from kubernetes import client

    core.create_namespaced_pod(
        namespace,
        client.V1Pod(
            metadata=client.V1ObjectMeta(name=name),
            spec=client.V1PodSpec(
                restart_policy="Never",
                automount_service_account_token=False,
                enable_service_links=False,
                termination_grace_period_seconds=1,
                containers=containers,
                volumes=[
                    client.V1Volume(name="workspace", empty_dir=client.V1EmptyDirVolumeSource())
                ],
            ),
        ),
    )

    def terminated() -> dict[str, Any] | None:
        pod = core.read_namespaced_pod_status(name, namespace)
        states = {s.name: s.state.terminated for s in pod.status.container_statuses or []}
        if len(states) == len(containers) and all(states.values()):
            return states
        return None

    result: dict[str, Any] = wait_until(f"pod {name} to finish", terminated, timeout=180)
    return result


def test_sandbox_image_curl_and_wget_fetch_by_name_and_through_a_proxy_as_65532(
    core: Any, namespace: str
) -> None:
    from kubernetes import client

    token = uuid.uuid4().hex
    container = _container(
        "tools",
        SANDBOX,
        command=["/bin/sh", "-c", SANDBOX_SCRIPT],
        env=[client.V1EnvVar(name="TOKEN", value=token)],
        working_dir="/workspace",
        volume_mounts=[client.V1VolumeMount(name="workspace", mount_path="/workspace")],
    )
    states = _run_pod(core, namespace, "tools", [container])
    log = core.read_namespaced_pod_log("tools", namespace, container="tools")
    assert states["tools"].exit_code == 0, log
    lines = dict(line.split("=", 1) for line in log.splitlines() if "=" in line)
    assert lines["uid"] == "65532", log
    assert "curl 7.88.1" in log and "GNU Wget 1.21.3" in log, log
    assert int(lines["cas"]) > 100, log
    assert lines["wget-by-name"] == f"served-{token}", log
    assert lines["curl-by-name"] == f"served-{token}", log
    assert lines["curl-https-proxy"].startswith("CONNECT example.invalid:443 "), log
    assert lines["curl-http-proxy"].startswith("GET http://example.invalid/c "), log
    assert lines["wget-https-proxy"].startswith("CONNECT example.invalid:443 "), log
    assert lines["wget-http-proxy"].startswith("GET http://example.invalid/w "), log
    assert log.rstrip().endswith("done"), log


def test_operator_image_runs_the_command_line_as_65532_and_has_no_shell(
    core: Any, namespace: str
) -> None:
    states = _run_pod(
        core,
        namespace,
        "operator",
        [
            _container("help", OPERATOR_IMAGE, args=["--help"]),
            _container(
                "whoami",
                OPERATOR_IMAGE,
                command=["/usr/bin/python3", "-c", "import os, re2; print('uid', os.getuid())"],
            ),
            _container("shell", OPERATOR_IMAGE, command=["/bin/sh", "-c", "echo a shell ran"]),
        ],
    )
    help_log = core.read_namespaced_pod_log("operator", namespace, container="help")
    assert states["help"].exit_code == 0, help_log
    assert help_log.lower().startswith("usage: tooladapter"), help_log
    assert " run " in help_log, help_log
    whoami = core.read_namespaced_pod_log("operator", namespace, container="whoami")
    assert states["whoami"].exit_code == 0, whoami
    assert whoami.strip() == "uid 65532"
    # No /bin/sh: the runtime cannot start the container at all.
    assert states["shell"].exit_code != 0
    assert states["shell"].reason in ("StartError", "ContainerCannotRun"), states["shell"]
