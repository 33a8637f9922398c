"""Effect options: what makes a listed program delete, write elsewhere, upload or run a
helper (`find -delete`, `rsync -e`, `git -c`, `curl -T`, `make VAR=...`).

Such an option is covered only when the allow entry names it (`rsync -a --delete`).
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from tooladapter.pipeline.shell.interpreters import script_operand
from tooladapter.pipeline.shell.programs import names_of


@dataclass(frozen=True)
class _EffectSpec:
    what: str
    exact: frozenset[str] = frozenset()
    long: tuple[str, ...] = ()
    short: str = ""
    short_values: str = ""
    prefixes: tuple[str, ...] = ()


_DELETES = "deletes files"
_RUNS = "runs a helper command"
_UPLOADS = "sends data or changes the request"

_EFFECT_SPECS: dict[str, tuple[_EffectSpec, ...]] = {
    "find": (
        _EffectSpec(_DELETES, exact=frozenset({"-delete"})),
        _EffectSpec("writes files", exact=frozenset({"-fprint", "-fprint0", "-fprintf", "-fls"})),
    ),
    "rsync": (
        _EffectSpec(
            _DELETES,
            long=names_of(
                "delete del delete-before delete-during delete-delay delete-after delete-excluded"
                " delete-missing-args remove-source-files remove-sent-files"
            ),
        ),
        _EffectSpec(
            _RUNS, long=("rsh", "rsync-path", "remote-option"), short="eM", short_values="BfT"
        ),
    ),
    "tar": (
        _EffectSpec(
            _DELETES,
            long=("remove-files", "delete", "recursive-unlink", "unlink-first"),
            short="U",
            short_values="fbCgHKLNTVX",
        ),
        _EffectSpec(
            _RUNS,
            long=names_of(
                "to-command checkpoint-action use-compress-program rsh-command rmt-command"
                " info-script new-volume-script"
            ),
            short="IF",
            short_values="fbCgHKLNTVX",
        ),
    ),
    "npm": (
        _EffectSpec(
            _RUNS,
            long=names_of(
                "script-shell shell node-options userconfig globalconfig prefix git editor"
                " browser viewer onload-script init-module"
            ),
        ),
    ),
    "curl": (
        _EffectSpec(
            _UPLOADS,
            long=names_of(
                "upload-file data data-binary data-raw data-ascii data-urlencode form form-string"
                " json config request"
            ),
            short="TdFKX",
            short_values="AbcCdDeEFhHKmoQrTuUwxXyYz",
        ),
    ),
    "wget": (
        _EffectSpec(
            _UPLOADS,
            long=names_of(
                "post-file post-data body-file body-data method execute input-file config"
            ),
            short="ei",
            short_values="aABdDeiIlOoPQRtTUwXY",
        ),
    ),
    "nc": (_EffectSpec(_RUNS, long=("exec", "sh-exec", "lua-exec"), short="ec"),),
    "zip": (_EffectSpec(_RUNS, exact=frozenset({"-TT"}), long=("unzip-command",)),),
    "sed": (
        _EffectSpec("edits files in place", long=("in-place",), short="i", short_values="efl"),
    ),
    "perl": (_EffectSpec("edits files in place", short="i", short_values="I"),),
    "ruby": (_EffectSpec("edits files in place", short="i", short_values="CEFIKTWx"),),
    "dd": (_EffectSpec("writes to a file or device", prefixes=("of=",)),),
    "sort": (
        _EffectSpec(
            "writes its output to a file", long=("output",), short="o", short_values="kStT"
        ),
    ),
    "psql": (
        _EffectSpec(
            "writes a file", long=("output", "log-file"), short="oL", short_values="cdfhpUvPTF"
        ),
    ),
    "mysql": (_EffectSpec(_RUNS, long=("pager", "tee", "init-command")),),
}
_EFFECT_SPECS["netcat"] = _EFFECT_SPECS["ncat"] = _EFFECT_SPECS["nc"]
_EFFECT_SPECS["mariadb"] = _EFFECT_SPECS["mysql"]
_EFFECT_SPECS["gtar"] = _EFFECT_SPECS["tar"]

_GIT_LONG = names_of(
    "ext-diff output upload-pack receive-pack exec extcmd open-files-in-pager tree-filter"
    " index-filter msg-filter commit-filter env-filter parent-filter tag-name-filter template"
    " config config-env exec-path"
)
_GIT_SUBCOMMAND_SHORT = {
    "rebase": "x",
    "grep": "O",
    "difftool": "x",
    "clone": "uc",
    "ls-remote": "u",
    "fetch": "u",
    "pull": "u",
}
_GIT_RUNNERS = frozenset(
    {"filter-branch", "difftool", "mergetool", "daemon", "instaweb", "web--browse"}
)
_DOTNET_SWITCH = re.compile(r"^(?:--?|/)([a-z][a-z-]*)(?:[:=].*)?$", re.I)
_DOTNET_EFFECTS = frozenset(
    names_of(
        "p property t target l logger dl distributedlogger restoreproperty rp test-adapter-path"
        " collect settings s diag d source configfile bl binarylogger e environment pp"
        " preprocess fl filelogger flp fileloggerparameters orc outputresultscache"
    )
)
_COMPRESSORS = frozenset(
    names_of("gzip gunzip bzip2 bunzip2 xz unxz lzma unlzma zstd unzstd compress uncompress")
)
_MAKE_ASSIGNMENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_.]*\s*[:+?!]*=")


def effect_options(name: str, argv: Sequence[str]) -> list[tuple[int, str]]:
    """(token index, what it does) for every option of `argv` with an effect beyond its
    program's plain job; an allow entry covers it only by naming it."""
    found: list[tuple[int, str]] = []
    for spec in _EFFECT_SPECS.get(name, ()):
        found.extend(_spec_effects(spec, argv, name))
    script = script_operand(name, argv)
    if script is not None:
        found.append(
            (script, "is a script file run by its interpreter (its content cannot be judged)")
        )
    if name == "git":
        found.extend(_git_effects(argv))
    elif name == "dotnet":
        subcommand = next((t for t in argv[1:] if not t.startswith("-")), "")
        for i, token in enumerate(argv[1:], start=1):
            match = _DOTNET_SWITCH.match(token)
            switch = match.group(1).lower() if match else ""
            if switch in _DOTNET_EFFECTS or (switch == "a" and subcommand == "test"):
                found.append((i, "sets properties, targets, loggers or adapters (can run code)"))
            elif token.startswith("@") or token in ("--",):
                found.append((i, "reads settings that can run code"))
    elif name == "uniq":
        operands = [i for i, t in enumerate(argv[1:], start=1) if not t.startswith("-")]
        if len(operands) > 1:
            found.append((operands[1], "is an output file uniq writes"))
    elif name in _COMPRESSORS:
        keeps = any(
            t in ("-c", "--stdout", "-k", "--keep", "-l", "--list", "-t", "--test")
            or (t.startswith("-") and not t.startswith("--") and set(t[1:]) & set("cklt"))
            for t in argv[1:]
        )
        operands = [i for i, t in enumerate(argv[1:], start=1) if not t.startswith("-")]
        if operands and not keeps:
            found.append((operands[0], "is replaced (the original deleted) unless -c or -k"))
    elif name in ("make", "gmake"):
        for i, token in enumerate(argv[1:], start=1):
            if (
                _MAKE_ASSIGNMENT.match(token)
                or token in ("-E", "-f")
                or token.startswith(("--eval", "--file", "--makefile", "-E", "-f"))
            ):
                found.append((i, "overrides variables or makefiles (recipes can run anything)"))
    return sorted(found)


def _spec_effects(spec: _EffectSpec, argv: Sequence[str], name: str) -> Iterator[tuple[int, str]]:
    tokens = list(argv)
    if name in ("tar", "gtar") and len(tokens) > 1 and not tokens[1].startswith("-"):
        tokens[1] = "-" + tokens[1]  # tar's old-style bundled options: `tar xIf ...`
    skip = False
    for i, token in enumerate(tokens[1:], start=1):
        if skip:
            skip = False
            continue
        if token in spec.exact or any(token.startswith(p) for p in spec.prefixes):
            yield i, spec.what
        elif token.startswith("--") and len(token) > 2:
            # npm and others also accept `--script_shell`, `--Script-Shell`.
            given = token[2:].split("=", 1)[0].lower().replace("_", "-")
            if len(given) >= 2 and any(long.startswith(given) for long in spec.long):
                yield i, spec.what
        elif token.startswith("-") and len(token) > 1:
            for j, letter in enumerate(token[1:], start=1):
                if letter in spec.short:
                    yield i, spec.what
                    break
                if letter in spec.short_values:
                    skip = j == len(token) - 1
                    break


def _git_effects(argv: Sequence[str]) -> Iterator[tuple[int, str]]:
    i = 1
    with_value = ("-c", "-C", "--git-dir", "--work-tree", "--namespace", "--config-env")
    while i < len(argv) and argv[i].startswith("-"):
        token = argv[i]
        if token in ("-c", "--config-env") or token.startswith(("--config-env=", "--exec-path")):
            yield i, "sets configuration that can run commands (pager, aliases, helpers)"
        i += 2 if token in with_value else 1
    subcommand = argv[i] if i < len(argv) else ""
    if subcommand in _GIT_RUNNERS:
        yield i, "runs configured or given commands"
    shorts = _GIT_SUBCOMMAND_SHORT.get(subcommand, "")
    rest = argv[i + 1 :]
    for j, token in enumerate(rest, start=i + 1):
        if token.startswith("--") and len(token) > 2:
            given = token[2:].split("=", 1)[0]
            if len(given) >= 2 and any(long.startswith(given) for long in _GIT_LONG):
                yield j, "writes elsewhere or runs a helper command"
        elif token.startswith("-") and len(token) > 1 and shorts and token[1] in shorts:
            yield j, "runs a helper command"
        elif (subcommand, token) in (("bisect", "run"), ("submodule", "foreach")):
            yield j, "runs the command that follows"
