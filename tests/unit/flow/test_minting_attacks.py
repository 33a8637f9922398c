"""Issue 40's attack pass, as an agent (it creates calls, chooses keys and callers' calls,
never descriptors or Secrets), on the fake cluster with the fake issuer of
`test_minting`: no call carries or shows another's token; a token is revoked however its
call ends; nothing an issuer answers shows the client secret or the header it was sent in.
"""

from __future__ import annotations

import base64
import json
from typing import Any

import pytest

from tests.unit.fake_cluster import CALLER, NAMESPACE, invocation
from tests.unit.flow.test_brokering import b64
from tests.unit.flow.test_minting import SECRET, harness
from tooladapter.enums import FailureClass
from tooladapter.executors import Outcome
from tooladapter.executors.issuers import basic_authorization

pytestmark = [pytest.mark.timeout(10), pytest.mark.usefixtures("fast_retries")]

OTHER = "system:serviceaccount:team-a:other-agent"


def everything_said(h: Any, *names: str) -> str:
    """Status as stored and as written, events and receipts, as one text."""
    said = [h.cluster.invocation(name) for name in names]
    said += [write for name in names for write in h.cluster.writes_of(name)]
    said += [event.message for event in h.events.posted]
    said += [receipt.decode(errors="replace") for receipt in h.store.receipts()]
    return json.dumps(said)


async def test_a_duplicate_mints_nothing_and_carries_or_shows_no_token() -> None:
    h, executor, issuer = harness()

    first = await h.run(h.submit(invocation("f-1", tool="fetch", idempotencyKey="k")))
    again = await h.run(h.submit(invocation("f-2", tool="fetch", idempotencyKey="k")))

    assert first["status"]["state"] == "Observed", first["status"]
    assert again["status"]["state"] == "Observed", again["status"]
    assert again["status"]["duplicateOf"], again["status"]
    assert issuer.minted == 1 and len(executor.executed) == 1
    assert not again["status"].get("credentials"), again["status"]
    assert "minted-token-" not in everything_said(h, "f-1", "f-2")


async def test_the_same_key_from_another_caller_gets_a_token_of_its_own() -> None:
    h, executor, issuer = harness()
    h.cluster.grant(OTHER, tools=["fetch"], classes=["read"])

    mine = await h.run(h.submit(invocation("f-1", tool="fetch", idempotencyKey="k")))
    theirs = await h.run(
        h.submit(invocation("f-2", tool="fetch", idempotencyKey="k", caller=OTHER))
    )

    for stored in (mine, theirs):
        assert stored["status"]["state"] == "Observed", stored["status"]
        assert not stored["status"].get("duplicateOf")
    tokens = [call.credentials[0].value for call in executor.executed]
    assert tokens == ["minted-token-1", "minted-token-2"]
    assert issuer.revoked == tokens


@pytest.mark.parametrize(
    "outcome",
    [
        Outcome.failed(FailureClass.TRANSIENT, "connection refused"),
        Outcome.tool_error("HTTP 500", http_status=500),
    ],
    ids=["failed", "tool-error"],
)
async def test_a_token_is_revoked_when_its_call_fails_or_errs(outcome: Outcome) -> None:
    h, executor, issuer = harness()
    executor.outcome = outcome

    stored = await h.run(h.submit(invocation("f-1", tool="fetch")))

    assert stored["status"]["state"] in ("Failed", "Observed"), stored["status"]
    assert issuer.revoked == ["minted-token-1"]
    assert stored["status"]["credentials"][0]["revoked"] is True


async def test_a_token_is_revoked_when_its_executor_breaks_unexpectedly() -> None:
    """Settled by the unexpected-error path (`settle_unexpected`), not by an Outcome."""
    h, executor, issuer = harness()
    executor.raises = RuntimeError("the connection broke after the request was written")

    stored = await h.run(h.submit(invocation("f-1", tool="fetch")))

    assert stored["status"]["state"] in ("Failed", "Uncertain"), stored["status"]
    assert issuer.revoked == ["minted-token-1"]


async def test_a_call_interrupted_after_minting_is_cancelled_and_its_token_revoked() -> None:
    h, executor, issuer = harness()
    body = h.submit(invocation("f-1", tool="fetch"))
    uid = body["metadata"]["uid"]

    def interrupt_on_brokered(result: dict[str, Any], **_: object) -> None:
        if result["status"]["state"] == "Brokered":
            h.rt.interrupt_event(uid).set()

    h.cluster.after["patch_status"] = interrupt_on_brokered

    stored = await h.run(body)

    assert stored["status"]["state"] == "Cancelled", stored["status"]
    assert executor.executed == []
    assert issuer.revoked == ["minted-token-1"]


async def test_a_brokering_retried_after_an_error_revokes_every_token_it_minted() -> None:
    """The write after minting fails once (a transient API error): the step runs again and
    mints a second token; the first, never carried, is revoked too."""
    h, executor, issuer = harness()
    failed: list[bool] = []

    def fail_brokered_once(*_: object, status: dict[str, Any], **__: object) -> None:
        if status.get("state") == "Brokered" and not failed:
            failed.append(True)
            raise ConnectionResetError("the API server went away")

    h.cluster.hooks["patch_status"] = fail_brokered_once

    stored = await h.run(h.submit(invocation("f-1", tool="fetch")))

    assert failed, "the Brokered write was never made"
    assert stored["status"]["state"] == "Observed", stored["status"]
    assert [call.credentials[0].value for call in executor.executed] == ["minted-token-2"]
    assert sorted(issuer.revoked) == ["minted-token-1", "minted-token-2"]


def _header_forms(secret: str) -> list[str]:
    header = basic_authorization("tools", secret)
    return [header, header.split(" ", 1)[1]]


@pytest.mark.parametrize("secret", [SECRET, "s3cr+t/p@ss=w0rd"], ids=["plain", "escaped"])
@pytest.mark.parametrize("echo", ["secret", "header", "header-base64"])
async def test_an_issuer_error_that_echoes_the_client_secret_or_its_header_shows_neither(
    secret: str, echo: str
) -> None:
    """An issuer may answer `{"error": ...}` with what it was sent (a client secret, or
    the Basic header that holds it base64-encoded): the refusal's code goes to status,
    events and the receipt, so each form must be redacted there."""
    h, executor, issuer = harness()
    h.cluster.secrets[(NAMESPACE, "oauth-client")] = {"secret": b64(secret)}
    header, encoded = _header_forms(secret)
    issuer.refuse = {"secret": secret, "header": header, "header-base64": encoded}[echo]

    stored = await h.run(h.submit(invocation("f-1", tool="fetch")))

    status = stored["status"]
    assert (status["state"], status["deniedStage"]) == ("Denied", "credentials"), status
    assert executor.executed == []
    said = everything_said(h, "f-1")
    for form in (secret, header, encoded, base64.b64encode(secret.encode()).decode()):
        assert form not in said, (echo, form)


async def test_an_exchange_never_sends_another_callers_identity() -> None:
    """Two agents call one exchange tool: each issuer request carries the subject token of
    its own caller's ServiceAccount, never the other's."""
    h, _, issuer = harness("tokenExchange", subjectAudience="issuer.example.test")
    h.cluster.service_accounts.update({("team-a", "agent"), ("team-a", "other-agent")})
    h.cluster.grant(OTHER, tools=["fetch"], classes=["read"])

    mine = await h.run(h.submit(invocation("f-1", tool="fetch")))
    theirs = await h.run(h.submit(invocation("f-2", tool="fetch", caller=OTHER)))

    assert [s["status"]["state"] for s in (mine, theirs)] == ["Observed", "Observed"]
    requested = [(r["service_account"]) for r in h.cluster.calls_of("request_token")]
    assert requested == ["agent", "other-agent"]
    assert [r["subject_token"] for r in issuer.requests] == [
        "token-of-agent",
        "token-of-other-agent",
    ]
    assert mine["status"]["credentials"][0]["subject"] == CALLER
    assert theirs["status"]["credentials"][0]["subject"] == OTHER
