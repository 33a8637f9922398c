"""Executors: one small interface (`Executor`) for every tool kind.

An Outcome says what is known about the effect, the same way for every kind (the table in
docs and `kubectl explain toolinvocation.status.state`):

- Observed: the tool ran to its end and its answer was received, whatever the answer. A
  tool's own error (a non-zero exit code, an HTTP status of 400 or more other than a
  gateway's 502/504, an MCP `isError` or JSON-RPC error, a native not-found) is Observed
  with `is_error` (`Outcome.tool_error`): it may have acted, so it is never "safe to retry".
- Failed: the tool provably never started acting (the request was not sent, the Job was
  refused or never had a pod), or its effects are contained (read, sandbox) and its answer
  was lost.
- Uncertain: it may have started acting (its request was sent) and the answer was lost.
- Cancelled: interrupted before anything started.

The one rule behind Failed vs Uncertain is `sending.settle`: what was sent (the last byte of
the request written, a sandbox's tool possibly started) and whether the class can have
effects (`SideEffectClass.effects_contained`). Every executor settles an unconfirmed end
through `lost` (or `unconfirmed`, for "it may have started"), never on its own.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from contextlib import AbstractAsyncContextManager, nullcontext
from dataclasses import dataclass, field
from typing import Any, Protocol

from tooladapter.credentials.carried import Carried
from tooladapter.enums import (
    FailureClass,
    InvocationState,
    SandboxStart,
    SideEffectClass,
    Transmission,
)
from tooladapter.executors.limits import CallLimits
from tooladapter.executors.sending import settle
from tooladapter.model import ToolDescriptorSpec, WorkspaceLease


@dataclass(frozen=True)
class Call:
    namespace: str
    name: str
    uid: str
    caller: str
    descriptor: ToolDescriptorSpec | None
    arguments: dict[str, Any]
    effective_class: SideEffectClass
    #: Its timeout and result bound, derived once at brokering (`CallLimits`).
    limits: CallLimits
    idempotency_key: str | None = None
    #: The argv a shell or container tool runs, parsed once by the flow (`command_line`).
    argv: tuple[str, ...] = ()
    lease_id: str | None = None
    #: The lease goes through the egress proxy: the pod gets HTTP(S)_PROXY, and these
    #: CIDR entries as NO_PROXY. None: no proxy.
    proxy_bypass: tuple[str, ...] | None = None
    #: W3C trace context for the tool's request (http, MCP), when traces are exported.
    traceparent: str | None = None
    #: The call's attempt (`spec.attemptId`): with a `sandbox.workspace: attempt` tool, the
    #: workspace it runs in.
    attempt_id: str | None = None
    #: The lease's egress allow-list (CIDR entries keep a call out of warm sandboxes).
    egress_allow: tuple[str, ...] = ()
    #: The credentials an operator-run call (http) carries, with their values; each goes
    #: only into the requests its `inject` matches (`credentials.requests`).
    credentials: tuple[Carried, ...] = field(default=(), repr=False)
    interrupted: asyncio.Event = field(default_factory=asyncio.Event, compare=False)
    #: Waits on something outside the operator (a sandbox Job) without holding one of the
    #: calls-in-flight slots (`inflight`): long Jobs must not crowd out other calls.
    outside: Callable[[], AbstractAsyncContextManager[None]] = field(
        default=nullcontext, compare=False
    )
    #: Awaits an http or MCP server's answer without a calls-in-flight slot, holding one of
    #: the bounded remote slots instead (`Runtime.remote_gate`): slow servers never crowd
    #: out other calls, and answers held at once stay bounded.
    remote: Callable[[], AbstractAsyncContextManager[None]] = field(
        default=nullcontext, compare=False
    )
    #: Says the call waits for capacity (its sandbox's pod cannot be scheduled yet): the
    #: flow records the wait's detail in status (`flow.capacity.note_unschedulable`).
    waiting: Callable[[str], Awaitable[None]] | None = field(default=None, compare=False)


@dataclass(frozen=True)
class SandboxRun:
    """Which sandbox ran a call (status.sandboxLease, the receipt's `sandbox`)."""

    start: SandboxStart
    #: The Job (cold) or pod (warm).
    name: str
    #: The attempt's workspace the call ran in.
    workspace: WorkspaceLease | None = None


@dataclass(frozen=True)
class Outcome:
    state: InvocationState
    output: bytes = b""
    structured: dict[str, Any] | None = None
    exit_code: int | None = None
    failure_class: FailureClass | None = None
    message: str = ""
    #: The request was never sent (`sending.settle`: no connection, a request cut short,
    #: the Job refused): the descriptor's `retryPolicy` may send the call again. Never set
    #: once its last byte may have been written.
    retryable: bool = False
    #: Bytes of the JSON `structured` was parsed from (its sanitizing cost is linear in
    #: them); None when unknown, and its sanitizing then runs off the event loop.
    structured_bytes: int | None = None
    #: Observed, but the tool answered with an error (`status.result.isError`).
    is_error: bool = False
    #: The HTTP status an http tool's server answered.
    http_status: int | None = None
    #: How long the sandbox's tool may have run, on the operator's clock (`executors.meter`),
    #: for the usage meter and the receipt; None: no sandbox, or its tool never started.
    sandbox_seconds: float | None = None
    #: The sandbox that ran the call (sandboxed kinds).
    sandbox_run: SandboxRun | None = None

    @property
    def resendable(self) -> bool:
        """`retryPolicy` may run the call again: Failed, and never sent."""
        return self.state == InvocationState.FAILED and self.retryable

    @classmethod
    def observed(
        cls,
        output: bytes,
        *,
        structured: dict[str, Any] | None = None,
        exit_code: int | None = None,
        structured_bytes: int | None = None,
    ) -> Outcome:
        return cls(
            InvocationState.OBSERVED,
            output,
            structured,
            exit_code,
            structured_bytes=structured_bytes,
        )

    @classmethod
    def tool_error(
        cls,
        message: str,
        *,
        output: bytes = b"",
        exit_code: int | None = None,
        http_status: int | None = None,
        failure: FailureClass = FailureClass.TOOL_ERROR,
    ) -> Outcome:
        """The tool ran to its end and answered with an error: Observed, `is_error`.

        Not Failed: the tool may have acted before it reported the error (a half-applied
        plan, a POST the partner processed), and Failed tells agents "safe to retry"."""
        return cls(
            InvocationState.OBSERVED,
            output,
            None,
            exit_code,
            failure,
            message,
            is_error=True,
            http_status=http_status,
        )

    @classmethod
    def failed(
        cls,
        failure: FailureClass,
        message: str,
        *,
        output: bytes = b"",
        exit_code: int | None = None,
        retryable: bool = False,
    ) -> Outcome:
        return cls(InvocationState.FAILED, output, None, exit_code, failure, message, retryable)


def unconfirmed(call: Call, message: str, *, output: bytes = b"") -> Outcome:
    """The effect may have happened: Uncertain, unless the class cannot have an effect."""
    return unconfirmed_for(call.effective_class, message, output=output)


def unconfirmed_for(
    effective: SideEffectClass,
    message: str,
    *,
    output: bytes = b"",
    failure: FailureClass = FailureClass.TRANSIENT,
    exit_code: int | None = None,
) -> Outcome:
    """Failed with `failure` when the class keeps effects contained, else Uncertain: a
    call that may have started is settled as one that was sent."""
    return lost(
        effective,
        Transmission.WRITTEN,
        message,
        output=output,
        failure=failure,
        exit_code=exit_code,
    )


def lost(
    effective: SideEffectClass,
    transmission: Transmission,
    message: str,
    *,
    output: bytes = b"",
    failure: FailureClass = FailureClass.TRANSIENT,
    exit_code: int | None = None,
) -> Outcome:
    """The outcome of a call whose answer did not come, after getting as far as
    `transmission`: the one rule (`sending.settle`) decides Failed or Uncertain and whether
    `retryPolicy` may send it again."""
    settled = settle(transmission, effective, failure)
    if settled.state == InvocationState.UNCERTAIN and failure != FailureClass.TRANSIENT:
        message = f"{message}; its effect is unconfirmed"
    return Outcome(
        settled.state,
        output,
        None,
        exit_code,
        settled.failure,
        message,
        retryable=settled.resend,
    )


#: Executors read this much past a call's `max_result_bytes`: the sanitizer must see any
#: secret whole (in any of its encodings) before the result is cut at the bound, or the
#: shown part could end with most of one. `flow.ending` drops what lies within this
#: distance of the end of a cut read before redacting.
READ_MARGIN_BYTES = 64 * 1024


def read_limit(max_result_bytes: int) -> int:
    """How many bytes of output an executor reads for a call bounded at `max_result_bytes`."""
    return max_result_bytes + READ_MARGIN_BYTES


class Executor(Protocol):
    """Runs one kind of tool."""

    async def execute(self, call: Call) -> Outcome:
        """Start the call and see it to its end."""

    async def resume(self, call: Call) -> Outcome:
        """The call was started by an operator that stopped: follow it, never start it again."""


class InOperator:
    """Executors whose call runs inside the operator process: it died with the process."""

    async def resume(self, call: Call) -> Outcome:
        kind = call.descriptor.kind if call.descriptor else "tool"
        return unconfirmed(
            call, f"the operator stopped during the {kind} call; its effect cannot be confirmed"
        )
