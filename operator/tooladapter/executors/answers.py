"""What a sandboxed tool's exit says: its answer, the same for a Job and a warm pod.

A tool that ran to its end answered, whatever its exit code: a non-zero one is its error
(Observed, `is_error`), never a failure to start. Both sandbox executors settle an exit
through `exited`, so a cold and a warm run of one call answer alike.
"""

from __future__ import annotations

import json
from typing import Any

from tooladapter.executors import Outcome

#: Output larger than this is never parsed as structured content.
JSON_OBJECT_BYTES = 1_048_576


def json_object(output: bytes) -> dict[str, Any] | None:
    """A tool that prints one JSON object gets it as structured content too."""
    text = output.strip()
    if not text.startswith(b"{") or len(text) > JSON_OBJECT_BYTES:
        return None
    try:
        value = json.loads(text)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def exited(output: bytes, exit_code: int) -> Outcome:
    """The outcome of a tool that ran to its end with `exit_code`.

    No `structured_bytes`: what the tool prints is the agent's, and its structured form is
    sanitized off the event loop, in the tenant's turn."""
    if exit_code != 0:
        return Outcome.tool_error(
            f"the tool exited with code {exit_code}", output=output, exit_code=exit_code
        )
    return Outcome.observed(output, exit_code=0, structured=json_object(output))
