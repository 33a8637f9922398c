"""Declared HTTP calls, run by the operator: method and URL template fixed by the descriptor.

Arguments only fill `{name}` placeholders (URL-encoded); the host must be allow-listed, and
every address connected to must be public or explicitly allowed (`pipeline.addresses`): the
check runs on the address the connector resolved and is about to connect to, never on a
separate lookup. How far the request got when something broke (`Wire`, from aiohttp's
request tracing) decides Failed versus Uncertain through the one rule (`sending`): once its
last byte was written it was sent, whatever breaks after.

Brokered credentials (`Call.credentials`) go into the one request whose scheme, host,
port, method and path their `inject` matches (`credentials.requests.carries_url`), judged
on the URL exactly as it is sent, and nowhere else: redirects are not followed, aiohttp
never resends by itself (`no_silent_resend`), and the sessions keep no cookies (a server
that reflected a credential into a cookie would otherwise have it sent on later calls,
another tenant's included). TLS is verified against the system's CAs plus
`TOOLADAPTER_EGRESS_CA_FILE` (`egress.core.trust`), and names the operator maps for tests
(`TOOLADAPTER_EGRESS_HOSTS`) connect to their mapped address, judged as the egress proxy
judges mapped addresses. What the server answers is redacted of every form of the values
by the flow (`flow.ending.finish`, over `ctx.secret_values`), not here.
"""

from __future__ import annotations

import ipaddress
import socket
import ssl
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from types import SimpleNamespace
from urllib.parse import urlsplit

import aiohttp
from aiohttp.abc import AbstractResolver, ResolveResult
from aiohttp.resolver import DefaultResolver
from yarl import URL

from tooladapter.credentials.carried import Carried, header_of
from tooladapter.credentials.requests import carries_url, method_overrides
from tooladapter.egress.core.addresses import AddressRefused, AddressRule, parse_networks
from tooladapter.egress.core.hosts import is_ip
from tooladapter.egress.core.rules import normalize_host
from tooladapter.enums import FailureClass, Transmission
from tooladapter.executors import Call, InOperator, Outcome, lost, read_limit, unconfirmed
from tooladapter.model import ToolDescriptorSpec
from tooladapter.pipeline.validation.http_templates import render_http_request

#: Statuses an intermediary (a proxy, a load balancer) answers when the server's own answer
#: did not come: Bad Gateway and Gateway Timeout. The request may have been processed.
GATEWAY_ERRORS = frozenset({502, 504})


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


def allowances(spec: ToolDescriptorSpec) -> tuple[str, ...]:
    """What the descriptor allows explicitly: IP literals of `http.allowedHosts` and the CIDRs
    of `sandbox.egress.allow` (host names never count)."""
    entries = list(spec.http.allowed_hosts if spec.http is not None else [])
    if spec.sandbox is not None:
        entries.extend(spec.sandbox.egress.allow or [])
    return tuple(str(network) for network in parse_networks(entries))


def with_credentials(
    headers: Mapping[str, str], carried: Sequence[Carried], method: str, url: str
) -> dict[str, str]:
    """`headers` plus the header of each credential whose `inject` matches this request
    (`url` as it is sent, and every method an override header among `headers` names);
    the others add nothing."""
    out = dict(headers)
    overrides = method_overrides(headers.items())
    for item in carried:
        inject = item.declaration.inject
        if inject.hosts is None or not carries_url(inject, method, url, overrides):
            continue
        name, value = header_of(inject, item.value)
        # The credential replaces a template header of the same name (any case): that
        # header may be filled from an argument, and sent beside the credential, or in its
        # place, it would let the agent choose what the server authenticates, or send the
        # credential's header twice for the server to pick from.
        out = {k: v for k, v in out.items() if k.lower() != name.lower()}
        out[name] = value
    return out


class GuardedResolver(AbstractResolver):
    """Resolves as aiohttp does, then keeps only the addresses `rule` permits: the
    connector connects to exactly these (aiohttp skips the resolver for IP literals, which
    `HttpExecutor` checks itself). A name in `overrides` (`TOOLADAPTER_EGRESS_HOSTS`)
    resolves only to its mapped address, never through DNS, judged as mapped (unless
    `mapped_allowed` is False: then its address is judged like any other)."""

    def __init__(
        self,
        rule: AddressRule,
        inner: AbstractResolver | None = None,
        overrides: Mapping[str, str] | None = None,
        *,
        mapped_allowed: bool = True,
    ) -> None:
        self.rule = rule
        self.inner = inner or DefaultResolver()
        self.overrides = dict(overrides or {})
        self.mapped_allowed = mapped_allowed

    async def resolve(
        self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET
    ) -> list[ResolveResult]:
        mapped = self.overrides.get(normalize_host(host))
        if mapped is not None:
            self.rule.permitted(host, [mapped], mapped=self.mapped_allowed)
            version = ipaddress.ip_address(mapped).version
            return [
                ResolveResult(
                    hostname=host,
                    host=mapped,
                    port=port,
                    family=socket.AF_INET6 if version == 6 else socket.AF_INET,
                    proto=0,
                    flags=socket.AI_NUMERICHOST,
                )
            ]
        found = await self.inner.resolve(host, port, family)
        keep = set(self.rule.permitted(host, [r["host"] for r in found]))
        return [r for r in found if r["host"] in keep]

    async def close(self) -> None:
        await self.inner.close()


@dataclass
class Wire:
    """How far one request got. aiohttp announces the headers and each body chunk right
    before it writes them (`TraceConfig.on_request_headers_sent`, `on_request_chunk_sent`),
    so the state may run a moment ahead of the socket, never behind it: a request counts as
    written at the latest when its last byte is, and a failure in between settles as sent
    (the safe side). It only moves forward."""

    #: Bytes of the body (the announced Content-Length replaces it when there is one).
    body_size: int
    state: Transmission = Transmission.NOT_WRITTEN
    announced: int = 0

    def reach(self, state: Transmission) -> None:
        order = list(Transmission)
        if order.index(state) > order.index(self.state):
            self.state = state

    def headers_sent(self, content_length: str | None) -> None:
        if content_length is not None and content_length.isdigit():
            self.body_size = int(content_length)
        self.reach(
            Transmission.WRITTEN
            if self.announced >= self.body_size
            else Transmission.PARTLY_WRITTEN
        )

    def chunk_sent(self, size: int) -> None:
        self.announced += size
        if self.announced >= self.body_size:
            self.reach(Transmission.WRITTEN)


async def _on_headers_sent(
    _session: aiohttp.ClientSession,
    context: SimpleNamespace,
    params: aiohttp.TraceRequestHeadersSentParams,
) -> None:
    if isinstance(wire := context.trace_request_ctx, Wire):
        wire.headers_sent(params.headers.get("Content-Length"))


async def _on_chunk_sent(
    _session: aiohttp.ClientSession,
    context: SimpleNamespace,
    params: aiohttp.TraceRequestChunkSentParams,
) -> None:
    if isinstance(wire := context.trace_request_ctx, Wire):
        wire.chunk_sent(len(params.chunk))


async def _on_request_end(
    _session: aiohttp.ClientSession,
    context: SimpleNamespace,
    _params: aiohttp.TraceRequestEndParams,
) -> None:
    if isinstance(wire := context.trace_request_ctx, Wire):
        wire.reach(Transmission.ANSWERED)


def wire_tracing() -> aiohttp.TraceConfig:
    """The request tracing that keeps each request's `Wire` (its `trace_request_ctx`)."""
    config = aiohttp.TraceConfig()
    config.on_request_headers_sent.append(_on_headers_sent)
    config.on_request_chunk_sent.append(_on_chunk_sent)
    config.on_request_end.append(_on_request_end)
    return config


class ConnectionLost(aiohttp.ClientConnectionError):
    """The connection broke after it was made (a reset, a close): raised in place of
    aiohttp's own error so that aiohttp does not send the request again by itself."""


async def no_silent_resend(
    request: aiohttp.ClientRequest, handler: aiohttp.ClientHandlerType
) -> aiohttp.ClientResponse:
    """aiohttp sends an idempotent method (GET, PUT, DELETE...) a second time, unasked, when
    the connection breaks (`ClientOSError`, `ServerDisconnectedError`), even after its last
    byte was written: a PUT the server acted on would act twice. Only the one rule
    (`sending`) and the descriptor's `retryPolicy` decide a resend, so those errors are
    turned into `ConnectionLost`, which aiohttp does not retry."""
    try:
        return await handler(request)
    except aiohttp.ClientConnectorError:
        raise  # never connected: aiohttp does not retry these either
    except (aiohttp.ClientOSError, aiohttp.ServerDisconnectedError) as exc:
        raise ConnectionLost(f"{type(exc).__name__}: {exc}") from exc


class HttpExecutor(InOperator):
    """One client session per address rule: a connection (and a DNS cache entry) made under
    one descriptor's allowances is never reused under another's.

    `hosts`: names mapped to fixed addresses (`TOOLADAPTER_EGRESS_HOSTS`, parsed); `tls`:
    the context verifying https servers (default: the system's CAs)."""

    def __init__(
        self,
        blocked_hosts: tuple[str, ...] = (),
        *,
        hosts: Mapping[str, str] | None = None,
        tls: ssl.SSLContext | None = None,
    ) -> None:
        self.blocked_hosts = blocked_hosts
        self.hosts = dict(hosts or {})
        self.tls = tls if tls is not None else ssl.create_default_context()
        self.sessions: dict[AddressRule, tuple[aiohttp.ClientSession, GuardedResolver]] = {}

    def session_for(self, rule: AddressRule) -> aiohttp.ClientSession:
        held = self.sessions.get(rule)
        if held is None or held[0].closed:
            resolver = GuardedResolver(rule, overrides=self.hosts)
            session = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(resolver=resolver, ssl=self.tls),
                # No cookies kept: a session serves every call under one rule, any tenant's.
                cookie_jar=aiohttp.DummyCookieJar(),
                trace_configs=[wire_tracing()],
                middlewares=(no_silent_resend,),
            )
            held = self.sessions[rule] = (session, resolver)
        return held[0]

    async def close(self) -> None:
        held, self.sessions = list(self.sessions.values()), {}
        for session, resolver in held:
            await session.close()
            await resolver.close()

    async def execute(self, call: Call) -> Outcome:
        spec = call.descriptor.http if call.descriptor else None
        if spec is None or call.descriptor is None:
            return Outcome.failed(FailureClass.VALIDATION, "descriptor has no http block")
        try:
            method, url, headers, body = render_http_request(spec, call.arguments)
        except ValueError as exc:
            return Outcome.failed(FailureClass.VALIDATION, str(exc))
        if call.traceparent:
            headers = {k: v for k, v in headers.items() if k.lower() != "traceparent"}
            headers["traceparent"] = call.traceparent
        # Judged on the URL as aiohttp sends it (yarl's normalisation), which `_send` sends.
        try:
            target = URL(url)
        except ValueError as exc:
            return Outcome.failed(FailureClass.VALIDATION, f"{method} {url}: not sent: {exc}")
        headers = with_credentials(headers, call.credentials, method, str(target))
        blocked = blocked_host(url, self.blocked_hosts)
        if blocked is not None:
            return Outcome.failed(
                FailureClass.POLICY_DENIED,
                f"{method} {url}: the host is blocked for every tool ({blocked})",
            )
        rule = AddressRule.of(allowances(call.descriptor), self.blocked_hosts)
        host = urlsplit(url).hostname or ""
        if is_ip(host):
            # aiohttp never resolves an IP literal: judge it here (it cannot change). A
            # name is judged by the resolver, on every address it is about to connect to.
            try:
                rule.permitted(host, [host])
            except AddressRefused as exc:
                return _refused(method, url, exc)
        # The answer is awaited without a calls-in-flight slot: a slow server holds no
        # slot another tenant's call could use (`inflight`).
        async with call.remote():
            return await self._send(call, method, target, headers, body, rule)

    async def _send(
        self,
        call: Call,
        method: str,
        target: URL,
        headers: dict[str, str],
        body: str | None,
        rule: AddressRule,
    ) -> Outcome:
        url = str(target)
        timeout = aiohttp.ClientTimeout(total=call.limits.timeout_seconds)
        wire = Wire(body_size=len(body.encode()) if body else 0)
        try:
            async with self.session_for(rule).request(
                method,
                target,
                headers=headers,
                data=body,
                timeout=timeout,
                allow_redirects=False,
                trace_request_ctx=wire,
            ) as resp:
                wire.reach(Transmission.ANSWERED)
                chunks: list[bytes] = []
                size = 0
                # Read past the bound: the sanitizer must see any secret whole before the cut.
                limit = read_limit(call.limits.max_result_bytes)
                while size < limit:
                    chunk = await resp.content.read(min(65536, limit - size))
                    if not chunk:
                        break
                    chunks.append(chunk)
                    size += len(chunk)
                output = b"".join(chunks)
                if resp.status in GATEWAY_ERRORS:
                    # An intermediary answered: whether the server acted is unknown.
                    return unconfirmed(
                        call,
                        f"{method} {url}: a gateway answered {resp.status}; whether the "
                        "server acted is unknown",
                        output=output,
                    )
                if resp.status >= 400:
                    return Outcome.tool_error(
                        f"{method} {url} answered {resp.status}",
                        output=output,
                        http_status=resp.status,
                    )
                return replace(Outcome.observed(output), http_status=resp.status)
        except aiohttp.InvalidURL as exc:
            # Refused before connecting (e.g. a legacy numeric IPv4 spelling such as
            # 2130706433 or 127.1): nothing was sent.
            return Outcome.failed(FailureClass.VALIDATION, f"{method} {url}: not sent: {exc!r}")
        except aiohttp.ClientConnectorError as exc:
            if isinstance(exc.os_error, AddressRefused):
                return _refused(method, url, exc.os_error)
            return lost(
                call.effective_class,
                wire.state,
                f"{method} {url}: could not connect: {exc.os_error}",
            )
        except (TimeoutError, aiohttp.ClientError) as exc:
            return lost(call.effective_class, wire.state, _broken(method, url, wire.state, exc))


def _broken(method: str, url: str, reached: Transmission, exc: BaseException) -> str:
    """What broke, and how far the request had got (the reason for Failed or Uncertain)."""
    what = type(exc).__name__
    if reached == Transmission.NOT_WRITTEN:
        return f"{method} {url}: not sent, the connection failed first ({what})"
    if reached == Transmission.PARTLY_WRITTEN:
        return f"{method} {url}: not sent, the connection failed while writing it ({what})"
    if reached == Transmission.WRITTEN:
        return f"{method} {url}: sent, then the connection failed before an answer ({what})"
    return f"{method} {url}: sent, then the answer broke off ({what})"


def _refused(method: str, url: str, exc: AddressRefused) -> Outcome:
    return Outcome.failed(FailureClass.POLICY_DENIED, f"{method} {url}: not sent: {exc}")
