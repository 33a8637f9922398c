"""A call's limits: how long it may run and how many bytes of result it may return.

Both come from the descriptor and the operator's settings. They are derived once, at
brokering (`flow.brokering`), and carried from there to every reader: the lease and its
credentials, the sandbox Job's deadline, each executor's wait and read bound, and the
sanitizer's cut. No reader derives them again, so none can disagree.
"""

from __future__ import annotations

from dataclasses import dataclass

from tooladapter.model import ToolDescriptorSpec, effective_timeout
from tooladapter.settings import Settings


@dataclass(frozen=True)
class CallLimits:
    #: The call's deadline (the descriptor's `timeoutSeconds`, else the operator's default).
    timeout_seconds: int
    #: The result's bound: the descriptor's `maxResultBytes`, never above the operator's
    #: (the operator's when the descriptor sets none).
    max_result_bytes: int

    @classmethod
    def of(cls, descriptor: ToolDescriptorSpec | None, settings: Settings) -> CallLimits:
        """The limits of a call of `descriptor` (None: a descriptor gone since, the
        operator's defaults)."""
        ceiling = settings.limits.max_result_bytes
        own = descriptor.max_result_bytes if descriptor is not None else None
        return cls(
            timeout_seconds=effective_timeout(descriptor, settings.limits.default_timeout_seconds),
            max_result_bytes=min(own, ceiling) if own is not None else ceiling,
        )
