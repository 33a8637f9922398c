"""Interrupt one ToolInvocation as whoever `objects` speaks for (the command line's user, a
gateway caller): read it, write `spec.interrupt` while it stands as read (same uid and state,
`pipeline.interrupts.interrupt_patch`), read again when it moved on meanwhile. The API
server's RBAC and the interrupt admission policy judge the write.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final

from tooladapter.enums import InterruptStanding, Resource
from tooladapter.kube.objects import CustomObjects
from tooladapter.pipeline.interrupts import interrupt_patch, standing

#: Reads and writes at most: only a change of the call's state between the read and the
#: write costs one more round (a call has few states; metadata or progress moving costs none).
ATTEMPTS: Final = 8
#: A test of the patch that failed: 422 (the apply failed), or 409.
_MOVED_ON: Final = (409, 422)


@dataclass(frozen=True)
class Interrupted:
    """How the request stood (`REQUESTED`: written now) and the object as last seen."""

    standing: InterruptStanding
    obj: dict[str, Any]


def _stands(obj: dict[str, Any]) -> tuple[Any, Any]:
    """What the patch tests: the object and its state."""
    return (obj.get("metadata") or {}).get("uid"), (obj.get("status") or {}).get("state")


async def interrupt(objects: CustomObjects, namespace: str, name: str) -> Interrupted:
    """Interrupt `namespace/name` unless it ended. Errors are `objects`' own error class
    (404, 403 from RBAC or admission, ...); a refused write of a call that still stands as
    it was read (so no test failed: something else refused it), or of one whose state keeps
    changing faster than it can be written, raises its error."""
    refused: tuple[tuple[Any, Any], Exception] | None = None
    for attempt in range(ATTEMPTS):
        obj = await objects.get(Resource.INVOCATIONS, namespace, name)
        found = standing(obj)
        if found is not InterruptStanding.REQUESTED:
            return Interrupted(found, obj)
        if refused is not None and refused[0] == _stands(obj):
            raise refused[1]
        try:
            patched = await objects.json_patch(
                Resource.INVOCATIONS, namespace, name, interrupt_patch(obj)
            )
        except objects.error as exc:
            if exc.status not in _MOVED_ON or attempt == ATTEMPTS - 1:
                raise
            refused = (_stands(obj), exc)
            continue
        # Written on a call with no state yet, which may have ended meanwhile: as it stands.
        ended = standing(patched) is InterruptStanding.ENDED
        return Interrupted(
            InterruptStanding.ENDED if ended else InterruptStanding.REQUESTED, patched
        )
    raise AssertionError("unreachable: the last attempt returns or raises")
