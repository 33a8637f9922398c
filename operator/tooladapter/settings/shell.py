"""The shell lists in force when neither a descriptor nor a policy says otherwise."""

from __future__ import annotations

from dataclasses import dataclass

from tooladapter.pipeline.shell.allow import DEFAULT_ALLOW_LIST
from tooladapter.pipeline.shell.block import DEFAULT_BLOCK_LIST
from tooladapter.settings import environ as env
from tooladapter.settings.variables import FromEnv, setting


@dataclass(frozen=True)
class ShellSettings(FromEnv):
    """Shell judging's default lists (`pipeline.shell`); an approved call whose lists
    widened since its approval is Denied at the re-check."""

    #: Commands a shell tool runs as `sandbox` class when its descriptor sets no
    #: `shell.allow` (reference: Tools:Shell:AllowList), comma-separated argv prefixes.
    allow_list: tuple[str, ...] = setting(
        "TOOLADAPTER_SHELL_ALLOW_LIST", env.listed, DEFAULT_ALLOW_LIST, reloadable=True
    )
    #: Patterns every shell command is checked against, besides the descriptor's and the
    #: policies' (reference: Tools:Shell:BlockList), comma-separated.
    block_list: tuple[str, ...] = setting(
        "TOOLADAPTER_SHELL_BLOCK_LIST", env.listed, DEFAULT_BLOCK_LIST, reloadable=True
    )
