"""How an MCP client cancels its `tools/call`, by protocol era, as pure rules.

- Handshake eras (2024-11-05 to 2025-11-25): the client posts `notifications/cancelled`
  naming the request's JSON-RPC id. The gateway is stateless, so the notification arrives on
  a request of its own (possibly at another replica): a call is named by `call_key` of
  (namespace, caller, the client's sealed `Mcp-Session-Id`, request id), kept in this
  replica's table of calls in flight and written as the label `CALL_LABEL` on the
  invocation it creates, where any replica finds it. Disconnecting does not cancel in these
  eras ("disconnection SHOULD NOT be interpreted as the client cancelling its request").
- 2026-07-28: the client cancels a request by closing its response stream (this revision
  defines no client notifications over HTTP); a posted `notifications/cancelled` is
  acknowledged and does nothing.

Either way the cancelled call's invocation is interrupted (`spec.interrupt`, as the caller).
"""

from __future__ import annotations

import hashlib
import json
from typing import Any, Final

#: Label of an invocation created by a handshake-era tools/call: its `call_key`.
CALL_LABEL: Final = "tooladapter.dev/mcp-call"

#: The most request ids one posted body cancels. Each id not in this replica's table costs
#: a listing at the API server: a 4 MB batch of cancellations must not cost 60,000 of them
#: (a client cancels the few calls it has in flight; its further ids are ignored).
MAX_CANCELLED_PER_BODY: Final = 16

RequestId = str | int


def call_key(namespace: str, username: str, session: str, request_id: RequestId) -> str:
    """The label value naming one tools/call: 40 hex characters, a lookup key only. The id's
    JSON form keeps 1 and "1" apart, as JSON-RPC does."""
    text = "\n".join((namespace, username, session, json.dumps(request_id)))
    return hashlib.sha256(text.encode()).hexdigest()[:40]


def _request_id(message: Any) -> RequestId | None:
    if not isinstance(message, dict) or message.get("method") != "notifications/cancelled":
        return None
    if "id" in message:
        return None  # a request, not a notification
    params = message.get("params")
    found = params.get("requestId") if isinstance(params, dict) else None
    if isinstance(found, bool) or not isinstance(found, str | int):
        return None
    return found


def cancelled_request_ids(body: bytes) -> list[RequestId]:
    """The request ids a posted body cancels: one `notifications/cancelled`, or those in a
    batch (2025-03-26), each once and at most `MAX_CANCELLED_PER_BODY`; [] for anything
    else (the SDK answers what it is)."""
    if b"notifications/cancelled" not in body:
        return []
    try:
        message = json.loads(body)
    except (ValueError, RecursionError):
        return []
    messages = message if isinstance(message, list) else [message]
    ids: list[RequestId] = []
    seen: set[str] = set()
    for m in messages:
        found = _request_id(m)
        # 1 and "1" are two ids (JSON-RPC): compared in their JSON form.
        if found is None or (text := json.dumps(found)) in seen:
            continue
        seen.add(text)
        ids.append(found)
        if len(ids) >= MAX_CANCELLED_PER_BODY:
            break
    return ids
