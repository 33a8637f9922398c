"""Following one invocation on a watch until it ends, showing its stages as they happen.

On a terminal the current state is redrawn on one line under the stage lines; elsewhere
(a CI log, a pipe) each stage is one plain line and nothing is redrawn.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from tooladapter.cli.render import new_stage_lines
from tooladapter.enums import TERMINAL_STATES, InvocationState, Resource
from tooladapter.kube.user import UserApi

#: The terminal state of a dry-run (`spec.dryRun: true`): evaluated, never executed.
PREVIEWED = "Previewed"


def finished(obj: dict[str, Any], *, dry_run: bool = False) -> bool:
    state = (obj.get("status") or {}).get("state")
    if dry_run and state == PREVIEWED:
        return True
    try:
        return InvocationState(state or "") in TERMINAL_STATES
    except ValueError:
        return False


@dataclass
class StageDisplay:
    """Writes new stage lines (and, on a TTY, a redrawn state line) through `write`."""

    write: Callable[[str], None]
    tty: bool
    namespace: str
    shown: int = 0
    state: str | None = None
    hinted: bool = field(default=False)

    def update(self, obj: dict[str, Any]) -> None:
        status = obj.get("status") or {}
        lines, self.shown = new_stage_lines(status, self.shown)
        state = status.get("state")
        if self.tty and (lines or state != self.state):
            self.write("\r\x1b[K")
        for line in lines:
            self.write(f"  {line}\n")
        if state == InvocationState.AWAITING_APPROVAL and not self.hinted:
            self.hinted = True
            name = (obj.get("metadata") or {}).get("name")
            self.write(
                f"  waiting for an approval: a reviewer runs "
                f"`tooladapter approve {name} -n {self.namespace}`\n"
            )
        if self.tty:
            self.write(f"  state: {state or '(not evaluated yet)'}")
        elif state != self.state:
            self.write(f"  state: {state or '(not evaluated yet)'}\n")
        self.state = state

    def close(self) -> None:
        if self.tty:
            self.write("\n")


async def follow_until_finished(
    api: UserApi,
    name: str,
    *,
    timeout: float,
    display: StageDisplay | None,
    dry_run: bool = False,
) -> tuple[dict[str, Any] | None, bool]:
    """The last version seen and whether it finished within `timeout` seconds."""
    last: dict[str, Any] | None = None
    try:
        async with asyncio.timeout(timeout):
            async for obj in api.follow(Resource.INVOCATIONS, name):
                last = obj
                if display is not None:
                    display.update(obj)
                if finished(obj, dry_run=dry_run):
                    return obj, True
    except TimeoutError:
        pass
    finally:
        if display is not None:
            display.close()
    return last, False
