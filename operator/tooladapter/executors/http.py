"""Declared HTTP calls, run by the operator: method and URL template fixed by the descriptor.

Arguments only fill `{name}` placeholders (URL-encoded); the host must be allow-listed.
Whether the request was sent decides Failed versus Uncertain when something breaks.
"""

from __future__ import annotations

import aiohttp

from ..enums import FailureClass
from ..pipeline.validation import render_http_request
from . import Call, Outcome, unconfirmed


class HttpExecutor:
    def __init__(self, session: aiohttp.ClientSession) -> None:
        self.session = session

    async def execute(self, call: Call) -> Outcome:
        spec = call.descriptor.http if call.descriptor else None
        if spec is None:
            return Outcome.failed(FailureClass.VALIDATION, "descriptor has no http block")
        try:
            method, url, headers, body = render_http_request(spec, call.arguments)
        except ValueError as exc:
            return Outcome.failed(FailureClass.VALIDATION, str(exc))
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
            return Outcome.failed(FailureClass.TRANSIENT, f"could not connect: {exc.os_error}")
        except (TimeoutError, aiohttp.ClientError) as exc:
            if (
                not sent
                and isinstance(exc, aiohttp.ClientConnectionError)
                and not isinstance(exc, aiohttp.ServerDisconnectedError)
            ):
                return Outcome.failed(FailureClass.TRANSIENT, f"connection failed: {exc}")
            return unconfirmed(call, f"{method} {url}: no complete answer ({type(exc).__name__})")
