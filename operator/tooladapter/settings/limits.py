"""The bounds of one call when its descriptor or policy sets none: time and result size."""

from __future__ import annotations

from dataclasses import dataclass

from tooladapter.model import DEFAULT_MAX_RESULT_BYTES, DEFAULT_TIMEOUT_SECONDS
from tooladapter.settings import environ as env


@dataclass(frozen=True)
class LimitSettings:
    """Per-call defaults and upper bounds (reference: Tools:Execution)."""

    #: Timeout when a descriptor sets none (reference: Tools:Execution:DefaultTimeoutSeconds).
    default_timeout_seconds: int = DEFAULT_TIMEOUT_SECONDS
    #: Upper bound of any result (reference: Tools:Execution:MaxResultBytes).
    max_result_bytes: int = DEFAULT_MAX_RESULT_BYTES
    #: Results up to this size are also inlined in status.result; bigger ones only by ref.
    inline_result_bytes: int = 16_384
    #: Approval wait when no ToolPolicy sets one.
    default_approval_timeout_seconds: int = 3600

    @classmethod
    def from_env(cls) -> LimitSettings:
        base = cls()
        return cls(
            default_timeout_seconds=env.integer(
                "TOOLADAPTER_DEFAULT_TIMEOUT_SECONDS", base.default_timeout_seconds
            ),
            max_result_bytes=env.integer("TOOLADAPTER_MAX_RESULT_BYTES", base.max_result_bytes),
            inline_result_bytes=env.integer(
                "TOOLADAPTER_INLINE_RESULT_BYTES", base.inline_result_bytes
            ),
            default_approval_timeout_seconds=env.integer(
                "TOOLADAPTER_APPROVAL_TIMEOUT_SECONDS", base.default_approval_timeout_seconds
            ),
        )
