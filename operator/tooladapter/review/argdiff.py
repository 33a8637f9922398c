"""What changed between two calls' arguments, for a reviewer.

A reviewer who approved `deploy {"tag": "v41"}` yesterday needs to see that today's call
differs only in `/tag`, or that it also gained `/force: true`. Changes are listed by JSON
pointer (RFC 6901), values in canonical JSON (RFC 8785), objects walked key by key and
arrays index by index, in a stable order.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from tooladapter.pipeline.hashing import CanonicalizationError, canonical_json


class ChangeKind(StrEnum):
    ADDED = "added"
    REMOVED = "removed"
    CHANGED = "changed"


_MARK = {ChangeKind.ADDED: "+", ChangeKind.REMOVED: "-", ChangeKind.CHANGED: "~"}


@dataclass(frozen=True)
class Change:
    kind: ChangeKind
    path: str
    before: Any = None
    after: Any = None

    def wire(self) -> dict[str, Any]:
        out: dict[str, Any] = {"kind": self.kind.value, "path": self.path}
        if self.kind is not ChangeKind.ADDED:
            out["before"] = self.before
        if self.kind is not ChangeKind.REMOVED:
            out["after"] = self.after
        return out


def canonical(value: Any) -> str:
    """RFC 8785 text of `value` (what the request hash is computed over)."""
    try:
        return canonical_json(value).decode()
    except CanonicalizationError:
        return repr(value)


def _escape(key: str) -> str:
    return key.replace("~", "~0").replace("/", "~1")


def diff(before: Any, after: Any, path: str = "") -> list[Change]:
    """Every difference from `before` to `after`; empty when they are canonically equal."""
    if isinstance(before, dict) and isinstance(after, dict):
        changes: list[Change] = []
        for key in sorted(set(before) | set(after)):
            sub = f"{path}/{_escape(str(key))}"
            if key not in after:
                changes.append(Change(ChangeKind.REMOVED, sub, before=before[key]))
            elif key not in before:
                changes.append(Change(ChangeKind.ADDED, sub, after=after[key]))
            else:
                changes.extend(diff(before[key], after[key], sub))
        return changes
    if isinstance(before, list) and isinstance(after, list):
        changes = []
        for index in range(max(len(before), len(after))):
            sub = f"{path}/{index}"
            if index >= len(after):
                changes.append(Change(ChangeKind.REMOVED, sub, before=before[index]))
            elif index >= len(before):
                changes.append(Change(ChangeKind.ADDED, sub, after=after[index]))
            else:
                changes.extend(diff(before[index], after[index], sub))
        return changes
    # Canonical comparison: 1 and 1.0 are the same JSON number, True and 1 are not.
    if canonical(before) == canonical(after):
        return []
    return [Change(ChangeKind.CHANGED, path or "/", before=before, after=after)]


def _clip(text: str, width: int) -> str:
    return text if len(text) <= width else text[: max(0, width - 3)] + "..."


def render(changes: list[Change], *, width: int = 120) -> list[str]:
    """One line per change: `+ /path: value`, `- /path: value`, `~ /path: old -> new`."""
    lines = []
    for change in changes:
        mark = _MARK[change.kind]
        if change.kind is ChangeKind.ADDED:
            text = f"{mark} {change.path}: {canonical(change.after)}"
        elif change.kind is ChangeKind.REMOVED:
            text = f"{mark} {change.path}: {canonical(change.before)}"
        else:
            text = f"{mark} {change.path}: {canonical(change.before)} -> {canonical(change.after)}"
        lines.append(_clip(text, width))
    return lines
