"""Credentials an OAuth 2.0 issuer mints per call (`oauth2ClientCredentials`,
`tokenExchange`) on the fake cluster, with a fake issuer: one token per call, carried to
the executor and never shown; revoked at the end (bounded); a refusal denies at
credentials with the issuer's code and an issuer that does not answer fails the call
transient, nothing sent either way; an exchange acts for the caller's ServiceAccount
only."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from tests.unit.fake_cluster import (
    CALLER,
    NAMESPACE,
    Harness,
    ScriptedExecutor,
    http_descriptor,
    invocation,
    make_runtime,
)
from tests.unit.flow.test_brokering import b64
from tooladapter.credentials.issuers import IssuerRefused, IssuerUnreachable, Minted
from tooladapter.enums import ToolKind
from tooladapter.flow import ending
from tooladapter.settings import Settings

pytestmark = [pytest.mark.timeout(10), pytest.mark.usefixtures("fast_retries")]

URL = "https://api.example.test/items"
TOKEN_URL = "https://issuer.example.test/token"
REVOKE_URL = "https://issuer.example.test/revoke"
SECRET = "client-s3cret-value"


class FakeIssuer:
    """Mints `minted-<n>` (or refuses, or does not answer) and records every request."""

    def __init__(self) -> None:
        self.minted = 0
        self.requests: list[dict[str, Any]] = []
        self.revoked: list[str] = []
        self.refuse: str | None = None
        self.silent = False
        self.slow_revocation = False
        self.attempts = 0
        self.retried = asyncio.Event()

    async def token(
        self, url: str, client_id: str, client_secret: str, form: dict[str, str]
    ) -> Minted:
        self.requests.append({"url": url, "client": client_id, "secret": client_secret, **form})
        if self.refuse:
            raise IssuerRefused(self.refuse)
        if self.silent:
            raise IssuerUnreachable(f"{url}: no answer in 10s")
        self.minted += 1
        return Minted(f"minted-token-{self.minted}", 300, tuple(form.get("scope", "").split()))

    async def revoke(
        self, url: str, client_id: str, client_secret: str, token: str, timeout: float
    ) -> bool:
        self.attempts += 1
        if self.slow_revocation and self.attempts == 1:
            await asyncio.sleep(timeout)
            return False
        if self.attempts > 1:
            self.retried.set()
        self.revoked.append(token)
        return True


def minted_credential(kind: str = "oauth2ClientCredentials", **extra: Any) -> dict[str, Any]:
    source: dict[str, Any] = {
        "tokenUrl": TOKEN_URL,
        "clientId": "tools",
        "clientSecretRef": {"name": "oauth-client", "key": "secret"},
        "scopes": ["items.read"],
        "audience": "items-api",
        "revocationUrl": REVOKE_URL,
        **extra,
    }
    return {"name": "minted", "source": {kind: source}, "inject": {"hosts": ["api.example.test"]}}


def harness(
    kind: str = "oauth2ClientCredentials", **extra: Any
) -> tuple[Harness, ScriptedExecutor, FakeIssuer]:
    executor = ScriptedExecutor()
    h = make_runtime(settings=Settings(write_every_state=True), executors={ToolKind.HTTP: executor})
    issuer = FakeIssuer()
    h.rt.issuers = issuer
    h.cluster.secrets[(NAMESPACE, "oauth-client")] = {"secret": b64(SECRET + "\n")}
    h.publish(http_descriptor("fetch", URL, credentials=[minted_credential(kind, **extra)]))
    h.cluster.grant(tools=["fetch"], classes=["read"])
    return h, executor, issuer


async def test_each_call_carries_its_own_token_revoked_at_its_end_and_never_shown() -> None:
    h, executor, issuer = harness()

    first = await h.run(h.submit(invocation("f-1", tool="fetch")))
    second = await h.run(h.submit(invocation("f-2", tool="fetch")))

    for stored in (first, second):
        assert stored["status"]["state"] == "Observed", stored["status"]
    tokens = [call.credentials[0].value for call in executor.executed]
    assert tokens == ["minted-token-1", "minted-token-2"]
    assert issuer.revoked == tokens
    assert [r["secret"] for r in issuer.requests] == [SECRET, SECRET]
    assert issuer.requests[0]["scope"] == "items.read"
    assert issuer.requests[0]["audience"] == "items-api"
    (use,) = first["status"]["credentials"]
    assert use["source"] == "oauth2ClientCredentials"
    assert use["tokenUrl"] == TOKEN_URL
    assert use["scopes"] == ["items.read"]
    assert use["audience"] == "items-api"
    assert use["revoked"] is True
    assert use["expiresAt"]
    written = json.dumps([first, second, *h.cluster.writes_of("f-1"), *h.cluster.writes_of("f-2")])
    for value in [*tokens, SECRET, b64(SECRET)]:
        assert value not in written
    for receipt in h.store.receipts():
        assert b"minted-token-" not in receipt
        assert b'"revoked":true' in receipt.replace(b" ", b"")


async def test_an_issuer_refusal_denies_at_credentials_with_its_code_and_sends_nothing() -> None:
    h, executor, issuer = harness()
    issuer.refuse = "invalid_client"

    stored = await h.run(h.submit(invocation("f-1", tool="fetch")))

    status = stored["status"]
    assert (status["state"], status["failureClass"]) == ("Denied", "credentials"), status
    assert status["deniedStage"] == "credentials"
    assert "invalid_client" in status["message"]
    assert executor.executed == []


async def test_an_issuer_that_does_not_answer_fails_the_call_transient_and_sends_nothing() -> None:
    h, executor, issuer = harness()
    issuer.silent = True

    stored = await h.run(h.submit(invocation("f-1", tool="fetch")))

    status = stored["status"]
    assert (status["state"], status["failureClass"]) == ("Failed", "transient"), status
    assert executor.executed == []


async def test_a_revocation_that_does_not_answer_in_time_is_recorded_false_and_retried(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(ending, "REVOKE_SECONDS", 0.05)
    monkeypatch.setattr(ending, "REVOKE_RETRY_PAUSES", (0.0,))
    h, _, issuer = harness()
    issuer.slow_revocation = True

    stored = await h.run(h.submit(invocation("f-1", tool="fetch")))

    assert stored["status"]["state"] == "Observed", stored["status"]
    assert stored["status"]["credentials"][0]["revoked"] is False
    await asyncio.wait_for(issuer.retried.wait(), 5)
    assert issuer.revoked == ["minted-token-1"]
    await h.rt.close()


async def test_a_token_minted_before_a_later_credential_failed_is_still_revoked() -> None:
    h, executor, issuer = harness()
    h.publish(
        http_descriptor(
            "fetch",
            URL,
            credentials=[
                minted_credential(),
                {
                    "name": "missing",
                    "source": {"serviceAccountToken": {"serviceAccountName": "absent"}},
                    "inject": {"hosts": ["api.example.test"]},
                },
            ],
        )
    )

    stored = await h.run(h.submit(invocation("f-1", tool="fetch")))

    status = stored["status"]
    assert (status["state"], status["deniedStage"]) == ("Denied", "credentials"), status
    assert executor.executed == []
    assert issuer.revoked == ["minted-token-1"]


async def test_an_exchange_sends_the_callers_service_account_token_for_its_audience() -> None:
    h, _, issuer = harness("tokenExchange", subjectAudience="issuer.example.test")
    h.cluster.service_accounts.add(("team-a", "agent"))

    stored = await h.run(h.submit(invocation("f-1", tool="fetch")))

    assert stored["status"]["state"] == "Observed", stored["status"]
    requested = [args for method, args in h.cluster.calls if method == "request_token"]
    assert [(r["namespace"], r["service_account"], r["audiences"]) for r in requested] == [
        ("team-a", "agent", ["issuer.example.test"])
    ]
    (request,) = issuer.requests
    assert request["subject_token"] == "token-of-agent"
    assert request["grant_type"] == "urn:ietf:params:oauth:grant-type:token-exchange"
    (use,) = stored["status"]["credentials"]
    assert use["subject"] == CALLER
    assert "token-of-agent" not in json.dumps(h.cluster.writes_of("f-1"))


async def test_an_exchange_for_a_caller_that_is_no_service_account_is_denied() -> None:
    h, executor, issuer = harness("tokenExchange", subjectAudience="issuer.example.test")
    h.cluster.grant("alice", tools=["fetch"], classes=["read"])

    stored = await h.run(h.submit(invocation("f-1", tool="fetch", caller="alice")))

    status = stored["status"]
    assert (status["state"], status["deniedStage"]) == ("Denied", "credentials"), status
    assert "alice is none" in status["message"]
    assert issuer.requests == [] and executor.executed == []
