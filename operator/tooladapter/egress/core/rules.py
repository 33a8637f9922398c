"""Egress by host name: the pure rules of the lease-scoped egress proxy.

A NetworkPolicy only knows addresses, and a name's addresses change under it (and are what
DNS says, which the sandbox must not be able to steer). So a sandbox reaches hosts by name
only through the egress proxy (`tooladapter.egress`), which judges every connection here:

- the allow-list: host names (exact, or `*.suffix`: any name below the suffix, never the
  suffix itself), each with an optional port (default 443 for CONNECT and TLS upstreams,
  80 for plain-HTTP forwarding), and CIDRs (which the NetworkPolicy lets out directly);
- an IP literal is refused unless a CIDR entry covers it;
- a name is resolved by the proxy, and refused when it resolves only into private,
  loopback, link-local, metadata or cluster ranges that no CIDR entry covers (names the
  operator maps itself, `TOOLADAPTER_EGRESS_HOSTS`, skip that check: they are its own
  configuration);
- through CONNECT, the TLS ClientHello's SNI must name the CONNECT host (an encrypted
  ClientHello, which hides the real name, is refused).

Nothing here does I/O; the proxy feeds it bytes and addresses.
"""

from __future__ import annotations

import base64
import binascii
import ipaddress
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Final

from tooladapter.egress.core.addresses import (
    METADATA,
    IPAddress,
    IPNetwork,
    address_kind,
    embedded_ipv4,
)
from tooladapter.egress.core.hosts import EgressEntry, parse_egress_entry
from tooladapter.enums import EgressVerdict

#: Default ports: CONNECT (and TLS upstreams of credentialed hosts) and plain-HTTP forwarding.
HTTPS_PORT: Final = 443
HTTP_PORT: Final = 80

#: The reference's `Tools:Sandbox DefaultEgressAllowList`.
REFERENCE_DEFAULT_ALLOW: Final = ("github.com", "dev.azure.com", "api.nuget.org")


def normalize_host(host: str) -> str:
    """Lower-case, no brackets, no trailing dot: the form every comparison uses."""
    return host.strip().strip("[]").rstrip(".").lower()


def ip_literal(host: str) -> IPAddress | None:
    try:
        return ipaddress.ip_address(normalize_host(host).split("%", 1)[0])
    except ValueError:
        return None


@dataclass(frozen=True)
class HostEntry:
    """`name` (or `*.suffix`) with an optional port; None: the request's default port."""

    name: str
    port: int | None = None

    def matches(self, host: str, port: int, default_port: int) -> bool:
        if port != (self.port if self.port is not None else default_port):
            return False
        host = normalize_host(host)
        if self.name.startswith("*."):
            suffix = self.name[1:]
            return host.endswith(suffix) and len(host) > len(suffix)
        return host == self.name

    def covers(self, other: HostEntry) -> bool:
        """Whether every request `other` allows is allowed by this entry too."""
        if self.port != other.port:
            return False
        if not self.name.startswith("*."):
            return self.name == other.name
        suffix = self.name[1:]
        name = other.name[1:] if other.name.startswith("*.") else other.name
        return other.name == self.name or (name.endswith(suffix) and len(name) > len(suffix))

    def __str__(self) -> str:
        return f"{self.name}:{self.port}" if self.port is not None else self.name


def _parsed(entries: Iterable[str]) -> Iterator[tuple[str, EgressEntry]]:
    """(entry, parsed) of the entries that parse: they were validated where they were
    written, so one that does not is skipped (it allows nothing: fail closed)."""
    for entry in entries:
        try:
            yield entry, parse_egress_entry(entry)
        except ValueError:
            continue


@dataclass(frozen=True)
class AllowList:
    """A lease's parsed egress allow-list."""

    hosts: tuple[HostEntry, ...] = ()
    networks: tuple[IPNetwork, ...] = ()

    @classmethod
    def parse(cls, entries: Iterable[str]) -> AllowList:
        """Entries were validated where they were written; one that does not parse allows
        nothing (fail closed)."""
        hosts: list[HostEntry] = []
        networks: list[IPNetwork] = []
        for _, parsed in _parsed(entries):
            if parsed.kind == "cidr":
                networks.append(ipaddress.ip_network(parsed.value))
            else:
                hosts.append(HostEntry(parsed.value, parsed.port))
        return cls(tuple(hosts), tuple(networks))

    def host_entry(self, host: str, port: int, default_port: int) -> HostEntry | None:
        return next((e for e in self.hosts if e.matches(host, port, default_port)), None)

    def network_for(self, address: IPAddress) -> IPNetwork | None:
        inner = embedded_ipv4(address)
        for network in self.networks:
            for candidate in (address, inner):
                if candidate is not None and candidate.version == network.version:
                    if candidate in network:
                        return network
        return None


def split_entries(entries: Iterable[str]) -> tuple[list[str], list[str]]:
    """(CIDR entries, host entries) of an allow-list, each in its canonical form."""
    cidrs: list[str] = []
    hosts: list[str] = []
    for _, parsed in _parsed(entries):
        if parsed.kind == "cidr":
            cidrs.append(parsed.value)
        else:
            hosts.append(f"{parsed.value}:{parsed.port}" if parsed.port else parsed.value)
    return cidrs, hosts


def effective_allow(
    declared: Sequence[str] | None,
    default: Sequence[str],
    narrowing: Sequence[Sequence[str]] = (),
) -> list[str]:
    """The allow-list a lease gets: the descriptor's (the operator's default when it sets
    none; `[]` is none), narrowed by every policy list (an entry survives only when an entry
    of each list covers it)."""
    entries = list(default if declared is None else declared)
    for policy in narrowing:
        allowed = AllowList.parse(policy)
        kept: list[str] = []
        for entry, parsed in _parsed(entries):
            if parsed.kind == "cidr":
                network = ipaddress.ip_network(parsed.value)
                if any(
                    network.version == n.version and network.subnet_of(n)  # type: ignore[arg-type]
                    for n in allowed.networks
                ):
                    kept.append(entry)
            elif any(h.covers(HostEntry(parsed.value, parsed.port)) for h in allowed.hosts):
                kept.append(entry)
        entries = kept
    return entries


# --------------------------------------------------------------------------- judgements


@dataclass(frozen=True)
class Verdict:
    verdict: EgressVerdict
    reason: str = ""

    @property
    def allowed(self) -> bool:
        return self.verdict == EgressVerdict.ALLOWED


ALLOWED: Final = Verdict(EgressVerdict.ALLOWED)


def judge_target(allow: AllowList, host: str, port: int, *, default_port: int) -> Verdict:
    """Whether `host:port` may be asked for at all, before anything is resolved."""
    literal = ip_literal(host)
    if literal is not None:
        if allow.network_for(literal) is not None:
            return ALLOWED
        return Verdict(
            EgressVerdict.IP_LITERAL,
            f"{literal} is an IP literal no CIDR entry of the lease allows",
        )
    if allow.host_entry(host, port, default_port) is None:
        return Verdict(
            EgressVerdict.NOT_ALLOWED, f"{normalize_host(host)}:{port} is not on the allow-list"
        )
    return ALLOWED


@dataclass(frozen=True)
class AddressPolicy:
    """The proxy's own view of addresses: the cluster's ranges count as non-public, the
    metadata services are refused whatever a lease says, and names the operator mapped
    itself (`TOOLADAPTER_EGRESS_HOSTS`) resolve only to what it mapped."""

    cluster: tuple[IPNetwork, ...] = ()
    overrides: Mapping[str, str] = field(default_factory=dict)

    def refusal(self, allow: AllowList, address: str, *, mapped: bool) -> str | None:
        try:
            parsed = ipaddress.ip_address(address.split("%", 1)[0])
        except ValueError:
            return f"{address} is not an IP address"
        inner = embedded_ipv4(parsed)
        if parsed in METADATA or (inner is not None and inner in METADATA):
            return f"{parsed} is a metadata service"
        if mapped or allow.network_for(parsed) is not None:
            return None
        for network in self.cluster:
            for candidate in (parsed, inner):
                if candidate is not None and candidate.version == network.version:
                    if candidate in network:
                        return f"{parsed} is in a cluster range ({network})"
        kind = address_kind(parsed)
        if kind is not None:
            return f"{parsed} is a non-public address ({kind}) no CIDR entry allows"
        return None

    def permitted(
        self, allow: AllowList, host: str, addresses: Iterable[str], *, mapped: bool
    ) -> tuple[list[str], Verdict]:
        """The addresses of `host` that may be connected to, and the verdict."""
        ok: list[str] = []
        reasons: list[str] = []
        for address in addresses:
            reason = self.refusal(allow, address, mapped=mapped)
            if reason is None:
                if address not in ok:
                    ok.append(address)
            elif reason not in reasons:
                reasons.append(reason)
        if ok:
            return ok, ALLOWED
        if not reasons:
            return [], Verdict(EgressVerdict.UPSTREAM_FAILED, f"{host} did not resolve")
        return [], Verdict(
            EgressVerdict.PRIVATE_ADDRESS, f"{normalize_host(host)}: " + "; ".join(reasons)
        )


def parse_hosts_override(text: str) -> dict[str, str]:
    """`name=address,...` (TOOLADAPTER_EGRESS_HOSTS); raises ValueError naming a bad pair."""
    out: dict[str, str] = {}
    for part in text.split(","):
        part = part.strip()
        if not part:
            continue
        name, sep, address = part.partition("=")
        if not sep or not name.strip():
            raise ValueError(f"{part!r} is not name=address")
        try:
            out[normalize_host(name)] = str(ipaddress.ip_address(address.strip()))
        except ValueError as exc:
            raise ValueError(f"{part!r}: {address.strip()!r} is not an IP address") from exc
    return out


# --------------------------------------------------------------------------- TLS


#: A ClientHello larger than this is refused (real ones are a few KiB).
MAX_CLIENT_HELLO: Final = 65_536
_TLS_HANDSHAKE: Final = 22
_CLIENT_HELLO: Final = 1
_EXT_SERVER_NAME: Final = 0
_EXT_ECH: Final = 0xFE0D


class NotClientHello(ValueError):
    """The bytes are not (the start of) a TLS ClientHello."""


@dataclass(frozen=True)
class ClientHello:
    server_name: str | None
    encrypted: bool


def _handshake_bytes(data: bytes) -> bytes | None:
    """The handshake message reassembled from the leading TLS records; None: need more."""
    out = bytearray()
    offset = 0
    while True:
        if len(data) < offset + 5:
            return None
        if data[offset] != _TLS_HANDSHAKE or data[offset + 1] != 3:
            raise NotClientHello("not a TLS handshake record")
        length = int.from_bytes(data[offset + 3 : offset + 5], "big")
        if length == 0 or length > 16_384 + 2048:
            raise NotClientHello("TLS record length out of range")
        if len(data) < offset + 5 + length:
            return None
        out += data[offset + 5 : offset + 5 + length]
        offset += 5 + length
        if len(out) >= 4:
            if out[0] != _CLIENT_HELLO:
                raise NotClientHello("the first handshake message is not a ClientHello")
            wanted = 4 + int.from_bytes(out[1:4], "big")
            if wanted > MAX_CLIENT_HELLO:
                raise NotClientHello("ClientHello too large")
            if len(out) >= wanted:
                return bytes(out[:wanted])
        if offset > MAX_CLIENT_HELLO:
            raise NotClientHello("ClientHello too large")


class _Reader:
    def __init__(self, data: bytes) -> None:
        self.data = data
        self.at = 0

    def take(self, n: int) -> bytes:
        if self.at + n > len(self.data):
            raise NotClientHello("truncated ClientHello")
        chunk = self.data[self.at : self.at + n]
        self.at += n
        return chunk

    def number(self, n: int) -> int:
        return int.from_bytes(self.take(n), "big")

    def vector(self, length_bytes: int) -> bytes:
        return self.take(self.number(length_bytes))

    @property
    def left(self) -> int:
        return len(self.data) - self.at


def parse_client_hello(data: bytes) -> ClientHello | None:
    """The SNI of the ClientHello at the start of `data`; None while more bytes are needed;
    `NotClientHello` when the bytes cannot be one."""
    message = _handshake_bytes(data)
    if message is None:
        return None
    reader = _Reader(message[4:])
    reader.take(2 + 32)  # legacy_version, random
    reader.vector(1)  # legacy_session_id
    reader.vector(2)  # cipher_suites
    reader.vector(1)  # legacy_compression_methods
    if reader.left == 0:
        return ClientHello(server_name=None, encrypted=False)
    extensions = _Reader(reader.vector(2))
    name: str | None = None
    encrypted = False
    seen: set[int] = set()
    while extensions.left:
        kind = extensions.number(2)
        body = extensions.vector(2)
        if kind in seen:
            raise NotClientHello(f"extension {kind} repeated")
        seen.add(kind)
        if kind == _EXT_ECH:
            encrypted = True
        elif kind == _EXT_SERVER_NAME:
            names = _Reader(_Reader(body).vector(2))
            while names.left:
                name_type = names.number(1)
                value = names.vector(2)
                if name_type == 0:
                    if name is not None:
                        raise NotClientHello("two host names in server_name")
                    try:
                        name = value.decode("ascii")
                    except UnicodeDecodeError as exc:
                        raise NotClientHello("server_name is not ASCII") from exc
    return ClientHello(server_name=name, encrypted=encrypted)


def judge_hello(hello: ClientHello, connect_host: str) -> Verdict:
    """The SNI must name the CONNECT host; an IP literal CONNECT carries no SNI."""
    if hello.encrypted:
        return Verdict(
            EgressVerdict.SNI_MISMATCH, "an encrypted ClientHello (ECH) hides the host it names"
        )
    if ip_literal(connect_host) is not None:
        if hello.server_name is None:
            return ALLOWED
        return Verdict(
            EgressVerdict.SNI_MISMATCH,
            f"SNI {hello.server_name!r} on a CONNECT to the address {connect_host}",
        )
    if hello.server_name is None:
        return Verdict(EgressVerdict.SNI_MISMATCH, "the ClientHello names no host (no SNI)")
    if normalize_host(hello.server_name) != normalize_host(connect_host):
        return Verdict(
            EgressVerdict.SNI_MISMATCH,
            f"SNI {normalize_host(hello.server_name)!r} differs from the CONNECT host "
            f"{normalize_host(connect_host)!r}",
        )
    return ALLOWED


# --------------------------------------------------------------------------- HTTP


#: A request head larger than this is refused.
MAX_HEAD: Final = 32_768

#: Headers that concern one hop only, never forwarded (RFC 9110 7.6.1), plus the proxy's.
HOP_BY_HOP: Final = frozenset(
    {
        "connection",
        "keep-alive",
        "proxy-authorization",
        "proxy-authenticate",
        "proxy-connection",
        "te",
        "trailer",
        "upgrade",
    }
)


#: Bytes no line of a head may hold (CR and LF only as the line ends).
_CONTROL: Final = frozenset(chr(c) for c in (*range(0x20), 0x7F))


class BadRequest(ValueError):
    """A request head the proxy does not accept."""


@dataclass(frozen=True)
class RequestHead:
    method: str
    target: str
    version: str
    headers: tuple[tuple[str, str], ...]

    def header(self, name: str) -> str | None:
        wanted = name.lower()
        return next((v for k, v in self.headers if k.lower() == wanted), None)


def parse_request_head(raw: bytes) -> RequestHead:
    """A request line and its headers (`raw` ends with the blank line)."""
    try:
        text = raw.decode("latin-1")
    except UnicodeDecodeError as exc:  # pragma: no cover - latin-1 decodes every byte
        raise BadRequest("undecodable head") from exc
    lines = text.split("\r\n")
    # A bare CR or LF (or any control byte but a value's tab) inside a line would end a
    # line for a lenient upstream: a second Host header, or a second request line, past
    # the checks made on this parse.
    if any(_CONTROL.intersection(line.replace("\t", "")) for line in lines):
        raise BadRequest("a control character inside a line of the head")
    parts = lines[0].split(" ")
    if len(parts) != 3 or not parts[2].startswith("HTTP/1."):
        raise BadRequest("malformed request line")
    method, target, version = parts
    if not method.isalpha() or not method.isupper():
        raise BadRequest("malformed method")
    headers: list[tuple[str, str]] = []
    for line in lines[1:]:
        if not line:
            continue
        name, sep, value = line.partition(":")
        if not sep or not name or name != name.strip() or any(c in name for c in " \t"):
            raise BadRequest("malformed header line")
        headers.append((name, value.strip()))
    return RequestHead(method, target, version, tuple(headers))


def split_authority(authority: str, default_port: int) -> tuple[str, int]:
    """`host[:port]` or `[v6][:port]` -> (host, port); BadRequest when malformed."""
    if authority.startswith("["):
        host, _, rest = authority[1:].partition("]")
        port_text = rest[1:] if rest.startswith(":") else ""
        if rest and not rest.startswith(":"):
            raise BadRequest(f"malformed authority {authority!r}")
    elif authority.count(":") == 1:
        host, _, port_text = authority.partition(":")
    elif ":" in authority:
        raise BadRequest(f"malformed authority {authority!r}")
    else:
        host, port_text = authority, ""
    if not host or any(c in host for c in "@/ \t\\"):
        raise BadRequest(f"malformed authority {authority!r}")
    if port_text:
        if not port_text.isdigit() or not 1 <= int(port_text) <= 65535:
            raise BadRequest(f"malformed port in {authority!r}")
        return normalize_host(host), int(port_text)
    return normalize_host(host), default_port


@dataclass(frozen=True)
class ForwardTarget:
    host: str
    #: The port as the request names it (None: the scheme's default).
    port: int | None
    path: str


def forward_target(head: RequestHead) -> ForwardTarget:
    """The absolute-form `http://` target of a forwarded request; its Host header, when
    given, must name the same host and port."""
    target = head.target
    if not target.lower().startswith("http://"):
        raise BadRequest("only absolute http:// targets are forwarded (use CONNECT for TLS)")
    rest = target[len("http://") :]
    slash = min((i for i in (rest.find("/"), rest.find("?")) if i >= 0), default=len(rest))
    authority, path = rest[:slash], rest[slash:] or "/"
    if path.startswith("?"):
        path = "/" + path
    host, port = split_authority(authority, 0)
    given = head.header("host")
    if given is not None and split_authority(given, 0) != (host, port):
        raise BadRequest(f"Host header {given!r} differs from the target {authority!r}")
    return ForwardTarget(host, port or None, path)


def upstream_head(
    head: RequestHead, target: ForwardTarget, *, inject: tuple[str, str] | None = None
) -> bytes:
    """The request as sent upstream: origin-form, one request per connection, no
    proxy or hop-by-hop headers, and the injected credential header (replacing any the
    sandbox sent under that name)."""
    connection_named = {
        token.strip().lower()
        for value in (head.header("connection") or "").split(",")
        for token in [value]
        if token.strip()
    }
    # With a credential, the answer should come back uncompressed: the proxy masks the
    # value in it (`egress_response`), decoding gzip and deflate, refusing other codings.
    injected = {inject[0].lower(), "accept-encoding"} if inject else set()
    drop = HOP_BY_HOP | connection_named | injected
    lines = [f"{head.method} {target.path} HTTP/1.1"]
    host_value = target.host if target.port is None else f"{target.host}:{target.port}"
    if ":" in target.host:
        host_value = f"[{target.host}]" + ("" if target.port is None else f":{target.port}")
    lines.append(f"Host: {host_value}")
    for name, value in head.headers:
        if name.lower() in drop or name.lower() == "host":
            continue
        lines.append(f"{name}: {value}")
    if inject is not None:
        lines.append(f"{inject[0]}: {inject[1]}")
        lines.append("Accept-Encoding: identity")
    lines.append("Connection: close")
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")


def proxy_credentials(head: RequestHead) -> tuple[str, str] | None:
    """(user, token) of `Proxy-Authorization: Basic ...`; None when absent or malformed."""
    value = head.header("proxy-authorization")
    if not value:
        return None
    scheme, _, encoded = value.partition(" ")
    if scheme.lower() != "basic":
        return None
    try:
        decoded = base64.b64decode(encoded.strip(), validate=True).decode("utf-8")
    except (binascii.Error, UnicodeDecodeError):
        return None
    user, sep, token = decoded.partition(":")
    return (user, token) if sep else None


__all__ = [
    "ALLOWED",
    "HTTPS_PORT",
    "HTTP_PORT",
    "REFERENCE_DEFAULT_ALLOW",
    "AddressPolicy",
    "AllowList",
    "BadRequest",
    "ClientHello",
    "ForwardTarget",
    "HostEntry",
    "NotClientHello",
    "RequestHead",
    "Verdict",
    "effective_allow",
    "forward_target",
    "judge_hello",
    "judge_target",
    "normalize_host",
    "parse_client_hello",
    "parse_hosts_override",
    "parse_request_head",
    "proxy_credentials",
    "split_authority",
    "split_entries",
    "upstream_head",
]
