"""The pure side of OAuth 2.0 issuers: the forms sent, the answers read (a refusal keeps
only a well-formed error code), and who may be the subject of an exchange."""

from __future__ import annotations

import json

import pytest

from tooladapter.credentials.issuers import (
    CLIENT_CREDENTIALS,
    JWT_TOKEN_TYPE,
    TOKEN_EXCHANGE,
    IssuerRefused,
    IssuerUnreachable,
    client_credentials_form,
    parse_token_response,
    service_account_of,
    token_exchange_form,
)
from tooladapter.model import (
    McpServerSpec,
    OAuth2ClientCredentialsSource,
    TokenExchangeSource,
    ToolDescriptorSpec,
)
from tooladapter.pipeline.validation.credentials import check_credentials, check_server_credentials

REF = {"name": "oauth-client", "key": "secret"}


def test_the_client_credentials_form_asks_for_the_declared_scopes_and_audience() -> None:
    source = OAuth2ClientCredentialsSource.model_validate(
        {
            "tokenUrl": "https://issuer.example.com/token",
            "clientId": "c",
            "clientSecretRef": REF,
            "scopes": ["a.read", "b.write"],
            "audience": "api",
        }
    )
    assert client_credentials_form(source) == {
        "grant_type": CLIENT_CREDENTIALS,
        "scope": "a.read b.write",
        "audience": "api",
    }
    bare = source.model_copy(update={"scopes": [], "audience": None})
    assert client_credentials_form(bare) == {"grant_type": CLIENT_CREDENTIALS}


def test_the_exchange_form_sends_the_subject_token_as_a_jwt() -> None:
    source = TokenExchangeSource.model_validate(
        {
            "tokenUrl": "https://issuer.example.com/token",
            "clientId": "c",
            "clientSecretRef": REF,
            "scopes": ["a.read"],
            "audience": "api",
            "subjectAudience": "issuer",
        }
    )
    form = token_exchange_form(source, "subject.jwt.here")
    assert form["grant_type"] == TOKEN_EXCHANGE
    assert form["subject_token"] == "subject.jwt.here"
    assert form["subject_token_type"] == JWT_TOKEN_TYPE
    assert form["scope"] == "a.read"
    assert form["audience"] == "api"


def test_a_token_answer_gives_the_token_its_expiry_and_the_granted_scopes() -> None:
    body = json.dumps({"access_token": "t0k", "expires_in": 300, "scope": "a b"}).encode()
    minted = parse_token_response(200, body)
    assert (minted.access_token, minted.expires_in, minted.scopes) == ("t0k", 300, ("a", "b"))
    quiet = parse_token_response(200, b'{"access_token": "t0k"}')
    assert (quiet.expires_in, quiet.scopes) == (None, None)


@pytest.mark.parametrize(
    ("status", "body", "error"),
    [
        (401, b'{"error": "invalid_client"}', "invalid_client"),
        (400, b'{"error": "invalid_scope", "error_description": "no"}', "invalid_scope"),
    ],
)
def test_an_oauth_error_is_a_refusal_with_the_issuers_code(
    status: int, body: bytes, error: str
) -> None:
    with pytest.raises(IssuerRefused) as refused:
        parse_token_response(status, body)
    assert refused.value.error == error


@pytest.mark.parametrize(
    ("status", "body"),
    [
        (500, b'{"error": "server_error"}'),  # not a refusal of this client: try again
        (400, b"<html>bad gateway</html>"),
        (400, b'{"error": "bad\\"code"}'),  # not an RFC 6749 code: never echoed
        (400, json.dumps({"error": "x" * 65}).encode()),
        (200, b"not json"),
        (200, b'{"token_type": "Bearer"}'),
        (200, b'{"access_token": "two\\r\\nlines"}'),
    ],
)
def test_anything_else_is_no_answer(status: int, body: bytes) -> None:
    with pytest.raises(IssuerUnreachable):
        parse_token_response(status, body)


@pytest.mark.parametrize(
    ("username", "account"),
    [
        ("system:serviceaccount:team:agent", ("team", "agent")),
        ("alice", None),
        ("system:serviceaccount:team", None),
        ("system:serviceaccount::agent", None),
        ("system:node:n1:x", None),
    ],
)
def test_only_a_service_account_can_be_the_subject(
    username: str, account: tuple[str, str] | None
) -> None:
    assert service_account_of(username) == account


@pytest.mark.parametrize(
    "url", ["http://issuer.example.com/token", "ftp://issuer.example.com/token", "issuer/token"]
)
def test_a_token_url_that_is_not_https_is_refused_by_the_model(url: str) -> None:
    with pytest.raises(ValueError, match="https"):
        OAuth2ClientCredentialsSource.model_validate(
            {"tokenUrl": url, "clientId": "c", "clientSecretRef": REF}
        )


def _issued_source() -> dict[str, object]:
    return {
        "oauth2ClientCredentials": {
            "tokenUrl": "https://issuer.example.com/token",
            "clientId": "c",
            "clientSecretRef": REF,
        }
    }


def test_a_minted_token_goes_to_http_requests_and_not_to_a_file_or_an_mcp_server() -> None:
    tool = ToolDescriptorSpec.model_validate(
        {
            "toolId": "t",
            "version": "1.0.0",
            "kind": "container",
            "sideEffectClass": "read",
            "sandbox": {
                "image": "registry.example.com/tool@sha256:" + "a" * 64,
                "command": ["/bin/tool"],
                "egress": {"allow": ["api.example.com"]},
            },
            "credentials": [
                {
                    "name": "minted",
                    "source": _issued_source(),
                    "inject": {"file": "/tooladapter/credentials/token"},
                }
            ],
        }
    )
    assert any("not to a file" in p for p in check_credentials(tool))
    server = McpServerSpec.model_validate(
        {
            "url": "https://mcp.example.com/mcp",
            "credentials": [
                {
                    "name": "minted",
                    "source": _issued_source(),
                    "inject": {"hosts": ["mcp.example.com"]},
                }
            ],
        }
    )
    assert any("do not carry one yet" in p for p in check_server_credentials(server))
