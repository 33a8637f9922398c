"""One tools/call: create the ToolInvocation as the caller, follow it, answer its end.

The invocation is followed on a watch (with the caller's token) from the version the
create returned; every change of state or stage is reported as progress. A call waiting
for an approval is followed for `gateway_approval_wait_seconds` at most, then answered as
still pending (not an error), naming the invocation; so is any call still running after
its descriptor's timeout plus that wait (plus a margin). A duplicate of an idempotency
key (same caller, same request) ends in its first call's state with that call's result and
`duplicateOf`: it is answered as it stands, naming the first call in `_meta`.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Mapping
from contextlib import aclosing
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Final

from tooladapter.artifacts import Space
from tooladapter.enums import InvocationState, Resource
from tooladapter.gateway.auth import too_many
from tooladapter.gateway.cancelling import CallTracker
from tooladapter.gateway.context import Caller, Deps
from tooladapter.gateway.doors import Busy
from tooladapter.gateway.tools import invocable
from tooladapter.gateway.views.tools import (
    META_PROVENANCE,
    PROVENANCE,
    ToolCall,
    ToolEntry,
    call_result,
    pending_result,
    progress_of,
)
from tooladapter.kube.callers import CallerApiError
from tooladapter.mcp.core.approvals import (
    CALL_OPTION_FIELDS,
    REQUEST_LABEL,
    RepeatedRequest,
    WaitState,
    approvals_to_read,
    expiry_of,
    newest_attachable,
    request_label,
)
from tooladapter.pipeline.hashing import request_hash
from tooladapter.review.readout import state_of

logger = logging.getLogger("tooladapter.gateway")

#: Report progress: (progress, total, message).
Progress = Callable[[float, float | None, str | None], Awaitable[None]]

#: Beyond the descriptor's timeout and the approval wait: the pipeline's own steps.
FOLLOW_MARGIN_SECONDS: Final = 120
#: A decided call stays attachable (its retry answers it) at least this long after it ended.
ATTACH_WINDOW_MIN: Final = 60
#: Approvals read per attach lookup at most (the newest calls of one caller and request).
ATTACH_APPROVALS_MAX: Final = 8


class UnknownTool(LookupError):
    """The caller may invoke no callable tool of that id in the namespace."""


class AwaitingReviewer(Exception):
    """The call waits for a reviewer and the client can open the reviewers' page: the MCP
    endpoint answers with the page's URL (input-required, or URLElicitationRequired)."""

    def __init__(self, obj: dict[str, Any]) -> None:
        super().__init__("awaiting approval")
        self.obj = obj


class StateMismatch(LookupError):
    """A resumed call's state names an invocation that is not (or no longer) this caller's."""


@dataclass(frozen=True)
class Elicit:
    """How a call that waits for an approval is answered to a client that can open a URL.

    `resume`: the call a 2026-07-28 client's sealed `requestState` names (no new
    invocation); `declined`: the person declined to open the page (answered as still
    pending at once, the call goes on waiting)."""

    resume: WaitState | None = None
    declined: bool = False


def _version(obj: Mapping[str, Any]) -> str:
    return str((obj.get("metadata") or {}).get("resourceVersion") or "")


def _name(obj: Mapping[str, Any]) -> str:
    return str((obj.get("metadata") or {}).get("name") or "")


def _refused(namespace: str, exc: CallerApiError) -> dict[str, Any]:
    return {
        "content": [
            {
                "type": "text",
                "text": f"the API server refused to create the invocation in {namespace} "
                f"({exc.status}): {exc.message}",
            }
        ],
        "isError": True,
        "_meta": {META_PROVENANCE: PROVENANCE},
    }


async def _call_tool(
    deps: Deps,
    caller: Caller,
    call: ToolCall,
    *,
    progress: Progress,
    elicit: Elicit | None,
    tracker: CallTracker | None,
) -> dict[str, Any]:
    namespace, tool_id, options = call.namespace, call.tool_id, call.options
    versions = (await invocable(deps, caller, namespace)).get(tool_id)
    if not versions:
        raise UnknownTool(f"unknown tool {tool_id!r} (none the caller may invoke in {namespace})")
    entry: ToolEntry | None = versions[0]
    version = options.version or versions[0].spec.version
    if options.version is not None:
        # A pinned version that is not callable still becomes an invocation: the pipeline
        # denies it at validation, with a receipt.
        entry = next((v for v in versions if v.spec.version == options.version), None)
    timeout = 0
    if entry is not None:
        # No timeoutSeconds on the descriptor: the operator's default applies (issue 27).
        timeout = entry.spec.timeout_seconds or deps.in_force().limits.default_timeout_seconds
    follower = _Follower(deps, caller, namespace, entry, progress, timeout, elicit)
    username = caller.identity.username
    if elicit is not None and elicit.resume is not None:
        resumed = await _resumed(caller, namespace, elicit)
        if tracker is not None:
            await tracker.bound(caller, namespace, _name(resumed))
        return await follower.follow(resumed, hand_back=False)
    body = call.body(version=version, username=username, groups=caller.identity.groups)
    hashed = request_hash(
        namespace=namespace,
        tool_id=tool_id,
        tool_version=version,
        arguments=body["spec"]["arguments"],
    )
    label = request_label(username, hashed)
    body["metadata"]["labels"] = {REQUEST_LABEL: label, **(tracker.label if tracker else {})}
    if elicit is not None:
        # The same request coming back attaches to the call that waits (or was decided
        # moments ago): never a second invocation, never a second approval to ask for.
        try:
            items = await caller.api.list(
                Resource.INVOCATIONS,
                namespace,
                field_selector=f"spec.caller.name={username}",
                label_selector=f"{REQUEST_LABEL}={label}",
            )
        except CallerApiError as exc:
            if exc.status != 403:
                return _refused(namespace, exc)
            items = []  # may create, not list: a call of its own (it needs its own approval)
        repeated = RepeatedRequest(
            namespace=namespace,
            username=username,
            hash_=hashed,
            now=datetime.now(UTC),
            window_seconds=max(deps.settings.gateway.approval_wait_seconds, ATTACH_WINDOW_MIN),
            approval_expiries=await _expiries(deps, namespace, approvals_to_read(items, username)),
            idempotency_key=options.idempotency_key,
            options={k: body["spec"].get(k) for k in CALL_OPTION_FIELDS},
        )
        found = newest_attachable(items, repeated)
        if found is not None:
            await follower.report(f"attached to {_name(found)}, which waits for this request")
            if tracker is not None:
                await tracker.bound(caller, namespace, _name(found))
            return await follower.follow(dict(found), hand_back=False)
    # Shielded: a request cut off while its create is under way still learns the name it
    # may have to interrupt (`CallTracker.creating`).
    creating = asyncio.ensure_future(caller.api.create(Resource.INVOCATIONS, namespace, body))
    creating.add_done_callback(_retrieved)
    if tracker is not None:
        tracker.creating = creating
    try:
        created = await asyncio.shield(creating)
    except CallerApiError as exc:
        return _refused(namespace, exc)
    if tracker is not None:
        await tracker.bound(caller, namespace, _name(created))
    return await follower.follow(created, hand_back=elicit is not None)


def _retrieved(done: asyncio.Future[Any]) -> None:
    """A create nobody awaits any more (its request was cut off) fails quietly."""
    if not done.cancelled():
        done.exception()


async def _expiries(deps: Deps, namespace: str, names: list[str]) -> dict[str, datetime]:
    """The expiry of each named ToolApproval, read with the operator's client (a caller may
    not read approvals; only the time is used); one that cannot be read does not count."""
    found: dict[str, datetime] = {}
    for name in names[:ATTACH_APPROVALS_MAX]:
        try:
            approval = await deps.kube.get_custom(Resource.APPROVALS, namespace, name)
        except Exception as exc:  # unreadable: the short window decides (a new call)
            logger.info("approval %s/%s unreadable for attaching: %s", namespace, name, type(exc))
            continue
        expires = expiry_of(approval)
        if expires is not None:
            found[name] = expires
    return found


async def _resumed(caller: Caller, namespace: str, elicit: Elicit) -> dict[str, Any]:
    """The invocation a resumed call's state names, read with the caller's token and
    checked: same namespace, same object (uid), the caller's own call."""
    state = elicit.resume
    assert state is not None
    if state.namespace != namespace or state.caller != caller.identity.username:
        raise StateMismatch("the request state is not this caller's in this namespace")
    try:
        obj = await caller.api.get(Resource.INVOCATIONS, namespace, state.name)
    except CallerApiError as exc:
        raise StateMismatch(f"invocation {namespace}/{state.name}: {exc.message}") from exc
    meta = obj.get("metadata") or {}
    spec_caller = ((obj.get("spec") or {}).get("caller") or {}).get("name")
    if meta.get("uid") != state.uid or spec_caller != caller.identity.username:
        raise StateMismatch(f"invocation {namespace}/{state.name} is not the call that waited")
    return obj


async def call_tool(
    deps: Deps,
    caller: Caller,
    call: ToolCall,
    *,
    progress: Progress,
    elicit: Elicit | None = None,
    tracker: CallTracker | None = None,
) -> dict[str, Any]:
    """The tools/call result (MCP wire form) of `call` as `caller`: a follow,
    held against the caller's and the namespace's stream caps (`doors`) from before the
    invocation is created (beyond them: a 429 `ProblemError`, and nothing created).
    `tracker`: how the client cancels this call (`gateway.cancelling`); a request cut off
    before its answer tells it so."""
    try:
        held = deps.doors.take_stream(caller.identity.username, [call.namespace])
    except Busy as exc:
        raise too_many(exc) from None
    cut = True
    try:
        answer = await _call_tool(
            deps, caller, call, progress=progress, elicit=elicit, tracker=tracker
        )
        cut = False
        return answer
    except BaseException as exc:
        cut = isinstance(exc, asyncio.CancelledError)
        raise
    finally:
        deps.doors.give(held)
        if tracker is not None:
            tracker.ended(caller, call.namespace, answered=not cut)


class _Follower:
    def __init__(
        self,
        deps: Deps,
        caller: Caller,
        namespace: str,
        entry: ToolEntry | None,
        progress: Progress,
        timeout_seconds: int,
        elicit: Elicit | None = None,
    ) -> None:
        self.deps = deps
        #: The client can open the page (and did not decline to): waits are handed back.
        self.elicit = elicit is not None and not elicit.declined
        self.hand_back = False
        self.caller = caller
        self.namespace = namespace
        self.entry = entry
        self.progress = progress
        self.wait = deps.settings.gateway.approval_wait_seconds
        if elicit is not None and elicit.declined:
            self.wait = 0  # declined: say where it stands now, do not hold
        self.started = time.monotonic()
        self.give_up = self.started + timeout_seconds + self.wait + FOLLOW_MARGIN_SECONDS
        self.approval_since: float | None = None
        self.reported: str | None = None
        self.sent = 0

    def deadline(self) -> float:
        if self.approval_since is not None:
            return min(self.give_up, self.approval_since + self.wait)
        return self.give_up

    async def follow(self, obj: dict[str, Any], *, hand_back: bool = False) -> dict[str, Any]:
        """Follow `obj` to its end. `hand_back`: a call that waits for an approval raises
        `AwaitingReviewer` at once (its client opens the page); an attached or resumed call
        (`hand_back=False` with `elicit`) raises it only once the approval wait is over."""
        self.hand_back = hand_back
        name = _name(obj)
        while True:
            answer, obj, name = await self.observe(obj, name)
            if answer is not None:
                return answer
            loop = asyncio.get_running_loop()
            try:
                async with asyncio.timeout(None) as window:
                    window.reschedule(loop.time() + max(0.0, self.deadline() - time.monotonic()))
                    events = self.caller.api.watch_one(
                        Resource.INVOCATIONS, self.namespace, name, _version(obj)
                    )
                    async with aclosing(events) as stream:
                        async for changed in stream:
                            answer, obj, followed = await self.observe(changed, name)
                            if answer is not None:
                                return answer
                            if followed != name:
                                name = followed
                                break  # watch the holder of the key instead
                            window.reschedule(
                                loop.time() + max(0.0, self.deadline() - time.monotonic())
                            )
            except TimeoutError:
                pass
            except CallerApiError as exc:
                if exc.status not in (410, 0) and exc.status < 500:
                    return self.lost(name, exc)
            try:
                obj = await self.caller.api.get(Resource.INVOCATIONS, self.namespace, name)
            except CallerApiError as exc:
                return self.lost(name, exc)

    def lost(self, name: str, exc: CallerApiError) -> dict[str, Any]:
        return {
            "content": [
                {
                    "type": "text",
                    "text": f"invocation {self.namespace}/{name} can no longer be followed "
                    f"({exc.status}: {exc.message})",
                }
            ],
            "isError": True,
            "_meta": {
                "dev.tooladapter/invocation": name,
                "dev.tooladapter/namespace": self.namespace,
                META_PROVENANCE: PROVENANCE,
            },
        }

    async def observe(
        self, obj: dict[str, Any], name: str
    ) -> tuple[dict[str, Any] | None, dict[str, Any], str]:
        """(the answer, or None to go on following; the object; the name followed)."""
        state = state_of(obj)
        now = time.monotonic()
        if state is not None and state.terminal:
            # A duplicate carries its first call's outcome and is answered as it is.
            return await self.answer(obj), obj, name
        step = progress_of(obj)
        if step is not None:
            await self.report(step[1])
        if state == InvocationState.AWAITING_APPROVAL:
            self.approval_since = self.approval_since or now
            if self.elicit and (self.hand_back or now >= self.deadline()):
                raise AwaitingReviewer(obj)
        if now >= self.deadline():
            return pending_result(obj, now - self.started), obj, name
        return None, obj, name

    async def report(self, message: str) -> None:
        if message == self.reported:
            return
        self.reported = message
        self.sent += 1
        await self.progress(float(self.sent), None, message)

    async def answer(self, obj: dict[str, Any]) -> dict[str, Any]:
        status = obj.get("status") or {}
        result = status.get("result") or {}
        text: str | None = result.get("content") if result else None
        ref = status.get("resultRef")
        if result and not result.get("inline", True) and ref:
            text = await self._stored_text(str(ref))
        schema = None
        if self.entry is not None and state_of(obj) == InvocationState.OBSERVED:
            tool = (obj.get("spec") or {}).get("tool") or {}
            if tool.get("version") == self.entry.spec.version:
                schema = self.entry.spec.output_schema
                if not (isinstance(schema, dict) and schema.get("type") == "object"):
                    schema = None
        answer = call_result(obj, text=text, output_schema=schema, delimiters=self.delimiters())
        return answer

    def delimiters(self) -> bool:
        """The descriptor's `resultDelimiters`, else the gateway's setting."""
        chosen = self.entry.spec.result_delimiters if self.entry is not None else None
        return self.deps.settings.gateway.result_delimiters if chosen is None else chosen

    async def _stored_text(self, ref: str) -> str:
        try:
            data = await asyncio.to_thread(self.deps.store.get, ref, Space.RESULTS)
        except KeyError:
            return f"(the result is stored as {ref}; this replica cannot read it)"
        return data.decode("utf-8", errors="replace")
