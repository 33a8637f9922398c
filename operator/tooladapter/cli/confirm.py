"""`confirm`: an operator (a person) records whether an Uncertain effect happened."""

from __future__ import annotations

import asyncio

import click

from tooladapter.cli.bodies import confirmation_patch
from tooladapter.cli.complete import invocations_in
from tooladapter.cli.context import Settings, common_options, run_async
from tooladapter.cli.exitcodes import ExitCode
from tooladapter.enums import InvocationState, Resource


async def _confirm(
    settings: Settings, *, name: str, happened: bool, evidence: str, wait: bool, timeout: float
) -> ExitCode:
    async with settings.connect() as api:
        me = await api.whoami()
        invocation = await api.get(Resource.INVOCATIONS, name)
        patch = confirmation_patch(
            invocation, happened=happened, confirmed_by=me.username, evidence=evidence
        )
        await api.patch_status(Resource.INVOCATIONS, name, patch)
        words = "happened" if happened else "did not happen"
        click.echo(
            f"toolinvocation {api.namespace}/{name}: effect {words}, as {me.username}", err=True
        )
        recorded = None
        if wait:
            try:
                async with asyncio.timeout(timeout):
                    async for obj in api.follow(Resource.INVOCATIONS, name):
                        status = obj.get("status") or {}
                        if (status.get("effectConfirmation") or {}).get("recorded"):
                            recorded = status
                            break
            except TimeoutError:
                pass
    out = {
        "invocation": name,
        "effectHappened": happened,
        "recorded": recorded is not None,
        "receiptRef": (recorded or {}).get("receiptRef"),
    }
    if settings.structured:
        settings.emit(out)
    elif recorded is not None:
        click.echo(f"recorded on receipt {out['receiptRef']}")
    elif wait:
        click.echo(f"not recorded by the operator within {timeout:.0f}s", err=True)
    if wait and recorded is None:
        return ExitCode.PENDING
    return ExitCode.OK


@click.command("confirm")
@common_options
@click.argument("name", metavar="NAME", shell_complete=invocations_in(InvocationState.UNCERTAIN))
@click.option(
    "--happened/--did-not-happen",
    "happened",
    default=None,
    help="Whether the effect took place (checked outside tooladapter). Required.",
)
@click.option("--evidence", required=True, help="What you checked (on the receipt, redacted).")
@click.option("--wait/--no-wait", default=True, show_default=True, help="Wait for the new receipt.")
@click.option("--timeout", type=click.FloatRange(min=1), default=60, show_default=True)
@click.pass_obj
def confirm(
    settings: Settings,
    name: str,
    happened: bool | None,
    evidence: str,
    wait: bool,
    timeout: float,
) -> ExitCode:
    """Record whether the Uncertain call NAME's effect happened (needs the
    tooladapter-operations role; recorded under your name on a new receipt).

    --did-not-happen frees the call's idempotency key: a new call with it runs once."""
    if happened is None:
        raise click.UsageError("say --happened or --did-not-happen")
    return run_async(
        _confirm(
            settings, name=name, happened=happened, evidence=evidence, wait=wait, timeout=timeout
        )
    )
