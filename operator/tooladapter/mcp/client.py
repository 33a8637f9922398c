"""Talking to MCP servers: discovery, tool calls and health probes over streamable HTTP.

Built on the official `mcp` SDK v2 `Client` in automatic mode: it probes `server/discover`
(the 2026-07-28 protocol: no initialize, no session) and falls back to the `initialize`
handshake (with an optional `Mcp-Session-Id`) for servers of earlier revisions. Every
function opens its own connection and closes it: nothing is cached (the SDK's response
cache is switched off), so a tool list is always what the server says now.

No Kubernetes here. Credentials arrive as plain headers (the caller reads the Secret) and
go only to `url`: the SDK follows a redirect only within the endpoint's origin, and
environment proxies and `.netrc` are ignored (`trust_env=False`). Every connection goes only
to an address the caller's `AddressRule` permits (`pipeline.addresses`: public, or in the
McpServer's `spec.allowedCidrs`): the network backend resolves the host, checks each
address and connects to a permitted one, so the address checked is the address connected
to; none permitted raises `McpAddressRefused` before anything is sent. TLS is verified
against `tls`, the operator's outbound trust (`egress.core.trust.settings_context`: the
system's CAs plus `TOOLADAPTER_EGRESS_CA_FILE` and `TOOLADAPTER_CA_BUNDLE`, as http tools
trust), or the system's CAs alone when none is given.

Errors say whether the call could have had an effect (`McpError.effect_possible`):

- `McpUnavailable`: the server could not be reached, or the connection/handshake failed,
  before the tools/call request left: no effect possible.
- `McpBrokenMidCall`: the connection broke or the stream ended after the tools/call request
  was sent: the effect is unknown. `McpCallTimeout` (a subclass) when the deadline passed.
- `McpProtocolError`: the server answered, but not with a usable result (a JSON-RPC error,
  an HTTP error status, a malformed result). `effect_possible` is False when the server
  refused the request outright (parse error, invalid request/params, unknown method or
  tool, HTTP 4xx), True otherwise.
- `McpToolNotListed` / `McpToolChanged`: the fresh listing before a call does not have the
  tool, or its digest differs from the pinned one: the call was not sent.
"""

from __future__ import annotations

import json
import logging
import socket
import ssl
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from typing import Any, Final

import anyio
import httpcore2
import httpx2
from mcp import Client, types
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError
from pydantic import RootModel, ValidationError

from tooladapter.egress.core.addresses import AddressRefused, AddressRule
from tooladapter.mcp.core.rules import tool_digest
from tooladapter.mcp.core.types import (
    Discovery,
    McpAddressRefused,
    McpBrokenMidCall,
    McpCallResult,
    McpCallTimeout,
    McpError,
    McpProtocolError,
    McpResponseTooLarge,
    McpToolChanged,
    McpToolNotListed,
    McpUnavailable,
    ProbeResult,
)

logger = logging.getLogger(__name__)

#: Where the idempotency key travels in a tools/call request's `_meta` (namespaced, as the
#: MCP spec asks of non-protocol `_meta` keys).
IDEMPOTENCY_META_KEY: Final = "dev.tooladapter/idempotencyKey"

CLIENT_INFO: Final = types.Implementation(name="tooladapter", version="0.1.0")

#: A listing that never ends cannot hang discovery.
MAX_PAGES: Final = 100

#: JSON-RPC errors that mean "the server refused the request before acting on it".
_REFUSED_CODES: Final = frozenset(
    {
        types.PARSE_ERROR,
        types.INVALID_REQUEST,
        types.METHOD_NOT_FOUND,
        types.INVALID_PARAMS,
        types.HEADER_MISMATCH,
    }
)


class _RawResult(RootModel[dict[str, Any]]):
    """A result kept as the dict it came as (after the SDK's protocol-level validation)."""


# --------------------------------------------------------------------------- connection


class _GuardedBackend(httpcore2.AsyncNetworkBackend):
    """Resolves the host once, keeps the addresses `rule` permits (raising `AddressRefused`
    when there are none) and connects to the first of them that answers."""

    def __init__(self, rule: AddressRule) -> None:
        self.rule = rule
        self.inner = httpcore2.AnyIOBackend()

    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Any = None,
    ) -> httpcore2.AsyncNetworkStream:
        try:
            infos = await anyio.getaddrinfo(host, port, type=socket.SOCK_STREAM)
        except OSError as exc:
            raise httpcore2.ConnectError(f"cannot resolve {host}: {exc}") from exc
        addresses = list(dict.fromkeys(str(info[4][0]) for info in infos))
        failure: Exception | None = None
        for address in self.rule.permitted(host, addresses):
            try:
                return await self.inner.connect_tcp(
                    address,
                    port,
                    timeout=timeout,
                    local_address=local_address,
                    socket_options=socket_options,
                )
            except (httpcore2.ConnectError, httpcore2.ConnectTimeout) as exc:
                failure = exc
        assert failure is not None
        raise failure

    async def sleep(self, seconds: float) -> None:
        await self.inner.sleep(seconds)


class _GuardedTransport(httpx2.AsyncHTTPTransport):
    """httpx's transport over a connection pool with `_GuardedBackend` (httpx has no public
    parameter for the network backend, so the pool it built is replaced)."""

    def __init__(self, rule: AddressRule, tls: ssl.SSLContext | None = None) -> None:
        super().__init__()
        self._pool = httpcore2.AsyncConnectionPool(
            ssl_context=tls if tls is not None else httpx2.create_ssl_context(),
            max_connections=100,
            max_keepalive_connections=20,
            keepalive_expiry=5.0,
            network_backend=_GuardedBackend(rule),
        )


#: Bound of one response (a listing, a probe) when the caller gives none.
DEFAULT_MAX_RESPONSE_BYTES: Final = 8 << 20


class _BoundedStream(httpx2.AsyncByteStream):
    """A response body that stops (`McpResponseTooLarge`) past `limit` bytes."""

    def __init__(self, inner: Any, limit: int, tracker: _CallTracker, is_call: bool) -> None:
        self.inner = inner
        self.limit = limit
        self.tracker = tracker
        self.is_call = is_call

    async def __aiter__(self) -> AsyncIterator[bytes]:
        size = 0
        async for chunk in self.inner:
            size += len(chunk)
            if size > self.limit:
                error = McpResponseTooLarge(
                    f"the MCP server's response is larger than {self.limit} bytes: "
                    "not read on (the tool's maxResultBytes bounds it)",
                    effect_possible=self.is_call,
                )
                self.tracker.too_large = error
                raise error
            yield chunk

    async def aclose(self) -> None:
        await self.inner.aclose()


class _CallTracker(httpx2.AsyncBaseTransport):
    """Knows whether the tools/call request left, and how the server answered it.

    `call_state`: "none" (not attempted), "unsent" (the connection could not be opened:
    nothing left), "cut-short" (the transport reported that writing the request failed
    before its last byte: not sent), "maybe-sent" (failed after connecting, before a
    response, with no such report: counted as sent), "answered" (a response status arrived;
    `call_status` holds it). Only a failed write that httpcore itself reports (its `trace`
    extension) makes a request "cut-short": without that report the request counts as sent.

    Every response body is bounded by `max_response_bytes` and asked for uncompressed (a
    compressed one is refused: its size on the wire would not bound what it decodes to).
    """

    def __init__(
        self, inner: httpx2.AsyncBaseTransport, max_response_bytes: int = DEFAULT_MAX_RESPONSE_BYTES
    ) -> None:
        self.inner = inner
        self.call_state = "none"
        self.call_status: int | None = None
        self.last_error_status: int | None = None
        self.max_response_bytes = max_response_bytes
        self.too_large: McpResponseTooLarge | None = None

    @staticmethod
    def _is_call(request: httpx2.Request) -> bool:
        if request.method != "POST":
            return False
        if request.headers.get("mcp-method") == "tools/call":
            return True
        try:
            body = json.loads(request.content)
        except (httpx2.RequestNotRead, ValueError, TypeError):
            return False
        return isinstance(body, dict) and body.get("method") == "tools/call"

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        is_call = self._is_call(request)
        write_failed = False
        if is_call:
            self.call_state = "unsent"
            inner_trace = request.extensions.get("trace")

            async def trace(name: str, info: dict[str, Any]) -> None:
                # httpcore reports "<http11|http2>.send_request_<headers|body>.failed" when
                # a write of the request raised: its last byte was not written.
                nonlocal write_failed
                if name.endswith((".send_request_headers.failed", ".send_request_body.failed")):
                    write_failed = True
                if inner_trace is not None:
                    await inner_trace(name, info)

            request.extensions["trace"] = trace
        request.headers["Accept-Encoding"] = "identity"
        try:
            response = await self.inner.handle_async_request(request)
        except (httpx2.ConnectError, httpx2.ConnectTimeout, httpx2.PoolTimeout, AddressRefused):
            raise  # nothing left: the call (if this was it) stays "unsent"
        except BaseException:
            if is_call:
                self.call_state = "cut-short" if write_failed else "maybe-sent"
            raise
        if is_call:
            self.call_state = "answered"
            self.call_status = response.status_code
        if response.status_code >= 400:
            self.last_error_status = response.status_code
        encoding = response.headers.get("content-encoding", "identity").strip().lower()
        if encoding not in ("", "identity"):
            await response.aclose()
            error = McpResponseTooLarge(
                f"the MCP server answered with Content-Encoding {encoding!r} though asked for "
                "identity: refused (a compressed body's size does not bound its content)",
                effect_possible=is_call,
            )
            self.too_large = error
            raise error
        response.stream = _BoundedStream(response.stream, self.max_response_bytes, self, is_call)
        return response

    async def aclose(self) -> None:
        await self.inner.aclose()


#: Headers the transport owns; credentials may not set them.
_RESERVED_HEADERS: Final = frozenset(
    {"accept", "connection", "content-length", "content-type", "host", "last-event-id"}
)


def _check_headers(headers: Mapping[str, str]) -> dict[str, str]:
    for name in headers:
        lowered = name.lower()
        if lowered in _RESERVED_HEADERS or lowered.startswith("mcp-"):
            raise McpUnavailable(f"header {name!r} is reserved by the MCP transport")
    return dict(headers)


@asynccontextmanager
async def _connect(
    url: str,
    headers: Mapping[str, str],
    timeout: float,
    tracker: _CallTracker,
) -> AsyncIterator[Client]:
    http = httpx2.AsyncClient(
        headers=_check_headers(headers),
        timeout=httpx2.Timeout(timeout),
        transport=tracker,
        trust_env=False,
        follow_redirects=False,
    )
    async with (
        http,
        Client(
            streamable_http_client(url, http_client=http),
            mode="auto",
            cache=None,
            read_timeout_seconds=timeout,
            client_info=CLIENT_INFO,
        ) as client,
    ):
        yield client


def _describe(exc: BaseException) -> str:
    """A one-line description, looking through exception groups to the first real cause."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    text = str(exc) or type(exc).__name__
    return f"{type(exc).__name__}: {text}"[:500]


def _unquoted(exc: BaseException) -> str:
    """`_describe` for a call's message, quoting nothing the server wrote: a JSON-RPC error
    by its code, a malformed answer by where it breaks the protocol (never its values)."""
    mcp_error = _find(exc, MCPError)
    if isinstance(mcp_error, MCPError):
        return f"JSON-RPC error {mcp_error.error.code}"
    invalid = _find(exc, ValidationError)
    if isinstance(invalid, ValidationError):
        places = sorted(
            {".".join(map(str, e["loc"])) or "$" for e in invalid.errors(include_input=False)}
        )
        shown = ", ".join(places[:5]) + (" ..." if len(places) > 5 else "")
        return f"ValidationError: {invalid.error_count()} problems at {shown}"[:500]
    return _describe(exc)


def _find(exc: BaseException, kind: type[BaseException]) -> BaseException | None:
    if isinstance(exc, kind):
        return exc
    if isinstance(exc, BaseExceptionGroup):
        for inner in exc.exceptions:
            found = _find(inner, kind)
            if found is not None:
                return found
    return None


def _address_refused(url: str, exc: BaseException) -> McpAddressRefused | None:
    refused = _find(exc, AddressRefused)
    if refused is None:
        return None
    return McpAddressRefused(f"MCP server {url} was not contacted: {refused}")


def _unavailable(
    url: str, exc: BaseException, tracker: _CallTracker, *, quote: bool = True
) -> McpUnavailable:
    """`quote`: whether the message may quote the server's error text (a probe's, for the
    McpServer's status); a call's message never does (`_unquoted`)."""
    if isinstance(exc, McpError):
        return McpUnavailable(exc.message)
    refused = _address_refused(url, exc)
    if refused is not None:
        return refused
    mcp_error = _find(exc, MCPError)
    if isinstance(mcp_error, MCPError):
        status = tracker.last_error_status
        http = f", HTTP {status}" if status is not None else ""
        said = f"{mcp_error.error.message} " if quote else ""
        return McpUnavailable(
            f"MCP server {url} refused the handshake: {said}(code {mcp_error.error.code}{http})",
            http_status=status,
        )
    if _find(exc, TimeoutError) is not None:
        return McpUnavailable(f"MCP server {url} did not answer in time")
    described = _describe(exc) if quote else _unquoted(exc)
    return McpUnavailable(f"MCP server {url} is unavailable: {described}")


# --------------------------------------------------------------------------- listing


async def _list_tools(client: Client) -> list[dict[str, Any]]:
    if client.server_capabilities.tools is None:
        return []
    tools: list[dict[str, Any]] = []
    cursor: str | None = None
    seen: set[str] = set()
    for _ in range(MAX_PAGES):
        page = await client.session.list_tools(params=types.PaginatedRequestParams(cursor=cursor))
        tools.extend(
            t.model_dump(by_alias=True, mode="json", exclude_unset=True, exclude_none=True)
            for t in page.tools
        )
        cursor = page.next_cursor
        if cursor is None:
            return tools
        if cursor in seen:
            raise McpProtocolError("tools/list repeated a cursor", effect_possible=False)
        seen.add(cursor)
    raise McpProtocolError(f"tools/list has more than {MAX_PAGES} pages", effect_possible=False)


async def _list_resources(client: Client) -> list[dict[str, Any]]:
    if client.server_capabilities.resources is None:
        return []
    out: list[dict[str, Any]] = []
    cursor: str | None = None
    for _ in range(MAX_PAGES):
        page = await client.session.list_resources(
            params=types.PaginatedRequestParams(cursor=cursor)
        )
        out.extend(
            {"uri": str(r.uri), "name": r.name or "", "description": r.description or ""}
            for r in page.resources
        )
        cursor = page.next_cursor
        if cursor is None:
            break
    return out


async def _list_prompts(client: Client) -> list[dict[str, Any]]:
    if client.server_capabilities.prompts is None:
        return []
    out: list[dict[str, Any]] = []
    cursor: str | None = None
    for _ in range(MAX_PAGES):
        page = await client.session.list_prompts(params=types.PaginatedRequestParams(cursor=cursor))
        out.extend({"name": p.name, "description": p.description or ""} for p in page.prompts)
        cursor = page.next_cursor
        if cursor is None:
            break
    return out


# --------------------------------------------------------------------------- API


async def discover(
    url: str,
    *,
    headers: Mapping[str, str] | None = None,
    timeout: float = 10,
    addresses: AddressRule | None = None,
    tls: ssl.SSLContext | None = None,
) -> Discovery:
    """Connect (auto mode), and list tools, resources and prompts (all pages). Never cached.

    Raises `McpUnavailable` when the server cannot be reached or the handshake fails
    (`McpAddressRefused` when `addresses` permits none of its addresses; without a rule only
    public addresses are), and `McpProtocolError` when a listing is refused or malformed.
    """
    tracker = _CallTracker(_GuardedTransport(addresses or AddressRule(), tls))
    connected = False
    try:
        with anyio.fail_after(timeout):
            async with _connect(url, headers or {}, timeout, tracker) as client:
                connected = True
                info = client.server_info
                tools = await _list_tools(client)
                resources = await _list_resources(client)
                prompts = await _list_prompts(client)
                return Discovery(
                    protocol_version=client.protocol_version,
                    server_name=info.name if info is not None else None,
                    server_version=(info.version or None) if info is not None else None,
                    instructions=client.instructions,
                    tools=tools,
                    resources=resources,
                    prompts=prompts,
                )
    except McpError:
        raise
    except Exception as exc:
        ours = _find(exc, McpError)
        if ours is not None:
            raise ours from exc
        refused = _address_refused(url, exc)
        if refused is not None:
            raise refused from exc
        if not connected:
            raise _unavailable(url, exc, tracker) from exc
        mcp_error = _find(exc, MCPError)
        if isinstance(mcp_error, MCPError):
            raise McpProtocolError(
                f"MCP server {url} refused a listing: {mcp_error.error.message}",
                effect_possible=False,
                code=mcp_error.error.code,
            ) from exc
        if isinstance(_find(exc, ValidationError), ValidationError):
            raise McpProtocolError(
                f"MCP server {url} sent a malformed listing: {_describe(exc)}",
                effect_possible=False,
            ) from exc
        raise McpUnavailable(f"MCP server {url} failed during discovery: {_describe(exc)}") from exc


async def probe(
    url: str,
    *,
    headers: Mapping[str, str] | None = None,
    timeout: float = 10,
    addresses: AddressRule | None = None,
    tls: ssl.SSLContext | None = None,
) -> ProbeResult:
    """A health probe: the connect-time negotiation (server/discover or initialize). Never raises
    for server trouble; `ok` False with a message instead."""
    tracker = _CallTracker(_GuardedTransport(addresses or AddressRule(), tls))
    try:
        with anyio.fail_after(timeout):
            async with _connect(url, headers or {}, timeout, tracker) as client:
                version = client.protocol_version
    except Exception as exc:
        return ProbeResult(False, _unavailable(url, exc, tracker).message)
    return ProbeResult(True, f"negotiated MCP {version}", version)


def _content_text(result: types.CallToolResult) -> str:
    parts: list[str] = []
    for block in result.content:
        if isinstance(block, types.TextContent):
            parts.append(block.text)
        elif isinstance(block, types.EmbeddedResource) and isinstance(
            block.resource, types.TextResourceContents
        ):
            parts.append(block.resource.text)
    return "\n".join(parts)


#: An intermediary's answer (Bad Gateway, Gateway Timeout): not the server's own.
_GATEWAY_ERRORS = frozenset({502, 504})


def _classify_call_failure(
    url: str, tool: str, exc: BaseException, tracker: _CallTracker
) -> McpError:
    """Map what broke during a tools/call onto Unavailable / BrokenMidCall / ProtocolError."""
    state, status = tracker.call_state, tracker.call_status
    where = f"tools/call {tool!r} on {url}"
    if state in ("none", "unsent"):
        return _address_refused(url, exc) or McpUnavailable(
            f"{where} was not sent: {_unquoted(exc)}"
        )
    if state == "cut-short":
        # Its last byte never left: the server cannot act on a request it did not get whole.
        return McpUnavailable(
            f"{where} was not sent: the connection broke while it was written: {_describe(exc)}"
        )
    timed_out = _find(exc, TimeoutError) is not None
    mcp_error = _find(exc, MCPError)
    if isinstance(mcp_error, MCPError):
        # The error's text may be the server's (its JSON-RPC error): it is never quoted in
        # our words. An answer's text travels as `server_text`, the tool's output.
        code = mcp_error.error.code
        if status is not None and status >= 400:
            # 4xx: refused before acting; 5xx: the server may have failed while acting. A
            # gateway's 502/504 is not the server's answer: its text is dropped.
            answered = status not in _GATEWAY_ERRORS
            return McpProtocolError(
                f"{where}: server answered HTTP {status} (JSON-RPC error {code})",
                effect_possible=status >= 500,
                code=code,
                http_status=status,
                answered=answered,
                server_text=mcp_error.error.message if answered else "",
            )
        if code == types.CONNECTION_CLOSED:
            # -32000 is also the code servers use for their own errors: no text quoted.
            return McpBrokenMidCall(f"{where}: stream broke after the request was sent")
        if code == types.REQUEST_TIMEOUT:
            return McpCallTimeout(f"{where}: no answer before the deadline")
        return McpProtocolError(
            f"{where}: server answered JSON-RPC error {code}",
            effect_possible=code not in _REFUSED_CODES,
            code=code,
            http_status=status,
            answered=True,
            server_text=mcp_error.error.message,
        )
    if timed_out:
        return McpCallTimeout(f"{where}: no answer before the deadline")
    if isinstance(_find(exc, ValidationError), ValidationError):
        return McpProtocolError(
            f"{where}: server sent a result that is not a valid CallToolResult: {_unquoted(exc)}",
            effect_possible=True,
            http_status=status,
        )
    return McpBrokenMidCall(
        f"{where}: connection broke after the request was sent: {_unquoted(exc)}"
    )


async def call_tool(
    url: str,
    *,
    headers: Mapping[str, str] | None = None,
    tool: str,
    arguments: Mapping[str, Any],
    meta: Mapping[str, Any] | None = None,
    timeout: float,
    idempotency_key: str | None = None,
    expected_digest: str | None = None,
    addresses: AddressRule | None = None,
    max_response_bytes: int = DEFAULT_MAX_RESPONSE_BYTES,
    tls: ssl.SSLContext | None = None,
) -> McpCallResult:
    """`tools/call` with the given arguments; the idempotency key in `_meta`.

    Every response (the listing, the result) is read up to `max_response_bytes`: a larger
    one raises `McpResponseTooLarge` (effect possible when it was the call's answer).

    The tool list is fetched fresh first (never from a cache): with `expected_digest`, a
    tool whose current digest differs raises `McpToolChanged` and nothing is called; a tool
    not listed raises `McpToolNotListed`. `timeout` bounds the whole exchange.

    The SDK does not validate the result here: `structured_content` comes back as sent and
    the caller checks it against the pinned outputSchema (`pipeline.mcp`).
    """
    request_meta: dict[str, Any] = dict(meta or {})
    if idempotency_key is not None:
        request_meta[IDEMPOTENCY_META_KEY] = idempotency_key
    tracker = _CallTracker(_GuardedTransport(addresses or AddressRule(), tls), max_response_bytes)
    connected = False
    listed: dict[str, Any] | None = None
    version = ""
    raw: dict[str, Any] | None = None
    try:
        with anyio.fail_after(timeout):
            async with _connect(url, headers or {}, timeout, tracker) as client:
                connected = True
                version = client.protocol_version
                listed = next((t for t in await _list_tools(client) if t.get("name") == tool), None)
                if listed is None:
                    raise McpToolNotListed(f"tool {tool!r} is not listed by {url}; not called")
                current = tool_digest(listed)
                if expected_digest is not None and current != expected_digest:
                    raise McpToolChanged(
                        f"tool {tool!r} on {url} changed: pinned {expected_digest}, current "
                        f"{current}; not called",
                        pinned=expected_digest,
                        current=current,
                    )
                request = types.CallToolRequest(
                    params=types.CallToolRequestParams(
                        name=tool, arguments=dict(arguments), _meta=request_meta or None
                    )
                )
                raw = (await client.session.send_request(request, _RawResult)).root
    except McpError:
        raise
    except Exception as exc:
        if tracker.too_large is not None:  # however the SDK reported the broken stream
            raise tracker.too_large from exc
        ours = _find(exc, McpError)
        if ours is not None:
            raise ours from exc
        if raw is not None:
            # The answer is in; only closing the connection failed. Keep the answer.
            logger.debug("closing the connection to %s failed after the result: %s", url, exc)
        elif not connected and tracker.call_state == "none":
            raise _unavailable(url, exc, tracker, quote=False) from exc
        elif tracker.call_state == "none":
            # Connected, but failed while listing (before the call): nothing was sent.
            refused = _address_refused(url, exc)
            if refused is not None:
                raise refused from exc
            raise McpUnavailable(
                f"tools/call {tool!r} on {url} was not sent: listing tools failed: {_unquoted(exc)}"
            ) from exc
        else:
            raise _classify_call_failure(url, tool, exc, tracker) from exc
    assert raw is not None
    try:
        result = types.CallToolResult.model_validate(raw, by_name=False)
    except ValidationError as exc:
        kind = raw.get("resultType")
        why = (
            "the server asked for input (elicitation/sampling), which tooladapter cannot give"
            if kind not in (None, "complete")
            else f"not a valid CallToolResult: {_unquoted(exc)}"
        )
        raise McpProtocolError(
            f"tools/call {tool!r} on {url}: {why}", effect_possible=True
        ) from exc
    structured = result.structured_content
    return McpCallResult(
        content_text=_content_text(result),
        structured_content=dict(structured) if isinstance(structured, Mapping) else None,
        is_error=bool(result.is_error),
        raw=raw,
        protocol_version=version,
        tool=listed,
    )
