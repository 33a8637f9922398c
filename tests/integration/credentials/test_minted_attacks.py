"""Issue 40's attack pass on the real cluster, with the real issuer and fixtures of
`test_minted_credentials`: an agent that repeats an idempotency key, forges a caller for a
token exchange, or a descriptor that names an issuer the platform did not trust, gets no
token and makes the operator post no client secret."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from pathlib import Path

import pytest
from kubernetes import client

from tests.integration.conftest import Configured
from tests.integration.credentials.conftest import deleted_after, loopback_settings
from tests.integration.credentials.test_http_credentials import shown
from tests.integration.credentials.test_minted_credentials import (
    API,
    ISSUER,
    SECRET,
    Servers,
    api_tool,
    client_secret,
    forms,
    magent,
    minting,
    mns,
    servers,
    source_of,
)
from tests.integration.objects import Agent, create, pretty, status_of
from tooladapter.devtools import Namespace
from tooladapter.pipeline.validation.credentials import internal_literal

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(300)]

__all__ = ["magent", "minting", "mns", "servers"]  # fixtures, used by name


def test_a_duplicate_call_gets_no_token_of_its_own_and_shows_none(
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
    before_heads, before_tokens = len(s.api_heads), len(s.issuer.tokens())

    first = status_of(magent.wait(magent.invoke("items", {}, idempotencyKey="once")))
    again = status_of(magent.wait(magent.invoke("items", {}, idempotencyKey="once")))

    assert first["state"] == "Observed", pretty(first)
    assert (again["state"], bool(again.get("duplicateOf"))) == ("Observed", True), pretty(again)
    assert not again.get("credentials"), pretty(again)
    assert len(s.api_heads) == before_heads + 1
    assert len(s.issuer.tokens()) == before_tokens + 1
    said = shown(api, mns.name, [first, again], minting)
    token = [t for t in s.issuer.tokens()][-1]
    assert token["revoked"] is True, token
    assert not any(form in said for form in forms(SECRET))


def test_a_forged_caller_gets_no_exchange_on_anothers_behalf(
    api: client.ApiClient,
    mns: Namespace,
    magent: Agent,
    servers: tuple[Servers, Path],
) -> None:
    """An agent naming another agent as its caller is refused at create (admission): the
    exchange would otherwise act on the other's behalf."""
    s = servers[0]
    client_secret(api, mns.name)
    api_tool(api, mns.name, s, source_of("tokenExchange", s))
    other = Agent.create(api, mns.name, "agent-2")
    magent.grant(["items"], ["read"])
    before = len(s.issuer.tokens())

    with pytest.raises(client.ApiException) as refused:
        create(
            magent.api,
            mns.name,
            "toolinvocations",
            {
                "kind": "ToolInvocation",
                "metadata": {"name": "forged"},
                "spec": {
                    "tool": {"id": "items", "version": "1.0.0"},
                    "arguments": {},
                    "caller": {"kind": "agent", "name": other.user},
                },
            },
        )

    assert "spec.caller.name must be the creating user" in (refused.value.body or "")
    assert len(s.issuer.tokens()) == before


@pytest.mark.parametrize(
    ("url", "why"),
    [
        ("https://167772161/oauth/token", "non-canonical"),
        ("https://[64:ff9b::a00:1]/oauth/token", "not a public address"),
        (f"https://{ISSUER}@10.0.0.1/oauth/token", "user or password"),
    ],
    ids=["decimal", "nat64", "userinfo"],
)
def test_a_token_url_that_hides_an_internal_address_is_refused_at_apply(
    api: client.ApiClient,
    mns: Namespace,
    servers: tuple[Servers, Path],
    url: str,
    why: str,
) -> None:
    """Refused by the admission policy tooladapter-issuer-addresses, naming the field (the
    operator's own reason, `why`, is what it would say of a descriptor stored without the
    policy: tests/unit/credentials/test_issuer_attacks.py)."""
    s = servers[0]
    assert why in (internal_literal(url) or "")
    with pytest.raises(client.ApiException) as refused:
        api_tool(api, mns.name, s, source_of("oauth2ClientCredentials", s, url), wait_active=False)
    body = refused.value.body or ""
    assert refused.value.status == 422, body
    assert "spec.credentials[minted].source.oauth2ClientCredentials.tokenUrl" in body, body
    assert f"{ISSUER}@" not in body, body  # the host is shown, never a user part


# --------------------------------------------------------------------------- untrusted
# The same issuer under the same mapped name, but the platform does not list it as trusted:
# the mapping says where the name is, not that a client secret may be posted there.


@pytest.fixture(scope="module")
def untrusting(
    configured: Callable[[Mapping[str, str]], Configured], servers: tuple[Servers, Path]
) -> Configured:
    return configured(loopback_settings([ISSUER, API], servers[1]))


@pytest.fixture
def uns(api: client.ApiClient, untrusting: Configured) -> Iterator[Namespace]:
    yield from deleted_after(untrusting.namespace(api))


def test_a_mapped_issuer_the_platform_does_not_trust_is_never_posted_to(
    api: client.ApiClient,
    uns: Namespace,
    servers: tuple[Servers, Path],
    untrusting: Configured,
) -> None:
    s = servers[0]
    agent = Agent.create(api, uns.name, "agent-1")
    client_secret(api, uns.name)
    api_tool(api, uns.name, s, source_of("oauth2ClientCredentials", s))
    agent.grant(["items"], ["read"])
    before_heads, before_tokens = len(s.api_heads), len(s.issuer.tokens())

    status = status_of(agent.wait(agent.invoke("items", {})))

    assert (status["state"], status["failureClass"]) == ("Failed", "transient"), pretty(status)
    failed = [e for e in status["stages"] if e["outcome"] == "failed"]
    assert [e["stage"] for e in failed] == ["credentials"], pretty(status)
    assert "non-public" in failed[0].get("detail", ""), pretty(status)
    assert len(s.issuer.tokens()) == before_tokens
    assert len(s.api_heads) == before_heads
