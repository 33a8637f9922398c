"""Issue 38, attack pass: an agent, with only an agent's rights (its own ServiceAccount
token: it creates ToolInvocations, chooses arguments and idempotency keys), tries to get an
http tool's credential sent elsewhere, or shown back to it, or sent when it must not be.

Its own operator (`configured`): the tool reaches two TLS servers on loopback under test
names (`TOOLADAPTER_EGRESS_HOSTS`); both are on its allow-list, only the first is on the
credential's, and only for paths under `/v1/`. The servers record every request head and
answer by path: `/v1/redirect` redirects to the other host, `/v1/reflect` hands the
Authorization header back in every encoding (body and response headers), anything else
echoes it as JSON.
"""

from __future__ import annotations

import base64
import json
import re
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any
from urllib.parse import quote, quote_plus

import pytest
from kubernetes import client

from tests.integration.conftest import Configured
from tests.integration.credentials.conftest import deleted_after, loopback_settings
from tests.integration.credentials.test_http_credentials import (
    BEARER,
    VALUE,
    create_secret,
    forms,
    shown,
)
from tests.integration.objects import (
    Agent,
    approve,
    descriptor,
    pretty,
    status_of,
)
from tests.integration.servers import tls_server
from tooladapter import GROUP, VERSION
from tooladapter.devtools import Namespace
from tooladapter.devtools.tls import make_certificates

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(400)]

API = "api.attacks.test"
OTHER = "other.attacks.test"


class Servers:
    def __init__(self) -> None:
        self.api_port = 0
        self.other_port = 0
        self.api_heads: list[bytes] = []
        self.other_heads: list[bytes] = []

    def count(self) -> int:
        return len(self.api_heads) + len(self.other_heads)


def answering(s: Servers) -> Callable[[bytes], bytes]:
    def answer(head: bytes) -> bytes:
        path = head.split(b" ", 2)[1] if head.count(b" ") >= 2 else b"/"
        match = re.search(rb"\r\nauthorization: ([^\r\n]*)", head, re.IGNORECASE)
        auth = match.group(1).decode() if match else ""
        if path.startswith(b"/v1/redirect"):
            location = f"https://{OTHER}:{s.other_port}/v1/landed"
            return (
                f"HTTP/1.1 302 Found\r\nLocation: {location}\r\nContent-Length: 0\r\n"
                "Connection: close\r\n\r\n"
            ).encode()
        if path.startswith(b"/v1/reflect"):
            body = (
                json.dumps(
                    {
                        "raw": auth,
                        "slashes": json.dumps(auth).replace("/", "\\/"),
                        "b64": base64.b64encode(auth.encode()).decode(),
                        "b64url": base64.urlsafe_b64encode(auth.encode()).decode(),
                        "url": quote(auth, safe=""),
                        "form": quote_plus(auth),
                        "hex": auth.encode().hex(),
                    }
                ).encode()
                + f"\nAuthorization: {auth}\n".encode()
            )
            b64 = base64.b64encode(auth.encode()).decode()
            extra_bytes = f"X-Echo: {auth}\r\nX-Echo-B64: {b64}\r\n".encode()
        else:
            body = json.dumps({"authorization": auth or None}).encode()
            extra_bytes = b""
        return (
            b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nConnection: close\r\n"
            + extra_bytes
            + f"Content-Length: {len(body)}\r\n\r\n".encode()
            + body
        )

    return answer


@pytest.fixture(scope="module")
def servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Servers, Path]]:
    certs = make_certificates(tmp_path_factory.mktemp("tls"), [API, OTHER])
    s = Servers()
    with (
        tls_server("127.0.0.1", certs, answering(s)) as (api_port, api_heads),
        tls_server("127.0.0.1", certs, answering(s)) as (other_port, other_heads),
    ):
        s.api_port, s.api_heads = api_port, api_heads
        s.other_port, s.other_heads = other_port, other_heads
        yield s, certs.ca


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


def api_tool(
    api: client.ApiClient,
    namespace: str,
    s: Servers,
    secret: str = "api-token",
    *,
    side_effect_class: str = "read",
) -> None:
    """Host, port and the last path segment come from arguments, and so does a template
    `Authorization` header (the agent's own, which the credential must replace)."""
    descriptor(
        api,
        namespace,
        "api",
        kind="http",
        side_effect_class=side_effect_class,
        inputSchema={
            "type": "object",
            "properties": {
                "host": {"type": "string"},
                "port": {"type": ["integer", "string"]},
                "item": {"type": "string"},
                "mine": {"type": "string"},
            },
            "required": ["host", "port", "item", "mine"],
            "additionalProperties": False,
        },
        http={
            "method": "GET",
            "url": "https://{host}:{port}/v1/{item}",
            "allowedHosts": [f"{API}:{s.api_port}", f"{OTHER}:{s.other_port}"],
            "headers": {"Authorization": "Agent {mine}"},
        },
        credentials=[
            {
                "name": "api",
                "source": {"secretKeyRef": {"name": secret, "key": "token"}},
                "inject": {"hosts": [f"{API}:{s.api_port}"], "paths": ["/v1/"]},
            }
        ],
    )


def call(agent: Agent, s: Servers, **arguments: Any) -> dict[str, Any]:
    args = {"host": API, "port": s.api_port, "item": "items", "mine": "agent-chosen", **arguments}
    return status_of(agent.wait(agent.invoke("api", args), timeout=120))


def authorizations(head: bytes) -> list[bytes]:
    return re.findall(rb"\r\nauthorization: ([^\r\n]*)", head, re.IGNORECASE)


def test_arguments_that_point_elsewhere_never_carry_the_credential(
    api: client.ApiClient,
    cns: Namespace,
    cagent: Agent,
    servers: tuple[Servers, Path],
    credentialed: Configured,
) -> None:
    """Host, port and path arguments: another allowed host, the other host's port on the
    credentialed name, userinfo and encoded-host tricks, a trailing dot, an IP literal, and
    paths that leave `/v1/` for a lenient server (regression: `../admin` rendered as
    `/v1/..%2Fadmin` carried the credential). Each is refused before sending, or sent
    without the credential; the credentialed request carries exactly one Authorization,
    the credential's, never the agent's template header."""
    s = servers[0]
    create_secret(api, cns.name)
    api_tool(api, cns.name, s)
    cagent.grant(["api"], ["read"])

    good = call(cagent, s)
    assert good["state"] == "Observed", pretty(good)
    assert authorizations(s.api_heads[-1]) == [BEARER.encode()]

    refused: list[dict[str, Any]] = [
        {"host": API, "port": s.other_port},  # allowed port of the other name only
        {"host": f"{API}@{OTHER}", "port": s.other_port},
        {"host": f"{OTHER}#@{API}"},
        {"host": f"{API}."},
        {"host": "127.0.0.1"},
        {"host": "api%2eattacks.test"},
        {"host": f"{API}:{s.api_port}"},
        {"port": f"{s.api_port}@{OTHER}"},
        {"item": ".."},
    ]
    for arguments in refused:
        before = s.count()
        status = call(cagent, s, **arguments)
        assert status["state"] == "Failed", (arguments, pretty(status))
        assert s.count() == before, arguments

    sent_without: list[tuple[dict[str, Any], str]] = [
        ({"host": OTHER, "port": s.other_port}, "other"),
        ({"item": "../admin"}, "api"),  # /v1/..%2Fadmin
        ({"item": "..\\admin"}, "api"),  # /v1/..%5Cadmin
        ({"item": "..;"}, "api"),
    ]
    for arguments, where in sent_without:
        heads = s.other_heads if where == "other" else s.api_heads
        before = len(heads)
        status = call(cagent, s, **arguments)
        assert status["state"] == "Observed", (arguments, pretty(status))
        assert len(heads) == before + 1, arguments
        assert authorizations(heads[-1]) == [b"Agent agent-chosen"], (arguments, heads[-1])

    upper = call(cagent, s, host=API.upper())
    assert upper["state"] == "Observed", pretty(upper)
    assert authorizations(s.api_heads[-1]) == [BEARER.encode()]
    for form in forms():
        assert form not in shown(api, cns.name, [good, upper], credentialed), form


def test_a_redirect_to_another_host_is_not_followed(
    api: client.ApiClient,
    cns: Namespace,
    cagent: Agent,
    servers: tuple[Servers, Path],
) -> None:
    s = servers[0]
    create_secret(api, cns.name)
    api_tool(api, cns.name, s)
    cagent.grant(["api"], ["read"])
    api_before, other_before = len(s.api_heads), len(s.other_heads)

    status = call(cagent, s, item="redirect")

    assert status["state"] == "Observed", pretty(status)
    assert len(s.api_heads) == api_before + 1
    assert authorizations(s.api_heads[-1]) == [BEARER.encode()]
    assert len(s.other_heads) == other_before, "the redirect was followed"


def test_a_server_reflecting_the_header_in_every_encoding_shows_the_agent_none(
    api: client.ApiClient,
    cns: Namespace,
    cagent: Agent,
    servers: tuple[Servers, Path],
    credentialed: Configured,
) -> None:
    """Raw, JSON-escaped, base64 (standard and URL-safe), URL- and form-encoded, hex, and
    in response headers: nothing of it in status, events, stored results or receipts."""
    s = servers[0]
    create_secret(api, cns.name)
    api_tool(api, cns.name, s)
    cagent.grant(["api"], ["read"])

    status = call(cagent, s, item="reflect")

    assert status["state"] == "Observed", pretty(status)
    assert authorizations(s.api_heads[-1]) == [BEARER.encode()]
    assert status["result"]["redactions"], pretty(status)
    said = shown(api, cns.name, [status], credentialed)
    reflected = [
        *forms(),
        json.dumps(BEARER).replace("/", "\\/"),
        base64.urlsafe_b64encode(BEARER.encode()).decode(),
        quote(BEARER, safe=""),
        quote_plus(BEARER),
        BEARER.encode().hex(),
        VALUE.encode().hex(),
    ]
    for form in reflected:
        assert form not in said, form


@pytest.mark.parametrize("tail", ["\r\nX-Evil: 1", "\x0bX", "\x7f"])
def test_a_secret_value_no_header_may_hold_denies_at_credentials_and_sends_nothing(
    api: client.ApiClient,
    cns: Namespace,
    cagent: Agent,
    servers: tuple[Servers, Path],
    tail: str,
) -> None:
    """CR/LF, and (regression: a hit) other control characters, which aiohttp refused
    only while sending: an unexpected error, settled Uncertain."""
    s = servers[0]
    client.CoreV1Api(api).create_namespaced_secret(
        cns.name,
        {"metadata": {"name": "split-token"}, "stringData": {"token": f"{VALUE}{tail}"}},  # type: ignore[arg-type]  # the client sends a dict body as is
    )
    api_tool(api, cns.name, s, "split-token")
    cagent.grant(["api"], ["read"])
    before = s.count()

    status = call(cagent, s)

    assert (status["state"], status.get("failureClass")) == ("Denied", "credentials"), pretty(
        status
    )
    assert not [e for e in status["stages"] if e["stage"] == "execute"], pretty(status)
    assert s.count() == before
    assert VALUE not in json.dumps(status)


def test_a_control_character_in_a_header_argument_fails_the_call_sending_nothing(
    api: client.ApiClient,
    cns: Namespace,
    cagent: Agent,
    servers: tuple[Servers, Path],
) -> None:
    """Regression (hit): the agent's `\\x0b` in a header argument passed rendering, and
    aiohttp refused it while sending: the call settled as if it might have been sent."""
    s = servers[0]
    create_secret(api, cns.name)
    api_tool(api, cns.name, s)
    cagent.grant(["api"], ["read"])
    before = s.count()

    status = call(cagent, s, mine="a\x0bb")

    assert (status["state"], status.get("failureClass")) == ("Failed", "validation"), pretty(status)
    assert s.count() == before


def test_a_forged_caller_naming_another_agent_is_refused_at_admission(
    api: client.ApiClient,
    cns: Namespace,
    cagent: Agent,
    servers: tuple[Servers, Path],
) -> None:
    s = servers[0]
    create_secret(api, cns.name)
    api_tool(api, cns.name, s)
    other = Agent.create(api, cns.name, "agent-2")
    other.grant(["api"], ["read"])  # the agent impersonated may call it; this one may not
    before = s.count()

    for caller in (
        {"kind": "agent", "name": other.user},
        {"kind": "user", "name": "admin"},
        {"kind": "agent", "name": cagent.user, "groups": ["system:masters"]},
    ):
        with pytest.raises(client.ApiException) as refused:
            client.CustomObjectsApi(cagent.api).create_namespaced_custom_object(
                GROUP,
                VERSION,
                cns.name,
                "toolinvocations",
                {
                    "apiVersion": f"{GROUP}/{VERSION}",
                    "kind": "ToolInvocation",
                    "metadata": {"generateName": "forged-"},
                    "spec": {
                        "tool": {"id": "api", "version": "1.0.0"},
                        "arguments": {
                            "host": API,
                            "port": s.api_port,
                            "item": "items",
                            "mine": "x",
                        },
                        "caller": caller,
                    },
                },
            )
        assert refused.value.status in (400, 403, 422), caller
        assert "caller" in str(refused.value.body), (caller, refused.value.body)
    assert s.count() == before


def test_the_same_idempotency_key_twice_sends_one_request(
    api: client.ApiClient,
    cns: Namespace,
    cagent: Agent,
    servers: tuple[Servers, Path],
) -> None:
    s = servers[0]
    create_secret(api, cns.name)
    api_tool(api, cns.name, s)
    cagent.grant(["api"], ["read"])
    args = {"host": API, "port": s.api_port, "item": "items", "mine": "x"}
    before = len(s.api_heads)

    first = status_of(cagent.wait(cagent.invoke("api", args, idempotencyKey="once")))
    second_name = cagent.invoke("api", args, idempotencyKey="once")
    second = status_of(cagent.wait(second_name))

    assert first["state"] == "Observed", pretty(first)
    assert second["state"] == "Observed" and second.get("duplicateOf"), pretty(second)
    assert len(s.api_heads) == before + 1


def test_a_secret_deleted_after_the_request_was_approved_denies_and_sends_nothing(
    api: client.ApiClient,
    cns: Namespace,
    cagent: Agent,
    servers: tuple[Servers, Path],
) -> None:
    s = servers[0]
    create_secret(api, cns.name)
    api_tool(api, cns.name, s, side_effect_class="external")
    cagent.grant(["api"], ["external"])
    reviewer = Agent.create(api, cns.name, "reviewer-1", role="tooladapter-reviewer")
    before = s.count()

    name = cagent.invoke("api", {"host": API, "port": s.api_port, "item": "items", "mine": "x"})
    cagent.wait(name, states={"AwaitingApproval"})
    client.CoreV1Api(api).delete_namespaced_secret("api-token", cns.name)
    approve(reviewer, name)
    status = status_of(cagent.wait(name))

    assert (status["state"], status.get("failureClass")) == ("Denied", "credentials"), pretty(
        status
    )
    assert not [e for e in status["stages"] if e["stage"] == "execute"], pretty(status)
    assert s.count() == before
