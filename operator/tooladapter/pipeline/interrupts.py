"""Interrupting a call from a door (REST, CLI, MCP): what the request means for the call as
it stands, and the one write that makes it.

The interrupt itself is `spec.interrupt: true`, written as the requester (so the admission
policy `tooladapter-invocation-interrupt` decides who may: the call's own caller, or a
holder of `update` on `toolinvocations/interrupt`); the flow settles the call as it does for
any interrupt: Cancelled before any effect, else Observed or Uncertain. The write is a JSON
Patch that tests the call's uid and `status.state` as read, so a call that ended (or moved
on) between the read and the write is read again and answered as it stands, never
"interrupted" once it ended. Not the resourceVersion: every write to the object moves it,
including ones that change nothing the call's fate depends on (another holder of `patch`
rewriting `metadata.managedFields`, which no policy can pin), and a door that needed an
unchanged version could be held off by anyone who keeps writing.
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


def interrupt_patch(obj: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The JSON Patch that interrupts `obj`, applied only while it is the same object (uid)
    in the same state as read (the API server refuses the whole patch once a test fails).
    A call with no state yet is interrupted as it is: it has not ended, and should it end
    before the write lands, the answer read back says so."""
    ops: list[dict[str, Any]] = []
    uid = (obj.get("metadata") or {}).get("uid")
    if uid:
        ops.append({"op": "test", "path": "/metadata/uid", "value": uid})
    state = (obj.get("status") or {}).get("state")
    if state:
        ops.append({"op": "test", "path": "/status/state", "value": state})
    ops.append({"op": "add", "path": "/spec/interrupt", "value": True})
    return ops
