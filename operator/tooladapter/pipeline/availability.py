"""Whether the tool version a call names can be called: published, active and healthy.

One function for the flow and the dry run, so a preview refuses exactly what a call would,
with the same words; a version that is not published is answered with the ones that are.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from packaging.version import InvalidVersion, Version

from tooladapter.enums import FailureClass, ToolKind

#: At most this many published versions are listed in a refusal.
MAX_LISTED_VERSIONS = 20
#: Ready reasons of an unhealthy mcp descriptor that only a person's change ends (re-pinning
#: the digest, closing the server's schema): a call refused for one is not transient.
_NEEDS_A_PERSON = frozenset({"SchemaChanged", "OpenSchema"})


def published_versions(descriptors: Iterable[Mapping[str, Any]], tool_id: str) -> list[str]:
    """The versions of `tool_id` among descriptor bodies, newest first where comparable."""
    versions = {
        str((body.get("spec") or {}).get("version"))
        for body in descriptors
        if (body.get("spec") or {}).get("toolId") == tool_id
    }
    return sorted(versions, key=_version_key, reverse=True)


def _version_key(text: str) -> tuple[int, Version | str]:
    try:
        return (1, Version(text))
    except InvalidVersion:
        return (0, text)


def unavailable(
    *,
    namespace: str,
    tool_id: str,
    version: str,
    body: Mapping[str, Any] | None,
    published: Iterable[str] = (),
) -> tuple[str, FailureClass] | None:
    """Why the descriptor `body` (None: not found) cannot serve a call, else None."""
    if body is None:
        listed = list(published)
        if not listed:
            others = f"; no version of {tool_id} is published there"
        else:
            shown = ", ".join(listed[:MAX_LISTED_VERSIONS])
            more = f" and {len(listed) - MAX_LISTED_VERSIONS} more" if len(listed) > 20 else ""
            others = f"; published versions: {shown}{more}"
        return (
            f"tool {tool_id} version {version} is not published in {namespace}{others}",
            FailureClass.VALIDATION,
        )
    status = body.get("status") or {}
    if (body.get("spec") or {}).get("retired"):
        # Read from the spec, not the status the operator writes after it: a call made (or
        # re-checked) the moment the version is retired is refused as retired, not run.
        return (
            f"tool {tool_id}@{version} is retired: publish or call another version",
            FailureClass.RETIRED,
        )
    if not status.get("active"):
        return (
            f"tool {tool_id}@{version} is not active: {status.get('message') or 'inactive'}",
            FailureClass.VALIDATION,
        )
    if not status.get("healthy"):
        # An MCP server that is down or not active may come back (transient); a changed
        # tool schema needs a person to re-pin the digest, and a server schema that admits
        # unknown keys a person to close it, so retrying cannot help.
        ready: Mapping[str, Any] = next(
            (c for c in status.get("conditions") or [] if c.get("type") == "Ready"), {}
        )
        failure = (
            FailureClass.TRANSIENT
            if (body.get("spec") or {}).get("kind") == ToolKind.MCP
            and ready.get("reason") not in _NEEDS_A_PERSON
            else FailureClass.VALIDATION
        )
        return f"tool {tool_id}@{version} is unhealthy: {status.get('message') or ''}", failure
    return None
