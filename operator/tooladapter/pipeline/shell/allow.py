"""The allow list: a command is listed when every command it runs matches an entry by
argv-prefix tokens, with no inline code and no effect option the entry does not name
(rule 4).

The list in force is the descriptor's `shell.allow`, or the operator's default list (the
setting `TOOLADAPTER_SHELL_ALLOW_LIST`, by default `DEFAULT_ALLOW_LIST`) when it sets none;
the tenant policies' lists narrow it.
"""

from __future__ import annotations

import shlex
from collections.abc import Sequence
from functools import lru_cache

from tooladapter.pipeline.shell.effects import effect_options
from tooladapter.pipeline.shell.interpreters import runs_code
from tooladapter.pipeline.shell.programs import basename, normalise_head
from tooladapter.pipeline.shell.unwrapping import judge
from tooladapter.pipeline.shell.verdict import clip

#: The reference's default allow list (Tools:Shell:AllowList): run as sandbox class.
DEFAULT_ALLOW_LIST: tuple[str, ...] = (
    "dotnet restore",
    "dotnet build",
    "dotnet test",
    "git diff",
    "git status",
    "npm test",
)


def allow_list_for(
    configured: Sequence[str] | None, default: Sequence[str] = DEFAULT_ALLOW_LIST
) -> tuple[str, ...]:
    """The allow list in force for a descriptor: its own `shell.allow` when it sets one
    (even an empty one: nothing is listed), else `default` (the operator's setting,
    `TOOLADAPTER_SHELL_ALLOW_LIST`, whose default is the reference's `DEFAULT_ALLOW_LIST`)."""
    return tuple(default) if configured is None else tuple(configured)


@lru_cache(maxsize=512)
def _allow_tokens(pattern: str) -> tuple[str, ...]:
    try:
        tokens = shlex.split(pattern)
    except ValueError:
        return ()
    return tuple(normalise_head(tokens)) if tokens else ()


def _show(argv: Sequence[str], limit: int = 4) -> str:
    shown = " ".join(shlex.quote(a) for a in argv[:limit])
    return clip(shown + (" ..." if len(argv) > limit else ""), 100)


def listing(
    argv: Sequence[str], allow: tuple[str, ...], narrow: tuple[str, ...] | None
) -> tuple[tuple[str, ...] | None, str]:
    """(the allow entries that list every command argv runs, "") or (None, why not)."""
    if not argv:
        return None, "the command is empty: nothing is on the allow list"
    commands, problem = judge(argv, depth=0)
    if problem is not None:
        return None, f"command `{_show(argv)}` is not on the shell allow list: {problem}"
    entries: list[str] = []
    for command in commands:
        entry, why = _entry_for(command, allow)
        if entry is None:
            listed = ", ".join(allow) if allow else "empty"
            return None, (
                f"command `{_show(argv)}` is not on the shell allow list ({listed}): "
                f"{why}; only listed commands run as declared"
            )
        if narrow is not None:
            narrowed, why = _entry_for(command, narrow)
            if narrowed is None:
                listed = ", ".join(narrow) if narrow else "empty"
                return None, (
                    f"command `{_show(argv)}` is not on the ToolPolicy shell allow lists "
                    f"({listed}), which narrow the tool's: {why}"
                )
        entries.append(entry)
    return tuple(entries), ""


def _entry_for(command: Sequence[str], allow: Sequence[str]) -> tuple[str | None, str]:
    """The allow entry that lists one unwrapped command, or (None, why none does)."""
    normalised = normalise_head(command)
    name = basename(command[0])
    shown = f"`{_show(command)}`"
    code = runs_code(name, command)
    if code is not None:
        return None, f"{shown} {code}, which no allow entry covers"
    candidates = [
        pattern
        for pattern in allow
        if (tokens := _allow_tokens(pattern)) and tuple(normalised[: len(tokens)]) == tokens
    ]
    if not candidates:
        return None, f"{shown} matches no entry"
    effects = effect_options(name, command)
    for pattern in sorted(candidates, key=lambda p: -len(_allow_tokens(p))):
        length = len(_allow_tokens(pattern))
        if all(index < length for index, _ in effects):
            return pattern, ""
    longest = max(candidates, key=lambda p: len(_allow_tokens(p)))
    index, what = next(e for e in effects if e[0] >= len(_allow_tokens(longest)))
    return None, (
        f"{shown}: `{clip(command[index], 60)}` {what}, and no allow entry names it "
        f"(entry {longest!r} does not)"
    )
