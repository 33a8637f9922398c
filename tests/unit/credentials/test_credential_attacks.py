"""Issue 38, attack pass (pure logic): what an agent chooses (arguments, a sandbox's request
line and headers) never sends a credential to another host, port or path, never lets it
choose or read the credential's header, and a reflected value is masked in every form.

The agent's levers: an http tool's arguments fill URL and header placeholders
(`render_http_request`, then `with_credentials` on the URL as sent); a shell tool's command
writes the proxy's request (`forward_target`, `Lease.credential_for`, `upstream_head`).
"""

from __future__ import annotations

import asyncio
import base64
import json
from typing import Any
from urllib.parse import quote, quote_plus

import pytest
from yarl import URL

from tests.unit.executors.test_http_credentials import API as UNIT_API
from tests.unit.executors.test_http_credentials import VALUE as UNIT_VALUE
from tests.unit.executors.test_http_credentials import call_to, execute
from tests.unit.executors.test_http_credentials import carried as unit_carried
from tests.unit.executors.test_http_credentials import credential as unit_credential
from tooladapter.credentials.carried import Carried, header_problem, secret_forms
from tooladapter.credentials.requests import carries, lenient_path
from tooladapter.egress.core.response import ResponseFilter
from tooladapter.egress.core.rules import (
    BadRequest,
    RequestHead,
    forward_target,
    upstream_head,
)
from tooladapter.enums import FailureClass, InvocationState
from tooladapter.executors.http import with_credentials
from tooladapter.model import Credential, CredentialInjection, HttpSpec
from tooladapter.pipeline.sanitize.results import sanitize
from tooladapter.pipeline.validation.http_templates import render_http_request

VALUE = 'tok/en+1=Zq7"w\\x'
API = "api.example.com"
OTHER = "other.example.com"


def credential(**inject: Any) -> Credential:
    inject.setdefault("hosts", [f"{API}:8443"])
    return Credential.model_validate(
        {"name": "api", "source": {"secretKeyRef": {"name": "s", "key": "k"}}, "inject": inject}
    )


def carried(**inject: Any) -> Carried:
    return Carried(credential(**inject), VALUE, base64.b64encode(VALUE.encode()).decode())


#: An http tool whose host, port and last path segment come from arguments; a header too.
SPEC = HttpSpec.model_validate(
    {
        "method": "GET",
        "url": "https://{host}:{port}/v1/{item}",
        "allowedHosts": [f"{API}:8443", f"{OTHER}:8443", f"{API}:9443", "127.0.0.1:8443"],
        "headers": {"X-Trace": "{trace}", "authorization": "Token {trace}"},
    }
)
ARGS = {"host": API, "port": 8443, "item": "x", "trace": "t"}


def sent(arguments: dict[str, Any], item: Carried) -> tuple[str, dict[str, str]] | None:
    """(URL as sent, headers) of the rendered request, or None when it is refused."""
    try:
        method, url, headers, _ = render_http_request(SPEC, arguments)
    except ValueError:
        return None
    target = str(URL(url))
    return target, with_credentials(headers, [item], method, target)


def authorization(headers: dict[str, str]) -> list[str]:
    return [v for k, v in headers.items() if k.lower() == "authorization"]


def test_the_declared_request_carries_it_once_replacing_the_agents_authorization() -> None:
    out = sent(ARGS, carried(paths=["/v1/"]))
    assert out is not None
    assert authorization(out[1]) == [f"Bearer {VALUE}"]


@pytest.mark.parametrize(
    "override",
    [
        {"host": OTHER},  # allowed, not in inject.hosts
        {"port": 9443},  # same host, another allowed port
        {"host": "127.0.0.1"},  # an IP literal of the same server
        {"host": f"{API}@{OTHER}"},  # userinfo trick
        {"host": f"{OTHER}#@{API}"},
        {"host": f"{API}."},  # trailing dot
        {"host": "api%2eexample.com"},  # percent-encoded host
        {"host": f"{API}:8443"},  # a port inside the host argument
        {"port": "8443@other.example.com"},
        {"port": "8443/.."},
        {"item": "../admin"},  # normalises outside inject.paths for a lenient server
        {"item": "..\\admin"},
        {"item": "..;"},
        {"item": ".."},
        {"item": "%2e%2e"},
    ],
)
def test_arguments_never_send_the_credential_elsewhere(override: dict[str, Any]) -> None:
    """Each rendered request is refused, or goes out without the credential."""
    item = carried(paths=["/v1/x"])
    out = sent({**ARGS, **override}, item)
    if out is not None:
        url, headers = out
        assert f"Bearer {VALUE}" not in authorization(headers), url
        assert VALUE not in json.dumps(headers)


def test_an_upper_case_host_is_the_same_host_and_carries_it_there_only() -> None:
    out = sent({**ARGS, "host": API.upper()}, carried())
    assert out is not None
    assert URL(out[0]).host == API and authorization(out[1]) == [f"Bearer {VALUE}"]


@pytest.mark.parametrize(
    "path",
    [
        "/v1/..%2Fadmin",
        "/v1/..%2fadmin",
        "/v1/%2e%2e%2Fadmin",
        "/v1/..\\admin",
        "/v1/..%5Cadmin",
        "/v1/..;/admin",
        "/v1/%252e%252e/admin",
        "/v1/x/../../admin",
        "/v1/%2e%2e/admin",
        "//v1/x",
    ],
)
def test_a_path_a_lenient_server_reads_outside_the_prefix_does_not_carry_it(path: str) -> None:
    """Regression (hit): `/v1/..%2Fadmin` matched a `/v1/` prefix (`%2F` is not decoded by
    the RFC's normalisation), and a server that decodes it serves `/admin`; an http tool's
    argument `../admin` renders as exactly that path."""
    inject = credential(paths=["/v1/"]).inject
    assert not carries(inject, host=API, port=8443, default_port=443, method="GET", path=path)


@pytest.mark.parametrize("path", ["/v1/items", "/v1/a%2Fb", "/v1/a%20b?x=../..", "/v1/a;v=1"])
def test_paths_below_the_prefix_in_every_reading_still_carry_it(path: str) -> None:
    inject = credential(paths=["/v1/"]).inject
    assert carries(inject, host=API, port=8443, default_port=443, method="GET", path=path)
    assert lenient_path(path).startswith("/v1/")


# ---------------------------------------------------------------- the proxy (shell tools)


def head(target: str, *headers: tuple[str, str], method: str = "GET") -> RequestHead:
    return RequestHead(method, target, "HTTP/1.1", headers)


@pytest.mark.parametrize(
    ("target", "host"),
    [
        (f"http://{OTHER}/", API),  # an allowed host, named the credentialed one
        (f"http://{API}/", OTHER),
        (f"http://{API}:8443/", API),  # port differs from the Host header's
        (f"http://{API}/", f"{API}:8443"),
        (f"http://{API}@{OTHER}/", API),  # userinfo in the absolute-form target
    ],
)
def test_a_host_header_that_differs_from_the_target_is_refused(target: str, host: str) -> None:
    with pytest.raises(BadRequest):
        forward_target(head(target, ("Host", host)))


def test_only_the_entrys_port_carries_it_through_the_proxy() -> None:
    """An entry naming 8443: a request without a port (443) or on 80 carries nothing; an
    entry without a port: only 443 (a request naming none), never 80."""
    from tooladapter.egress.core.rules import HTTPS_PORT

    named = credential().inject
    bare = credential(hosts=[API]).inject

    def via_proxy(inject: CredentialInjection, port: int | None) -> bool:
        return carries(
            inject,
            host=API,
            port=port if port is not None else HTTPS_PORT,
            default_port=HTTPS_PORT,
            method="GET",
            path="/",
        )

    assert via_proxy(named, 8443)
    assert not via_proxy(named, None) and not via_proxy(named, 80) and not via_proxy(named, 443)
    assert via_proxy(bare, None) and via_proxy(bare, 443)
    assert not via_proxy(bare, 80) and not via_proxy(bare, 8443)


@pytest.mark.parametrize("host", [API.upper(), f"{API}."])
def test_spellings_of_the_host_carry_it_only_to_that_host(host: str) -> None:
    """Upper case and a trailing dot name the same host: the credential goes there, and the
    upstream head names the host in its normal form."""
    target = forward_target(head(f"http://{host}:8443/v1", ("Host", f"{host}:8443")))
    assert target.host == API
    sent_head = upstream_head(
        head(f"http://{host}:8443/v1", ("Host", f"{host}:8443"), ("Authorization", "mine")),
        target,
        inject=("Authorization", f"Bearer {VALUE}"),
    ).decode()
    assert sent_head.count("Authorization:") == 1 and "mine" not in sent_head
    assert sent_head.count("Host:") == 1 and f"Host: {API}:8443\r\n" in sent_head


def test_a_second_host_header_never_reaches_the_upstream() -> None:
    request = head(f"http://{API}:8443/", ("Host", f"{API}:8443"), ("Host", OTHER))
    target = forward_target(request)
    sent_head = upstream_head(request, target, inject=("Authorization", f"Bearer {VALUE}"))
    assert sent_head.count(b"Host:") == 1 and OTHER.encode() not in sent_head


# ---------------------------------------------------------------- values and reflections


@pytest.mark.parametrize(
    "value",
    ["a\r\nX-Evil: 1", "a\nb", "a\rb", "a\0b", "", "a\x0bb", "a\x7fb", "a\x1bb", "a\u0142b"],
)
def test_a_value_that_is_not_one_header_line_is_refused(value: str) -> None:
    """Regression (hit): a control character other than CR, LF and NUL (or one outside
    latin-1) passed; aiohttp then refused the header while sending, an unexpected error
    the flow settles Uncertain, and the proxy would have passed it on."""
    assert header_problem(value) is not None


@pytest.mark.parametrize("value", ["plain-token", "with space", "tab\there", "caf\u00e9"])
def test_a_value_a_header_can_carry_is_accepted(value: str) -> None:
    assert header_problem(value) is None


def reflections(text: str) -> list[str]:
    raw = text.encode()
    return [
        text,
        json.dumps(text),
        json.dumps(text).replace("/", "\\/"),
        json.dumps(text, ensure_ascii=True).replace("t", "\\u0074"),
        base64.b64encode(raw).decode(),
        base64.urlsafe_b64encode(raw).decode(),
        base64.b64encode(b"x" + raw).decode(),
        base64.b64encode(b"xy" + raw).decode(),
        quote(text, safe=""),
        quote_plus(text),
        raw.hex(),
        raw.hex().upper(),
    ]


@pytest.mark.parametrize("basic", [None, "svc-user"])
def test_a_reflected_header_is_redacted_from_an_http_tools_result_in_every_form(
    basic: str | None,
) -> None:
    item = carried() if basic is None else carried(basicUsername=basic)
    forms = secret_forms(item)
    header = forms[-1]
    for shown in reflections(VALUE) + reflections(header):
        out = sanitize(f"echo: {shown} .".encode(), secrets=forms).content
        assert shown not in out and VALUE not in out, shown


@pytest.mark.parametrize("basic", [None, "svc-user"])
def test_a_reflected_header_is_masked_by_the_proxy_in_every_form(basic: str | None) -> None:
    """Regression (hits): the proxy masked forms of the value only; a `Basic` header
    base64-encoded again by the server holds none, and reached the sandbox; and hex, which
    the result's sanitizer hides, reached it as is. The filter is
    built as the proxy builds it (`EgressProxy._forward`): the value, and the header."""
    item = carried() if basic is None else carried(basicUsername=basic)
    header = secret_forms(item)[-1]
    for shown in reflections(VALUE) + reflections(header):
        filt = ResponseFilter(VALUE.encode(), method="GET", also=(header.encode(),))
        body = f"echo: {shown} .".encode()
        answer = f"HTTP/1.1 200 OK\r\nContent-Length: {len(body)}\r\n\r\n".encode() + body
        out = filt.feed(answer) + filt.flush()
        assert shown.encode() not in out and VALUE.encode() not in out, shown


@pytest.mark.parametrize(
    "override",
    [
        {"trace": "a\r\nAuthorization: Bearer mine"},
        {"trace": "a\nX-Other: 1"},
        {"trace": "a\rb"},
        {"trace": "a\0b"},
        {"trace": "a\x0bb"},  # regression (hit): refused only by aiohttp, while sending
        {"trace": "a\x7fb"},
    ],
)
def test_a_header_argument_that_would_split_the_header_is_refused(
    override: dict[str, Any],
) -> None:
    assert sent({**ARGS, **override}, carried()) is None


@pytest.mark.parametrize("host", ["[::1]", "::1", "0x7f.0.0.1", "2130706433", "127.1"])
def test_other_spellings_of_the_servers_address_are_refused(host: str) -> None:
    assert sent({**ARGS, "host": host}, carried()) is None


# ---------------------------------------------------------------- error texts


async def _serve(handle: Any) -> tuple[asyncio.Server, int]:
    srv = await asyncio.start_server(handle, "127.0.0.1", 0)
    return srv, srv.sockets[0].getsockname()[1]


@pytest.mark.parametrize("when", ["after-the-request", "mid-answer", "refused"])
async def test_an_error_after_sending_the_credential_never_names_it(when: str) -> None:
    """The connection breaks after the header went out (or never opens): the message and
    the output say what broke, never the header."""
    heads: list[bytes] = []

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        heads.append(await reader.readuntil(b"\r\n\r\n"))
        if when == "mid-answer":
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\npartial")
            await writer.drain()
        writer.transport.abort()

    srv, port = await _serve(handle)
    if when == "refused":
        srv.close()
        await srv.wait_closed()
    try:
        creds = [unit_carried(unit_credential([f"{UNIT_API}:{port}"]))]
        outcome = await execute(
            call_to(f"http://{UNIT_API}:{port}/v1", [f"{UNIT_API}:{port}"], creds)
        )
    finally:
        srv.close()
    if when != "refused":
        assert heads and f"Bearer {UNIT_VALUE}".encode() in heads[0]
    text = f"{outcome.message} {outcome.output!r} {outcome!r}"
    assert UNIT_VALUE not in text and base64.b64encode(UNIT_VALUE.encode()).decode() not in text


@pytest.mark.parametrize("mine", ["a\x0bb", "a\x7fb", "a\x1fb"])
async def test_a_control_character_in_a_header_argument_fails_the_call_sending_nothing(
    mine: str,
) -> None:
    """Regression (hit): aiohttp raised ValueError from inside the send, which reached the
    flow as an unexpected error (settled Uncertain); now Failed (validation), not sent."""
    heads: list[bytes] = []

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        heads.append(await reader.readuntil(b"\r\n\r\n"))
        writer.transport.abort()

    srv, port = await _serve(handle)
    try:
        creds = [unit_carried(unit_credential([f"{UNIT_API}:{port}"]))]
        call = call_to(
            f"http://{UNIT_API}:{port}/v1",
            [f"{UNIT_API}:{port}"],
            creds,
            arguments={"mine": mine},
            headers={"X-Mine": "{mine}"},
        )
        outcome = await execute(call)
    finally:
        srv.close()
    assert outcome.state is InvocationState.FAILED, outcome
    assert outcome.failure_class is FailureClass.VALIDATION, outcome
    assert heads == []
