"""Approvals that reach the person at the MCP client's keyboard: pure rules.

A gated call made over MCP by a client that can open a URL (URL-mode elicitation) is
answered with the reviewers' page at that call, instead of being held until the gateway
gives up waiting. The client coming back with the same request attaches to the call that
waits; it never makes a second invocation. Nothing the client answers approves anything:
the call still runs only with a `ToolApproval` by an allowed reviewer, never its caller.

- `approval_link`: the page at one call, on the gateway's public URL (a setting: the host
  an agent sent is never trusted to build a link a reviewer will sign in at).
- `WaitState`: what a 2026-07-28 client echoes back (`requestState`), sealed by the SDK's
  request-state boundary with a key all replicas share and bound to the caller and the
  namespace; parsed here only after the seal opened, and checked again against the caller.
- `request_label` / `attachable`: which earlier invocation a repeated request attaches to:
  created by the gateway for the same caller and the same request hash (the label is a
  lookup key only; the caller, which admission pins to the creator, and the hash computed
  from the found object's own spec decide), waiting for approval, or decided while the
  approval it ran with lasts (else for a short window after it ended).
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Final
from urllib.parse import quote, urlsplit

from tooladapter.enums import InvocationState, Stage
from tooladapter.pipeline.hashing import request_hash
from tooladapter.review.readout import state_of
from tooladapter.review.shown import shown

#: The label the gateway puts on invocations it creates: a digest of (caller, request).
REQUEST_LABEL: Final = "tooladapter.dev/mcp-request"
#: The `inputRequests` key of the approval's URL elicitation.
INPUT_KEY: Final = "approval"
#: The call options an invocation's spec carries beside its request: a request coming back
#: attaches only to a call made with the same ones (another run, attempt or fencing token
#: is another call, as another idempotency key is).
CALL_OPTION_FIELDS: Final = ("idempotencyKey", "runId", "attemptId", "fencingToken")
#: The arguments in the message to the person at the keyboard are cut here (the page,
#: where a reviewer decides, shows them whole).
MESSAGE_ARGUMENTS_MAX: Final = 2000


class BadPublicUrl(ValueError):
    """`TOOLADAPTER_GATEWAY_PUBLIC_URL` is not an absolute http(s) URL without query."""


def checked_public_url(value: str) -> str:
    """The gateway's public base URL without a trailing slash; refused unless absolute
    http(s), with a host, and no query, fragment or credentials."""
    parts = urlsplit(value.strip())
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise BadPublicUrl(f"{value!r} is not an absolute http(s) URL")
    if parts.query or parts.fragment or parts.username or parts.password:
        raise BadPublicUrl(f"{value!r} must not carry a query, fragment or credentials")
    return value.strip().rstrip("/")


def approval_link(public_url: str, namespace: str, name: str) -> str:
    """The reviewers' page at one waiting call."""
    return f"{public_url}/ui/approvals?call={quote(namespace, safe='')}/{quote(name, safe='')}"


#: `namespace/name` of a call on the page (DNS-1123 names): anything else is dropped.
_CALL_REF: Final = re.compile(
    r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?/[a-z0-9]([-.a-z0-9]{0,251}[a-z0-9])?"
)


def call_ref(value: object) -> tuple[str, str] | None:
    """(namespace, name) of the page's `call` parameter; None unless it is one."""
    if not isinstance(value, str) or not _CALL_REF.fullmatch(value):
        return None
    namespace, _, name = value.partition("/")
    return namespace, name


def call_notice(ref: tuple[str, str], waiting: Mapping[str, Any] | None, person: str) -> str:
    """What the page says at the top when it was opened at one call (an MCP client's link)."""
    namespace, name = ref
    if waiting is None:
        return (
            f"Invocation {namespace}/{name} is not waiting for a decision in the namespaces "
            "you look at (it may have been decided, or you may not read it)."
        )
    caller = ((waiting.get("spec") or {}).get("caller") or {}).get("name")
    if caller == person:
        return (
            f"Invocation {namespace}/{name} is your own call: its caller cannot approve it. "
            "Forward this page's link to a reviewer."
        )
    return f"Invocation {namespace}/{name} waits for your decision: it is marked below."


def elicitation_message(obj: Mapping[str, Any], username: str) -> str:
    """What the person at the keyboard reads: the call waits for a reviewer, the arguments
    exactly as they will run, and that answering here approves nothing."""
    meta = obj.get("metadata") or {}
    spec = obj.get("spec") or {}
    status = obj.get("status") or {}
    tool = spec.get("tool") or {}
    view = shown(spec.get("arguments") or {})
    arguments = view.canonical
    if len(arguments) > MESSAGE_ARGUMENTS_MAX:
        more = len(arguments) - MESSAGE_ARGUMENTS_MAX
        arguments = (
            f"{arguments[:MESSAGE_ARGUMENTS_MAX]}... ({more} more characters: the page shows "
            "them all)"
        )
    lines = [
        f"{tool.get('id')} {tool.get('version')} needs a reviewer's approval "
        f"({status.get('effectiveClass') or 'gated'}): invocation "
        f"{meta.get('namespace')}/{meta.get('name')} waits.",
        f"Arguments, exactly as they will run: {arguments}",
        *(f"warning: {w}" for w in view.warnings),
        f"The caller ({username}) cannot approve its own call: if that is you, forward "
        "this link to a reviewer. Opening it approves nothing; a reviewer decides there.",
    ]
    return "\n".join(lines)


@dataclass(frozen=True)
class WaitState:
    """The call a 2026-07-28 client's `requestState` names (plaintext inside the seal)."""

    namespace: str
    name: str
    uid: str
    caller: str

    def dumps(self) -> str:
        return json.dumps(
            {"ns": self.namespace, "name": self.name, "uid": self.uid, "caller": self.caller},
            sort_keys=True,
            separators=(",", ":"),
        )

    @classmethod
    def loads(cls, text: str) -> WaitState | None:
        """None for anything this gateway did not write."""
        try:
            raw = json.loads(text)
        except ValueError:
            return None
        if not isinstance(raw, dict):
            return None
        fields = [raw.get(k) for k in ("ns", "name", "uid", "caller")]
        if not all(isinstance(f, str) and f for f in fields):
            return None
        ns, name, uid, caller = (str(f) for f in fields)
        return cls(namespace=ns, name=name, uid=uid, caller=caller)


def request_label(username: str, hash_: str) -> str:
    """The label value of (caller, request hash): 40 hex characters, a lookup key only."""
    return hashlib.sha256(f"{username}\n{hash_}".encode()).hexdigest()[:40]


def spec_request_hash(obj: Mapping[str, Any]) -> str | None:
    """The request hash of an invocation, computed from its own spec."""
    meta = obj.get("metadata") or {}
    spec = obj.get("spec") or {}
    tool = spec.get("tool") or {}
    if not tool.get("id") or not tool.get("version"):
        return None
    return request_hash(
        namespace=str(meta.get("namespace") or ""),
        tool_id=str(tool["id"]),
        tool_version=str(tool["version"]),
        arguments=spec.get("arguments") or {},
    )


def _moment(raw: Any) -> datetime | None:
    """A timestamp the object holds, if it is a readable one."""
    if not isinstance(raw, str):
        return None
    try:
        return datetime.fromisoformat(raw.replace("Z", "+00:00"))
    except ValueError:
        return None


def _ended(obj: Mapping[str, Any]) -> datetime | None:
    return _moment((obj.get("status") or {}).get("endedAt"))


def past_approval(obj: Mapping[str, Any]) -> bool:
    """Whether the call reached the approval stage: waiting there, approved (bound), or
    ended there (rejected, expired)."""
    status = obj.get("status") or {}
    return (
        state_of(obj) == InvocationState.AWAITING_APPROVAL
        or bool(status.get("approval"))
        or status.get("deniedStage") == Stage.APPROVAL
    )


@dataclass(frozen=True)
class RepeatedRequest:
    """A request that may repeat a call already made: what a stored call is compared with.

    The caller `username` and request hash `hash_` in `namespace`, at `now`; an ended call
    still counts while the approval it ran with lasts (`approval_expiries`: the
    ToolApprovals' `expiresAt` by name) or less than `window_seconds` after it ended. A call
    made with another idempotency key (or with one, where the other had none) is another
    call the agent means to make. So is one made with another run, attempt or fencing token
    (`options`: the request's spec values of `CALL_OPTION_FIELDS`; an attempt's call runs
    in that attempt's workspace, a newer fencing token's holder is not answered with a
    stale holder's call).
    """

    namespace: str
    username: str
    hash_: str
    now: datetime
    window_seconds: float
    approval_expiries: Mapping[str, datetime] | None = None
    idempotency_key: str | None = None
    options: Mapping[str, Any] | None = None


def attachable(obj: Mapping[str, Any], request: RepeatedRequest) -> bool:
    """Whether `request` attaches to `obj` instead of creating a new invocation: the same
    namespace, caller, request and call options (from the object's own spec), a real call
    (not a dry run) that reached the approval stage, and, once ended, within the time
    `request` gives it (see `RepeatedRequest`)."""
    meta = obj.get("metadata") or {}
    spec = obj.get("spec") or {}
    if meta.get("namespace") != request.namespace or meta.get("deletionTimestamp"):
        return False
    if (spec.get("caller") or {}).get("name") != request.username or spec.get("dryRun"):
        return False
    if spec_request_hash(obj) != request.hash_ or not past_approval(obj):
        return False
    wanted = {**dict.fromkeys(CALL_OPTION_FIELDS), **(request.options or {})}
    wanted["idempotencyKey"] = request.idempotency_key
    if any(spec.get(field) != wanted[field] for field in CALL_OPTION_FIELDS):
        return False
    state = state_of(obj)
    if state is None or not state.terminal:
        return True
    binding = (obj.get("status") or {}).get("approval") or {}
    expires = (request.approval_expiries or {}).get(str(binding.get("name") or ""))
    if expires is not None and request.now < expires:
        return True
    ended = _ended(obj)
    return ended is not None and 0 <= (request.now - ended).total_seconds() < request.window_seconds


def approvals_to_read(items: Sequence[Mapping[str, Any]], username: str) -> list[str]:
    """The ToolApprovals whose expiry decides whether an ended call of `username` among
    `items` still attaches."""
    names = []
    for obj in items:
        spec_caller = ((obj.get("spec") or {}).get("caller") or {}).get("name")
        state = state_of(obj)
        name = ((obj.get("status") or {}).get("approval") or {}).get("name")
        if spec_caller == username and state is not None and state.terminal and name:
            names.append(str(name))
    return sorted(set(names))


def expiry_of(approval: Mapping[str, Any]) -> datetime | None:
    """A ToolApproval's `spec.expiresAt`, if it has a readable one."""
    return _moment((approval.get("spec") or {}).get("expiresAt"))


def newest_attachable(
    items: Sequence[Mapping[str, Any]], request: RepeatedRequest
) -> Mapping[str, Any] | None:
    """The call `request` attaches to: a waiting one before an ended one, then the newest."""
    found = [obj for obj in items if attachable(obj, request)]

    def rank(obj: Mapping[str, Any]) -> tuple[int, str]:
        state = state_of(obj)
        live = 1 if state is not None and not state.terminal else 0
        return live, str((obj.get("metadata") or {}).get("creationTimestamp") or "")

    return max(found, key=rank) if found else None
