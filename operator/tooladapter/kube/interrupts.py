"""Interrupt one ToolInvocation as whoever `objects` speaks for (the command line's user, a
gateway caller): read it, write `spec.interrupt` on the version read, read again when it
changed meanwhile. The API server's RBAC and the interrupt admission policy judge the write.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final

from tooladapter.enums import InterruptStanding, Resource
from tooladapter.kube.objects import CustomObjects
from tooladapter.pipeline.interrupts import interrupt_patch, standing

#: Reads and writes at most: a running call's status changes often (stages, progress), and
#: each change between the read and the write costs one more round.
ATTEMPTS: Final = 8


@dataclass(frozen=True)
class Interrupted:
    """How the request stood (`REQUESTED`: written now) and the object as last seen."""

    standing: InterruptStanding
    obj: dict[str, Any]


async def interrupt(objects: CustomObjects, namespace: str, name: str) -> Interrupted:
    """Interrupt `namespace/name` unless it ended. Errors are `objects`' own error class
    (404, 403 from RBAC or admission, ...); a call that keeps changing faster than it can be
    written raises the last 409."""
    conflicts = 0
    while True:
        obj = await objects.get(Resource.INVOCATIONS, namespace, name)
        found = standing(obj)
        if found is not InterruptStanding.REQUESTED:
            return Interrupted(found, obj)
        try:
            patched = await objects.merge_patch(
                Resource.INVOCATIONS, namespace, name, interrupt_patch(obj)
            )
        except objects.error as exc:
            conflicts += 1
            if exc.status != 409 or conflicts >= ATTEMPTS:
                raise
            continue
        return Interrupted(InterruptStanding.REQUESTED, patched)
