"""Interrupting a call from a door (REST, CLI, MCP): what the request means for the call as
it stands, and the one write that makes it.

The interrupt itself is `spec.interrupt: true`, written as the requester (so the admission
policy `tooladapter-invocation-interrupt` decides who may: the call's own caller, or a
holder of `update` on `toolinvocations/interrupt`); the flow settles the call as it does for
any interrupt: Cancelled before any effect, else Observed or Uncertain. The write names the
resourceVersion it was decided on, so a call that ended between the read and the write is
read again (409 from the API server) and answered as ended, never "interrupted".
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tooladapter.enums import InterruptStanding, InvocationState


def standing(obj: Mapping[str, Any]) -> InterruptStanding:
    """Where an interrupt of `obj` (a ToolInvocation) stands."""
    raw = str((obj.get("status") or {}).get("state") or "")
    try:
        ended = bool(raw) and InvocationState(raw).terminal
    except ValueError:
        ended = False  # a state this version does not know is not taken for an end
    if ended:
        return InterruptStanding.ENDED
    if (obj.get("spec") or {}).get("interrupt") is True:
        return InterruptStanding.ALREADY_REQUESTED
    return InterruptStanding.REQUESTED


def interrupt_patch(obj: Mapping[str, Any]) -> dict[str, Any]:
    """The JSON merge patch that interrupts `obj`, valid only on the version it was read at
    (the API server answers 409 once the call changed meanwhile)."""
    version = str((obj.get("metadata") or {}).get("resourceVersion") or "")
    patch: dict[str, Any] = {"spec": {"interrupt": True}}
    if version:
        patch["metadata"] = {"resourceVersion": version}
    return patch
