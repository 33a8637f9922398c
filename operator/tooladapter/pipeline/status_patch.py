"""The smallest JSON merge patch (RFC 7386) from the status the API server holds to ours.

A call's status is written a few times over its life; sending only what changed keeps each
write, and the API server's work on it, proportional to the change (issue 17). Lists are
atomic in a merge patch: a changed list is sent whole.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def merge_patch(stored: Mapping[str, Any], wanted: Mapping[str, Any]) -> dict[str, Any]:
    """The patch that turns `stored` into `wanted`: changed and new keys, None for keys
    `wanted` no longer has, nested objects patched key by key."""
    patch: dict[str, Any] = {}
    for key, value in wanted.items():
        old = stored.get(key)
        if isinstance(value, Mapping) and isinstance(old, Mapping):
            inner = merge_patch(old, value)
            if inner:
                patch[key] = inner
        elif key not in stored or old != value:
            patch[key] = value
    for key in stored:
        if key not in wanted:
            patch[key] = None
    return patch
