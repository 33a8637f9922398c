"""Executors: one small interface (`execute(call) -> Outcome`) for every tool kind.

An Outcome says what is known about the effect: Observed (result seen), Failed (no effect
could have happened, or the tool reported an error), Uncertain (it may have happened and
cannot be confirmed) or Cancelled (interrupted before anything started).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any, Protocol

from ..enums import FailureClass, InvocationState, SideEffectClass
from ..model import ToolDescriptorSpec


@dataclass(frozen=True)
class Call:
    namespace: str
    name: str
    uid: str
    caller: str
    descriptor: ToolDescriptorSpec | None
    arguments: dict[str, Any]
    effective_class: SideEffectClass
    timeout_seconds: int
    max_result_bytes: int
    idempotency_key: str | None = None
    argv: tuple[str, ...] = ()
    lease_id: str | None = None
    interrupted: asyncio.Event = field(default_factory=asyncio.Event, compare=False)


@dataclass(frozen=True)
class Outcome:
    state: InvocationState
    output: bytes = b""
    structured: dict[str, Any] | None = None
    exit_code: int | None = None
    failure_class: FailureClass | None = None
    message: str = ""

    @classmethod
    def observed(
        cls,
        output: bytes,
        *,
        structured: dict[str, Any] | None = None,
        exit_code: int | None = None,
    ) -> Outcome:
        return cls(InvocationState.OBSERVED, output, structured, exit_code)

    @classmethod
    def failed(
        cls,
        failure: FailureClass,
        message: str,
        *,
        output: bytes = b"",
        exit_code: int | None = None,
    ) -> Outcome:
        return cls(InvocationState.FAILED, output, None, exit_code, failure, message)


def unconfirmed(call: Call, message: str, *, output: bytes = b"") -> Outcome:
    """The effect may have happened: Uncertain, unless the class cannot have an effect."""
    return unconfirmed_for(call.effective_class, message, output=output)


def unconfirmed_for(effective: SideEffectClass, message: str, *, output: bytes = b"") -> Outcome:
    if effective in (SideEffectClass.READ, SideEffectClass.SANDBOX):
        # read tools have no effect, sandbox tools only inside their own throwaway sandbox.
        return Outcome(InvocationState.FAILED, output, None, None, FailureClass.TRANSIENT, message)
    return Outcome(
        InvocationState.UNCERTAIN, output, None, None, FailureClass.EFFECT_UNCONFIRMED, message
    )


class Executor(Protocol):
    async def execute(self, call: Call) -> Outcome: ...
