"""The bounds of one call when its descriptor or policy sets none: time and result size."""

from __future__ import annotations

from dataclasses import dataclass

from tooladapter.model import DEFAULT_MAX_RESULT_BYTES, DEFAULT_TIMEOUT_SECONDS
from tooladapter.settings import environ as env
from tooladapter.settings.variables import FromEnv, setting


@dataclass(frozen=True)
class LimitSettings(FromEnv):
    """Per-call defaults and upper bounds (reference: Tools:Execution)."""

    #: Timeout when a descriptor sets none (reference: Tools:Execution:DefaultTimeoutSeconds).
    #: A call takes it when its limits are first derived (at brokering), and keeps it.
    default_timeout_seconds: int = setting(
        "TOOLADAPTER_DEFAULT_TIMEOUT_SECONDS",
        env.at_least(1),
        DEFAULT_TIMEOUT_SECONDS,
        reloadable=True,
    )
    #: Upper bound of any result, and the bound of a descriptor that sets no
    #: `maxResultBytes` (reference: Tools:Execution:MaxResultBytes). A call takes it when its
    #: limits are first derived (at brokering), and keeps it.
    max_result_bytes: int = setting(
        "TOOLADAPTER_MAX_RESULT_BYTES", env.at_least(1), DEFAULT_MAX_RESULT_BYTES, reloadable=True
    )
    #: Results up to this size are also inlined in status.result; bigger ones only by ref.
    inline_result_bytes: int = setting("TOOLADAPTER_INLINE_RESULT_BYTES", env.integer, 16_384)
    #: Approval wait when no ToolPolicy sets one.
    default_approval_timeout_seconds: int = setting(
        "TOOLADAPTER_APPROVAL_TIMEOUT_SECONDS", env.integer, 3600
    )
