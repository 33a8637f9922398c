"""How programs are named on a command line: basenames, standard bin paths, shells.

Every part of the check names programs the same way, so `/usr/bin/env` is the wrapper
`env` everywhere and `./env` is nowhere.
"""

from __future__ import annotations

from collections.abc import Sequence


def names_of(text: str) -> tuple[str, ...]:
    """Names written as one space-separated string (long tables read better so)."""
    return tuple(text.split())


STANDARD_BIN_DIRS = frozenset(
    {"/bin", "/usr/bin", "/usr/local/bin", "/sbin", "/usr/sbin", "/usr/local/sbin"}
)

#: Interpreters whose `-c STRING` is a shell command line.
SHELLS = frozenset(names_of("sh bash zsh dash ksh ash mksh yash fish csh tcsh rbash hush msh posh"))


def basename(token: str) -> str:
    """The program a token names for matching: its last path part, lower case."""
    return token.rsplit("/", 1)[-1].lower()


def normalise_head(argv: Sequence[str]) -> list[str]:
    """argv with a standard bin path in `argv[0]` reduced to its basename (`/usr/bin/git`)."""
    head = argv[0]
    if head.startswith("/"):
        directory, _, base = head.rpartition("/")
        if directory in STANDARD_BIN_DIRS and base:
            head = base
    return [head, *argv[1:]]


def program_name(token: str) -> str | None:
    """The name a program is known by here: a bare name, or the basename of a standard
    bin path. None for any other path (`./env`, `/tmp/x/timeout`): not a known wrapper."""
    head = normalise_head([token])[0]
    return None if "/" in head else head
