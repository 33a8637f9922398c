"""Issue 38: an http tool carries a brokered credential to the one API it names, over TLS
verified against `TOOLADAPTER_EGRESS_CA_FILE`, and nowhere else; a credential that cannot
be brokered sends nothing; no value shows in status, events or the result.

Its own operator (`configured`): http tools reach two TLS servers on loopback under test
names (`TOOLADAPTER_EGRESS_HOSTS`), with certificates of a test CA. Both names are on the
tool's allow-list; only the first is on the credential's.
"""

from __future__ import annotations

import base64
import json
import re
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from tests.integration.conftest import Configured
from tests.integration.credentials.conftest import deleted_after, loopback_settings
from tests.integration.objects import Agent, descriptor, pretty, status_of, stored_receipt
from tests.integration.servers import tls_server
from tooladapter.devtools import Namespace
from tooladapter.devtools.tls import make_certificates

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(300)]

API = "api.credentials.test"
OTHER = "other.credentials.test"
VALUE = "http-credential-" + "Kq3" * 8
BEARER = f"Bearer {VALUE}"


def echo_authorization(head: bytes) -> bytes:
    """Answers with the Authorization header it got, as is and base64-encoded."""
    match = re.search(rb"\r\nauthorization: ([^\r\n]*)", head, re.IGNORECASE)
    value = match.group(1).decode() if match else None
    body = json.dumps(
        {
            "authorization": value,
            "b64": base64.b64encode(value.encode()).decode() if value else None,
        }
    ).encode()
    return (
        b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nConnection: close\r\n"
        + f"Content-Length: {len(body)}\r\n\r\n".encode()
        + body
    )


class Servers:
    def __init__(self, api: tuple[int, list[bytes]], other: tuple[int, list[bytes]]) -> None:
        self.api_port, self.api_heads = api
        self.other_port, self.other_heads = other


@pytest.fixture(scope="module")
def servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Servers, Path]]:
    certs = make_certificates(tmp_path_factory.mktemp("tls"), [API, OTHER])
    with (
        tls_server("127.0.0.1", certs, echo_authorization) as api,
        tls_server("127.0.0.1", certs, echo_authorization) as other,
    ):
        yield Servers(api, other), certs.ca


@pytest.fixture(scope="module")
def credentialed(
    configured: Callable[[Mapping[str, str]], Configured], servers: tuple[Servers, Path]
) -> Configured:
    return configured(loopback_settings([API, OTHER], servers[1]))


@pytest.fixture
def cns(api: client.ApiClient, credentialed: Configured) -> Iterator[Namespace]:
    yield from deleted_after(credentialed.namespace(api))


@pytest.fixture
def cagent(api: client.ApiClient, cns: Namespace) -> Agent:
    return Agent.create(api, cns.name, "agent-1")


def api_tool(api: client.ApiClient, namespace: str, s: Servers, secret: str) -> None:
    descriptor(
        api,
        namespace,
        "api",
        kind="http",
        inputSchema={
            "type": "object",
            "properties": {"host": {"type": "string"}, "port": {"type": "integer"}},
            "required": ["host", "port"],
            "additionalProperties": False,
        },
        http={
            "method": "GET",
            "url": "https://{host}:{port}/v1/items",
            "allowedHosts": [f"{API}:{s.api_port}", f"{OTHER}:{s.other_port}"],
        },
        credentials=[
            {
                "name": "api",
                "source": {"secretKeyRef": {"name": secret, "key": "token"}},
                "inject": {"hosts": [f"{API}:{s.api_port}"]},
            }
        ],
    )


def create_secret(api: client.ApiClient, namespace: str) -> None:
    client.CoreV1Api(api).create_namespaced_secret(
        namespace,
        {"metadata": {"name": "api-token"}, "stringData": {"token": VALUE}},  # type: ignore[arg-type]  # the client sends a dict body as is
    )


def forms() -> list[str]:
    """The value as a tool, a log or an encoder may show it."""
    return [
        VALUE,
        BEARER,
        base64.b64encode(VALUE.encode()).decode(),
        base64.b64encode(BEARER.encode()).decode(),
    ]


def shown(
    api: client.ApiClient, namespace: str, statuses: list[dict[str, Any]], op: Configured
) -> str:
    """Everything the call left to be read: its status, the namespace's events, and every
    stored result and receipt of the operator."""
    events = client.CoreV1Api(api).list_namespaced_event(namespace).items
    text = json.dumps(statuses) + json.dumps([(e.reason, e.message) for e in events])
    stored = [path for path in op.operator.artifacts.rglob("*") if path.is_file()]
    assert stored, "the operator stored no result or receipt to look in"
    for path in stored:
        text += path.read_bytes().decode(errors="replace")
    return text


def test_an_http_tool_carries_the_secret_to_its_api_and_to_no_other_host(
    api: client.ApiClient,
    cns: Namespace,
    cagent: Agent,
    servers: tuple[Servers, Path],
    credentialed: Configured,
) -> None:
    s = servers[0]
    create_secret(api, cns.name)
    api_tool(api, cns.name, s, "api-token")
    cagent.grant(["api"], ["read"])
    api_before, other_before = len(s.api_heads), len(s.other_heads)

    to_api = status_of(
        cagent.wait(cagent.invoke("api", {"host": API, "port": s.api_port}), timeout=120)
    )
    to_other = status_of(
        cagent.wait(cagent.invoke("api", {"host": OTHER, "port": s.other_port}), timeout=120)
    )

    assert to_api["state"] == "Observed", pretty(to_api)
    assert to_other["state"] == "Observed", pretty(to_other)
    api_heads = s.api_heads[api_before:]
    other_heads = s.other_heads[other_before:]
    assert len(api_heads) == 1 and len(other_heads) == 1
    assert f"\r\nAuthorization: {BEARER}\r\n".encode() in api_heads[0]
    assert b"authorization:" not in other_heads[0].lower()
    # The API reflected it, the result says it was redacted, and where it went is named.
    assert to_api["result"]["redactions"], pretty(to_api)
    assert not to_other["result"].get("redactions"), pretty(to_other)
    for status in (to_api, to_other):
        assert status["credentials"] == [
            {"name": "api", "source": "secretKeyRef", "hosts": [f"{API}:{s.api_port}"]}
        ], pretty(status)
    # The receipt names what the call carried, which definition ran and where it went.
    receipt = stored_receipt(credentialed.operator.artifacts, to_api)
    assert receipt["credentials"] == [
        {
            "name": "api",
            "source": "secretKeyRef",
            "hosts": [f"{API}:{s.api_port}"],
            "file": None,
            "expiresAt": None,
            # What a minted credential records (part 3); none of it for a Secret's value.
            "tokenUrl": None,
            "scopes": None,
            "audience": None,
            "subject": None,
            "revoked": None,
        }
    ], receipt
    assert receipt["descriptorDigest"] == to_api["descriptorDigest"], receipt
    assert receipt["target"] == {
        "method": "GET",
        "urlTemplate": "https://{host}:{port}/v1/items",
        "host": f"{API}:{s.api_port}",
    }, receipt
    said = shown(api, cns.name, [to_api, to_other], credentialed)
    for form in forms():
        assert form not in said, form


def test_a_missing_secret_denies_at_credentials_and_sends_nothing(
    api: client.ApiClient,
    cns: Namespace,
    cagent: Agent,
    servers: tuple[Servers, Path],
    credentialed: Configured,
) -> None:
    s = servers[0]
    api_tool(api, cns.name, s, "absent-token")
    cagent.grant(["api"], ["read"])
    before = len(s.api_heads) + len(s.other_heads)

    status = status_of(
        cagent.wait(cagent.invoke("api", {"host": API, "port": s.api_port}), timeout=120)
    )

    assert status["state"] == "Denied", pretty(status)
    assert status["failureClass"] == "credentials", pretty(status)
    denied = [e for e in status["stages"] if e["outcome"] == "denied"]
    assert [e["stage"] for e in denied] == ["credentials"], pretty(status)
    assert "absent-token" in denied[0].get("detail", ""), pretty(status)
    assert not [e for e in status["stages"] if e["stage"] == "execute"], pretty(status)
    assert len(s.api_heads) + len(s.other_heads) == before
