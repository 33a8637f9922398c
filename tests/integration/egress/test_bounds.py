"""Issue 28: descriptor CIDRs cannot reopen what the egress proxy closes, and an injected
credential reflected by the upstream never reaches the sandbox, whatever its framing.

Runs its own operator and egress proxy (as `test_egress.py` does), serving only this
module's namespaces, against servers on the node's address.
"""

from __future__ import annotations

import base64
import json
import re
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from typing import Any

import pytest
from kubernetes import client

from tests.integration.objects import SHELL_SCHEMA, Agent, descriptor, get, pretty, status_of
from tests.integration.servers import tls_server
from tooladapter.devtools import (
    SESSION,
    EgressProxyProcess,
    Namespace,
    OperatorProcess,
    node_ip,
    wait_for,
)
from tooladapter.devtools.tls import make_certificates

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(600)]

PREFIX = f"{SESSION}eb"
SECRET_VALUE = "bounds-credential-" + "Zx7" * 8
ECHO = "echo.example.test"
#: The local cluster's pod and service ranges (hack/cluster/lib.sh).
CLUSTER_CIDRS = "10.244.0.0/16,10.0.0.0/24"


def chunk(data: bytes) -> bytes:
    return f"{len(data):x}\r\n".encode() + data + b"\r\n"


def echo_split(head: bytes) -> bytes:
    """Echoes the Authorization header it got, chunked, every chunk boundary inside the
    value: raw, JSON-escaped (`\\/`, `\\u00xx`) and base64."""
    match = re.search(rb"\r\nAuthorization: ([^\r\n]*)", head)
    value = match.group(1) if match else b"none"
    token = value.split(b" ", 1)[-1]
    escaped = "".join(f"\\u{c:04x}" for c in token).encode()
    parts = [
        b'{"authorization": "' + value[:14],
        value[14:] + b'", "escaped": "' + escaped[:30],
        escaped[30:] + b'", "b64": "' + base64.b64encode(value)[:9],
        base64.b64encode(value)[9:] + b'"}\n',
    ]
    return (
        b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
        b"Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n"
        + b"".join(chunk(p) for p in parts)
        + b"0\r\n\r\n"
    )


class Echo:
    def __init__(self, port: int, heads: list[bytes]) -> None:
        self.port = port
        self.heads = heads


@pytest.fixture(scope="module")
def echo(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Echo, Any]]:
    certs = make_certificates(tmp_path_factory.mktemp("tls"), [ECHO])
    with tls_server(node_ip(), certs, echo_split) as (port, heads):
        yield Echo(port, heads), certs


@pytest.fixture(scope="module")
def egress(
    echo: tuple[Echo, Any],
    egress_operator: Callable[
        ..., AbstractContextManager[tuple[OperatorProcess, EgressProxyProcess]]
    ],
) -> Iterator[tuple[OperatorProcess, EgressProxyProcess]]:
    settings = {"TOOLADAPTER_EGRESS_CLUSTER_CIDRS": CLUSTER_CIDRS}
    with egress_operator(PREFIX, [ECHO], echo[1].ca, settings) as pair:
        yield pair


@pytest.fixture
def ens(
    api: client.ApiClient, egress: tuple[OperatorProcess, EgressProxyProcess]
) -> Iterator[Namespace]:
    namespace = Namespace(api, prefix=PREFIX)
    yield namespace
    namespace.delete()


@pytest.fixture
def eagent(api: client.ApiClient, ens: Namespace) -> Agent:
    return Agent.create(api, ens.name, "agent-1")


def explain(status: dict[str, Any], egress: tuple[OperatorProcess, EgressProxyProcess]) -> str:
    return (
        f"{pretty(status)}\n--- egress proxy log ---\n{egress[1].tail(40)}"
        f"\n--- operator log ---\n{egress[0].tail(40)}"
    )


def run(agent: Agent, tool: str, command: str, timeout: float = 180) -> dict[str, Any]:
    return status_of(agent.wait(agent.invoke(tool, {"command": command}), timeout=timeout))


def shell(
    api: client.ApiClient, namespace: str, tool: str, egress: dict[str, Any], **kw: Any
) -> dict[str, Any]:
    return descriptor(
        api,
        namespace,
        tool,
        kind="shell",
        side_effect_class="sandbox",
        inputSchema=SHELL_SCHEMA,
        timeoutSeconds=60,
        shell={"allow": ["wget", "ls"]},
        sandbox={"resources": {"limits": {"cpu": "500m", "memory": "64Mi"}}, "egress": egress},
        **kw,
    )


# --------------------------------------------------------------------------- CIDR bounds


def test_a_descriptor_allowing_half_the_internet_is_refused_and_its_calls_denied(
    api: client.ApiClient,
    ens: Namespace,
    eagent: Agent,
    egress: tuple[OperatorProcess, EgressProxyProcess],
) -> None:
    node = node_ip()
    obj = shell(api, ens.name, "wide", {"allow": ["0.0.0.0/1", "128.0.0.0/1"]}, wait_active=False)
    name = obj["metadata"]["name"]

    def refused() -> dict[str, Any] | None:
        status = get(api, ens.name, "tooldescriptors", name).get("status") or {}
        return status if status.get("conditions") else None

    status = wait_for(refused, timeout=60, what="the wide descriptor's status")
    assert status["active"] is False, explain(status, egress)
    assert status["conditions"][0]["reason"] == "Invalid"
    for index in (0, 1):
        assert f"sandbox.egress.allow[{index}]" in status["message"], pretty(status)
    assert "broader than /24" in status["message"]
    # A call naming it is denied before any sandbox exists: nothing private is reached
    # (the node's address, where the operator listens, among the rest).
    eagent.grant(["wide"], ["sandbox"])
    denied = run(eagent, "wide", f"wget -q -T 5 -O - http://{node}:{egress[0].metrics_port}/")
    assert denied["state"] == "Denied", explain(denied, egress)
    assert denied.get("failureClass") == "validation", pretty(denied)
    assert not client.BatchV1Api(api).list_namespaced_job(ens.name).items


def test_an_allowed_block_excepts_the_metadata_address_inside_it(
    api: client.ApiClient,
    ens: Namespace,
    eagent: Agent,
    egress: tuple[OperatorProcess, EgressProxyProcess],
) -> None:
    shell(api, ens.name, "linklocal", {"allow": ["169.254.169.0/24"]})
    eagent.grant(["linklocal"], ["sandbox"])
    done = run(eagent, "linklocal", "ls /workspace")
    assert done["state"] == "Observed", explain(done, egress)
    # The API server accepted the policy (an `except` must lie strictly inside its block).
    policies = client.NetworkingV1Api(api).list_namespaced_network_policy(ens.name).items
    blocks = [
        peer.ip_block
        for policy in policies
        for rule in policy.spec.egress or []
        for peer in rule.to or []
        if peer.ip_block is not None and peer.ip_block.cidr == "169.254.169.0/24"
    ]
    assert blocks and all(b._except == ["169.254.169.254/32"] for b in blocks), policies


# --------------------------------------------------------------------------- masking


def test_a_chunk_split_reflection_of_the_injected_credential_never_reaches_the_sandbox(
    api: client.ApiClient,
    ens: Namespace,
    eagent: Agent,
    echo: tuple[Echo, Any],
    egress: tuple[OperatorProcess, EgressProxyProcess],
) -> None:
    server = echo[0]
    client.CoreV1Api(api).create_namespaced_secret(
        ens.name,
        {"metadata": {"name": "api-key"}, "stringData": {"token": SECRET_VALUE}},  # type: ignore[arg-type]  # the client sends a dict body as is
    )
    target = f"{ECHO}:{server.port}"
    shell(
        api,
        ens.name,
        "echo",
        {
            "allow": [target],
        },
        credentials=[
            {
                "name": "api-key",
                "source": {"secretKeyRef": {"name": "api-key", "key": "token"}},
                "inject": {"hosts": [target]},
            }
        ],
    )
    eagent.grant(["echo"], ["sandbox"])
    fetched = run(eagent, "echo", f"wget -q -O - http://{target}/echo")
    assert fetched["state"] == "Observed", explain(fetched, egress)
    # The upstream got the credential, and echoed it split across chunks.
    assert f"Authorization: Bearer {SECRET_VALUE}".encode() in server.heads[-1]
    content = fetched["result"]["content"]
    body = json.loads(content)
    # The whole header value is masked (`Bearer ` too).
    assert body["authorization"] == "*" * len("Bearer " + SECRET_VALUE), content
    assert set(body["escaped"]) == {"*"}, content
    encoded = base64.b64encode(f"Bearer {SECRET_VALUE}".encode()).decode()
    assert encoded not in content and encoded[12:-8] not in content, content
    everything = json.dumps(fetched)
    for form in (
        SECRET_VALUE,
        SECRET_VALUE[2:-2],
        "".join(f"\\\\u{ord(c):04x}" for c in SECRET_VALUE[2:-2]),
        base64.b64encode(SECRET_VALUE.encode()).decode()[4:-4],
    ):
        assert form not in everything, form
