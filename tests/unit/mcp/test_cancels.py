"""How an MCP client's cancellation names its call: the key of a tools/call, and the ids a
posted body cancels."""

from __future__ import annotations

import json

from hypothesis import given
from hypothesis import strategies as st

from tooladapter.mcp.core.cancels import MAX_CANCELLED_PER_BODY, call_key, cancelled_request_ids


def _cancel(request_id: object, **extra: object) -> dict[str, object]:
    return {
        "jsonrpc": "2.0",
        "method": "notifications/cancelled",
        "params": {"requestId": request_id, "reason": "user"},
        **extra,
    }


def test_a_call_key_is_a_label_value_and_names_one_request_of_one_session() -> None:
    key = call_key("ns", "system:serviceaccount:ns:a", "s1", 3)
    assert len(key) == 40 and all(c in "0123456789abcdef" for c in key)
    others = {
        call_key("ns", "system:serviceaccount:ns:a", "s1", "3"),  # 3 and "3" are two ids
        call_key("ns", "system:serviceaccount:ns:b", "s1", 3),
        call_key("ns", "system:serviceaccount:ns:a", "s2", 3),
        call_key("other", "system:serviceaccount:ns:a", "s1", 3),
        call_key("ns", "system:serviceaccount:ns:a", "s1", 4),
    }
    assert key not in others and len(others) == 5
    assert call_key("ns", "system:serviceaccount:ns:a", "s1", 3) == key


def test_the_ids_a_body_cancels() -> None:
    assert cancelled_request_ids(json.dumps(_cancel(7)).encode()) == [7]
    assert cancelled_request_ids(json.dumps(_cancel("abc")).encode()) == ["abc"]
    batch = [_cancel(1), {"jsonrpc": "2.0", "method": "notifications/progress"}, _cancel("x")]
    assert cancelled_request_ids(json.dumps(batch).encode()) == [1, "x"]


def test_nothing_else_cancels_anything() -> None:
    for body in (
        _cancel(True),  # not an id
        _cancel(None),
        _cancel(1.5),
        _cancel({"id": 1}),
        _cancel(1, id=9),  # a request, not a notification
        {"jsonrpc": "2.0", "method": "tools/call", "params": {"requestId": 1}},
        {"jsonrpc": "2.0", "method": "notifications/cancelled"},
        {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": [1]},
    ):
        assert cancelled_request_ids(json.dumps(body).encode()) == [], body
    assert cancelled_request_ids(b'{"method": "notifications/cancelled", ') == []
    assert cancelled_request_ids(b"[" * 100_000 + b"notifications/cancelled") == []


@given(st.binary(max_size=200))
def test_any_body_is_read_without_an_error(body: bytes) -> None:
    found = cancelled_request_ids(b"notifications/cancelled" + body)
    assert all(isinstance(i, str | int) and not isinstance(i, bool) for i in found)


def test_a_batch_of_many_cancellations_cancels_a_bounded_number_of_ids_each_once() -> None:
    """Attack: one 4 MB batch of `notifications/cancelled` would make the gateway list the
    caller's invocations once per id (tens of thousands of API calls for one request)."""
    batch = [_cancel(i) for i in range(50_000)] + [_cancel(1), _cancel("1")]
    found = cancelled_request_ids(json.dumps(batch).encode())
    assert found == list(range(MAX_CANCELLED_PER_BODY))
    repeated = [_cancel(1)] * 1000 + [_cancel("1")]
    assert cancelled_request_ids(json.dumps(repeated).encode()) == [1, "1"]
