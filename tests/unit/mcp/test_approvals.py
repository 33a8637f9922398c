"""Issue 31: the pure rules of approvals in the MCP client, dry runs over MCP, and the
sealed session token of the 2025-11-25 era (attacks an agent would try, as regressions)."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from tooladapter.gateway.mcp_endpoint import SessionSeal, _initialize_declares_url, derived_key
from tooladapter.gateway.views.tools import BadCallOptions, dry_run_requested, dry_run_result
from tooladapter.mcp.core.approvals import (
    BadPublicUrl,
    RepeatedRequest,
    WaitState,
    approval_link,
    approvals_to_read,
    attachable,
    call_notice,
    call_ref,
    checked_public_url,
    elicitation_message,
    expiry_of,
    newest_attachable,
    request_label,
)
from tooladapter.pipeline.hashing import request_hash

NOW = datetime(2026, 12, 3, 12, 0, tzinfo=UTC)
AGENT = "system:serviceaccount:team-a:agent-1"
OTHER = "system:serviceaccount:team-a:agent-2"


def call(
    *,
    caller: str = AGENT,
    namespace: str = "team-a",
    arguments: dict[str, Any] | None = None,
    state: str = "AwaitingApproval",
    ended: datetime | None = None,
    **status: Any,
) -> dict[str, Any]:
    obj: dict[str, Any] = {
        "metadata": {"name": "gated-abc", "namespace": namespace, "uid": "u-1"},
        "spec": {
            "tool": {"id": "gated", "version": "1.0.0"},
            "arguments": arguments if arguments is not None else {"limit": 3},
            "caller": {"kind": "agent", "name": caller},
        },
        "status": {"state": state, **status},
    }
    if ended is not None:
        obj["status"]["endedAt"] = ended.strftime("%Y-%m-%dT%H:%M:%SZ")
    return obj


HASH = request_hash(
    namespace="team-a", tool_id="gated", tool_version="1.0.0", arguments={"limit": 3}
)


def attaches(obj: dict[str, Any], *, username: str = AGENT, window: float = 300) -> bool:
    return attachable(
        obj,
        RepeatedRequest(
            namespace="team-a", username=username, hash_=HASH, now=NOW, window_seconds=window
        ),
    )


def test_the_same_callers_waiting_call_with_the_same_request_attaches() -> None:
    assert attaches(call())


def test_another_callers_call_with_the_same_arguments_never_attaches() -> None:
    # The label is computable by anyone; the caller (admission pins it) decides.
    assert not attaches(call(caller=OTHER))
    assert not attaches(call(), username=OTHER)


def test_other_arguments_or_another_namespace_never_attach_even_under_the_same_label() -> None:
    assert not attaches(call(arguments={"limit": 4}))
    assert not attaches(call(namespace="team-b"))


def test_a_dry_run_or_a_call_that_never_reached_approval_does_not_attach() -> None:
    dry = call()
    dry["spec"]["dryRun"] = True
    assert not attaches(dry)
    assert not attaches(call(state="Authorized"))
    assert not attaches(call(state="Observed", ended=NOW))  # a read call: never gated


def test_a_decided_call_attaches_only_within_the_window_after_it_ended() -> None:
    approved = {"name": "approval-1", "reviewer": "r"}
    assert attaches(call(state="Brokered", approval=approved))
    assert attaches(call(state="Observed", approval=approved, ended=NOW - timedelta(seconds=10)))
    assert not attaches(
        call(state="Observed", approval=approved, ended=NOW - timedelta(seconds=400))
    )
    rejected = call(state="Denied", deniedStage="approval", ended=NOW - timedelta(seconds=5))
    assert attaches(rejected)
    assert not attaches(call(state="Denied", deniedStage="approval"))  # no end time: no


def test_a_waiting_call_wins_over_a_decided_one() -> None:
    old = call(state="Observed", approval={"name": "a"}, ended=NOW - timedelta(seconds=5))
    old["metadata"]["creationTimestamp"] = "2026-12-03T11:59:00Z"
    waiting = call()
    waiting["metadata"]["creationTimestamp"] = "2026-12-03T11:00:00Z"
    found = newest_attachable(
        [old, waiting],
        RepeatedRequest(
            namespace="team-a", username=AGENT, hash_=HASH, now=NOW, window_seconds=300
        ),
    )
    assert found is waiting


def test_the_request_label_is_a_label_value_and_differs_by_caller() -> None:
    label = request_label(AGENT, HASH)
    assert len(label) == 40 and label.isalnum()
    assert label != request_label(OTHER, HASH)


@pytest.mark.parametrize(
    "value",
    [
        "ftp://tools.example.com",
        "tools.example.com",
        "https://tools.example.com/?next=evil",
        "https://tools.example.com/#x",
        "https://user:pw@tools.example.com",
        "https://",
    ],
)
def test_a_public_url_that_could_mislead_a_reviewer_is_refused(value: str) -> None:
    with pytest.raises(BadPublicUrl):
        checked_public_url(value)


def test_the_link_is_the_public_url_and_the_call_only() -> None:
    base = checked_public_url("https://tools.example.com/")
    assert approval_link(base, "team-a", "gated-abc") == (
        "https://tools.example.com/ui/approvals?call=team-a/gated-abc"
    )


@pytest.mark.parametrize(
    "value",
    ['team-a/"><script>', "team-a", "/x", "Team-A/x", "a/b/c", "a/" + "b" * 300, None, 3],
)
def test_the_pages_call_parameter_takes_only_a_namespace_and_a_name(value: object) -> None:
    assert call_ref(value) is None


def test_the_page_tells_the_caller_to_forward_its_own_call() -> None:
    ref = ("team-a", "gated-abc")
    assert "Forward this page's link to a reviewer" in call_notice(ref, call(), AGENT)
    assert "waits for your decision" in call_notice(ref, call(), OTHER)
    assert "not waiting" in call_notice(ref, None, OTHER)


def test_the_message_shows_the_arguments_and_says_opening_approves_nothing() -> None:
    obj = call(arguments={"cmd": "rm\u202e -rf"}, effectiveClass="shared-write")
    text = elicitation_message(obj, AGENT)
    assert "cannot approve its own call" in text and "approves nothing" in text
    assert "\u202e" not in text  # shown visibly, as every review view shows it


def test_a_wait_state_this_gateway_did_not_write_is_none() -> None:
    state = WaitState(namespace="team-a", name="n", uid="u", caller=AGENT)
    assert WaitState.loads(state.dumps()) == state
    for junk in ("", "[]", "{}", '{"ns":"a","name":"n","uid":"u","caller":1}', "x" * 10):
        assert WaitState.loads(junk) is None


def test_the_sealed_session_opens_only_for_its_caller_and_namespace() -> None:
    seal = SessionSeal(derived_key(b"k" * 32, b"session"))
    token = seal.seal(namespace="team-a", username=AGENT, url=True)
    assert seal.url_capable(token, namespace="team-a", username=AGENT)
    assert not seal.url_capable(token, namespace="team-b", username=AGENT)
    assert not seal.url_capable(token, namespace="team-a", username=OTHER)
    # Another replica's key (not shared) and a changed token do not open.
    assert not SessionSeal(derived_key(b"j" * 32, b"session")).url_capable(
        token, namespace="team-a", username=AGENT
    )
    assert not seal.url_capable(token[:-2] + "AA", namespace="team-a", username=AGENT)
    declined = seal.seal(namespace="team-a", username=AGENT, url=False)
    assert not seal.url_capable(declined, namespace="team-a", username=AGENT)


def test_keys_for_each_purpose_differ_and_a_shared_key_gives_every_replica_the_same() -> None:
    shared = b"s" * 32
    assert derived_key(shared, b"session") == derived_key(shared, b"session")
    assert derived_key(shared, b"session") != derived_key(shared, b"request-state")
    assert derived_key(None, b"session") != derived_key(None, b"session")  # process keys


def test_only_an_initialize_declaring_url_elicitation_is_read_as_capable() -> None:
    def init(caps: dict[str, Any]) -> bytes:
        message = {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "initialize",
            "params": {"capabilities": caps},
        }
        return json.dumps(message).encode()

    assert _initialize_declares_url(init({"elicitation": {"url": {}}})) is True
    assert _initialize_declares_url(init({"elicitation": {}})) is False
    assert _initialize_declares_url(init({"elicitation": {"url": True}})) is False
    assert _initialize_declares_url(b'{"method":"tools/call"}') is None
    deep = b'{"method":"initialize","params":' + b"[" * 100_000 + b"]" * 100_000 + b"}"
    assert _initialize_declares_url(deep) is None


def test_dry_run_is_a_boolean_option_and_its_answer_names_no_invocation() -> None:
    assert dry_run_requested({"dev.tooladapter/dryRun": True}) is True
    assert dry_run_requested({}) is False
    bad: object
    for bad in ("true", 1, {}):
        with pytest.raises(BadCallOptions):
            dry_run_requested({"dev.tooladapter/dryRun": bad})
    preview = {"verdict": "would-be-denied", "deniedStage": "permission", "message": "no"}
    answer = dry_run_result(preview, namespace="team-a", tool_id="gated")
    assert answer["isError"] is False
    assert answer["_meta"]["dev.tooladapter/preview"] == preview
    assert "dev.tooladapter/invocation" not in answer["_meta"]
    assert "structuredContent" not in answer


def test_an_ended_call_attaches_while_the_approval_it_ran_with_lasts() -> None:
    ran = call(
        state="Observed",
        approval={"name": "approval-1", "reviewer": "r"},
        ended=NOW - timedelta(seconds=3000),
    )
    assert not attaches(ran)  # past the short window, no expiry known
    lasting = {"approval-1": NOW + timedelta(seconds=600)}
    assert attachable(
        ran,
        RepeatedRequest(
            namespace="team-a",
            username=AGENT,
            hash_=HASH,
            now=NOW,
            window_seconds=300,
            approval_expiries=lasting,
        ),
    )
    expired = {"approval-1": NOW - timedelta(seconds=1)}
    assert not attachable(
        ran,
        RepeatedRequest(
            namespace="team-a",
            username=AGENT,
            hash_=HASH,
            now=NOW,
            window_seconds=300,
            approval_expiries=expired,
        ),
    )
    # Only the caller's own ended calls have their approvals read.
    assert approvals_to_read([ran, call(caller=OTHER, state="Observed")], AGENT) == ["approval-1"]
    assert approvals_to_read([ran], OTHER) == []
    assert expiry_of({"spec": {"expiresAt": "2026-12-03T12:10:00Z"}}) == NOW + timedelta(
        seconds=600
    )
    assert expiry_of({"spec": {"expiresAt": "soon"}}) is None


def test_large_arguments_are_cut_in_the_message_and_say_the_page_shows_them_all() -> None:
    text = elicitation_message(call(arguments={"blob": "x" * 100_000}), AGENT)
    assert len(text) < 3000
    assert "more characters: the page shows them all" in text


def test_another_idempotency_key_is_another_call_the_agent_means_to_make() -> None:
    keyed = call()
    keyed["spec"]["idempotencyKey"] = "k-1"
    same: dict[str, Any] = {"namespace": "team-a", "username": AGENT, "hash_": HASH, "now": NOW}
    assert attachable(keyed, RepeatedRequest(**same, window_seconds=300, idempotency_key="k-1"))
    assert not attachable(keyed, RepeatedRequest(**same, window_seconds=300, idempotency_key="k-2"))
    assert not attachable(keyed, RepeatedRequest(**same, window_seconds=300))
    assert not attachable(
        call(), RepeatedRequest(**same, window_seconds=300, idempotency_key="k-1")
    )
