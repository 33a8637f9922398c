"""Repository config an attempt's workspace may not carry into a later call.

An attempt's calls share `/workspace`: a `.git/config` written by one call is read by git in
the next, with that call's egress and approval. Keys that make git run a command or send
its requests elsewhere (`REFUSED`) are refused before every call of an attempt
(`flow.execution.check_workspace`): the call ends Denied naming the file and key, before
its tool starts. Global and system config never come from the workspace (`podspec`:
`GIT_CONFIG_GLOBAL`, `GIT_CONFIG_NOSYSTEM`, a per-call HOME), so repository config is
what is left.

The workspace pod lists what to judge (`SCAN_SCRIPT`: every git directory's `config` and
`config.worktree`, every `.gitattributes` and `info/attributes`, executable hooks) and this
module judges it, pure: `parse_scan` reads the listing, `parse_config` reads git-config
syntax (sections and subsections, case-insensitive section and key names, the old
`[section.sub]` form, quoted values, continuations) and `findings` says what is refused.
A line this parser cannot read is refused too: git would read something there.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import StrEnum

from tooladapter.sandbox.podspec import HOME_DIR, SHARED_MEMORY, TOOLADAPTER_DIR, WORKSPACE

#: Bytes of one file the scan sends whole; a bigger config or attributes file is refused
#: unread (no repository needs one that large).
FILE_CAP = 65536
#: The scan's last line: a listing without it was cut short and is judged incomplete.
END_MARK = "tooladapter-scan-end"
#: The roots the scan walks: every place the sandbox user can write in a workspace pod.
#: `.git` may be a symlink or a `gitdir:` file pointing outside /workspace, so the other
#: writable places are scanned too (and emptied before every call, `warm.RUN_SCRIPT`).
SCAN_ROOTS = (WORKSPACE, HOME_DIR, TOOLADAPTER_DIR, *SHARED_MEMORY)

#: One candidate file, framed: `<kind> <path bytes> <content bytes or -1>\n<path><content>`.
#: Symlinks are followed (git follows them); a dangling one is nothing git reads. A git
#: directory is one with a `HEAD` that is a file or any symlink: git takes a symlink whose
#: text starts `refs/` as HEAD (the old symref form) even when it dangles (an unborn
#: branch), so `-f` alone would miss a repository git still opens (`h`). A linked
#: worktree's common directory (its gitdir's `commondir` names it) needs no HEAD at all,
#: only `objects` and `refs`: git reads its config and runs its hooks, so such a directory
#: is a git directory here too.
#: Names arrive as arguments (`find -exec ... {} +`), so a line break in a name cannot
#: split a record. Kinds: C config of a git directory (`h`), A attributes,
#: H an executable hook (no content), `-1` a file over `FILE_CAP` (not sent).
_GIT_DIR = (
    'h() { [ -f "$1/HEAD" ] || [ -L "$1/HEAD" ] || '
    '{ [ -e "$1/objects" ] && [ -e "$1/refs" ]; }; }; '
)
EMIT_SCRIPT = (
    _GIT_DIR + 'for f; do [ -e "$f" ] || continue; b=${f##*/}; d=${f%/*}; '
    'case "$f" in */hooks/*) case "$d" in */hooks) ;; *) continue;; esac; '
    'h "${d%/hooks}" || continue; case "$b" in *.sample) continue;; esac; '
    '[ -x "$f" ] || continue; printf "H %s 0\\n%s" "${#f}" "$f"; continue;; esac; '
    # A `hooks` that is a symlink: git runs the hooks of the directory it names, whose
    # path need not hold `/hooks/`; they are listed under the link's name.
    'case "$b" in hooks) [ -L "$f" ] && h "$d" || continue; for x in "$f"/*; do '
    'case "$x" in *.sample) continue;; esac; [ -f "$x" ] && [ -x "$x" ] || continue; '
    'printf "H %s 0\\n%s" "${#x}" "$x"; done; continue;; esac; '
    'case "$b" in config|config.worktree) h "$d" || continue; k=C;; '
    'attributes) case "$d" in */info) h "${d%/info}" || continue;; '
    "*) continue;; esac; k=A;; .gitattributes) k=A;; *) continue;; esac; "
    's=$(wc -c < "$f") || exit 3; s=$((s)); '
    f'if [ "$s" -gt {FILE_CAP} ]; then printf "%s %s -1\\n%s" "$k" "${{#f}}" "$f"; '
    "continue; fi; "
    'printf "%s %s %s\\n%s" "$k" "${#f}" "$s" "$f"; cat "$f" || exit 3; done'
)
#: Lists what `findings` judges (byte lengths: `LC_ALL=C`), `EMIT_SCRIPT` as `$0`. Exit 0
#: and `END_MARK` last: the listing is whole. A directory find cannot read (a tool may
#: make one unreadable, and git can still open a known path inside it) fails the scan.
SCAN_SCRIPT = (
    "export LC_ALL=C; set --; "
    f'for r in {" ".join(SCAN_ROOTS)}; do [ -d "$r" ] && set -- "$@" "$r"; done; '
    'find "$@" \\( -type f -o -type l \\) \\( -name config -o -name config.worktree '
    "-o -name .gitattributes -o -name attributes -o -name hooks -o -path '*/hooks/*' \\) "
    f'-exec /bin/sh -c "$0" scan {{}} + || exit 3; echo "{END_MARK}"'
)


def scan_command() -> list[str]:
    """The exec command of a workspace's scan."""
    return ["/bin/sh", "-c", SCAN_SCRIPT, EMIT_SCRIPT]


class FileKind(StrEnum):
    CONFIG = "C"
    ATTRIBUTES = "A"
    HOOK = "H"


@dataclass(frozen=True)
class ScannedFile:
    kind: FileKind
    path: str
    #: None: over `FILE_CAP`, or a hook (its content does not matter: it runs).
    content: str | None


@dataclass(frozen=True)
class Finding:
    """One refused thing: the file, and the key (or hook, or line) in it."""

    path: str
    what: str

    def __str__(self) -> str:
        # A name may hold a line break (or anything): shown escaped, on one line.
        shown = self.path.encode("unicode_escape").decode("ascii")
        return f"{shown}: {self.what}"


@dataclass(frozen=True)
class Entry:
    section: str  # lower case
    subsection: str | None  # as written (case-sensitive), None: none
    key: str  # lower case
    value: str | None  # None: a bare key (boolean true)
    line: int

    @property
    def name(self) -> str:
        if self.subsection is None:
            return f"{self.section}.{self.key}"
        return f"{self.section}.{self.subsection}.{self.key}"


class ConfigError(ValueError):
    def __init__(self, line: int, why: str) -> None:
        super().__init__(f"line {line}: {why}")
        self.line = line


def parse_scan(stdout: bytes) -> tuple[list[ScannedFile], bool]:
    """The scan's files, and whether the listing was whole (ended by `END_MARK`)."""
    files: list[ScannedFile] = []
    at = 0
    while at < len(stdout):
        end = stdout.find(b"\n", at)
        if end < 0:
            return files, False
        head = stdout[at:end].decode("ascii", errors="replace").split(" ")
        if head == [END_MARK]:
            return files, end + 1 == len(stdout)
        if len(head) != 3 or head[0] not in {k.value for k in FileKind}:
            return files, False
        try:
            path_len, size = int(head[1]), int(head[2])
        except ValueError:
            return files, False
        path_start = end + 1
        content_start = path_start + path_len
        path = stdout[path_start:content_start].decode("utf-8", errors="replace")
        kind = FileKind(head[0])
        if size < 0 or kind == FileKind.HOOK:
            files.append(ScannedFile(kind, path, None))
            at = content_start
            continue
        content = stdout[content_start : content_start + size]
        if len(content) != size:
            return files, False
        files.append(ScannedFile(kind, path, content.decode("utf-8", errors="replace")))
        at = content_start + size
    return files, False


_SECTION_CHARS = re.compile(r"[A-Za-z0-9.-]+")
_KEY = re.compile(r"[A-Za-z][A-Za-z0-9-]*")


def _header(text: str, at: int, line: int) -> tuple[str, str | None, int]:
    """A `[section]`, `[section "sub"]` or `[section.sub]` header starting after `[` at
    `at`: (section, subsection, index after `]`)."""
    name = _SECTION_CHARS.match(text, at)
    if name is None:
        raise ConfigError(line, "bad section name")
    at = name.end()
    if at < len(text) and text[at] == "]":
        section = name.group().lower()
        if "." in section:
            # The old form: `[section.sub]`, the subsection lower-cased as git does.
            first, _, old = section.partition(".")
            return first, old, at + 1
        return section, None, at + 1
    while at < len(text) and text[at] in " \t":
        at += 1
    if at >= len(text) or text[at] != '"':
        raise ConfigError(line, "bad section header")
    at += 1
    sub: list[str] = []
    while True:
        if at >= len(text) or text[at] == "\n":
            raise ConfigError(line, "unterminated subsection")
        c = text[at]
        if c == '"':
            at += 1
            break
        if c == "\\":
            at += 1
            if at >= len(text) or text[at] == "\n":
                raise ConfigError(line, "bad escape in subsection")
            c = text[at]
        sub.append(c)
        at += 1
    if at >= len(text) or text[at] != "]":
        raise ConfigError(line, "bad section header")
    if "." in name.group():
        raise ConfigError(line, "bad section name")
    return name.group().lower(), "".join(sub), at + 1


def _value(text: str, at: int, line: int) -> tuple[str, int, int]:
    """A value from `at` to its line's end (continuations joined): (value, index after
    the line break, lines consumed)."""
    out: list[str] = []
    quoted = False
    lines = 0
    pending_space = ""
    while at < len(text):
        c = text[at]
        if c == "\n":
            if quoted:
                raise ConfigError(line + lines, "unterminated quote")
            return "".join(out), at + 1, lines + 1
        if not quoted and c in "#;":
            end = text.find("\n", at)
            return "".join(out), (len(text) if end < 0 else end + 1), lines + 1
        if c == "\\":
            nxt = text[at + 1] if at + 1 < len(text) else ""
            if nxt == "\n":
                lines += 1
                at += 2
                continue
            escapes = {"n": "\n", "t": "\t", "b": "\b", '"': '"', "\\": "\\"}
            if nxt not in escapes:
                raise ConfigError(line + lines, "bad escape in value")
            out.append(pending_space + escapes[nxt])
            pending_space = ""
            at += 2
            continue
        if c == '"':
            quoted = not quoted
            out.append(pending_space)
            pending_space = ""
            at += 1
            continue
        if c in " \t" and not quoted:
            if out or pending_space:
                pending_space += c
            at += 1
            continue
        out.append(pending_space + c)
        pending_space = ""
        at += 1
    if quoted:
        raise ConfigError(line + lines, "unterminated quote")
    return "".join(out), at, lines + 1


def parse_config(text: str) -> list[Entry]:
    """Every key of a git config file, in order. Raises `ConfigError` on a line git would
    not read as git does (refused by the caller: git reads what it can)."""
    entries: list[Entry] = []
    section: str | None = None
    subsection: str | None = None
    at, line = 0, 1
    if text.startswith("\ufeff"):
        at = 1
    while at < len(text):
        c = text[at]
        if c == "\n":
            at, line = at + 1, line + 1
            continue
        if c in " \t\r":
            at += 1
            continue
        if c in "#;":
            end = text.find("\n", at)
            at = len(text) if end < 0 else end
            continue
        if c == "[":
            section, subsection, at = _header(text, at + 1, line)
            continue  # a key may follow on the same line
        key = _KEY.match(text, at)
        if key is None or section is None:
            raise ConfigError(line, "not a key")
        at = key.end()
        while at < len(text) and text[at] in " \t\r":
            at += 1
        value: str | None = None
        consumed = 1
        if at < len(text) and text[at] == "=":
            value, at, consumed = _value(text, at + 1, line)
        elif at < len(text) and text[at] in "#;":
            end = text.find("\n", at)
            at = len(text) if end < 0 else end + 1
        elif at < len(text) and text[at] != "\n":
            raise ConfigError(line, "not a key")
        else:
            at += 1
        entries.append(Entry(section, subsection, key.group().lower(), value, line))
        line += consumed
    return entries


#: Why a key is refused, by (section, subsection rule, key): subsection `None` must be
#: absent, `"*"` any present one, `"?"` present or not; key `"*"` any key.
_RULES: tuple[tuple[str, str | None, str], ...] = (
    ("core", None, "fsmonitor"),
    ("core", None, "hookspath"),
    ("core", None, "sshcommand"),
    ("core", None, "pager"),
    ("core", None, "editor"),
    ("core", None, "askpass"),
    ("core", None, "gitproxy"),
    ("core", None, "alternaterefscommand"),
    ("diff", None, "external"),
    ("diff", "*", "textconv"),
    ("diff", "*", "command"),
    ("difftool", "*", "cmd"),
    ("mergetool", "*", "cmd"),
    ("merge", "*", "driver"),
    ("filter", "?", "*"),
    ("credential", "?", "*"),
    ("url", "*", "insteadof"),
    ("url", "*", "pushinsteadof"),
    ("http", "?", "proxy"),
    ("remote", "*", "proxy"),
    ("remote", "*", "uploadpack"),
    ("remote", "*", "receivepack"),
    ("include", None, "path"),
    ("includeif", "?", "*"),
    ("protocol", None, "allow"),
    ("protocol", "ext", "allow"),
    ("uploadpack", None, "packobjectshook"),
    ("sequence", None, "editor"),
    ("gpg", "?", "program"),
    ("gpg", "ssh", "defaultkeycommand"),
    ("pager", None, "*"),
    # Found by the attack pass (issue 39): each runs a program the config names.
    # `git archive --format=<format>` pipes through `tar.<format>.command` (a shell command).
    ("tar", "*", "command"),
    # `git difftool`/`mergetool` run a known tool from `<tool>.path` (any program).
    ("difftool", "*", "path"),
    ("mergetool", "*", "path"),
    # `git add -p` pipes its diff through this shell command (with colour, which
    # `color.ui` in the same file turns on).
    ("interactive", None, "difffilter"),
    # `git help` runs the viewer and browser these name.
    ("man", "*", "cmd"),
    ("man", "*", "path"),
    ("browser", "*", "cmd"),
    ("browser", "*", "path"),
    ("guitool", "*", "cmd"),
    # `git send-email`: commands for recipients and headers, a program as SMTP server.
    ("sendemail", "?", "tocmd"),
    ("sendemail", "?", "cccmd"),
    ("sendemail", "?", "headercmd"),
    ("sendemail", "?", "sendmailcmd"),
    ("sendemail", "?", "smtpserver"),
)
#: Keys refused only when their value runs a shell command (`!...`).
_SHELL_VALUE_RULES: tuple[tuple[str, str | None, str], ...] = (
    ("alias", None, "*"),
    ("submodule", "*", "update"),
)


def _shown(rule: tuple[str, str | None, str]) -> str:
    section, sub, key = rule
    if sub == "?":
        return f"{section}.*" if key == "*" else f"{section}.[<name>.]{key}"
    middle = "" if sub is None else ".<name>" if sub == "*" else f".{sub}"
    return f"{section}{middle}.{key}"


#: The refused keys as the docs list them (lower case, as git compares them).
REFUSED = tuple(_shown(rule) for rule in _RULES)
#: Refused when the value starts with `!` (a shell command).
REFUSED_SHELL_VALUES = tuple(_shown(rule) for rule in _SHELL_VALUE_RULES)


def _matches(rule: tuple[str, str | None, str], entry: Entry) -> bool:
    section, sub, key = rule
    if entry.section != section or (key != "*" and entry.key != key):
        return False
    if sub is None:
        return entry.subsection is None
    if sub == "*":
        return entry.subsection is not None
    if sub == "?":
        return True
    return entry.subsection is not None and entry.subsection.lower() == sub


def refused_entries(entries: list[Entry]) -> list[Entry]:
    """The entries that run a command or send requests elsewhere."""
    out = []
    for entry in entries:
        if any(_matches(rule, entry) for rule in _RULES):
            out.append(entry)
        elif any(_matches(rule, entry) for rule in _SHELL_VALUE_RULES):
            if (entry.value or "").lstrip().startswith("!"):
                out.append(entry)
    return out


_ATTRIBUTE_DRIVER = re.compile(r"(?:^|\s)(filter|diff|merge)=(\S+)")


def attribute_drivers(text: str) -> list[tuple[int, str, str]]:
    """The `filter=`, `diff=` and `merge=` attributes of a gitattributes file: (line,
    attribute, driver)."""
    found = []
    for number, raw in enumerate(text.splitlines(), 1):
        stripped = raw.strip()
        if not stripped or stripped.startswith("#"):
            continue
        for match in _ATTRIBUTE_DRIVER.finditer(stripped):
            found.append((number, match.group(1), match.group(2)))
    return found


def findings(files: list[ScannedFile]) -> list[Finding]:
    """Everything the workspace may not carry into a call: refused keys of each git
    directory's config, attributes that name a refused driver, executable hooks, and any
    config file too large or not readable as git config."""
    out: list[Finding] = []
    drivers: set[tuple[str, str]] = set()
    for f in files:
        if f.kind == FileKind.HOOK:
            out.append(Finding(f.path, "an executable hook"))
            continue
        if f.kind != FileKind.CONFIG:
            continue
        if f.content is None:
            out.append(Finding(f.path, f"larger than {FILE_CAP} bytes, not checked"))
            continue
        try:
            entries = parse_config(f.content)
        except ConfigError as exc:
            out.append(Finding(f.path, f"not readable as git config ({exc})"))
            continue
        for entry in refused_entries(entries):
            out.append(Finding(f.path, f"{entry.name} (line {entry.line})"))
            if entry.subsection is not None and entry.section in ("filter", "diff", "merge"):
                drivers.add((entry.section, entry.subsection))
    for f in files:
        if f.kind != FileKind.ATTRIBUTES:
            continue
        if f.content is None:
            out.append(Finding(f.path, f"larger than {FILE_CAP} bytes, not checked"))
            continue
        for number, attribute, driver in attribute_drivers(f.content):
            if (attribute, driver) in drivers:
                out.append(Finding(f.path, f"{attribute}={driver} (line {number})"))
    return out


def refusal(found: list[Finding], *, limit: int = 10) -> str:
    """The Denied reason: what was found, file and key, the first `limit` of them."""
    shown = "; ".join(str(f) for f in found[:limit])
    more = f"; and {len(found) - limit} more" if len(found) > limit else ""
    return (
        "the attempt's workspace holds git configuration that would run a command or send "
        f"requests elsewhere in this call: {shown}{more}. Nothing ran. A workspace holding it "
        "serves no later call (an earlier call of the attempt wrote it): release the "
        "workspace (tooladapter workspace release ATTEMPT_ID) and start the attempt again"
    )


__all__ = [
    "EMIT_SCRIPT",
    "END_MARK",
    "FILE_CAP",
    "REFUSED",
    "REFUSED_SHELL_VALUES",
    "SCAN_ROOTS",
    "SCAN_SCRIPT",
    "ConfigError",
    "Entry",
    "FileKind",
    "Finding",
    "ScannedFile",
    "attribute_drivers",
    "findings",
    "parse_config",
    "parse_scan",
    "refusal",
    "refused_entries",
    "scan_command",
]
