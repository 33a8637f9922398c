"""Http tools carry brokered credentials (issue 38): each credential's header goes into the
one request its `inject` matches (scheme, host, port, method, path) and into no other, the
descriptor's own header of that name never replaces or reveals it, https is verified
against the system's CAs plus `TOOLADAPTER_EGRESS_CA_FILE`, names mapped by
`TOOLADAPTER_EGRESS_HOSTS` connect to their mapped address (judged as the egress proxy
judges mapped addresses), and a value the server reflects never reaches the result.

Over real sockets: aiohttp servers on 127.0.0.1 that record every request's headers and
echo the Authorization header they got.
"""

from __future__ import annotations

import base64
import json
import ssl
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web

from tests.unit.fake_cluster import (
    NAMESPACE,
    FakeCluster,
    Harness,
    descriptor,
    invocation,
    make_runtime,
)
from tooladapter.credentials.carried import Carried
from tooladapter.devtools.tls import make_certificates
from tooladapter.egress.core.trust import verified_context
from tooladapter.enums import FailureClass, InvocationState, SideEffectClass, ToolKind
from tooladapter.executors import Call, Outcome
from tooladapter.executors.http import HttpExecutor
from tooladapter.executors.limits import CallLimits
from tooladapter.model import Credential, HttpSpec, ToolDescriptorSpec
from tooladapter.settings import Settings

pytestmark = pytest.mark.timeout(20)

VALUE = "s3cr3t-api-token-Qw9"
API = "api.test"
OTHER = "other.test"
MAPPED = {API: "127.0.0.1", OTHER: "127.0.0.1"}


@dataclass
class Seen:
    """What reached one server: each request's method, path and headers (names lower)."""

    port: int = 0
    requests: list[tuple[str, str, dict[str, str]]] = field(default_factory=list)

    def auth(self) -> list[str | None]:
        return [headers.get("authorization") for _, _, headers in self.requests]


@asynccontextmanager
async def server(tls: ssl.SSLContext | None = None) -> AsyncIterator[Seen]:
    """Answers every method and path with JSON echoing the Authorization header it got."""
    seen = Seen()

    async def answer(request: web.Request) -> web.Response:
        headers = {k.lower(): v for k, v in request.headers.items()}
        seen.requests.append((request.method, request.path, headers))
        return web.json_response({"authorization": headers.get("authorization")})

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", answer)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0, ssl_context=tls)
    await site.start()
    seen.port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    try:
        yield seen
    finally:
        await runner.cleanup()


def credential(hosts: list[str], **inject: Any) -> Credential:
    return Credential.model_validate(
        {
            "name": "api",
            "source": {"secretKeyRef": {"name": "api-token", "key": "token"}},
            "inject": {"hosts": hosts, **inject},
        }
    )


def carried(declaration: Credential, value: str = VALUE) -> Carried:
    return Carried(declaration, value, base64.b64encode(value.encode()).decode())


def call_to(
    url: str,
    allowed: list[str],
    creds: list[Carried],
    *,
    method: str = "GET",
    arguments: dict[str, Any] | None = None,
    headers: dict[str, str] | None = None,
) -> Call:
    spec = ToolDescriptorSpec(
        tool_id="api",
        version="1.0.0",
        kind=ToolKind.HTTP,
        side_effect_class=SideEffectClass.READ,
        http=HttpSpec(method=method, url=url, allowed_hosts=allowed, headers=headers or {}),
    )
    return Call(
        namespace=NAMESPACE,
        name="call-1",
        uid="uid-1",
        caller="agent",
        descriptor=spec,
        arguments=arguments or {},
        effective_class=SideEffectClass.READ,
        limits=CallLimits(timeout_seconds=5, max_result_bytes=4096),
        credentials=tuple(creds),
    )


async def execute(call: Call, **executor: Any) -> Outcome:
    http = HttpExecutor(**{"hosts": MAPPED, **executor})
    try:
        return await http.execute(call)
    finally:
        await http.close()


# --------------------------------------------------------------------------- which request


async def test_the_matching_request_carries_it_and_another_host_of_the_tool_gets_nothing() -> None:
    async with server() as seen:
        port = seen.port
        allowed = [f"{API}:{port}", f"{OTHER}:{port}"]
        creds = [carried(credential([f"{API}:{port}"]))]
        url = f"http://{{host}}:{port}/v1/items"
        to_api = await execute(call_to(url, allowed, creds, arguments={"host": API}))
        to_other = await execute(call_to(url, allowed, creds, arguments={"host": OTHER}))

    assert to_api.state is InvocationState.OBSERVED, to_api
    assert to_other.state is InvocationState.OBSERVED, to_other
    assert seen.auth() == [f"Bearer {VALUE}", None]


async def test_a_different_port_of_the_same_host_gets_nothing() -> None:
    async with server() as first, server() as second:
        allowed = [f"{API}:{first.port}", f"{API}:{second.port}"]
        creds = [carried(credential([f"{API}:{first.port}"]))]
        url = f"http://{API}:{{port}}/x"
        await execute(call_to(url, allowed, creds, arguments={"port": first.port}))
        await execute(call_to(url, allowed, creds, arguments={"port": second.port}))

    assert first.auth() == [f"Bearer {VALUE}"]
    assert second.auth() == [None]


async def test_a_host_entry_without_a_port_is_the_schemes_default_port_not_any_port() -> None:
    async with server() as seen:
        creds = [carried(credential([API]))]
        await execute(call_to(f"http://{API}:{seen.port}/x", [f"{API}:{seen.port}"], creds))

    assert seen.auth() == [None]


@pytest.mark.parametrize(
    ("method", "path", "carries"),
    [
        ("GET", "/v1/items", True),
        ("POST", "/v1/items", False),  # not among `methods`
        ("GET", "/v2/items", False),  # not under a `paths` prefix
        ("GET", "/v1/%2e%2e/admin", False),  # a dot segment out of the prefix
    ],
)
async def test_methods_and_paths_decide_which_requests_of_the_host_carry_it(
    method: str, path: str, carries: bool
) -> None:
    async with server() as seen:
        hosts = [f"{API}:{seen.port}"]
        creds = [carried(credential(hosts, methods=["GET"], paths=["/v1/"]))]
        outcome = await execute(
            call_to(f"http://{API}:{seen.port}{path}", hosts, creds, method=method)
        )

    assert outcome.state is InvocationState.OBSERVED, outcome
    assert len(seen.requests) == 1
    assert seen.auth() == [f"Bearer {VALUE}" if carries else None]


@pytest.mark.parametrize(("verb", "carries"), [("DELETE", False), ("get", True)])
async def test_a_method_override_header_filled_by_the_agent_is_judged_as_a_method(
    verb: str, carries: bool
) -> None:
    # A GET-only credential: a GET asking the server to DELETE gets none.
    async with server() as seen:
        hosts = [f"{API}:{seen.port}"]
        creds = [carried(credential(hosts, methods=["GET"]))]
        headers = {"X-HTTP-Method-Override": "{verb}"}
        url = f"http://{API}:{seen.port}/x"
        outcome = await execute(
            call_to(url, hosts, creds, arguments={"verb": verb}, headers=headers)
        )

    assert outcome.state is InvocationState.OBSERVED, outcome
    assert seen.auth() == [f"Bearer {VALUE}" if carries else None]


async def test_basic_sends_base64_of_user_and_value_in_the_declared_header() -> None:
    async with server() as seen:
        hosts = [f"{API}:{seen.port}"]
        creds = [carried(credential(hosts, header="X-Api-Auth", basicUsername="robot"))]
        await execute(call_to(f"http://{API}:{seen.port}/x", hosts, creds))

    expected = "Basic " + base64.b64encode(f"robot:{VALUE}".encode()).decode()
    assert seen.requests[0][2]["x-api-auth"] == expected
    assert "authorization" not in seen.requests[0][2]


async def test_an_empty_scheme_sends_the_value_alone() -> None:
    async with server() as seen:
        hosts = [f"{API}:{seen.port}"]
        creds = [carried(credential(hosts, header="X-Api-Key", scheme=""))]
        await execute(call_to(f"http://{API}:{seen.port}/x", hosts, creds))

    assert seen.requests[0][2]["x-api-key"] == VALUE


async def test_a_template_header_of_the_same_name_never_replaces_the_credential() -> None:
    # The agent fills the descriptor's own Authorization header: on the credential's host
    # the credential wins (sent once); elsewhere the template's header goes as declared.
    async with server() as seen:
        port = seen.port
        allowed = [f"{API}:{port}", f"{OTHER}:{port}"]
        creds = [carried(credential([f"{API}:{port}"]))]
        headers = {"AUTHORIZATION": "Bearer {token}"}
        url = f"http://{{host}}:{port}/x"
        for host in (API, OTHER):
            await execute(
                call_to(
                    url,
                    allowed,
                    creds,
                    arguments={"host": host, "token": "agent-chosen"},
                    headers=headers,
                )
            )

    assert seen.auth() == [f"Bearer {VALUE}", "Bearer agent-chosen"]


async def test_a_redirect_is_not_followed_so_the_credential_goes_nowhere_else() -> None:
    async with server() as target:
        redirected: list[dict[str, str]] = []

        async def redirect(request: web.Request) -> web.Response:
            redirected.append(dict(request.headers))
            raise web.HTTPFound(f"http://{OTHER}:{target.port}/landed")

        app = web.Application()
        app.router.add_get("/x", redirect)
        runner = web.AppRunner(app)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        try:
            hosts = [f"{API}:{port}"]
            outcome = await execute(
                call_to(f"http://{API}:{port}/x", hosts, [carried(credential(hosts))])
            )
        finally:
            await runner.cleanup()

    assert outcome.http_status == 302, outcome
    assert len(redirected) == 1
    assert target.requests == []


async def test_a_cookie_the_server_sets_is_not_sent_on_a_later_call() -> None:
    # One session serves every call under one address rule, any tenant's: a server that
    # put a credential into a cookie must not get it back on someone else's call.
    cookies: list[str | None] = []

    async def answer(request: web.Request) -> web.Response:
        cookies.append(request.headers.get("Cookie"))
        response = web.Response(text="ok")
        response.set_cookie("session", VALUE)
        return response

    app = web.Application()
    app.router.add_get("/x", answer)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    http = HttpExecutor(hosts=MAPPED)
    try:
        call = call_to(f"http://{API}:{port}/x", [f"{API}:{port}"], [])
        await http.execute(call)
        await http.execute(call)
    finally:
        await http.close()
        await runner.cleanup()

    assert cookies == [None, None]


# --------------------------------------------------------------------------- TLS


@pytest.fixture
def certificates(tmp_path: Path) -> Any:
    return make_certificates(tmp_path, [API])


def serving_context(certs: Any) -> ssl.SSLContext:
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(certs.cert, certs.key)
    return context


async def test_https_is_verified_against_the_configured_ca_and_carries_the_credential(
    certificates: Any,
) -> None:
    async with server(serving_context(certificates)) as seen:
        hosts = [f"{API}:{seen.port}"]
        outcome = await execute(
            call_to(f"https://{API}:{seen.port}/x", hosts, [carried(credential(hosts))]),
            tls=verified_context(str(certificates.ca)),
        )

    assert outcome.state is InvocationState.OBSERVED, outcome
    assert seen.auth() == [f"Bearer {VALUE}"]


async def test_https_to_a_server_no_trusted_ca_signed_sends_nothing(certificates: Any) -> None:
    async with server(serving_context(certificates)) as seen:
        hosts = [f"{API}:{seen.port}"]
        outcome = await execute(
            call_to(f"https://{API}:{seen.port}/x", hosts, [carried(credential(hosts))]),
            tls=verified_context(None),
        )

    assert outcome.state is InvocationState.FAILED, outcome
    assert seen.requests == []


# --------------------------------------------------------------------------- mapped names


async def test_a_mapped_name_connects_to_its_address_without_an_explicit_allowance() -> None:
    # As at the egress proxy: the operator's own mapping is the allowance of a non-public
    # address (127.0.0.1 here), for tests.
    async with server() as seen:
        outcome = await execute(call_to(f"http://{API}:{seen.port}/x", [f"{API}:{seen.port}"], []))

    assert outcome.state is InvocationState.OBSERVED, outcome
    assert len(seen.requests) == 1


@pytest.mark.parametrize("address", ["169.254.169.254", "::ffff:169.254.169.254"])
async def test_a_name_mapped_to_a_metadata_service_is_still_refused(address: str) -> None:
    outcome = await execute(
        call_to("http://meta.test/latest", ["meta.test"], []), hosts={"meta.test": address}
    )

    assert outcome.failure_class is FailureClass.POLICY_DENIED, outcome
    assert "not sent" in outcome.message


async def test_a_name_mapped_to_a_blocked_address_is_still_refused() -> None:
    outcome = await execute(
        call_to("http://api.test:1/x", ["api.test:1"], []),
        hosts={API: "127.0.0.1"},
        blocked_hosts=("127.0.0.0/8",),
    )

    assert outcome.failure_class is FailureClass.POLICY_DENIED, outcome
    assert "blocked" in outcome.message


async def test_a_name_not_mapped_is_judged_as_before() -> None:
    outcome = await execute(
        call_to("http://localhost:1/x", ["localhost:1"], []),
        blocked_hosts=Settings().blocked_http_hosts,
    )

    assert outcome.failure_class is FailureClass.POLICY_DENIED, outcome


# --------------------------------------------------------------------------- redaction


def reflected_tool(port: int, **inject: Any) -> dict[str, Any]:
    hosts = [f"{API}:{port}"]
    return descriptor(
        "api",
        kind="http",
        http={"method": "GET", "url": f"http://{API}:{port}/echo", "allowedHosts": hosts},
        credentials=[
            {
                "name": "api",
                "source": {"secretKeyRef": {"name": "api-token", "key": "token"}},
                "inject": {"hosts": hosts, **inject},
            }
        ],
    )


def every_form(value: str, header: str) -> list[str]:
    return [
        value,
        header,
        base64.b64encode(value.encode()).decode(),
        base64.b64encode(header.encode()).decode(),
    ]


@pytest.mark.parametrize(
    ("inject", "header"),
    [
        ({}, f"Bearer {VALUE}"),
        (
            {"basicUsername": "robot"},
            "Basic " + base64.b64encode(f"robot:{VALUE}".encode()).decode(),
        ),
    ],
)
async def test_a_value_the_server_reflects_is_in_no_result_status_event_or_receipt(
    inject: dict[str, Any], header: str
) -> None:
    http = HttpExecutor(hosts=MAPPED)
    cluster = FakeCluster()
    cluster.secrets[(NAMESPACE, "api-token")] = {"token": base64.b64encode(VALUE.encode()).decode()}
    h: Harness = make_runtime(cluster, executors={ToolKind.HTTP: http})
    try:
        async with server() as seen:
            h.publish(reflected_tool(seen.port, **inject))
            h.cluster.grant(tools=["api"], classes=["read"])
            stored = await h.run(h.submit(invocation("call-1", tool="api")))
    finally:
        await http.close()

    status = stored["status"]
    # It was sent, and reflected: the redaction had something to do.
    assert seen.auth() == [header]
    assert status["state"] == "Observed", status
    assert status["result"]["redactions"], status["result"]
    assert status["credentials"] == [
        {"name": "api", "source": "secretKeyRef", "hosts": [f"{API}:{seen.port}"]}
    ]
    said = json.dumps(stored) + json.dumps([e.message for e in h.events.posted])
    said += "".join(blob.decode(errors="replace") for blob in h.store.blobs.values())
    for form in every_form(VALUE, header):
        assert form not in said, form
