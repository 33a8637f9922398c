"""`run`: start the operator (as `make run` does)."""

from __future__ import annotations

import click

from .exitcodes import ExitCode


@click.command(
    "run",
    context_settings={"ignore_unknown_options": True, "help_option_names": ["-h", "--help"]},
)
@click.argument("kopf_args", nargs=-1, type=click.UNPROCESSED)
def run(kopf_args: tuple[str, ...]) -> ExitCode:
    """Run the operator against the cluster of KUBECONFIG (or in-cluster).

    Settings come from TOOLADAPTER_* environment variables (see the README);
    TOOLADAPTER_NAMESPACES limits it to namespace globs. Options after `--` go to `kopf run`.
    """
    from ..launcher import run as launch

    launch([a for a in kopf_args if a != "--"])
    return ExitCode.OK
