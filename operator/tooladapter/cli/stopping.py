"""Ctrl-C while `invoke --wait` follows a call: the call runs in the cluster, not in this
process, so stopping the command must never look like stopping the call.

- On a terminal (stdin and stderr both a TTY), the first Ctrl-C asks whether to interrupt
  the call; `y` interrupts it (as you, `spec.interrupt`) and the command follows it until it
  settles (Cancelled, Observed or Uncertain).
- `--interrupt-on-exit` interrupts without asking whenever the command would stop before
  the call ended: the first Ctrl-C, a SIGTERM (a CI job cancelled), or `--timeout`. For
  scripts and pipelines, where there is nobody to ask.
- Otherwise, and on a second Ctrl-C (or SIGTERM) at any point, the command stops following
  and says that the call keeps running and how to interrupt it.

`action_for` is the pure rule; `follow_stoppable` is its asyncio wiring.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, Final

from tooladapter.cli.follow import StageDisplay, finished
from tooladapter.cli.interrupt import interrupt_call
from tooladapter.enums import InterruptStanding, Resource
from tooladapter.kube.errors import UserApiError
from tooladapter.kube.user import UserApi

#: How long the command follows an interrupted call after --timeout (with
#: --interrupt-on-exit) for it to settle.
SETTLE_SECONDS: Final = 60.0


class StopAction(StrEnum):
    """What a stop request (a signal, the timeout) does to the followed call."""

    ASK = "ask"
    INTERRUPT = "interrupt"
    LEAVE = "leave"


def action_for(count: int, *, interactive: bool, interrupt_on_exit: bool) -> StopAction:
    """The `count`-th stop request (1: the first): ask on a terminal, interrupt with
    `--interrupt-on-exit`; a second request always leaves the call running."""
    if count >= 2:
        return StopAction.LEAVE
    if interrupt_on_exit:
        return StopAction.INTERRUPT
    return StopAction.ASK if interactive else StopAction.LEAVE


def wants_interrupt(answer: str) -> bool:
    """`y`/`yes` (any case) interrupts; anything else, an empty line included, does not."""
    return answer.strip().lower() in ("y", "yes")


def left_running_message(name: str, namespace: str) -> str:
    return f"the call keeps running: tooladapter interrupt {name} -n {namespace}"


@dataclass
class Followed:
    """The last version seen; whether it ended; whether the person chose to leave it."""

    obj: dict[str, Any] | None
    finished: bool
    left_running: bool = False


def interactive() -> bool:
    return sys.stdin.isatty() and sys.stderr.isatty()


@contextlib.contextmanager
def _signals(queue: asyncio.Queue[int]) -> Iterator[None]:
    """SIGINT and SIGTERM put on `queue` instead of ending the process (main thread only;
    elsewhere they keep their defaults)."""
    loop = asyncio.get_running_loop()
    installed = []
    for sig in (signal.SIGINT, signal.SIGTERM):
        try:
            loop.add_signal_handler(sig, queue.put_nowait, int(sig))
        except (NotImplementedError, RuntimeError, ValueError):
            continue
        installed.append(sig)
    try:
        yield
    finally:
        for sig in installed:
            loop.remove_signal_handler(sig)


async def _read_line() -> str:
    """The next line on stdin, read when it is there (never a thread blocked on it)."""
    loop = asyncio.get_running_loop()
    answer: asyncio.Future[str] = loop.create_future()
    fd = sys.stdin.fileno()

    def ready() -> None:
        if not answer.done():
            answer.set_result(sys.stdin.readline())

    loop.add_reader(fd, ready)
    try:
        return await answer
    finally:
        loop.remove_reader(fd)


async def follow_stoppable(
    api: UserApi,
    name: str,
    *,
    timeout: float,
    display: StageDisplay,
    interrupt_on_exit: bool,
    write: Callable[[str], None],
    ask: bool | None = None,
) -> Followed:
    """Follow `name` until it ends, `timeout` passes, or a person stops following
    (module docstring). `ask`: whether a prompt can be answered (default: `interactive()`)."""
    can_ask = interactive() if ask is None else ask
    last: dict[str, Any] | None = None
    asking = False

    async def follow() -> dict[str, Any]:
        nonlocal last
        async for obj in api.follow(Resource.INVOCATIONS, name):
            last = obj
            if not asking:
                display.update(obj)
            if finished(obj):
                return obj
        raise AssertionError("a follow ends only when its object does")  # pragma: no cover

    signals: asyncio.Queue[int] = asyncio.Queue()
    following = asyncio.ensure_future(follow())
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    count = 0
    interrupted = False

    async def request_interrupt() -> None:
        nonlocal interrupted
        try:
            done = await interrupt_call(api, name)
        except UserApiError as err:
            write(f"\n  the interrupt was refused ({err.status}: {err.message})\n")
            return
        interrupted = True
        if done.standing is InterruptStanding.ENDED:
            return  # the follow sees the end
        write(f"\n  interrupt requested: following {name} until it settles\n")

    try:
        with _signals(signals):
            while True:
                got_signal = asyncio.ensure_future(signals.get())
                try:
                    done, _ = await asyncio.wait(
                        {following, got_signal},
                        timeout=max(0.0, deadline - loop.time()),
                        return_when=asyncio.FIRST_COMPLETED,
                    )
                finally:
                    got_signal.cancel()
                if following in done:
                    return Followed(following.result(), True)
                if got_signal in done and not got_signal.cancelled():
                    count += 1
                    action = action_for(
                        count, interactive=can_ask, interrupt_on_exit=interrupt_on_exit
                    )
                elif interrupt_on_exit and not interrupted:
                    action = StopAction.INTERRUPT  # --timeout, told to interrupt on exit
                    count = max(count, 1)
                    deadline = loop.time() + SETTLE_SECONDS
                else:
                    return Followed(last, False)  # --timeout
                if action is StopAction.LEAVE:
                    if interrupted:
                        write(
                            f"\n  stopped following; {name} was asked to stop and settles on "
                            f"its own (kubectl get ti {name} -n {api.namespace} -w)\n"
                        )
                    else:
                        write(f"\n  {left_running_message(name, api.namespace)}\n")
                    return Followed(last, False, left_running=True)
                if action is StopAction.INTERRUPT:
                    await request_interrupt()
                    continue
                # ASK: the follow goes on; the display waits for the answer.
                asking = True
                write(f"\n  interrupt {name}? [y/N] (Ctrl-C again leaves it running) ")
                answer = asyncio.ensure_future(_read_line())
                next_signal = asyncio.ensure_future(signals.get())
                try:
                    done, _ = await asyncio.wait(
                        {answer, next_signal, following}, return_when=asyncio.FIRST_COMPLETED
                    )
                finally:
                    next_signal.cancel()
                    answer.cancel()
                    asking = False
                if following in done:
                    return Followed(following.result(), True)
                if next_signal in done and not next_signal.cancelled():
                    write(f"\n  {left_running_message(name, api.namespace)}\n")
                    return Followed(last, False, left_running=True)
                if wants_interrupt(answer.result()):
                    await request_interrupt()
                elif last is not None:
                    display.update(last)
    finally:
        following.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await following
        display.close()
