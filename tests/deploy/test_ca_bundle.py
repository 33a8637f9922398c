"""Issue 44 in the cluster: the chart's `caBundle` lets the Helm-installed operator's http
tools reach an API signed by a private CA, and only that CA is added.

The platform team's way: a ConfigMap holding the CA in the release namespace, then `helm
upgrade --reuse-values --set caBundle.configMap=...`, which rolls the operator pods with the
bundle mounted read-only and TOOLADAPTER_CA_BUNDLE naming it. The bundle stays set for the
rest of the session (it only adds trust in this test's CA, and a roll back would cost the
suite another roll); the ConfigMap goes with the release's namespace.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from kubernetes import client

from tests.deploy.release import Release
from tests.integration.objects import Agent, descriptor, pretty, status_of
from tests.integration.servers import tls_server
from tooladapter.devtools import Namespace, node_ip, tls
from tooladapter.devtools.tls import make_certificates

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(600)]

CONFIGMAP = "tooladapter-test-corp-ca"


@pytest.fixture(scope="module")
def bundled(
    api: client.ApiClient, release: Release, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[tls.TestCertificates, tls.TestCertificates]]:
    """(the CA the release trusts, another CA): the release upgraded with the first."""
    node = node_ip()
    private = make_certificates(tmp_path_factory.mktemp("private-ca"), [node])
    other = make_certificates(tmp_path_factory.mktemp("other-ca"), [node])
    core = client.CoreV1Api(api)
    body = {"metadata": {"name": CONFIGMAP}, "data": {"ca.crt": Path(private.ca).read_text()}}
    try:
        core.create_namespaced_config_map(release.namespace, body)  # type: ignore[arg-type]  # the client sends a dict body as is
    except client.ApiException as e:
        if e.status != 409:
            raise
        core.replace_namespaced_config_map(CONFIGMAP, release.namespace, body)  # type: ignore[arg-type]
    release.upgrade(f"--set=caBundle.configMap={CONFIGMAP}")
    release.wait_ready(int(release.values()["replicas"]))
    yield private, other


def test_an_http_tool_reaches_a_server_signed_by_the_charts_ca_bundle(
    api: client.ApiClient,
    release: Release,
    tenant: Namespace,
    bundled: tuple[tls.TestCertificates, tls.TestCertificates],
) -> None:
    private, other = bundled
    for pod in release.pods():
        (operator,) = [c for c in pod.spec.containers if c.name == "operator"]
        env = {e.name: e.value for e in operator.env or []}
        mounts = {m.name: m for m in operator.volume_mounts or []}
        assert mounts["ca-bundle"].read_only is True
        assert env["TOOLADAPTER_CA_BUNDLE"].startswith(mounts["ca-bundle"].mount_path)
    node = node_ip()
    with tls_server(node, private) as (signed_port, _), tls_server(node, other) as (other_port, _):
        descriptor(
            api,
            tenant.name,
            "private-api",
            kind="http",
            inputSchema={
                "type": "object",
                "properties": {"port": {"type": "integer"}},
                "required": ["port"],
                "additionalProperties": False,
            },
            http={
                "method": "GET",
                "url": f"https://{node}:{{port}}/hello",
                "allowedHosts": [f"{node}:{signed_port}", f"{node}:{other_port}"],
            },
        )
        agent = Agent.create(api, tenant.name, "agent-1", role=f"{release.prefix}-requester")
        agent.grant(["private-api"], ["read"])
        signed = status_of(
            agent.wait(agent.invoke("private-api", {"port": signed_port}), timeout=180)
        )
        assert signed["state"] == "Observed", pretty(signed)
        assert signed["result"]["content"] == "private hello", pretty(signed)
        # A CA the bundle does not hold: still refused (the bundle adds trust, nothing more).
        unknown = status_of(
            agent.wait(agent.invoke("private-api", {"port": other_port}), timeout=180)
        )
        assert unknown["state"] != "Observed", pretty(unknown)
        assert "certificate" in pretty(unknown).lower(), pretty(unknown)
