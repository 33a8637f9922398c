"""`run`: start the operator (as `make run` does)."""

from __future__ import annotations

import click

from tooladapter.cli.exitcodes import ExitCode


@click.command(
    "run",
    context_settings={"ignore_unknown_options": True, "help_option_names": ["-h", "--help"]},
)
@click.argument("kopf_args", nargs=-1, type=click.UNPROCESSED)
def run(kopf_args: tuple[str, ...]) -> ExitCode:
    """Run the operator against the cluster of KUBECONFIG (or in-cluster).

    Settings come from TOOLADAPTER_* environment variables (docs/reference/settings.md);
    TOOLADAPTER_NAMESPACES limits it to namespace globs. Options after `--` go to `kopf run`.
    """
    from tooladapter.launcher import run as launch

    launch([a for a in kopf_args if a != "--"])
    return ExitCode.OK


@click.command("egress-proxy", context_settings={"help_option_names": ["-h", "--help"]})
def egress_proxy() -> ExitCode:
    """Run the lease-scoped egress proxy sandboxes reach host names through.

    Its own process, never the operator's. Settings come from TOOLADAPTER_EGRESS_*
    environment variables (docs/concepts/egress.md); `make run` starts it beside the operator.
    """
    from tooladapter.egress.proxy.main import main as egress_main

    egress_main()
    return ExitCode.OK
