"""Attack pass 7 on issue 31 (approvals in the MCP client), pure rules: a request coming
back attaches only to a call made with the same call options. Another run, attempt or
fencing token is another call the agent means to make, as another idempotency key is: an
attempt's call runs in that attempt's workspace, and the holder of a newer fencing token is
never answered with a stale holder's call (or its denial)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from tooladapter.gateway.doors import Busy, Caps, Doors
from tooladapter.mcp.core.approvals import (
    CALL_OPTION_FIELDS,
    RepeatedRequest,
    attachable,
    elicitation_message,
    newest_attachable,
)
from tooladapter.pipeline.hashing import request_hash

NOW = datetime(2026, 12, 3, 12, 0, tzinfo=UTC)
AGENT = "system:serviceaccount:team-a:agent-1"
HASH = request_hash(
    namespace="team-a", tool_id="gated", tool_version="1.0.0", arguments={"path": "out.txt"}
)
SAME: dict[str, Any] = {
    "namespace": "team-a",
    "username": AGENT,
    "hash_": HASH,
    "now": NOW,
    "window_seconds": 300,
}


def call(**options: Any) -> dict[str, Any]:
    return {
        "metadata": {"name": "gated-abc", "namespace": "team-a", "uid": "u-1"},
        "spec": {
            "tool": {"id": "gated", "version": "1.0.0"},
            "arguments": {"path": "out.txt"},
            "caller": {"kind": "agent", "name": AGENT},
            **options,
        },
        "status": {"state": "AwaitingApproval"},
    }


@pytest.mark.parametrize(
    ("field", "first", "again"),
    [
        ("attemptId", "attempt-1", "attempt-2"),
        ("runId", "run-1", "run-2"),
        ("fencingToken", 5, 6),
        ("fencingToken", 0, None),
    ],
)
def test_another_attempt_run_or_fencing_token_never_attaches(
    field: str, first: Any, again: Any
) -> None:
    waiting = call(**{field: first})
    assert attachable(waiting, RepeatedRequest(**SAME, options={field: first}))
    assert not attachable(waiting, RepeatedRequest(**SAME, options={field: again}))
    assert not attachable(waiting, RepeatedRequest(**SAME))  # the request has none, the call one
    # And the other way: the call has none, the request one.
    assert not attachable(call(), RepeatedRequest(**SAME, options={field: first}))
    assert newest_attachable([waiting], RepeatedRequest(**SAME, options={field: again})) is None


def test_the_same_options_all_together_attach() -> None:
    options = {"runId": "r", "attemptId": "a", "fencingToken": 7}
    waiting = call(idempotencyKey="k", **options)
    assert set(CALL_OPTION_FIELDS) == {"idempotencyKey", *options}
    assert attachable(waiting, RepeatedRequest(**SAME, idempotency_key="k", options=options))
    assert not attachable(waiting, RepeatedRequest(**SAME, options=options))  # no key: another call


def test_the_message_shows_invisible_characters_even_past_the_cut() -> None:
    """What the person at the keyboard reads: a bidirectional control is a visible marker
    with a warning, never the raw character, also when it sits beyond the cut."""
    near = call()
    near["spec"]["arguments"] = {"path": "safe\u202etxt.exe"}
    far = call()
    far["spec"]["arguments"] = {"pad": "x" * 5000, "path": "a\u2066b\u200bc"}
    for obj, hidden in ((near, "\u202e"), (far, "\u2066")):
        text = elicitation_message(obj, AGENT)
        assert hidden not in text and "\u200b" not in text
        assert "warning:" in text, text[-500:]
    assert "\u27e8U+202E\u27e9" in elicitation_message(near, AGENT)


def test_a_namespaces_slots_are_taken_apart_from_the_callers() -> None:
    """The gateway takes the caller's slot when a request's head arrives and the
    namespace's once its body did: a caller's slow bodies fill its own cap only."""
    doors = Doors(Caps(caller_requests=2, namespace_requests=2))
    slow = [doors.take_request("outsider", None) for _ in range(2)]
    with pytest.raises(Busy):
        doors.take_request("outsider", None)
    served = doors.take_request("agent", None)
    also = doors.take_namespace_requests(["team-a", "team-a", None])
    assert doors.requests[("namespace", "team-a")] == 1
    for held in (*slow, served, also):
        doors.give(held)
    assert not doors.requests
