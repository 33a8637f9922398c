"""Issue 44: the chart's `caBundle` lets the operator's http tools reach an API signed by a
private CA.

Not a whole chart install (that needs the images built and a release of its own in the
shared cluster): the chart is rendered with `helm template` and a ConfigMap holding the CA,
the ConfigMap's key is projected as the kubelet would project the rendered volume (its
items, read-only, under a directory standing for the mount path), and an operator process
runs with the rendered container's TOOLADAPTER_CA_BUNDLE, rebased onto that directory. Its
http tool then calls a TLS server signed by the private CA (and one signed by another CA,
which must still fail: the bundle adds trust, verification stays on).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from pathlib import Path, PurePosixPath
from typing import Any

import pytest
from kubernetes import client

from tests.integration.conftest import Configured
from tests.integration.objects import Agent, descriptor, pretty, status_of
from tests.integration.packaging.test_monitoring_chart import render
from tests.integration.servers import tls_server
from tooladapter.devtools import Namespace
from tooladapter.devtools.tls import make_certificates

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(300)]

PRIVATE = "api.private-ca.test"
OTHER = "api.other-ca.test"


def operator_container(docs: list[dict[str, Any]]) -> tuple[dict[str, Any], dict[str, Any]]:
    """(pod spec, operator container) of the rendered operator Deployment."""
    (deployment,) = [
        d
        for d in docs
        if d["kind"] == "Deployment" and d["metadata"]["name"] == "tooladapter-operator"
    ]
    pod = deployment["spec"]["template"]["spec"]
    (container,) = [c for c in pod["containers"] if c["name"] == "operator"]
    return pod, container


def project(
    pod: Mapping[str, Any], container: Mapping[str, Any], data: Mapping[str, str], root: Path
) -> Path:
    """Project the `ca-bundle` volume as the kubelet does (its items under the mount path,
    read-only) into `root`, and return where TOOLADAPTER_CA_BUNDLE points in it."""
    (mount,) = [m for m in container["volumeMounts"] if m["name"] == "ca-bundle"]
    assert mount["readOnly"] is True, mount
    (volume,) = [v for v in pod["volumes"] if v["name"] == "ca-bundle"]
    for item in volume["configMap"]["items"]:
        target = root / item["path"]
        target.write_text(data[item["key"]])
        target.chmod(0o444)
    root.chmod(0o555)
    env = {e["name"]: e.get("value") for e in container["env"]}
    path = PurePosixPath(env["TOOLADAPTER_CA_BUNDLE"])
    return root / path.relative_to(mount["mountPath"])


class Setup:
    def __init__(self, operator: Configured, private_port: int, other_port: int) -> None:
        self.operator = operator
        self.private_port = private_port
        self.other_port = other_port


@pytest.fixture(scope="module")
def setup(
    api: client.ApiClient,
    configured: Callable[[Mapping[str, str]], Configured],
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Setup]:
    private = make_certificates(tmp_path_factory.mktemp("private-ca"), [PRIVATE])
    other = make_certificates(tmp_path_factory.mktemp("other-ca"), [OTHER])
    # The CA's ConfigMap, as a platform team creates it in the release namespace.
    home = Namespace(api)
    core = client.CoreV1Api(api)
    core.create_namespaced_config_map(
        home.name,
        {"metadata": {"name": "corp-ca"}, "data": {"ca.crt": private.ca.read_text()}},  # type: ignore[arg-type]  # the client sends a dict body as is
    )
    stored = core.read_namespaced_config_map("corp-ca", home.name).data or {}
    pod, container = operator_container(render("--set=caBundle.configMap=corp-ca"))
    bundle = project(pod, container, stored, tmp_path_factory.mktemp("ca-bundle-mount"))
    try:
        with (
            tls_server("127.0.0.1", private) as (private_port, _),
            tls_server("127.0.0.1", other) as (other_port, _),
        ):
            operator = configured(
                {
                    "TOOLADAPTER_CA_BUNDLE": str(bundle),
                    "TOOLADAPTER_EGRESS_HOSTS": f"{PRIVATE}=127.0.0.1,{OTHER}=127.0.0.1",
                }
            )
            yield Setup(operator, private_port, other_port)
    finally:
        bundle.parent.chmod(0o755)  # writable again: pytest removes its temp dirs later
        home.delete()


@pytest.fixture
def cns(api: client.ApiClient, setup: Setup) -> Iterator[Namespace]:
    namespace = setup.operator.namespace(api)
    yield namespace
    namespace.delete()


def test_an_http_tool_reaches_a_server_signed_by_the_charts_ca_bundle(
    api: client.ApiClient, cns: Namespace, setup: Setup
) -> None:
    descriptor(
        api,
        cns.name,
        "private-api",
        kind="http",
        inputSchema={
            "type": "object",
            "properties": {"host": {"type": "string"}, "port": {"type": "integer"}},
            "required": ["host", "port"],
            "additionalProperties": False,
        },
        http={
            "method": "GET",
            "url": "https://{host}:{port}/hello",
            "allowedHosts": [f"{PRIVATE}:{setup.private_port}", f"{OTHER}:{setup.other_port}"],
        },
    )
    agent = Agent.create(api, cns.name, "agent-1")
    agent.grant(["private-api"], ["read"])
    signed = status_of(
        agent.wait(
            agent.invoke("private-api", {"host": PRIVATE, "port": setup.private_port}),
            timeout=120,
        )
    )
    assert signed["state"] == "Observed", pretty(signed)
    assert signed["result"]["content"] == "private hello", pretty(signed)
    # A CA the bundle does not hold: still refused (the bundle adds trust, nothing more).
    unknown = status_of(
        agent.wait(
            agent.invoke("private-api", {"host": OTHER, "port": setup.other_port}),
            timeout=120,
        )
    )
    assert unknown["state"] != "Observed", pretty(unknown)
    assert "certificate" in pretty(unknown).lower(), pretty(unknown)
