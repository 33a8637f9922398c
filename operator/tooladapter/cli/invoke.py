"""`invoke` and `dry-run`: create a ToolInvocation as yourself and follow it to its end."""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import click

from tooladapter.cli import views
from tooladapter.cli.bodies import claimable_groups, invocation_body
from tooladapter.cli.complete import tool_ids
from tooladapter.cli.context import (
    Settings,
    common_options,
    gathered,
    run_async,
    stacked,
    stderr_is_tty,
    wait_options,
)
from tooladapter.cli.exitcodes import CliError, ExitCode, for_outcome
from tooladapter.cli.follow import PREVIEWED, StageDisplay, follow_until_finished
from tooladapter.cli.parsing import name_prefix, parse_arguments
from tooladapter.cli.render import cell
from tooladapter.cli.stopping import follow_stoppable
from tooladapter.enums import InvocationState, Resource
from tooladapter.kube.errors import UserApiError
from tooladapter.kube.user import UserApi
from tooladapter.review import readout
from tooladapter.review.shown import visible


@dataclass(frozen=True)
class Call:
    """The input both commands take (`call_options`): the tool, its arguments, the call's
    identity, and how long to follow it."""

    tool_id: str
    pairs: tuple[str, ...]
    args_json: str | None
    tool_version: str | None
    run_id: str | None
    attempt_id: str | None
    release_workspace: bool
    name: str | None
    wait: bool
    timeout: float


def call_options(func: Callable[..., Any]) -> Callable[..., Any]:
    """`Call`'s options, handed to `func` as `call`."""
    options = [
        click.argument("tool_id", metavar="TOOL", shell_complete=tool_ids),
        click.option(
            "--arg",
            "pairs",
            multiple=True,
            metavar="KEY=VALUE",
            help="An argument: key=text, or key:=json (count:=3, tags:='[\"a\"]'). Repeatable.",
        ),
        click.option("--args-json", metavar="JSON", help="All arguments as one JSON object."),
        click.option(
            "--version", "tool_version", help="Tool version (default: the newest active)."
        ),
        click.option(
            "--run-id", envvar="TOOLADAPTER_RUN_ID", help="spec.runId ($TOOLADAPTER_RUN_ID)."
        ),
        click.option(
            "--attempt-id",
            envvar="TOOLADAPTER_ATTEMPT_ID",
            help="spec.attemptId ($TOOLADAPTER_ATTEMPT_ID): calls of one attempt share its "
            "workspace (tools with sandbox.workspace: attempt).",
        ),
        click.option(
            "--release-workspace",
            is_flag=True,
            help="Release the attempt's workspace once this call ends (spec.releaseWorkspace; "
            "needs --attempt-id): the attempt's last call.",
        ),
        click.option("--name", help="Name of the ToolInvocation (default: generated)."),
        *wait_options(
            wait_help="Follow the call to its end.",
            timeout=600,
            timeout_help="Seconds to follow before giving up (exit 7; the call goes on).",
        ),
    ]
    return stacked(gathered(Call, "call")(func), options)


async def _resolve_version(api: UserApi, tool_id: str, version: str | None) -> str:
    if version:
        return version
    latest = views.latest_version(await api.list_all(Resource.DESCRIPTORS), tool_id)
    if latest is None:
        raise CliError(
            f"no active version of tool {tool_id!r} in namespace {api.namespace} "
            "(see `tooladapter tools`)",
            ExitCode.NOT_FOUND,
        )
    return latest


async def _call(
    settings: Settings,
    call: Call,
    *,
    idempotency_key: str | None = None,
    dry_run: bool = False,
    interrupt_on_exit: bool = False,
) -> ExitCode:
    tool_id, timeout = call.tool_id, call.timeout
    if call.release_workspace and not call.attempt_id:
        raise CliError(
            "--release-workspace releases an attempt's workspace: give --attempt-id "
            "($TOOLADAPTER_ATTEMPT_ID)",
            ExitCode.USAGE,
        )
    arguments = parse_arguments(call.pairs, call.args_json)
    async with settings.connect() as api:
        me = await api.whoami()
        version = await _resolve_version(api, tool_id, call.tool_version)
        body = invocation_body(
            tool_id=tool_id,
            version=version,
            arguments=arguments,
            username=me.username,
            groups=claimable_groups(me.groups),
            generate_name=name_prefix(tool_id),
            name=call.name,
            run_id=call.run_id,
            attempt_id=call.attempt_id,
            release_workspace=call.release_workspace,
            idempotency_key=idempotency_key,
            dry_run=dry_run,
        )
        try:
            created = await api.create(Resource.INVOCATIONS, body)
        except UserApiError as err:
            if dry_run and err.status == 400 and "dryRun" in err.message:
                raise CliError(
                    "this cluster's ToolInvocation CRD has no spec.dryRun: dry-run needs a newer "
                    f"tooladapter ({err.message})",
                    ExitCode.ERROR,
                ) from err
            raise
        created_name = str(created["metadata"]["name"])
        click.echo(
            f"toolinvocation {api.namespace}/{created_name} created "
            f"({tool_id} {version} as {me.username})",
            err=True,
        )
        if not call.wait:
            return _report(settings, created, finished=False, dry_run=dry_run)
        display = StageDisplay(
            write=lambda text: click.echo(text, err=True, nl=False),
            tty=stderr_is_tty(),
            namespace=api.namespace,
        )
        if dry_run:
            final, done = await follow_until_finished(
                api, created_name, timeout=timeout, display=display, dry_run=dry_run
            )
            left = False
        else:
            # Ctrl-C asks whether to interrupt the call (`cli.stopping`).
            followed = await follow_stoppable(
                api,
                created_name,
                timeout=timeout,
                display=display,
                interrupt_on_exit=interrupt_on_exit,
                write=lambda text: click.echo(text, err=True, nl=False),
            )
            final, done, left = followed.obj, followed.finished, followed.left_running
    return _report(
        settings,
        final or created,
        finished=done,
        dry_run=dry_run,
        timeout=timeout,
        left_running=left,
    )


def _report(
    settings: Settings,
    obj: dict[str, Any],
    *,
    finished: bool,
    dry_run: bool,
    timeout: float | None = None,
    left_running: bool = False,
) -> ExitCode:
    """Print the outcome and choose the exit code (`left_running`: a person stopped
    following; what goes on was said then)."""
    status = obj.get("status") or {}
    state = status.get("state")
    if dry_run and state == PREVIEWED:
        preview = status.get("preview") or {}
        code = ExitCode.DENIED if views.preview_denied(preview) else ExitCode.OK
    elif not finished:
        code = ExitCode.OK if timeout is None else ExitCode.PENDING
    else:
        code = for_outcome(status)
    if settings.structured:
        settings.emit(views.outcome(obj))
        return code
    name = (obj.get("metadata") or {}).get("name")
    if not finished:
        if timeout is None:
            click.echo(name)  # --no-wait: the name, for the next command
        elif not left_running:
            click.echo(
                f"{name}: still {state or 'not evaluated'} after {timeout:.0f}s; "
                "the call goes on (follow it with kubectl get ti -w)",
                err=True,
            )
        return code
    if dry_run and state == PREVIEWED:
        # A preview quotes the arguments (a rendered request, an argv): marked, not raw.
        lines = views.preview_lines(status.get("preview") or {})
        click.echo("\n".join(visible(line) for line in lines))
        return code
    summary = [readout.outcome_label(status)]
    if status.get("effectiveClass"):
        summary.append(f"class {status['effectiveClass']}")
    if status.get("receiptRef"):
        summary.append(f"receipt {status['receiptRef']}")
    click.echo(f"{name}: {', '.join(summary)}", err=True)
    if (meters := views.usage(status)) is not None:
        click.echo(f"  usage: {views.usage_text(meters)}", err=True)
    if state != InvocationState.OBSERVED or readout.tool_error(status):
        detail = [status.get("failureClass"), status.get("deniedStage"), status.get("message")]
        # The message may quote the arguments: marked, never printed raw (render.cell).
        click.echo("  " + " | ".join(cell(d) for d in detail if d), err=True)
    for line in views.egress_lines(obj):
        # What the egress proxy refused, beside the tool's output (which may say only
        # "CONNECT tunnel failed, response 502"): tooladapter's record, on stderr.
        click.echo(f"  egress refused: {cell(line)}", err=True)
    if status.get("result") and not views.result_inline(status):
        namespace = (obj.get("metadata") or {}).get("namespace")
        size = (status.get("result") or {}).get("originalBytes")
        click.echo(
            f"  the result ({size} bytes of output) is too large to inline in the call's "
            f"status; read it whole: tooladapter result {name} -n {namespace} --gateway URL "
            "(or $TOOLADAPTER_GATEWAY_URL)",
            err=True,
        )
    text = views.result_text(obj)
    if text and sys.stdout.isatty():
        # The tool's own output, on a terminal: what it would act on (escape sequences,
        # carriage returns) or reorder is marked; piped, it stays byte for byte.
        text = visible(text, keep=frozenset("\t\n"))
    if text:
        click.echo(text, nl=not text.endswith("\n"))
    return code


@click.command("invoke")
@common_options
@call_options
@click.option(
    "--idempotency-key", help="spec.idempotencyKey: the same key (per caller) executes once."
)
@click.option(
    "--interrupt-on-exit",
    is_flag=True,
    help="Interrupt the call, without asking, when the command stops following it before it "
    "ended: Ctrl-C, SIGTERM or --timeout (for scripts; on a terminal Ctrl-C asks).",
)
@click.pass_obj
def invoke(
    settings: Settings, call: Call, idempotency_key: str | None, interrupt_on_exit: bool
) -> ExitCode:
    """Call TOOL as yourself: create the ToolInvocation, follow its stages, print the result.

    With -o json the outcome (state, result, usage, receiptRef, ...) is printed as JSON; the
    stage lines always go to stderr. A result too large to inline in the call's status is
    not printed: `tooladapter result NAME` prints it whole. Exit code: the call's end (0
    Observed, 11 Observed with a tool error, 3 Denied, 4 Failed, 5 Uncertain, 6 Cancelled, 7
    still running after --timeout or left running); a duplicate exits as its first call did.

    Ctrl-C while following: on a terminal it asks whether to interrupt the call (y: the
    call is interrupted and followed until it settles); a second Ctrl-C, or the first one
    without a terminal, stops following and says the call keeps running."""
    return run_async(
        _call(
            settings,
            call,
            idempotency_key=idempotency_key,
            interrupt_on_exit=interrupt_on_exit,
        )
    )


@click.command("dry-run")
@common_options
@call_options
@click.pass_obj
def dry_run(settings: Settings, call: Call) -> ExitCode:
    """What calling TOOL would do, without doing it: validation, policy, class,
    permission, whether an approval is needed and from whom, sandbox and egress.

    Creates the ToolInvocation with spec.dryRun: true and prints its status.preview once it
    is Previewed. Exit code 0, or 3 when the preview says the call would be denied."""
    return run_async(_call(settings, call, dry_run=True))
