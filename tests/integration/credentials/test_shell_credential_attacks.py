"""Issue 38, attack pass, sandboxed side: an agent runs commands in a shell tool whose
credential the egress proxy injects (plain `http://` to the proxy, TLS upstream), and tries
to have it sent on another port, to another host, or to read it in the pod.

The egress proxy, the operator and the node's servers are those of the egress tests
(`tests.integration.egress.test_egress`: a plain recording server under `API`, a TLS one
under `TLS`); here they carry the credential shape of issue 38. A separate module from
`test_credential_attacks` because its fixtures are those of another operator and proxy.
"""

from __future__ import annotations

import json

import pytest
from kubernetes import client

from tests.integration.egress.test_egress import (
    API,
    SECRET_VALUE,
    TLS,
    Servers,
    eagent,
    egress,
    ens,
    explain,
    run,
    servers,
)
from tests.integration.objects import Agent, pretty, shell_tool
from tooladapter.devtools import EgressProxyProcess, Namespace, OperatorProcess

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(600)]

__all__ = ["eagent", "egress", "ens", "servers"]  # fixtures, used by name


def private_tool(api: client.ApiClient, namespace: str, s: Servers) -> None:
    """A shell tool allowed the TLS host (credentialed, on its port only) and the plain
    one (no credential)."""
    client.CoreV1Api(api).create_namespaced_secret(
        namespace,
        {"metadata": {"name": "api-key"}, "stringData": {"token": SECRET_VALUE}},  # type: ignore[arg-type]  # the client sends a dict body as is
    )
    shell_tool(
        api,
        namespace,
        "private",
        egress=[f"{TLS}:{s.tls_port}", f"{API}:{s.plain.port}"],
        shell={"allow": ["wget", "cat", "ls", "grep"]},
        credentials=[
            {
                "name": "api",
                "source": {"secretKeyRef": {"name": "api-key", "key": "token"}},
                "inject": {"hosts": [f"{TLS}:{s.tls_port}"]},
            }
        ],
    )


def test_the_credential_goes_only_to_its_host_and_port_whatever_the_sandbox_sends(
    api: client.ApiClient,
    ens: Namespace,
    eagent: Agent,
    servers: Servers,
    egress: tuple[OperatorProcess, EgressProxyProcess],
) -> None:
    s = servers
    private_tool(api, ens.name, s)
    eagent.grant(["private"], ["sandbox"])
    bearer = f"Authorization: Bearer {SECRET_VALUE}".encode()

    fetched = run(eagent, "private", f"wget -q -O - http://{TLS}:{s.tls_port}/private")
    assert fetched["state"] == "Observed", explain(fetched, egress)
    assert bearer in s.tls_heads[-1]

    tls_before, plain_before = len(s.tls_heads), s.plain.total
    # Without the entry's port (443, then 80 plain): no credential, and not allowed.
    no_port = run(eagent, "private", f"wget -q -O - http://{TLS}/private")
    # A Host header naming the credentialed host, on a request to the plain one.
    named = run(
        eagent,
        "private",
        f"wget -q -O - --header 'Host: {TLS}:{s.tls_port}' http://{API}:{s.plain.port}/named",
    )
    # The proxy refused port 80 (the entry names its own port), and the command failed.
    assert no_port.get("failureClass") == "tool-error", explain(no_port, egress)
    assert [(r["host"], r["port"], r["verdict"]) for r in no_port["egress"]] == [
        (TLS, 80, "not-allowed")
    ], explain(no_port, egress)
    # Refused as a bad request (the Host header must name the target), or sent to the plain
    # host as the target says: never to the credentialed host, never with the credential.
    assert all(r["host"] != TLS for r in named.get("egress") or []), explain(named, egress)
    for status in (no_port, named):
        assert SECRET_VALUE not in json.dumps(status)
    assert len(s.tls_heads) == tls_before, "the credentialed host got another request"
    for headers in s.plain.headers[plain_before:]:
        assert SECRET_VALUE not in json.dumps(headers), headers
        assert "authorization" not in headers, headers


def test_the_pod_holds_no_credential_no_token_and_no_credentials_mount(
    api: client.ApiClient,
    ens: Namespace,
    eagent: Agent,
    servers: Servers,
    egress: tuple[OperatorProcess, EgressProxyProcess],
) -> None:
    private_tool(api, ens.name, servers)
    eagent.grant(["private"], ["sandbox"])

    env = run(eagent, "private", "cat /proc/self/environ")
    token = run(eagent, "private", "cat /var/run/secrets/kubernetes.io/serviceaccount/token")
    mounts = run(eagent, "private", "ls -R /tooladapter")
    creds = run(eagent, "private", "ls /tooladapter/credentials")
    files = run(
        eagent, "private", f"grep -rl -s -F {SECRET_VALUE[:24]} /workspace /etc /tmp /var /run"
    )

    assert env["state"] == "Observed" and "HTTP_PROXY=" in env["result"]["content"], pretty(env)
    assert mounts["state"] == "Observed", pretty(mounts)
    assert "credentials" not in mounts["result"]["content"], pretty(mounts)
    # No ServiceAccount token is mounted (automount off), no credentials directory exists,
    # and no file holds the value: each command fails or finds nothing.
    for status in (token, creds, files):
        assert status.get("failureClass") == "tool-error", pretty(status)
    assert files["result"]["content"] == "", pretty(files)
    for status in (env, token, mounts, creds, files):
        assert SECRET_VALUE not in json.dumps(status), pretty(status)
    pods = client.CoreV1Api(api).list_namespaced_pod(ens.name).items
    assert pods, "no sandbox pod to look at"
    for pod in pods:
        assert pod.spec.automount_service_account_token is False, pod.metadata.name
        assert SECRET_VALUE not in json.dumps(api.sanitize_for_serialization(pod))
