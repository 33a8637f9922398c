"""The proxy's connections: CONNECT tunnels and plain-HTTP forwarding, one lease each.

Every connection is judged by `pipeline.egress` before a byte goes upstream:

1. the head is read (bounded) and the lease is authenticated from `Proxy-Authorization`
   (`Basic <uid>:<token>`): 407 without a valid token of an open lease;
2. the target must be on the lease's allow-list (an IP literal only under a CIDR entry);
3. the proxy resolves the name itself (or takes the operator's mapping) and connects only
   to a permitted address;
4. CONNECT: the client's TLS ClientHello must name the CONNECT host in its SNI before the
   upstream is dialled; forwarding: the Host header must name the target, and a host with
   a credential is reached over verified TLS with the header added by the proxy.

Then bytes are relayed until either side closes, the connection idles out, or the lease
ends. Each connection leaves one record (`records.Recorder`). A refusal answered on the wire
carries its reason in the status line and a short body (`egress.core.answers`), as the
record does.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import ssl
import tempfile
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import NoReturn

from tooladapter.egress.core import answers
from tooladapter.egress.core.framing import ChunkedEnd, Framing, body_framing
from tooladapter.egress.core.lease_ca import LEAF_SECONDS, issue_leaf
from tooladapter.egress.core.response import BadResponse, ResponseFilter
from tooladapter.egress.core.rules import (
    ALLOWED,
    HTTP_PORT,
    HTTPS_PORT,
    MAX_CLIENT_HELLO,
    AddressPolicy,
    BadRequest,
    ClientHello,
    ForwardTarget,
    NotClientHello,
    RequestHead,
    Verdict,
    forward_target,
    ip_literal,
    judge_hello,
    judge_target,
    normalize_host,
    parse_client_hello,
    parse_request_head,
    proxy_credentials,
    split_authority,
    upstream_head,
)
from tooladapter.egress.proxy.leases import Lease, LeaseTable
from tooladapter.egress.proxy.records import Recorder
from tooladapter.enums import EgressVerdict

logger = logging.getLogger("tooladapter.egress")

HEAD_TIMEOUT_SECONDS = 30.0
HELLO_TIMEOUT_SECONDS = 15.0
CONNECT_TIMEOUT_SECONDS = 10.0
CHUNK = 65_536
#: Connections of one peer address still sending their head (each may take
#: `HEAD_TIMEOUT_SECONDS`): beyond this a new one is closed unread, so one sandbox
#: cannot hold the proxy's descriptors, which every tenant shares.
MAX_PENDING_PER_PEER = 32
#: Open connections of one lease; one more is refused (and recorded).
MAX_LEASE_CONNECTIONS = 64

#: One connection's reading and writing ends (the client's, or the upstream's).
Streams = tuple[asyncio.StreamReader, asyncio.StreamWriter]

#: Resolves a name to addresses (getaddrinfo in production; a table in unit tests).
Resolve = Callable[[str, int], Awaitable[list[str]]]


async def system_resolve(host: str, port: int) -> list[str]:
    loop = asyncio.get_running_loop()
    try:
        infos = await loop.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except OSError:
        return []
    return [str(info[4][0]) for info in infos]


class EgressRefused(Exception):
    """The proxy refuses a connection: `verdict` is recorded, `status` answered (0: none)."""

    def __init__(self, verdict: Verdict, status: int = 403) -> None:
        super().__init__(verdict.reason)
        self.verdict = verdict
        self.status = status


@dataclass
class Counts:
    up: int = 0
    down: int = 0


class EgressProxy:
    def __init__(
        self,
        leases: LeaseTable,
        recorder: Recorder,
        *,
        addresses: AddressPolicy,
        resolve: Resolve = system_resolve,
        upstream_tls: ssl.SSLContext | None = None,
        idle_seconds: float = 300,
    ) -> None:
        self.leases = leases
        self.recorder = recorder
        self.addresses = addresses
        self.resolve = resolve
        self.upstream_tls = upstream_tls or ssl.create_default_context()
        self.idle_seconds = idle_seconds
        #: Peer address -> its connections that have not sent a whole head yet.
        self.pending: dict[str, int] = {}

    # ------------------------------------------------------------------ entry

    async def serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            await self._serve(reader, writer)
        except Exception:
            logger.exception("egress connection failed")
        finally:
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()

    async def _head(self, reader: asyncio.StreamReader, peer: str) -> RequestHead | None:
        """The request head, within `HEAD_TIMEOUT_SECONDS`; None when the peer has too
        many heads under way (this one is not read)."""
        if self.pending.get(peer, 0) >= MAX_PENDING_PER_PEER:
            return None
        self.pending[peer] = self.pending.get(peer, 0) + 1
        try:
            raw = await asyncio.wait_for(
                reader.readuntil(b"\r\n\r\n"), timeout=HEAD_TIMEOUT_SECONDS
            )
        finally:
            self.pending[peer] -= 1
            if not self.pending[peer]:
                del self.pending[peer]
        return parse_request_head(raw)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        peername = writer.get_extra_info("peername")
        peer = str(peername[0]) if isinstance(peername, tuple) else "-"
        try:
            head = await self._head(reader, peer)
        except asyncio.IncompleteReadError as exc:
            if not exc.partial:
                # Opened and closed without a byte: the kubelet's TCP probes (every few
                # seconds in the cluster) or a port scan. No request: no record, no count.
                return
            self._record(None, "-", 0, "-", Verdict(EgressVerdict.BAD_REQUEST, "no request head"))
            await _answer(writer, 400, "no request head")
            return
        except (asyncio.LimitOverrunError, TimeoutError, BadRequest):
            self._record(None, "-", 0, "-", Verdict(EgressVerdict.BAD_REQUEST, "no request head"))
            await _answer(writer, 400, "no request head")
            return
        if head is None:
            return  # closed unread: its peer already has too many heads under way
        host, port = _target_for_log(head)
        creds = proxy_credentials(head)
        lease = await self.leases.authenticate(*creds) if creds else None
        if lease is None:
            why = "no token of an open lease" if creds else "no Proxy-Authorization"
            self._record(None, host, port, head.method, Verdict(EgressVerdict.UNAUTHORIZED, why))
            await _answer(
                writer, 407, why, extra=b'Proxy-Authenticate: Basic realm="tooladapter"\r\n'
            )
            return
        if len(lease.connections) >= MAX_LEASE_CONNECTIONS:
            why = f"the lease has {MAX_LEASE_CONNECTIONS} connections open already"
            verdict = Verdict(EgressVerdict.TOO_MANY_CONNECTIONS, why)
            self._record(lease, host, port, head.method, verdict)
            await _answer(writer, 429, why)
            return
        task = asyncio.current_task()
        assert task is not None
        lease.connections.add(task)
        try:
            if head.method == "CONNECT":
                await self._connect(lease, head, (reader, writer))
            else:
                await self._forward(lease, head, (reader, writer))
        except asyncio.CancelledError:
            if not lease.ended.is_set():
                raise
        finally:
            lease.connections.discard(task)

    def _record(
        self,
        lease: Lease | None,
        host: str,
        port: int,
        method: str,
        verdict: Verdict,
        counts: Counts | None = None,
    ) -> None:
        self.recorder.record(
            lease=lease.uid if lease else None,
            tenant=lease.tenant if lease else None,
            invocation=f"{lease.grant.namespace}/{lease.grant.invocation}" if lease else None,
            host=host,
            port=port,
            method=method,
            verdict=verdict.verdict,
            reason=verdict.reason,
            bytes_up=counts.up if counts else 0,
            bytes_down=counts.down if counts else 0,
        )

    # ------------------------------------------------------------------ CONNECT

    async def _connect(self, lease: Lease, head: RequestHead, client: Streams) -> None:
        reader, writer = client
        try:
            host, port = split_authority(head.target, HTTPS_PORT)
        except BadRequest as exc:
            self._record(
                lease, head.target, 0, "CONNECT", Verdict(EgressVerdict.BAD_REQUEST, str(exc))
            )
            await _answer(writer, 400, str(exc))
            return
        try:
            addresses = await self._admit(lease, host, port, HTTPS_PORT)
            if ip_literal(host) is None and lease.terminates(host, port):
                await self._terminate(lease, host, port, addresses, client)
                return
            writer.write(b"HTTP/1.1 200 Connection established\r\n\r\n")
            await writer.drain()
            hello = await self._client_hello(reader)
            verdict = judge_hello(hello[0], host)
            if not verdict.allowed:
                raise EgressRefused(verdict)
            upstream = await self._dial(addresses, port, None, host)
        except EgressRefused as refusal:
            self._record(lease, host, port, "CONNECT", refusal.verdict)
            if not writer.is_closing() and refusal.status != 0:
                await _answer(writer, refusal.status, refusal.verdict.reason)
            return
        await self._splice(lease, host, port, "CONNECT", hello[1], client, upstream)

    async def _terminate(
        self, lease: Lease, host: str, port: int, addresses: list[str], client: Streams
    ) -> None:
        """A CONNECT to a credential's host: TLS with the client ends here (a leaf of the
        lease CA for `host`, the SNI must name it, HTTP/1.1 only), and one request inside
        it goes upstream as a forwarded one does: over verified TLS, its Host the CONNECT
        host, the credential added only when that request's method and path match, the
        answer masked. Then the tunnel closes (one request per connection, as forwarding)."""
        reader, writer = client
        context = self._leaf_context(lease, host)
        writer.write(b"HTTP/1.1 200 Connection established\r\n\r\n")
        # No await may yield between the 200 and the handshake taking the socket over:
        # the client's ClientHello must reach TLS, not the plain reader.
        try:
            await writer.start_tls(context, ssl_handshake_timeout=HELLO_TIMEOUT_SECONDS)
        except (ssl.SSLError, OSError, TimeoutError, ConnectionError) as exc:
            raise EgressRefused(
                Verdict(
                    EgressVerdict.SNI_MISMATCH,
                    f"the client's TLS handshake failed (its SNI must name {host}): "
                    f"{type(exc).__name__}: {exc}"[:300],
                ),
                0,
            ) from None
        peername = writer.get_extra_info("peername")
        peer = str(peername[0]) if isinstance(peername, tuple) else "-"
        try:
            head = await self._head(reader, peer)
            if head is None:
                return
            target = tunnel_target(head, host, port)
            framing = body_framing(head)
        except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, TimeoutError):
            # The client closed (or stalled) without a request: nothing went upstream.
            raise EgressRefused(
                Verdict(EgressVerdict.BAD_REQUEST, "no request inside the tunnel"), 0
            ) from None
        except Misdirected as exc:
            raise EgressRefused(Verdict(EgressVerdict.BAD_REQUEST, str(exc)), 421) from None
        except BadRequest as exc:
            raise EgressRefused(Verdict(EgressVerdict.BAD_REQUEST, str(exc)), 400) from None
        credential = lease.credential_for(host, port, head.method, target.path, head.headers)
        try:
            upstream = await self._dial(addresses, port, self.upstream_tls, host)
        except EgressRefused as refusal:
            self._record(lease, host, port, head.method, refusal.verdict)
            await _answer(
                writer,
                refusal.status,
                refusal.verdict.reason,
                head_only=head.method == "HEAD",
            )
            return
        inject = (credential.header, credential.value) if credential is not None else None
        masker = (
            ResponseFilter(
                credential.secret.encode(),
                method=head.method,
                client_version=head.version,
                # The header as sent, too (as `_forward`): a `Basic base64(user:value)`
                # header reflected hex- or base64-encoded holds no form of the value itself.
                also=(credential.value.encode(),),
            )
            if credential is not None
            else None
        )
        first = upstream_head(head, target, inject=inject)
        await self._splice(
            lease, host, port, head.method, first, client, upstream, request=framing, masker=masker
        )

    def _leaf_context(self, lease: Lease, host: str) -> ssl.SSLContext:
        """The server context for `host` in `lease`: a leaf of the lease CA, made once per
        lease and host (again when it expires)."""
        now = datetime.now(UTC)
        known = lease.leaves.get(host)
        if known is not None and known[1] > now + timedelta(seconds=60):
            context: ssl.SSLContext = known[0]
            return context
        assert lease.ca is not None
        chain, key = issue_leaf(lease.ca, host, now=now)
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        # HTTP/1.1 only: an HTTP/2 connection could be reused for another name.
        context.set_alpn_protocols(["http/1.1"])
        load_chain(context, chain, key)
        expected = normalize_host(host)

        def sni(_obj: ssl.SSLObject, name: str | None, _ctx: ssl.SSLContext) -> int | None:
            if name is None or normalize_host(name) != expected:
                return ssl.ALERT_DESCRIPTION_UNRECOGNIZED_NAME
            return None

        context.sni_callback = sni
        lease.leaves[host] = (context, now + timedelta(seconds=LEAF_SECONDS))
        return context

    async def _client_hello(self, reader: asyncio.StreamReader) -> tuple[ClientHello, bytes]:
        """Read until a whole ClientHello is buffered; (parsed, the bytes read)."""
        buffered = b""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + HELLO_TIMEOUT_SECONDS
        while True:
            try:
                parsed = parse_client_hello(buffered)
            except NotClientHello as exc:
                raise EgressRefused(
                    Verdict(EgressVerdict.SNI_MISMATCH, f"not a TLS ClientHello: {exc}"), 0
                ) from None
            if parsed is not None:
                return parsed, buffered
            if len(buffered) > MAX_CLIENT_HELLO + 5 * 8:
                raise EgressRefused(Verdict(EgressVerdict.SNI_MISMATCH, "ClientHello too large"), 0)
            try:
                chunk = await asyncio.wait_for(reader.read(CHUNK), deadline - loop.time())
            except TimeoutError:
                chunk = b""
            if not chunk:
                raise EgressRefused(
                    Verdict(EgressVerdict.SNI_MISMATCH, "no ClientHello after CONNECT"), 0
                )
            buffered += chunk

    # ------------------------------------------------------------------ forwarding

    async def _forward(self, lease: Lease, head: RequestHead, client: Streams) -> None:
        writer = client[1]
        try:
            target = forward_target(head)
            framing = body_framing(head)
        except BadRequest as exc:
            self._record(
                lease,
                head.target[:255],
                0,
                head.method,
                Verdict(EgressVerdict.BAD_REQUEST, str(exc)),
            )
            await _answer(writer, 400, str(exc), head_only=head.method == "HEAD")
            return
        credential = lease.credential_for(
            target.host, target.port, head.method, target.path, head.headers
        )
        default_port = HTTPS_PORT if credential is not None else HTTP_PORT
        port = target.port or default_port
        try:
            addresses = await self._admit(lease, target.host, port, default_port)
            tls = self.upstream_tls if credential is not None else None
            upstream = await self._dial(addresses, port, tls, target.host)
        except EgressRefused as refusal:
            self._record(lease, target.host, port, head.method, refusal.verdict)
            await _answer(
                writer,
                refusal.status,
                refusal.verdict.reason,
                head_only=head.method == "HEAD",
            )
            return
        inject = (credential.header, credential.value) if credential is not None else None
        # The answer is de-framed, decoded and masked (`egress_response`): a reflected
        # credential is hidden in every form the filter knows, across chunk boundaries.
        masker = (
            ResponseFilter(
                credential.secret.encode(),
                method=head.method,
                client_version=head.version,
                # The header as sent, too: a `Basic` header base64-encoded again holds no
                # form of the value itself.
                also=(credential.value.encode(),),
            )
            if credential is not None
            else None
        )
        first = upstream_head(head, target, inject=inject)
        await self._splice(
            lease,
            target.host,
            port,
            head.method,
            first,
            client,
            upstream,
            request=framing,
            masker=masker,
        )

    # ------------------------------------------------------------------ shared

    async def _splice(
        self,
        lease: Lease,
        host: str,
        port: int,
        method: str,
        first: bytes,
        client: Streams,
        upstream: Streams,
        *,
        request: Framing | None = None,
        masker: ResponseFilter | None = None,
    ) -> None:
        """Send `first` upstream, relay both ways (`_relay`, with `request` and `masker`)
        until it ends, then record the allowed connection with its byte counts (however
        the relay ended)."""
        counts = Counts()
        try:
            upstream[1].write(first)
            counts.up += len(first)
            await self._relay(lease, *client, *upstream, counts, request=request, masker=masker)
        finally:
            upstream[1].close()
            self._record(lease, host, port, method, ALLOWED, counts)

    async def _admit(self, lease: Lease, host: str, port: int, default_port: int) -> list[str]:
        verdict = judge_target(lease.allow, host, port, default_port=default_port)
        if not verdict.allowed:
            raise EgressRefused(verdict)
        literal = ip_literal(host)
        mapped = self.addresses.overrides.get(host)
        if literal is not None:
            candidates = [str(literal)]
        elif mapped is not None:
            candidates = [mapped]
        else:
            candidates = await self.resolve(host, port)
        permitted, verdict = self.addresses.permitted(
            lease.allow, host, candidates, mapped=mapped is not None and literal is None
        )
        if not verdict.allowed:
            raise EgressRefused(
                verdict, 502 if verdict.verdict == EgressVerdict.UPSTREAM_FAILED else 403
            )
        return permitted

    async def _dial(
        self, addresses: list[str], port: int, tls: ssl.SSLContext | None, host: str
    ) -> Streams:
        errors: list[str] = []
        for address in addresses:
            try:
                return await asyncio.wait_for(
                    asyncio.open_connection(
                        address,
                        port,
                        ssl=tls,
                        server_hostname=host if tls is not None else None,
                    ),
                    CONNECT_TIMEOUT_SECONDS,
                )
            except (OSError, TimeoutError, ssl.SSLError) as exc:
                errors.append(f"{address}: {type(exc).__name__}: {exc}"[:200])
        raise EgressRefused(
            Verdict(EgressVerdict.UPSTREAM_FAILED, "; ".join(errors) or "no address"), 502
        )

    async def _relay(
        self,
        lease: Lease,
        client_reader: asyncio.StreamReader,
        client_writer: asyncio.StreamWriter,
        upstream_reader: asyncio.StreamReader,
        upstream_writer: asyncio.StreamWriter,
        counts: Counts,
        *,
        request: Framing | None = None,
        masker: ResponseFilter | None = None,
    ) -> None:
        """Both directions until both have ended (a half-close is passed on), the lease
        ends, or nothing moves for `idle_seconds`. With `request` (a forwarded request),
        the client's side ends with that request's body; with `masker`, the answer is
        masked on its way down."""
        activity = asyncio.Event()

        async def pump(src: asyncio.StreamReader, dst: asyncio.StreamWriter, up: bool) -> None:
            mask = None if up else masker
            while True:
                chunk = await src.read(CHUNK)
                if not chunk:
                    try:
                        rest = mask.flush() if mask is not None else b""
                    except BadResponse as exc:
                        await refuse(dst, exc)
                    if rest:
                        dst.write(rest)
                        await dst.drain()
                    if dst.can_write_eof():
                        with contextlib.suppress(OSError, RuntimeError):
                            dst.write_eof()
                    return
                activity.set()
                if up:
                    counts.up += len(chunk)
                else:
                    counts.down += len(chunk)
                try:
                    out = mask.feed(chunk) if mask is not None else chunk
                except BadResponse as exc:
                    await refuse(dst, exc)
                if out:
                    dst.write(out)
                    await dst.drain()

        async def refuse(dst: asyncio.StreamWriter, exc: BadResponse) -> NoReturn:
            """A 502 when nothing of the answer went down yet; the connection ends."""
            assert masker is not None
            logger.warning("egress answer refused (lease %s): %s", lease.uid, exc)
            dst.write(masker.refusal(str(exc)))
            with contextlib.suppress(OSError, ConnectionError):
                await dst.drain()
            raise exc

        async def body(framing: Framing) -> None:
            """The one request's body, then nothing more of the client's."""
            left = framing.length
            chunked = ChunkedEnd() if framing.chunked else None
            while chunked is not None or left > 0:
                chunk = await client_reader.read(CHUNK if chunked else min(CHUNK, left))
                if not chunk:
                    return
                if chunked is not None:
                    end = chunked.feed(chunk)
                    if end is not None:
                        chunk, chunked = chunk[:end], None
                else:
                    left -= len(chunk)
                activity.set()
                counts.up += len(chunk)
                upstream_writer.write(chunk)
                await upstream_writer.drain()

        up = body(request) if request is not None else pump(client_reader, upstream_writer, True)
        pumps: set[asyncio.Future[object]] = {
            asyncio.ensure_future(up),
            asyncio.ensure_future(pump(upstream_reader, client_writer, False)),
        }
        ended: asyncio.Future[object] = asyncio.ensure_future(lease.ended.wait())
        try:
            pending = set(pumps)
            while pending:
                activity.clear()
                done, pending = await asyncio.wait(
                    pending | {ended},
                    timeout=self.idle_seconds,
                    return_when=asyncio.FIRST_COMPLETED,
                )
                pending.discard(ended)
                if ended in done or (not done and not activity.is_set()):
                    break
                for task in done:
                    if task is not ended and task.exception() is not None:
                        pending = set()  # a reset on one side ends the connection
        finally:
            ended.cancel()
            for task in pumps:
                task.cancel()
            await asyncio.gather(*pumps, return_exceptions=True)


class Misdirected(BadRequest):
    """A request inside a terminated tunnel names another host than CONNECT did."""


def tunnel_target(head: RequestHead, host: str, port: int) -> ForwardTarget:
    """The target of a request inside a terminated tunnel to `host:port`: origin-form, and
    its Host header (required) must name the CONNECT host and port, so a credential never
    goes to a name the client did not CONNECT to."""
    if not head.target.startswith("/"):
        raise BadRequest("inside the tunnel only origin-form requests (/path) are forwarded")
    given = head.header("host")
    if given is None:
        raise Misdirected("the request inside the tunnel has no Host header")
    try:
        named = split_authority(given, HTTPS_PORT)
    except BadRequest as exc:
        raise Misdirected(f"Host header {given[:100]!r}: {exc}") from None
    if (normalize_host(named[0]), named[1]) != (normalize_host(host), port):
        raise Misdirected(
            f"Host {given[:100]!r} inside the tunnel differs from the CONNECT host {host}:{port}"
        )
    return ForwardTarget(host, None if port == HTTPS_PORT else port, head.target)


def load_chain(context: ssl.SSLContext, chain: str, key: str) -> None:
    """Load PEM text into `context` (the ssl module reads files only): a private file,
    removed at once."""
    with tempfile.TemporaryDirectory(prefix="ta-leaf-") as directory:
        path = os.path.join(directory, "leaf.pem")
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as handle:
            handle.write(key + chain)
        context.load_cert_chain(path)


def _target_for_log(head: RequestHead) -> tuple[str, int]:
    try:
        if head.method == "CONNECT":
            return split_authority(head.target, HTTPS_PORT)
        target = forward_target(head)
        return target.host, target.port or HTTP_PORT
    except BadRequest:
        return head.target[:255], 0


async def _answer(
    writer: asyncio.StreamWriter,
    status: int,
    reason: str = "",
    *,
    extra: bytes = b"",
    head_only: bool = False,
) -> None:
    """A refusal, its reason in the status line and body (`egress.core.answers`)."""
    if writer.is_closing():
        return
    writer.write(answers.refusal(status, reason, extra=extra, head_only=head_only))
    with contextlib.suppress(OSError, ConnectionError):
        await writer.drain()
