"""What checking a command line returns: the verdict, and the rules that refuse one.

Below every other part of the check: the parser, the block list and the allow list
each report in these terms.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


class ShellRule(StrEnum):
    """Why a command was refused before any pattern was looked at, or is not listed."""

    EMPTY = "empty-command"
    TOO_LONG = "command-too-long"
    CONTROL_CHARACTER = "control-character"
    UNPARSEABLE = "unparseable"
    SHELL_OPERATOR = "shell-operator"
    EXPANSION = "shell-expansion"
    NESTING = "nesting-too-deep"
    NOT_ALLOWED = "not-on-allow-list"


@dataclass(frozen=True)
class ShellVerdict:
    """The outcome of checking one command line.

    `allowed`: listed, i.e. everything it runs matches the allow list (and the policies'
    narrowing lists).
    `blocked`: refused by a structural rule or a block-list pattern.
    `matched`: the block pattern, the allow entries, or the `ShellRule` value that
    refused it (`not-on-allow-list` when it is merely unlisted).
    `escalate_ok`: true only when a block-list pattern (not a structural rule) blocked
    it, so a policy with `blockAction: escalate` may run it as production class.
    """

    command: str
    argv: list[str]
    allowed: bool
    blocked: bool
    matched: str | None
    reason: str
    escalate_ok: bool

    @property
    def ok(self) -> bool:
        """Runs as is: listed and not blocked."""
        return self.allowed and not self.blocked

    @property
    def unlisted(self) -> bool:
        """Not blocked, but not listed either: it may run only with an approval."""
        return not self.allowed and not self.blocked


#: Why a command is blocked: (matched, reason, escalate_ok), as in `ShellVerdict`.
Refusal = tuple[str, str, bool]


def clip(text: str, limit: int = 120) -> str:
    """`text` cut to `limit` characters for a reason (an ellipsis marks the cut)."""
    return text if len(text) <= limit else text[: limit - 1] + "…"
