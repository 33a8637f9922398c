"""Declared HTTP calls, run by the operator: method and URL template fixed by the descriptor.

Arguments only fill `{name}` placeholders (URL-encoded); the host must be allow-listed.
Whether the request was sent decides Failed versus Uncertain when something breaks.
"""

from __future__ import annotations

import ipaddress
from urllib.parse import urlsplit

import aiohttp

from ..enums import FailureClass
from ..pipeline.validation import render_http_request
from . import Call, InOperator, Outcome, unconfirmed


def blocked_host(url: str, blocked: tuple[str, ...]) -> str | None:
    """The entry of `blocked` that the URL's host matches (a name, an address or a CIDR)."""
    host = (urlsplit(url).hostname or "").lower().rstrip(".")
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        address = None
    for entry in blocked:
        if host == entry.lower().rstrip("."):
            return entry
        if address is not None:
            try:
                if address in ipaddress.ip_network(entry, strict=False):
                    return entry
            except ValueError:
                continue
    return None


class HttpExecutor(InOperator):
    def __init__(self, session: aiohttp.ClientSession, blocked_hosts: tuple[str, ...] = ()) -> None:
        self.session = session
        self.blocked_hosts = blocked_hosts

    async def execute(self, call: Call) -> Outcome:
        spec = call.descriptor.http if call.descriptor else None
        if spec is None:
            return Outcome.failed(FailureClass.VALIDATION, "descriptor has no http block")
        try:
            method, url, headers, body = render_http_request(spec, call.arguments)
        except ValueError as exc:
            return Outcome.failed(FailureClass.VALIDATION, str(exc))
        blocked = blocked_host(url, self.blocked_hosts)
        if blocked is not None:
            return Outcome.failed(
                FailureClass.POLICY_DENIED,
                f"{method} {url}: the host is blocked for every tool ({blocked})",
            )
        timeout = aiohttp.ClientTimeout(total=call.timeout_seconds)
        sent = False
        try:
            async with self.session.request(
                method, url, headers=headers, data=body, timeout=timeout, allow_redirects=False
            ) as resp:
                sent = True
                chunks: list[bytes] = []
                size = 0
                # Read one byte past the bound so the sanitizer can mark truncation.
                while size <= call.max_result_bytes:
                    chunk = await resp.content.read(min(65536, call.max_result_bytes + 1 - size))
                    if not chunk:
                        break
                    chunks.append(chunk)
                    size += len(chunk)
                output = b"".join(chunks)
                if resp.status >= 400:
                    return Outcome.failed(
                        FailureClass.TOOL_ERROR,
                        f"{method} {url} answered {resp.status}",
                        output=output,
                    )
                return Outcome.observed(output)
        except aiohttp.ClientConnectorError as exc:
            # Nothing was sent: no effect possible.
            return Outcome.failed(
                FailureClass.TRANSIENT, f"could not connect: {exc.os_error}", retryable=True
            )
        except (TimeoutError, aiohttp.ClientError) as exc:
            if (
                not sent
                and isinstance(exc, aiohttp.ClientConnectionError)
                and not isinstance(exc, aiohttp.ServerDisconnectedError)
            ):
                return Outcome.failed(
                    FailureClass.TRANSIENT, f"connection failed: {exc}", retryable=True
                )
            return unconfirmed(call, f"{method} {url}: no complete answer ({type(exc).__name__})")
