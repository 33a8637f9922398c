"""Issue 40's attack pass, pure: token URLs that would make the operator post a client
secret to an internal service (judged at apply, before any call), issuer answers that try to
put more than an error code into status, and usernames that would pass for a ServiceAccount.
"""

from __future__ import annotations

import json

import pytest

from tests.token_urls import ACCEPTED, REFUSED
from tooladapter.credentials.issuers import (
    IssuerRefused,
    IssuerUnreachable,
    parse_token_response,
    service_account_of,
)
from tooladapter.model import ToolDescriptorSpec
from tooladapter.pipeline.validation.credentials import check_credentials, internal_literal

SECRET = "client-s3cret-value"


@pytest.mark.parametrize(("url", "why"), REFUSED)
def test_an_internal_or_ambiguous_token_url_is_refused(url: str, why: str) -> None:
    problem = internal_literal(url)
    assert problem is not None and why in problem, problem


@pytest.mark.parametrize("url", ACCEPTED)
def test_a_public_token_url_is_accepted(url: str) -> None:
    assert internal_literal(url) is None


@pytest.mark.parametrize("field", ["tokenUrl", "revocationUrl"])
def test_a_descriptor_naming_an_internal_issuer_endpoint_is_refused_with_its_field(
    field: str,
) -> None:
    """The revocation endpoint is posted the client secret too."""
    source = {
        "tokenUrl": "https://issuer.example.com/token",
        "revocationUrl": "https://issuer.example.com/revoke",
        "clientId": "c",
        "clientSecretRef": {"name": "oauth-client", "key": "secret"},
        field: "https://[::ffff:7f00:1]/x",
    }
    tool = ToolDescriptorSpec.model_validate(
        {
            "toolId": "t",
            "version": "1.0.0",
            "kind": "http",
            "sideEffectClass": "read",
            "http": {
                "method": "GET",
                "url": "https://api.example.com/items",
                "allowedHosts": ["api.example.com"],
            },
            "credentials": [
                {
                    "name": "minted",
                    "source": {"oauth2ClientCredentials": source},
                    "inject": {"hosts": ["api.example.com"]},
                }
            ],
        }
    )
    problems = check_credentials(tool)
    assert any(f"oauth2ClientCredentials.{field}" in p for p in problems), problems


@pytest.mark.parametrize(
    "body",
    [
        # The description and any other member are never kept, whatever they echo.
        {"error": "invalid_client", "error_description": f"bad secret {SECRET}"},
        {"error": "invalid_client", "authorization": f"Basic {SECRET}", "secret": SECRET},
    ],
)
def test_a_refusal_keeps_the_error_code_only(body: dict[str, str]) -> None:
    with pytest.raises(IssuerRefused) as refused:
        parse_token_response(401, json.dumps(body).encode())
    assert refused.value.error == "invalid_client"
    assert SECRET not in str(refused.value)


@pytest.mark.parametrize(
    ("status", "body"),
    [
        # A redirect is no answer (it is not followed: `executors.issuers`), whatever it holds.
        (302, b'{"access_token": "from-a-redirect"}'),
        (307, b'{"error": "invalid_client"}'),
        # A code long or odd enough to carry something else is not echoed.
        (400, json.dumps({"error": "a" * 65}).encode()),
        (400, json.dumps({"error": "line\nbreak"}).encode()),
        (400, json.dumps({"error": ["invalid_client"]}).encode()),
        (400, json.dumps({"error": "caf\u00e9"}).encode()),
        # A token that could split the header it goes into.
        (200, json.dumps({"access_token": "t0k\r\nX-Injected: 1"}).encode()),
        (200, json.dumps({"access_token": "t0k with space"}).encode()),
        (200, json.dumps({"access_token": ""}).encode()),
        (200, json.dumps({"access_token": 12345}).encode()),
    ],
)
def test_an_answer_that_is_no_token_and_no_clean_refusal_is_no_answer(
    status: int, body: bytes
) -> None:
    with pytest.raises(IssuerUnreachable) as unreachable:
        parse_token_response(status, body)
    assert body.decode() not in str(unreachable.value)


@pytest.mark.parametrize(
    "username",
    [
        "system:serviceaccount:team:agent:extra",
        "system:serviceaccounts:team",  # the group, not a user
        "System:serviceaccount:team:agent",
        "system:serviceaccount:team:",
        " system:serviceaccount:team:agent",
        "oidc:system:serviceaccount:team:agent",
    ],
)
def test_nothing_that_merely_resembles_a_service_account_is_a_subject(username: str) -> None:
    assert service_account_of(username) is None
