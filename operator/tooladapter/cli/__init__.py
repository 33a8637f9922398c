"""`tooladapter` (also `kubectl tooladapter`, `python -m tooladapter`): the command line.

For agents (`tools`, `describe`, `invoke`, `dry-run`, `result`, `interrupt`), reviewers
(`approvals`, `approve`, `reject`), operators (`confirm`, `receipts`, `receipt`) and `run`,
which starts the operator. Every command speaks to the API server as the user of the
kubeconfig, so RBAC and the admission policies judge the real person or agent; one module
per command group, the pure parts (parsing, bodies, views, diff, render, verify) apart from
the I/O.

Exit codes are `exitcodes.ExitCode`: an API error maps by its HTTP status, a call by its
terminal state.
"""

from __future__ import annotations

import sys
from importlib.metadata import PackageNotFoundError, version

import click

from tooladapter.cli import roles
from tooladapter.cli.approvals import approvals, approve, reject
from tooladapter.cli.completion import complete_var, completion
from tooladapter.cli.confirm import confirm
from tooladapter.cli.context import Settings, common_options
from tooladapter.cli.exitcodes import CliError, ExitCode, for_api_status
from tooladapter.cli.interrupt import interrupt_command
from tooladapter.cli.invoke import dry_run, invoke
from tooladapter.cli.keys import keys
from tooladapter.cli.receipts import receipt, receipts
from tooladapter.cli.result import result
from tooladapter.cli.run import egress_proxy, run
from tooladapter.cli.tools import describe, tools
from tooladapter.cli.workspace import workspace
from tooladapter.kube.errors import UserApiError
from tooladapter.kube.user import FollowedObjectDeleted


def _version() -> str:
    try:
        return version("tooladapter")
    except PackageNotFoundError:
        return "unknown"


@click.group(
    "tooladapter",
    context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100},
)
@click.version_option(_version(), "--version", prog_name="tooladapter")
@common_options
@click.pass_context
def app(ctx: click.Context) -> None:
    """The governed gateway through which AI agents call tools.

    Commands speak to the cluster as the user of your kubeconfig (its current context and
    namespace unless -n/--context say otherwise). Exit codes: 0 success, 1 error, 2 usage,
    3 denied, 4 failed, 5 uncertain, 6 cancelled, 7 pending/timeout, 8 not found,
    9 forbidden, 10 receipt mismatch, 11 tool error, 12 bad signature, 13 chain broken."""
    ctx.ensure_object(Settings)


for command in (
    tools,
    describe,
    invoke,
    dry_run,
    result,
    interrupt_command,
    approvals,
    approve,
    reject,
    confirm,
    receipts,
    receipt,
    keys,
    completion,
    run,
    egress_proxy,
    workspace,
):
    app.add_command(command)


def main(argv: list[str] | None = None) -> None:
    """Run a command and exit with its documented code."""
    args = sys.argv[1:] if argv is None else argv
    # As a kubectl plugin (`kubectl tooladapter ...`), help and completion say so.
    plugin = sys.argv[0].endswith("kubectl-tooladapter")
    prog_name = "kubectl-tooladapter" if plugin else "tooladapter"
    try:
        result = app.main(
            args=args,
            prog_name=prog_name,
            complete_var=complete_var(prog_name),
            standalone_mode=False,
        )
    except click.exceptions.Exit as done:
        sys.exit(done.exit_code)
    except click.ClickException as err:  # usage errors: click's own exit code 2
        err.show()
        sys.exit(ExitCode.USAGE if isinstance(err, click.UsageError) else ExitCode.ERROR)
    except click.exceptions.Abort:
        click.echo("aborted", err=True)
        sys.exit(ExitCode.ERROR)
    except CliError as err:
        click.echo(f"error: {err.message}", err=True)
        sys.exit(err.code)
    except UserApiError as err:
        what = "" if err.status == 0 else f"API server: {err.status}: "
        click.echo(f"error: {what}{err.message}", err=True)
        command = next((arg for arg in args if arg in roles.COMMAND_ROLES), None)
        if err.status == 403 and (role := roles.hint(err.message, command)) is not None:
            click.echo(f"hint: {role}", err=True)
        sys.exit(for_api_status(err.status))
    except FollowedObjectDeleted as err:
        click.echo(f"error: {err} was deleted", err=True)
        sys.exit(ExitCode.NOT_FOUND)
    except OSError as err:  # connection refused, DNS, TLS: aiohttp's errors are OSErrors
        click.echo(f"error: cannot reach the API server: {err}", err=True)
        sys.exit(ExitCode.ERROR)
    sys.exit(int(result) if isinstance(result, int) else ExitCode.OK)


__all__ = ["ExitCode", "app", "main"]
