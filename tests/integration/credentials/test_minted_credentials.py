"""Issue 40: credentials minted per call by a real OAuth 2.0 issuer (`hack/oauth`, on
zitadel/oidc's op package), carried by an http tool to its API, revoked at the call's end.

Its own operator (`configured`): the issuer and the API are TLS servers on loopback under
test names (`TOOLADAPTER_EGRESS_HOSTS`), with certificates of a test CA. The issuer accepts
the cluster's ServiceAccount tokens as subject tokens of an exchange (checked against the
API server's keys), so the API sees on whose behalf a token acts.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any, cast

import pytest
from kubernetes import client

from tests.integration.conftest import Configured
from tests.integration.credentials.conftest import (
    EgressOperator,
    deleted_after,
    loopback_settings,
)
from tests.integration.credentials.test_http_credentials import echo_authorization, shown
from tests.integration.objects import (
    Agent,
    custom,
    descriptor,
    pretty,
    shell_tool,
    status_of,
)
from tests.integration.servers import tls_server
from tests.token_urls import ACCEPTED, REFUSED
from tooladapter import GROUP, VERSION
from tooladapter.devtools import (
    SESSION,
    EgressProxyProcess,
    Namespace,
    OperatorProcess,
    node_ip,
)
from tooladapter.devtools.oauth import OAuthServer
from tooladapter.devtools.tls import make_certificates
from tooladapter.pipeline.validation.credentials import internal_literal

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(300)]

ISSUER = "issuer.minted.test"
API = "api.minted.test"
CLIENT = "tooladapter-tools"
SECRET = "client-secret-" + "Zr8" * 8
SCOPE = "items.read"
AUDIENCE = "items-api"
SUBJECT_AUDIENCE = "issuer.minted.test"


class Servers:
    def __init__(self, issuer: OAuthServer, api: tuple[int, list[bytes]]) -> None:
        self.issuer = issuer
        self.api_port, self.api_heads = api


def raw_get(api: client.ApiClient, path: str) -> str:
    """A document of the API server as it sends it (the typed client turns JSON into a
    Python repr)."""
    method, url, headers, body, _ = api.param_serialize(
        "GET",
        path,
        auth_settings=["BearerToken"],
        header_params={"Accept": "application/jwk-set+json, application/json"},
    )
    response = api.call_api(method, url, header_params=headers, body=body)
    response.read()
    data = response.data or b""
    assert response.status == 200, data
    return data.decode()


@pytest.fixture(scope="module")
def servers(
    api: client.ApiClient, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[Servers, Path]]:
    certs = make_certificates(tmp_path_factory.mktemp("tls"), [ISSUER, API])
    jwks = raw_get(api, "/openid/v1/jwks")
    issuer = raw_get(api, "/.well-known/openid-configuration")
    oauth = OAuthServer(
        tmp_path_factory.mktemp("oauth"),
        ISSUER,
        certs,
        [{"id": CLIENT, "secret": SECRET, "scopes": [SCOPE], "audiences": [AUDIENCE]}],
        subject=(jwks, json.loads(issuer)["issuer"], SUBJECT_AUDIENCE),
    )
    oauth.start()
    try:
        with tls_server("127.0.0.1", certs, echo_authorization) as api_server:
            yield Servers(oauth, api_server), certs.ca
    finally:
        oauth.stop()


@pytest.fixture(scope="module")
def minting(
    configured: Callable[[Mapping[str, str]], Configured], servers: tuple[Servers, Path]
) -> Configured:
    # On loopback: mapped, and trusted by the platform (a mapping alone is not).
    return configured(
        loopback_settings([ISSUER, API], servers[1], TOOLADAPTER_TRUSTED_ISSUERS=ISSUER)
    )


@pytest.fixture
def mns(api: client.ApiClient, minting: Configured) -> Iterator[Namespace]:
    yield from deleted_after(minting.namespace(api))


@pytest.fixture
def magent(api: client.ApiClient, mns: Namespace) -> Agent:
    return Agent.create(api, mns.name, "agent-1")


def client_secret(api: client.ApiClient, namespace: str, value: str = SECRET) -> None:
    client.CoreV1Api(api).create_namespaced_secret(
        namespace,
        {"metadata": {"name": "oauth-client"}, "stringData": {"secret": value}},  # type: ignore[arg-type]  # the client sends a dict body as is
    )


def source_of(kind: str, s: Servers, token_url: str | None = None) -> dict[str, Any]:
    common: dict[str, Any] = {
        "tokenUrl": token_url or s.issuer.token_url,
        "clientId": CLIENT,
        "clientSecretRef": {"name": "oauth-client", "key": "secret"},
        "scopes": [SCOPE],
        "audience": AUDIENCE,
        "revocationUrl": s.issuer.revocation_url,
    }
    if kind == "tokenExchange":
        common["subjectAudience"] = SUBJECT_AUDIENCE
    return {kind: common}


def tool_spec(s: Servers, source: dict[str, Any]) -> dict[str, Any]:
    return {
        "toolId": "items",
        "version": "1.0.0",
        "description": "items",
        "sideEffectClass": "read",
        "kind": "http",
        "inputSchema": {"type": "object", "additionalProperties": False},
        "http": {
            "method": "GET",
            "url": f"https://{API}:{s.api_port}/v1/items",
            "allowedHosts": [f"{API}:{s.api_port}"],
        },
        "credentials": [
            {"name": "minted", "source": source, "inject": {"hosts": [f"{API}:{s.api_port}"]}}
        ],
    }


def api_tool(
    api: client.ApiClient, namespace: str, s: Servers, source: dict[str, Any], **kw: Any
) -> dict[str, Any]:
    spec = tool_spec(s, source)
    return descriptor(
        api,
        namespace,
        "items",
        kind="http",
        inputSchema=spec["inputSchema"],
        http=spec["http"],
        credentials=spec["credentials"],
        **kw,
    )


def forms(*values: str) -> list[str]:
    """Each value as a tool or an encoder may show it: itself, as a Bearer header, and both
    base64-encoded."""
    out = []
    for value in values:
        for text in (value, f"Bearer {value}"):
            out += [text, base64.b64encode(text.encode()).decode()]
    return out


def bearer_of(head: bytes) -> str:
    line = next(line for line in head.split(b"\r\n") if line.lower().startswith(b"authorization:"))
    scheme, token = line.split(b":", 1)[1].strip().decode().split(" ", 1)
    assert scheme == "Bearer"
    return token


def claims_of(token: str) -> dict[str, Any]:
    payload = token.split(".")[1]
    data: dict[str, Any] = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
    return data


def test_two_calls_get_two_tokens_of_the_declared_scope_and_audience_both_revoked(
    api: client.ApiClient,
    mns: Namespace,
    magent: Agent,
    servers: tuple[Servers, Path],
    minting: Configured,
) -> None:
    s = servers[0]
    client_secret(api, mns.name)
    api_tool(api, mns.name, s, source_of("oauth2ClientCredentials", s))
    magent.grant(["items"], ["read"])
    before = len(s.api_heads)

    first = status_of(magent.wait(magent.invoke("items", {}), timeout=120))
    second = status_of(magent.wait(magent.invoke("items", {}), timeout=120))

    assert first["state"] == "Observed", pretty(first)
    assert second["state"] == "Observed", pretty(second)
    heads = s.api_heads[before:]
    assert len(heads) == 2
    tokens = [bearer_of(head) for head in heads]
    assert tokens[0] != tokens[1]
    claims = [claims_of(token) for token in tokens]
    for each in claims:
        assert each["scope"] == SCOPE
        assert each["aud"] == [AUDIENCE]
        assert each["sub"] == CLIENT
    issued = {t["id"]: t for t in s.issuer.tokens()}
    for each in claims:
        assert issued[each["jti"]]["revoked"] is True, issued[each["jti"]]
    for status in (first, second):
        (use,) = status["credentials"]
        assert use["source"] == "oauth2ClientCredentials", pretty(status)
        assert use["tokenUrl"] == s.issuer.token_url
        assert use["scopes"] == [SCOPE]
        assert use["audience"] == AUDIENCE
        assert use["revoked"] is True, pretty(status)
        assert use["expiresAt"], pretty(status)
    said = shown(api, mns.name, [first, second], minting)
    for value in [*forms(*tokens), *forms(SECRET)]:
        assert value not in said


def test_a_wrong_client_secret_denies_with_the_issuers_error_and_sends_nothing(
    api: client.ApiClient,
    mns: Namespace,
    magent: Agent,
    servers: tuple[Servers, Path],
) -> None:
    s = servers[0]
    client_secret(api, mns.name, "not-the-secret")
    api_tool(api, mns.name, s, source_of("oauth2ClientCredentials", s))
    magent.grant(["items"], ["read"])
    before = len(s.api_heads)

    status = status_of(magent.wait(magent.invoke("items", {}), timeout=120))

    assert status["state"] == "Denied", pretty(status)
    assert status["failureClass"] == "credentials", pretty(status)
    denied = [e for e in status["stages"] if e["outcome"] == "denied"]
    assert [e["stage"] for e in denied] == ["credentials"], pretty(status)
    assert "invalid_client" in denied[0].get("detail", ""), pretty(status)
    assert not [e for e in status["stages"] if e["stage"] == "execute"], pretty(status)
    assert len(s.api_heads) == before


def test_an_exchanged_token_reaches_the_api_on_behalf_of_the_calling_agent(
    api: client.ApiClient,
    mns: Namespace,
    magent: Agent,
    servers: tuple[Servers, Path],
) -> None:
    s = servers[0]
    client_secret(api, mns.name)
    api_tool(api, mns.name, s, source_of("tokenExchange", s))
    magent.grant(["items"], ["read"])
    before = len(s.api_heads)

    status = status_of(magent.wait(magent.invoke("items", {}), timeout=120))

    assert status["state"] == "Observed", pretty(status)
    (head,) = s.api_heads[before:]
    claims = claims_of(bearer_of(head))
    caller = f"system:serviceaccount:{mns.name}:{magent.name}"
    assert claims["sub"] == caller
    assert claims["act"] == {"sub": CLIENT}
    assert claims["aud"] == [AUDIENCE]
    assert claims["scope"] == SCOPE
    (use,) = status["credentials"]
    assert use["source"] == "tokenExchange", pretty(status)
    assert use["subject"] == caller
    assert use["revoked"] is True, pretty(status)
    issued = {t["id"]: t for t in s.issuer.tokens()}
    assert issued[claims["jti"]]["revoked"] is True


def test_a_token_url_that_is_not_https_is_refused_at_apply(
    api: client.ApiClient, mns: Namespace, servers: tuple[Servers, Path]
) -> None:
    s = servers[0]
    plain = f"http://{ISSUER}:{s.issuer.port}/oauth/token"
    with pytest.raises(client.ApiException) as refused:
        api_tool(
            api, mns.name, s, source_of("oauth2ClientCredentials", s, plain), wait_active=False
        )
    assert refused.value.status == 422
    assert "https" in (refused.value.body or ""), refused.value.body


def test_a_token_url_on_a_private_address_is_refused_at_apply(
    api: client.ApiClient, mns: Namespace, servers: tuple[Servers, Path]
) -> None:
    """The operator posts client secrets to the token URL: a tenant naming an internal
    address literally is refused at apply with the field named (the admission policy
    tooladapter-issuer-addresses; an internal issuer is named by a host name the platform
    trusts), and nothing is stored."""
    s = servers[0]
    client_secret(api, mns.name)
    private = "https://10.1.2.3/oauth/token"
    with pytest.raises(client.ApiException) as refused:
        api_tool(
            api, mns.name, s, source_of("oauth2ClientCredentials", s, private), wait_active=False
        )
    body = refused.value.body or ""
    assert refused.value.status == 422, body
    assert "spec.credentials[minted].source.oauth2ClientCredentials.tokenUrl: 10.1.2.3" in body
    assert "TOOLADAPTER_TRUSTED_ISSUERS" in body
    stored = cast(
        dict[str, Any],
        custom(api).list_namespaced_custom_object(GROUP, VERSION, mns.name, "tooldescriptors"),
    )
    assert [o["metadata"]["name"] for o in stored["items"]] == []


def test_the_admission_policy_and_the_operator_judge_every_token_url_alike(
    api: client.ApiClient, mns: Namespace, servers: tuple[Servers, Path]
) -> None:
    """Each URL the operator's own check refuses (loopback, private, reserved, spelt
    loosely, a user in it) is refused at apply too, in either URL field of either minted
    source, and each it accepts is accepted (server-side dry runs)."""
    s = servers[0]
    objects = custom(api)
    verdicts: dict[tuple[str, str, str], bool] = {}
    cases = [(url, True) for url, _ in REFUSED] + [(url, False) for url in ACCEPTED]
    for url, internal in cases:
        assert (internal_literal(url) is not None) == internal, url
        for kind, field in (
            ("oauth2ClientCredentials", "tokenUrl"),
            ("tokenExchange", "revocationUrl"),
        ):
            source = source_of(kind, s)
            source[kind][field] = url
            body = {
                "apiVersion": "tooladapter.dev/v1alpha1",
                "kind": "ToolDescriptor",
                "metadata": {"name": "judged", "namespace": mns.name},
                "spec": tool_spec(s, source),
            }
            try:
                objects.create_namespaced_custom_object(
                    GROUP,
                    VERSION,
                    mns.name,
                    "tooldescriptors",
                    body,
                    dry_run="All",
                )
                verdicts[(url, kind, field)] = False
            except client.ApiException as e:
                assert e.status == 422, e.body
                # The policy names the credential; the CRD's https rule (a URL it cannot
                # parse) names its index.
                assert f".source.{kind}.{field}" in (e.body or ""), e.body
                verdicts[(url, kind, field)] = True
    wrong = {k: v for k, v in verdicts.items() if v != (internal_literal(k[0]) is not None)}
    assert wrong == {}, wrong


# --------------------------------------------------------------------------- sandboxes
# A shell tool's `curl` over https (the proxy ends TLS under the lease's CA) and `wget` over
# plain http go through the egress proxy, which adds the minted token to the requests to the
# API (TLS from the proxy on): the issuer, the API and the proxy's upstream all on this
# node's address.

PREFIX = f"{SESSION}mt"


class Sandboxed:
    def __init__(
        self,
        issuer: OAuthServer,
        api: tuple[int, list[bytes]],
        operator: OperatorProcess,
        proxy: EgressProxyProcess,
    ) -> None:
        self.issuer = issuer
        self.api_port, self.api_heads = api
        self.operator, self.proxy = operator, proxy


@pytest.fixture(scope="module")
def sandboxed(
    tmp_path_factory: pytest.TempPathFactory,
    egress_operator: EgressOperator,
) -> Iterator[Sandboxed]:
    node = node_ip()
    certs = make_certificates(tmp_path_factory.mktemp("tls"), [ISSUER, API])
    oauth = OAuthServer(
        tmp_path_factory.mktemp("oauth"),
        ISSUER,
        certs,
        [{"id": CLIENT, "secret": SECRET, "scopes": [SCOPE], "audiences": [AUDIENCE]}],
        address=node,
    )
    oauth.start()
    # The operator (on this host) reaches the issuer by its test name; the proxy, the API.
    operator_settings = {
        "TOOLADAPTER_EGRESS_HOSTS": f"{ISSUER}={node}",
        "TOOLADAPTER_EGRESS_CA_FILE": str(certs.ca),
        "TOOLADAPTER_TRUSTED_ISSUERS": ISSUER,
    }
    try:
        with (
            tls_server(node, certs, echo_authorization) as api_server,
            egress_operator(PREFIX, [API], certs.ca, operator_settings) as (operator, proxy),
        ):
            yield Sandboxed(oauth, api_server, operator, proxy)
    finally:
        oauth.stop()


@pytest.fixture
def sns(api: client.ApiClient, sandboxed: Sandboxed) -> Iterator[Namespace]:
    yield from deleted_after(Namespace(api, prefix=PREFIX))


@pytest.mark.parametrize(
    ("program", "command"),
    [
        ("curl", "curl -sS https://{target}/v1/items"),
        ("wget", "wget -q -O - http://{target}/v1/items"),
    ],
)
def test_a_sandboxed_curl_or_wget_gets_a_minted_token_per_call_revoked_after(
    api: client.ApiClient, sns: Namespace, sandboxed: Sandboxed, program: str, command: str
) -> None:
    s = sandboxed
    agent = Agent.create(api, sns.name, "agent-1")
    client_secret(api, sns.name)
    target = f"{API}:{s.api_port}"
    source = {
        "oauth2ClientCredentials": {
            "tokenUrl": s.issuer.token_url,
            "clientId": CLIENT,
            "clientSecretRef": {"name": "oauth-client", "key": "secret"},
            "scopes": [SCOPE],
            "audience": AUDIENCE,
            "revocationUrl": s.issuer.revocation_url,
        }
    }
    shell_tool(
        api,
        sns.name,
        "fetch",
        egress=[target],
        shell={"allow": [program]},
        credentials=[{"name": "minted", "source": source, "inject": {"hosts": [target]}}],
    )
    agent.grant(["fetch"], ["sandbox"])
    before = len(s.api_heads)
    arguments = {"command": command.format(target=target)}

    statuses = [
        status_of(agent.wait(agent.invoke("fetch", arguments), timeout=180)) for _ in range(2)
    ]

    for status in statuses:
        assert status["state"] == "Observed", (
            f"{pretty(status)}\n--- proxy ---\n{s.proxy.tail(30)}\n"
            f"--- operator ---\n{s.operator.tail(30)}"
        )
    heads = s.api_heads[before:]
    assert len(heads) == 2
    tokens = [bearer_of(head) for head in heads]
    assert tokens[0] != tokens[1]
    issued = {t["id"]: t for t in s.issuer.tokens()}
    for token in tokens:
        claims = claims_of(token)
        assert (claims["scope"], claims["aud"]) == (SCOPE, [AUDIENCE])
        assert issued[claims["jti"]]["revoked"] is True
    for status in statuses:
        (use,) = status["credentials"]
        assert (use["source"], use["revoked"]) == ("oauth2ClientCredentials", True), pretty(status)
        # The API echoed the header: the sandbox's output never shows the token.
        content = status["result"]["content"]
        # The whole header value is masked (`Bearer ` too).
        assert '"authorization": "***' in content, pretty(status)
        assert not any(form in content for form in forms(*tokens)), content
