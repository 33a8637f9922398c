"""`interrupt`: stop a call that has not ended, as yourself.

The same `spec.interrupt` patch kubectl would make (`kube.interrupts`): the admission
policy lets the call's own caller do it, and people holding `update` on
`toolinvocations/interrupt` (tooladapter-operations). The call then settles as any
interrupted call does: Cancelled when nothing outside its sandbox can have happened, else
Observed or Uncertain.
"""

from __future__ import annotations

import asyncio
from typing import Any

import click

from tooladapter.cli.complete import invocations_in
from tooladapter.cli.context import Settings, common_options, run_async
from tooladapter.cli.exitcodes import CliError, ExitCode, for_outcome
from tooladapter.cli.follow import finished
from tooladapter.enums import InterruptStanding, InvocationState, Resource
from tooladapter.kube.interrupts import Interrupted, interrupt
from tooladapter.kube.user import UserApi
from tooladapter.review import readout


async def interrupt_call(api: UserApi, name: str) -> Interrupted:
    """Interrupt `name` in the connection's namespace as its user (see `kube.interrupts`)."""
    return await interrupt(api.objects, api.namespace, name)


async def settled(api: UserApi, name: str, timeout: float) -> dict[str, Any] | None:
    """The call once it ended, or None when it did not within `timeout` seconds."""
    try:
        async with asyncio.timeout(timeout):
            async for obj in api.follow(Resource.INVOCATIONS, name):
                if finished(obj):
                    return obj
    except TimeoutError:
        pass
    return None


async def _interrupt(settings: Settings, *, name: str, wait: bool, timeout: float) -> ExitCode:
    async with settings.connect() as api:
        done = await interrupt_call(api, name)
        state = (done.obj.get("status") or {}).get("state")
        if done.standing is InterruptStanding.ENDED:
            raise CliError(
                f"toolinvocation {api.namespace}/{name} already ended ({state}): nothing to "
                "interrupt",
                ExitCode.ERROR,
            )
        words = "requested" if done.standing is InterruptStanding.REQUESTED else "already requested"
        click.echo(f"toolinvocation {api.namespace}/{name}: interrupt {words}", err=True)
        final = await settled(api, name, timeout) if wait else None
    if settings.structured:
        obj = final or done.obj
        status = obj.get("status") or {}
        settings.emit(
            {
                "invocation": name,
                "interrupt": str(done.standing),
                "settled": final is not None,
                "state": status.get("state"),
                "receiptRef": status.get("receiptRef"),
            }
        )
    if not wait:
        return ExitCode.OK
    if final is None:
        click.echo(
            f"{name}: not settled within {timeout:.0f}s; it settles on its own "
            f"(follow it with kubectl get ti {name} -n {api.namespace} -w)",
            err=True,
        )
        return ExitCode.PENDING
    status = final.get("status") or {}
    if not settings.structured:
        line = f"{name}: {readout.outcome_label(status)}"
        if status.get("message"):
            line += f" | {status['message']}"
        click.echo(line, err=True)
    return for_outcome(status)


@click.command("interrupt")
@common_options
@click.argument("name", metavar="NAME", shell_complete=invocations_in(InvocationState.EXECUTING))
@click.option(
    "--wait/--no-wait", default=True, show_default=True, help="Follow the call until it settles."
)
@click.option("--timeout", type=click.FloatRange(min=1), default=120, show_default=True)
@click.pass_obj
def interrupt_command(settings: Settings, name: str, wait: bool, timeout: float) -> ExitCode:
    """Interrupt the call NAME: your own, or any with the tooladapter-operations role.

    It settles Cancelled when nothing outside its sandbox can have happened, else Observed
    or Uncertain (an operator then confirms the effect). Exit code with --wait: the call's
    end (6 Cancelled, 5 Uncertain, 0 Observed, ...), 7 when not settled within --timeout;
    1 when it had already ended; 9 when you may not interrupt it."""
    return run_async(_interrupt(settings, name=name, wait=wait, timeout=timeout))
