"""Errors and results of MCP exchanges, without the SDK.

The handlers import these to branch on outcomes; the `mcp` SDK itself (about 30 MB
resident) is imported only by `mcp_client`, on the first exchange with a server. See
`mcp_client` for what each error means for a tool's effect.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

# --------------------------------------------------------------------------- errors


class McpError(Exception):
    """A failed MCP exchange; `effect_possible` says whether a tool may have acted."""

    effect_possible: bool = False

    def __init__(self, message: str, *, effect_possible: bool | None = None) -> None:
        super().__init__(message)
        self.message = message
        if effect_possible is not None:
            self.effect_possible = effect_possible


class McpUnavailable(McpError):
    """Not reachable, or the handshake failed, before any tools/call left, or the tools/call
    request was cut short before its last byte was written: not sent, no effect.

    `http_status`: the HTTP status that refused the handshake, if one did (401: the server
    wants credentials)."""

    effect_possible = False

    def __init__(self, message: str, *, http_status: int | None = None) -> None:
        super().__init__(message)
        self.http_status = http_status


class McpAddressRefused(McpUnavailable):
    """The server's address is not one the operator may connect to (`pipeline.addresses`):
    nothing was sent."""


class McpBrokenMidCall(McpError):
    """The connection or stream broke after the tools/call request was sent (its last byte
    written, or a failure with no report that it was not): effect unknown."""

    effect_possible = True


class McpCallTimeout(McpBrokenMidCall):
    """The deadline passed after the tools/call request was sent: effect unknown."""


class McpProtocolError(McpError):
    """The server answered with an error or something that is not a valid result.

    `message` is in tooladapter's words and never quotes the server: the server's own error
    text is `server_text`, which is tool output (sanitized and delimited like a result's
    text, never part of a message an agent reads as ours)."""

    def __init__(
        self,
        message: str,
        *,
        effect_possible: bool,
        code: int | None = None,
        http_status: int | None = None,
        answered: bool = False,
        server_text: str = "",
    ) -> None:
        super().__init__(message, effect_possible=effect_possible)
        self.code = code
        self.http_status = http_status
        #: The server's own error text (the JSON-RPC error's `message`), unsanitised.
        self.server_text = server_text
        #: The server itself answered the tools/call with an error (JSON-RPC or HTTP, a
        #: gateway's 502/504 excluded): the call is Observed with isError, like a result
        #: whose isError is set. False for listings and for answers that could not be read.
        self.answered = answered


class McpResponseTooLarge(McpProtocolError):
    """A response was larger than the bound (`max_response_bytes`): it is not read on.
    Possible effect when it answered the tools/call request (the tool ran)."""


class McpToolNotListed(McpError):
    """The tool is not in the server's current listing: the call was not sent."""


class McpToolChanged(McpError):
    """The tool's current digest differs from the pinned one: the call was not sent."""

    def __init__(self, message: str, *, pinned: str, current: str) -> None:
        super().__init__(message)
        self.pinned = pinned
        self.current = current


# --------------------------------------------------------------------------- results


@dataclass(frozen=True)
class Discovery:
    protocol_version: str
    server_name: str | None
    server_version: str | None
    instructions: str | None
    #: Whole wire objects (camelCase keys, `_meta` included, nulls dropped), as listed.
    tools: list[dict[str, Any]] = field(default_factory=list)
    #: {uri, name, description}
    resources: list[dict[str, Any]] = field(default_factory=list)
    #: {name, description}
    prompts: list[dict[str, Any]] = field(default_factory=list)


@dataclass(frozen=True)
class McpCallResult:
    #: The text content blocks (and text of embedded text resources), joined by newlines.
    content_text: str
    structured_content: dict[str, Any] | None
    is_error: bool
    #: The whole result as received (after protocol validation). Unsanitised.
    raw: dict[str, Any]
    protocol_version: str = ""
    #: The tool's wire object from the listing fetched right before the call.
    tool: dict[str, Any] | None = None


@dataclass(frozen=True)
class ProbeResult:
    ok: bool
    message: str
    protocol_version: str | None = None
