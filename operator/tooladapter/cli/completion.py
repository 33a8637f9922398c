"""`completion bash|zsh|fish`: the shell completion script (click's own)."""

from __future__ import annotations

import click
from click.shell_completion import get_completion_class

from tooladapter.cli.exitcodes import ExitCode

SHELLS = ("bash", "zsh", "fish")


def complete_var(prog_name: str) -> str:
    """The environment variable click's completion protocol uses for `prog_name`."""
    return f"_{prog_name.replace('-', '_').replace('.', '_').upper()}_COMPLETE"


@click.command("completion")
@click.argument("shell", type=click.Choice(SHELLS))
@click.pass_context
def completion(ctx: click.Context, shell: str) -> ExitCode:
    """Print the completion script for SHELL.

    \b
    bash:  source <(tooladapter completion bash)     (e.g. in ~/.bashrc)
    zsh:   source <(tooladapter completion zsh)      (e.g. in ~/.zshrc)
    """
    root = ctx.find_root()
    prog_name = root.info_name or "tooladapter"
    cls = get_completion_class(shell)
    assert cls is not None  # the Choice allows only shells click knows
    script = cls(root.command, {}, prog_name, complete_var(prog_name)).source()
    click.echo(script)
    return ExitCode.OK
