"""The judgement: one command line through the structural rules, the nested command
strings, the block list and the allow list, into one `ShellVerdict`.
"""

from __future__ import annotations

from collections.abc import Sequence

from tooladapter.pipeline.shell.allow import listing
from tooladapter.pipeline.shell.block import block_hit
from tooladapter.pipeline.shell.nesting import nested_commands
from tooladapter.pipeline.shell.parsing import parse_command
from tooladapter.pipeline.shell.verdict import Refusal, ShellRule, ShellVerdict, clip


def check_command(
    command: str,
    *,
    allow: Sequence[str],
    block: Sequence[str],
    narrow: Sequence[str] | None = None,
) -> ShellVerdict:
    """Check a command line against the block list, then the allow list.

    `allow` is the allow list in force (see `allow_list_for`; an empty one lists
    nothing); `narrow`, when not None, is the union of the tenant policies' allow lists,
    which a command must match as well. The rules: `tooladapter.pipeline.shell`.
    """
    argv, refusal = _check(command, tuple(block), depth=0)
    entries, why = listing(argv, tuple(allow), None if narrow is None else tuple(narrow))
    if refusal is not None:
        matched, reason, escalate_ok = refusal
        return ShellVerdict(command, argv, entries is not None, True, matched, reason, escalate_ok)
    if entries is None:
        return ShellVerdict(
            command, argv, False, False, ShellRule.NOT_ALLOWED.value, why, escalate_ok=False
        )
    shown = ", ".join(repr(e) for e in dict.fromkeys(entries))
    reason = f"command matches allow-list entry {shown} and no block-list pattern"
    return ShellVerdict(
        command, argv, True, False, ", ".join(dict.fromkeys(entries)), reason, False
    )


def _check(command: str, block: tuple[str, ...], *, depth: int) -> tuple[list[str], Refusal | None]:
    argv, refusal = parse_command(command, depth=depth)
    if refusal is not None:
        return argv, refusal

    for wrapper, inner in nested_commands(argv):
        _inner_argv, inner_refusal = _check(inner, block, depth=depth + 1)
        if inner_refusal is not None:
            matched, reason, escalate_ok = inner_refusal
            return argv, (matched, f"inside `{wrapper}`: {reason}", escalate_ok)

    hit = block_hit(argv, block)
    if hit is not None:
        pattern, found = hit
        return argv, (
            pattern,
            f"command matches block-list pattern {pattern!r} (as `{clip(found)}`)",
            True,
        )
    return argv, None
