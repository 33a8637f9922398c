"""Which network addresses the operator may connect to on a tool's (or MCP server's) behalf.

The operator runs inside the cluster (or on a node): a URL that resolves to a loopback,
private, link-local or metadata address reaches what only the operator's position can
reach. So every address the http executor and the MCP client are about to connect to (the
resolved one, checked at connect time: a name that re-resolves elsewhere later is checked
again) must be public, unless the object's author allowed that address explicitly:

- an IP literal in `http.allowedHosts` or a CIDR in `sandbox.egress.allow` of an http tool;
- a CIDR in `spec.allowedCidrs` of an McpServer.

A host name never counts as an allowance (it may resolve anywhere). Addresses the operator
blocks for every tool (`TOOLADAPTER_BLOCKED_HTTP_HOSTS`) stay refused even when allowed.
IPv4 addresses embedded in IPv6 (mapped `::ffff:a.b.c.d`, NAT64 `64:ff9b::/96`, 6to4
`2002::/16`) are judged as the IPv4 address they reach.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Final

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network

#: Cloud metadata services: they hand out the node's (or the operator's) credentials.
METADATA: Final = frozenset(
    ipaddress.ip_address(a)
    for a in (
        "169.254.169.254",  # AWS, GCP, Azure, OpenStack, ...
        "169.254.170.2",  # AWS ECS task credentials
        "100.100.100.200",  # Alibaba Cloud
        "192.0.0.192",  # Oracle Cloud
        "fd00:ec2::254",  # AWS over IPv6
    )
)

#: Non-public ranges by kind, checked in this order (the first match names the refusal).
_RANGES: Final[tuple[tuple[str, tuple[IPNetwork, ...]], ...]] = tuple(
    (kind, tuple(ipaddress.ip_network(n) for n in nets))
    for kind, nets in (
        ("loopback", ("127.0.0.0/8", "::1/128")),
        ("unspecified", ("0.0.0.0/8", "::/128")),
        ("link-local", ("169.254.0.0/16", "fe80::/10")),
        (
            "private",
            (
                "10.0.0.0/8",
                "172.16.0.0/12",
                "192.168.0.0/16",
                "100.64.0.0/10",  # carrier-grade NAT, also used by cluster networks
                "fc00::/7",
                "fec0::/10",
            ),
        ),
        ("multicast", ("224.0.0.0/4", "ff00::/8")),
        (
            "reserved",
            (
                "192.0.0.0/24",
                "192.0.2.0/24",
                "198.18.0.0/15",
                "198.51.100.0/24",
                "203.0.113.0/24",
                "240.0.0.0/4",
                "192.88.99.0/24",  # the deprecated 6to4 relay anycast (RFC 7526)
                "100::/64",
                "2001::/23",
                "2001:db8::/32",
                "3fff::/20",  # documentation (RFC 9637)
                "5f00::/16",  # SRv6 SIDs (RFC 9602)
                # Local-use NAT64 (RFC 8215) and IPv4-translated addresses (RFC 2765): a
                # translator delivers them to an IPv4 address of its network, so the whole
                # range is refused rather than the address inside judged.
                "64:ff9b:1::/48",
                "::ffff:0:0:0/96",
            ),
        ),
    )
)

_NAT64: Final = ipaddress.ip_network("64:ff9b::/96")
_IPV4_COMPATIBLE: Final = ipaddress.IPv6Network("::/96")


class AddressRefused(OSError):
    """Raised by a connector instead of connecting: no byte was sent to `host`."""

    def __init__(self, host: str, reasons: list[str]) -> None:
        self.host = host
        self.reasons = reasons
        super().__init__(f"{host}: no address the operator may connect to: " + "; ".join(reasons))


def _parse(address: str | IPAddress) -> IPAddress:
    if isinstance(address, ipaddress.IPv4Address | ipaddress.IPv6Address):
        return address
    # A scoped IPv6 address (`fe80::1%eth0`) is judged without its zone.
    return ipaddress.ip_address(address.split("%", 1)[0].strip("[]"))


def embedded_ipv4(address: IPAddress) -> ipaddress.IPv4Address | None:
    """The IPv4 address an IPv6 address reaches through mapping, NAT64 or 6to4."""
    if isinstance(address, ipaddress.IPv4Address):
        return None
    if address.ipv4_mapped is not None:
        return address.ipv4_mapped
    if address in _NAT64:
        return ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)
    if address in _IPV4_COMPATIBLE and int(address) > 1:
        # `::a.b.c.d` (deprecated, RFC 4291 2.5.5.1): a host with an automatic tunnel
        # sends it to a.b.c.d; `::` and `::1` are themselves.
        return ipaddress.IPv4Address(int(address))
    return address.sixtofour


def address_kind(address: str | IPAddress) -> str | None:
    """`metadata`, `loopback`, `link-local`, `private`, ... for a non-public address; None
    for a public one."""
    parsed = _parse(address)
    inner = embedded_ipv4(parsed)
    for candidate in (parsed, inner) if inner is not None else (parsed,):
        if candidate in METADATA:
            return "metadata"
        for kind, networks in _RANGES:
            if any(candidate in n for n in networks if n.version == candidate.version):
                return kind
    return None


def parse_networks(entries: Iterable[str]) -> tuple[IPNetwork, ...]:
    """The addresses and CIDRs among `entries` (host names and unparsable entries are
    skipped: they never allow an address). `host:port` and `[v6]:port` count by address."""
    out: list[IPNetwork] = []
    for entry in entries:
        text = entry.strip()
        if text.startswith("["):
            text = text[1:].partition("]")[0]
        elif text.count(":") == 1:
            text = text.partition(":")[0]
        try:
            out.append(ipaddress.ip_network(text, strict=False))
        except ValueError:
            continue
    return tuple(out)


@dataclass(frozen=True)
class AddressRule:
    """What may be connected to: public addresses and the explicitly `allowed` networks,
    never the `blocked` ones."""

    allowed: tuple[IPNetwork, ...] = ()
    blocked: tuple[IPNetwork, ...] = ()

    @classmethod
    def of(cls, allowed: Iterable[str] = (), blocked: Iterable[str] = ()) -> AddressRule:
        return cls(parse_networks(allowed), parse_networks(blocked))

    @staticmethod
    def _within(address: IPAddress, networks: tuple[IPNetwork, ...]) -> IPNetwork | None:
        inner = embedded_ipv4(address)
        for network in networks:
            for candidate in (address, inner):
                if candidate is not None and candidate.version == network.version:
                    if candidate in network:
                        return network
        return None

    def refusal(self, address: str | IPAddress, *, mapped: bool = False) -> str | None:
        """Why connecting to `address` is refused; None when it is allowed.

        `mapped`: the operator itself mapped the name to this address
        (`TOOLADAPTER_EGRESS_HOSTS`, for tests), as the egress proxy's `AddressPolicy`
        judges its mapped names: the non-public check is skipped (the mapping is the
        explicit allowance), a metadata service and a blocked address never are."""
        try:
            parsed = _parse(address)
        except ValueError:
            return f"{address} is not an IP address"
        blocked = self._within(parsed, self.blocked)
        if blocked is not None:
            return f"{parsed} is blocked for every tool ({blocked})"
        if mapped:
            inner = embedded_ipv4(parsed)
            if parsed in METADATA or (inner is not None and inner in METADATA):
                return f"{parsed} is a metadata service"
            return None
        if self._within(parsed, self.allowed) is not None:
            return None
        kind = address_kind(parsed)
        if kind is None:
            return None
        return (
            f"{parsed} is a non-public address ({kind}), not allowed explicitly (an IP literal in "
            "http.allowedHosts, a CIDR in sandbox.egress.allow or McpServer spec.allowedCidrs)"
        )

    def permitted(self, host: str, addresses: Iterable[str], *, mapped: bool = False) -> list[str]:
        """The addresses of `host` that may be connected to, in their order; raises
        `AddressRefused` when none may. `mapped`: see `refusal`."""
        ok: list[str] = []
        reasons: list[str] = []
        for address in addresses:
            reason = self.refusal(address, mapped=mapped)
            if reason is None:
                ok.append(address)
            elif reason not in reasons:
                reasons.append(reason)
        if not ok:
            raise AddressRefused(host, reasons or ["no address"])
        return ok


__all__ = [
    "METADATA",
    "AddressRefused",
    "AddressRule",
    "address_kind",
    "embedded_ipv4",
    "parse_networks",
]
