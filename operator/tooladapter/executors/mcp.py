"""MCP tool calls, sent by the operator to the server the descriptor is bound to.

Every call re-lists the server's tools and refuses to send when the pinned digest no longer
matches (a rug pull between discovery and call). A server's error answer is the tool's
output, never our words: its text becomes the result (sanitized and delimited like any
result's text), the message names only the code. The server's own credential comes from its
Secret, goes only to that server and only once a platform admin activated it, and never
reaches a result or message. The server's addresses must be public or in its
`spec.allowedCidrs` (`pipeline.addresses`), never one the operator blocks for every tool.
"""

from __future__ import annotations

import dataclasses
import ssl

from tooladapter import offload
from tooladapter.catalog import Catalog
from tooladapter.credentials.carried import header_of, header_problem
from tooladapter.credentials.requests import carries_url
from tooladapter.egress.core.addresses import AddressRule
from tooladapter.enums import FailureClass, Transmission
from tooladapter.executors import Call, InOperator, Outcome, lost
from tooladapter.kube.client import NotFound
from tooladapter.kube.cluster import Cluster
from tooladapter.kube.sandbox import decode_b64
from tooladapter.mcp.core import types as mcp_types
from tooladapter.mcp.core.rules import validate_structured_output
from tooladapter.model import McpServerSpec
from tooladapter.pipeline.sanitize.redaction import bounded_message, redact_text
from tooladapter.pipeline.sanitize.results import sanitize_structured


async def credentials_for(
    cluster: Cluster, namespace: str, spec: McpServerSpec
) -> tuple[dict[str, str], list[str]]:
    """The headers carrying the server's credentials (each whose `inject.hosts` names the
    url's host), and every form of their values (for redaction). `NotFound` when a Secret,
    its key or a ServiceAccount is missing: nothing is sent."""
    headers: dict[str, str] = {}
    secrets: list[str] = []
    for credential in spec.credentials:
        inject = credential.inject
        if inject.hosts is None or not carries_url(inject, "POST", spec.url):
            continue
        source = credential.source
        if source.secret_key_ref is not None:
            ref = source.secret_key_ref
            data = await cluster.read_secret(namespace, ref.name)
            if ref.key not in data:
                raise NotFound(f"secret {ref.name} has no key {ref.key}")
            value = decode_b64(data[ref.key]).strip()
        elif source.service_account_token is not None:
            token = source.service_account_token
            value, _expiry = await cluster.request_token(
                namespace=namespace,
                service_account=token.service_account_name,
                audiences=list(token.audiences),
                expiration_seconds=SERVER_TOKEN_SECONDS,
            )
        else:
            # An issuer's token per call is brokered by the flow for tools, not yet for a
            # server's connections (the McpServer controller refuses it): nothing is sent.
            raise NotFound(
                f"credential {credential.name}: {source.kind} is not served for McpServers"
            )
        if header_problem(value) is not None:
            raise NotFound(f"credential {credential.name}: the value is not a one-line header")
        name, text = header_of(inject, value)
        headers[name] = text
        secrets.extend((value, text))
    return headers, secrets


#: A server's token lives for the API server's minimum (it is minted per exchange).
SERVER_TOKEN_SECONDS = 600


def address_rule(spec: McpServerSpec, blocked: tuple[str, ...] = ()) -> AddressRule:
    """Where connections to the server may go: public addresses and its `allowedCidrs`,
    never the operator's blocked ones."""
    return AddressRule.of(spec.allowed_cidrs, blocked)


class McpExecutor(InOperator):
    def __init__(
        self,
        cluster: Cluster,
        catalog: Catalog,
        blocked: tuple[str, ...] = (),
        tls: ssl.SSLContext | None = None,
    ) -> None:
        self.cluster = cluster
        self.catalog = catalog
        self.blocked = blocked
        #: The operator's outbound trust, as http tools have it (None: the system's CAs).
        self.tls = tls

    async def execute(self, call: Call) -> Outcome:
        descriptor = call.descriptor
        if descriptor is None or descriptor.mcp is None:
            return Outcome.failed(FailureClass.VALIDATION, "descriptor has no mcp binding")
        entry = self.catalog.servers.get(call.namespace, descriptor.mcp.server)
        if entry is None or entry.spec is None:
            return Outcome.failed(
                FailureClass.TRANSIENT, f"McpServer {descriptor.mcp.server} not found"
            )
        if not entry.spec.activated or entry.status.get("verifiedUrl") != entry.spec.url:
            # Bound descriptors are unhealthy unless the server is Active; this closes the
            # window in which activation was just withdrawn or the url just changed (not
            # yet probed without credentials): its credential is not sent.
            return Outcome.failed(
                FailureClass.TRANSIENT,
                f"McpServer {descriptor.mcp.server} is not activated at a verified url",
            )
        try:
            headers, secrets = await credentials_for(self.cluster, call.namespace, entry.spec)
        except NotFound as exc:
            return Outcome.failed(FailureClass.CREDENTIALS, f"server credentials: {exc}")
        rule = address_rule(entry.spec, self.blocked)
        if call.traceparent:
            headers = {**headers, "traceparent": call.traceparent}
        # The server's answer is awaited without a calls-in-flight slot (`inflight`).
        async with call.remote():
            outcome = await self._call(call, entry.spec.url, headers, rule)
        if not secrets:
            return outcome
        size = len(outcome.output) + (offload.INLINE_BYTES if outcome.structured else 0)
        return await offload.run(call.namespace, size, _redacted, outcome, secrets)

    async def _call(
        self, call: Call, url: str, headers: dict[str, str], rule: AddressRule
    ) -> Outcome:
        binding = call.descriptor.mcp if call.descriptor is not None else None
        if binding is None:
            return Outcome.failed(FailureClass.VALIDATION, "descriptor has no mcp binding")
        try:
            from tooladapter.mcp import client as mcp_client  # the SDK loads on the first exchange

            result = await mcp_client.call_tool(
                url,
                headers=headers,
                tool=binding.tool,
                arguments=call.arguments,
                timeout=call.limits.timeout_seconds,
                idempotency_key=call.idempotency_key,
                expected_digest=binding.pinned_digest,
                addresses=rule,
                max_response_bytes=max_response_bytes(call.limits.max_result_bytes),
                tls=self.tls,
            )
        except mcp_types.McpAddressRefused as exc:
            return Outcome.failed(FailureClass.POLICY_DENIED, str(exc))
        except mcp_types.McpUnavailable as exc:
            # The tools/call request was not sent (no connection, a failed handshake or
            # listing, or cut short before its last byte): the one rule makes it Failed.
            return lost(call.effective_class, Transmission.NOT_WRITTEN, str(exc))
        except (mcp_types.McpToolNotListed, mcp_types.McpToolChanged) as exc:
            return Outcome.failed(FailureClass.TRANSIENT, str(exc))
        except mcp_types.McpProtocolError as exc:
            if exc.answered:
                # The server answered the call with an error: Observed, like isError. Its
                # error text is the tool's output (sanitized, delimited, tagged like a
                # result's text); the message is ours and names only the code.
                return Outcome.tool_error(
                    _answered_error(exc),
                    output=exc.server_text.encode(),
                    http_status=exc.http_status,
                )
            if exc.effect_possible:
                # Its answer began but is not a usable result (a gateway's 502/504, a
                # malformed result): sent.
                return lost(call.effective_class, Transmission.ANSWERED, f"MCP call broke: {exc}")
            return Outcome.failed(FailureClass.TRANSIENT, str(exc))
        except mcp_types.McpError as exc:
            if exc.effect_possible:
                # The tools/call request was written (or not known to have been cut short)
                # and the connection broke or the deadline passed: sent.
                return lost(call.effective_class, Transmission.WRITTEN, f"MCP call broke: {exc}")
            return Outcome.failed(FailureClass.TRANSIENT, str(exc))
        output = result.content_text.encode()
        if result.is_error:
            return Outcome.tool_error("the MCP tool reported an error", output=output)
        problems = validate_structured_output(
            (result.tool or {}).get("outputSchema"), result.structured_content
        )
        if problems:
            return Outcome.tool_error(
                "structuredContent violates the outputSchema: " + "; ".join(problems[:10]),
                output=output,
                failure=FailureClass.OUTPUT_INVALID,
            )
        return Outcome.observed(output, structured=result.structured_content)


def _answered_error(exc: mcp_types.McpProtocolError) -> str:
    """Our words for a server's error answer to tools/call: its code, never its text."""
    code = f"JSON-RPC error {exc.code}" if exc.code is not None else "an error"
    over = f" over HTTP {exc.http_status}" if exc.http_status is not None else ""
    return f"the MCP server answered tools/call with {code}{over}; its text is the result"


def max_response_bytes(max_result_bytes: int) -> int:
    """The bound of one MCP response for a call whose result is bounded by
    `max_result_bytes`: the result may come twice (text and structuredContent), JSON-escaped
    and framed, and the tool listing before it needs room too. Larger responses are refused
    (`McpResponseTooLarge`), not read into memory."""
    return 4 * max_result_bytes + 64 * 1024


def _redacted(outcome: Outcome, secrets: list[str]) -> Outcome:
    """The server's own credential never reaches a result or message, even if echoed.

    Structured content is redacted value by value (`sanitize_structured`), so a redaction
    never cuts through JSON syntax; the message is redacted and bounded."""
    structured = outcome.structured
    if structured is not None:
        value = sanitize_structured(structured, secrets=secrets).value
        structured = value if isinstance(value, dict) else None
    return dataclasses.replace(
        outcome,
        output=redact_text(outcome.output.decode(errors="replace"), secrets).encode(),
        structured=structured,
        message=bounded_message(outcome.message, secrets),
    )
