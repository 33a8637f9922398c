"""What "sent" means, decided in one place for every executor.

A request whose last byte was written is sent: whoever received it may have acted on it,
whatever happens next (a reset, a timeout, a close, a gateway's 502/504). After that, a
class that can have effects (shared-write, external, production, spend) settles Uncertain,
never Failed, and the descriptor's `retryPolicy` never sends it again. A class that
declares no effect (read, sandbox) still ends Failed after sending: by its declaration a
new call is safe, though `retryPolicy` sends again only what was never sent. A request cut
short (connected, not all written) was not sent: a server does not act on an incomplete
message, so it is Failed and may be sent again, as when no connection was made.

Each executor says how far its request got (`Transmission`); `settle` says what that
means, and `executors.lost` builds the outcome from it. See docs/concepts/outcomes.md.
"""

from __future__ import annotations

from dataclasses import dataclass

from tooladapter.enums import FailureClass, InvocationState, SideEffectClass, Transmission


@dataclass(frozen=True)
class Settlement:
    """The outcome class of a call whose answer did not come."""

    state: InvocationState
    failure: FailureClass
    #: The descriptor's `retryPolicy` may send the call again: only when it was never sent.
    resend: bool


def settle(
    transmission: Transmission,
    effective: SideEffectClass,
    failure: FailureClass = FailureClass.TRANSIENT,
) -> Settlement:
    """Failed or Uncertain for a call that broke after getting as far as `transmission`."""
    if not transmission.sent:
        return Settlement(InvocationState.FAILED, failure, resend=True)
    if effective.effects_contained:
        # Sent, but by its declaration it has no effect (or one inside its own sandbox):
        # Failed tells the agent a new call is safe. Still never re-sent by retryPolicy,
        # which only repeats what never left.
        return Settlement(InvocationState.FAILED, failure, resend=False)
    return Settlement(InvocationState.UNCERTAIN, FailureClass.EFFECT_UNCONFIRMED, resend=False)
