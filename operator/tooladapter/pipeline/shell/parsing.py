"""Parsing one command line into argv, refusing what no policy may override (rule 1).

The line is parsed once, the way it will be executed (POSIX `shlex`, no comments);
before that, control characters, shell operators and expansions are refused, since
tools run argv without a shell and these are how a checked command becomes an
unchecked one.
"""

from __future__ import annotations

import re
import shlex
import unicodedata

from tooladapter.pipeline.shell.verdict import Refusal, ShellRule

MAX_COMMAND_CHARS = 65_536
#: How deep command strings may nest (`sh -c "sh -c ..."`), and wrappers in wrappers.
MAX_NESTING = 4

_NO_SHELL = "tools run argv without a shell"


def parse_command(command: str, *, depth: int) -> tuple[list[str], Refusal | None]:
    """Parse one command line, refusing what no policy may override (rule 1)."""
    if depth > MAX_NESTING:
        return [], (
            ShellRule.NESTING.value,
            f"command strings nest more than {MAX_NESTING} levels deep (sh -c inside sh -c ...)",
            False,
        )
    if not command.strip():
        return [], (ShellRule.EMPTY.value, "the command is empty", False)
    if len(command) > MAX_COMMAND_CHARS:
        return [], (
            ShellRule.TOO_LONG.value,
            f"the command is longer than {MAX_COMMAND_CHARS} characters",
            False,
        )
    bad = _control_character(command)
    if bad is not None:
        return [], (
            ShellRule.CONTROL_CHARACTER.value,
            f"control or invisible character U+{ord(bad):04X} is not allowed in a command "
            "(one line, printable characters only)",
            False,
        )
    meta = _metacharacter(command)
    if meta is not None:
        text, rule = meta
        if rule is ShellRule.SHELL_OPERATOR:
            reason = f"shell operator {text!r} is not allowed: {_NO_SHELL}"
        else:
            reason = f"shell expansion {text!r} is not allowed: {_NO_SHELL}"
        return [], (rule.value, reason, False)
    try:
        argv = shlex.split(command, comments=False, posix=True)
    except ValueError as err:
        return [], (ShellRule.UNPARSEABLE.value, f"the command does not parse: {err}", False)
    if not argv or not argv[0]:
        return argv, (ShellRule.EMPTY.value, "the command has no program name", False)
    return argv, None


def _control_character(command: str) -> str | None:
    for ch in command:
        if ch == "\t":
            continue
        if unicodedata.category(ch) in ("Cc", "Cf", "Zl", "Zp", "Cs", "Co", "Cn"):
            return ch
    return None


_OPERATOR_CHARS = ";&|<>"
_EXPANSION_START = re.compile(r"[A-Za-z0-9_@*#?$!{(\-'\"]")


def _metacharacter(command: str) -> tuple[str, ShellRule] | None:
    """The first shell operator or expansion outside single quotes, if any."""
    quote: str | None = None
    i = 0
    n = len(command)
    while i < n:
        ch = command[i]
        if quote == "'":
            if ch == "'":
                quote = None
            i += 1
            continue
        if ch == "\\":
            i += 2
            continue
        if ch == "`":
            return "`", ShellRule.EXPANSION
        if ch == "$" and i + 1 < n and _EXPANSION_START.match(command[i + 1]):
            if quote == '"' and command[i + 1] in "'\"":
                i += 1
                continue
            end = i + 2
            if command[i + 1] not in "({'\"":
                while end < n and (command[end].isalnum() or command[end] == "_"):
                    end += 1
            return command[i:end], ShellRule.EXPANSION
        if quote == '"':
            if ch == '"':
                quote = None
            i += 1
            continue
        if ch in "'\"":
            quote = ch
        elif ch in _OPERATOR_CHARS:
            end = i
            while end < n and command[end] in _OPERATOR_CHARS:
                end += 1
            return command[i:end], ShellRule.SHELL_OPERATOR
        elif ch in "()":
            return ch, ShellRule.SHELL_OPERATOR
        i += 1
    return None


def split_command(line: str) -> list[str] | None:
    argv, refusal = parse_command(line, depth=0)
    return None if refusal is not None else argv
