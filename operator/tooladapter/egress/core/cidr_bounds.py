"""How far a descriptor's CIDRs may reach: the bound at admission, the exceptions in ipBlocks.

A CIDR entry of `sandbox.egress.allow` becomes a NetworkPolicy ipBlock: the sandbox reaches
it directly, around the egress proxy and every address check the proxy makes. So what a
descriptor's author may write is bounded here:

- no entry broader than a setting (default /24 for IPv4, /64 for IPv6): `0.0.0.0/1` would
  reopen half the internet and every private range behind it;
- a setting (`TOOLADAPTER_DESCRIPTOR_CIDRS=forbid`) refuses descriptor CIDRs (and the IP
  literals of `http.allowedHosts`) cluster-wide: then only host names reach out, through
  the proxy;
- whatever a block allows, link-local, loopback, the metadata services and the cluster's
  pod and service ranges are excepted from it (`ipBlock.except`) when they lie strictly
  inside it. A block that is (or lies inside) one of those ranges names it exactly: it
  stays as written (a NetworkPolicy cannot except a block from itself), bounded in size
  by the rule above;
- no IPv6 entry that embeds IPv4 addresses (`EMBEDS_IPV4`: IPv4-mapped `::ffff:0:0/96`,
  IPv4-compatible `::/96`, IPv4-translated, NAT64 `64:ff9b::/96` and `64:ff9b:1::/48`,
  6to4 `2002::/16`, Teredo `2001::/32`) is allowed, whatever its size: where the node or a
  NAT64 gateway maps it, `::ffff:0.0.0.0/96` is all of IPv4 (metadata, the cluster's
  ranges), a /96 within the IPv6 bound that no IPv4 exception reaches. Refused outright,
  not translated to its IPv4: name the IPv4 block instead, bounded and excepted as such.

McpServer `spec.allowedCidrs` are not bounded here: a platform admin activates servers.
Nothing here does I/O.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Final, Literal

from tooladapter.egress.core.addresses import METADATA, IPNetwork
from tooladapter.model import ToolDescriptorSpec

#: Ranges excepted from every ipBlock that strictly contains them (besides the cluster's).
ALWAYS_EXCEPTED: Final[tuple[IPNetwork, ...]] = (
    ipaddress.ip_network("169.254.0.0/16"),  # link-local, and most metadata services
    ipaddress.ip_network("fe80::/10"),
    ipaddress.ip_network("127.0.0.0/8"),
    ipaddress.ip_network("::1/128"),
    *(ipaddress.ip_network(address) for address in sorted(METADATA, key=str)),
)


#: IPv6 ranges whose addresses carry an IPv4 address (a translator or the node's stack
#: may reach that IPv4 address through them): refused in descriptor CIDRs.
EMBEDS_IPV4: Final[tuple[tuple[ipaddress.IPv6Network, str], ...]] = tuple(
    (ipaddress.IPv6Network(cidr), what)
    for cidr, what in (
        ("::ffff:0:0/96", "IPv4-mapped"),
        ("::/96", "IPv4-compatible"),
        ("::ffff:0:0:0/96", "IPv4-translated"),
        ("64:ff9b::/96", "NAT64"),
        ("64:ff9b:1::/48", "local-use NAT64"),
        ("2002::/16", "6to4"),
        ("2001::/32", "Teredo"),
    )
)


@dataclass(frozen=True)
class CidrBounds:
    """The bound on descriptor CIDRs: the shortest prefix per family, or none at all."""

    #: `allow` (bounded by the prefixes below) or `forbid` (no descriptor CIDR).
    mode: Literal["allow", "forbid"] = "allow"
    min_prefix_v4: int = 24
    min_prefix_v6: int = 64

    def problem(self, entry: str) -> str | None:
        """Why the CIDR (or IP literal) `entry` is refused; None when it is within bounds
        (or is no address at all)."""
        try:
            network = ipaddress.ip_network(entry.strip().strip("[]"), strict=False)
        except ValueError:
            return None
        if self.mode == "forbid":
            return (
                f"{entry!r}: descriptor CIDRs and IP addresses are forbidden in this cluster "
                "(TOOLADAPTER_DESCRIPTOR_CIDRS=forbid); name hosts instead (they go through "
                "the egress proxy)"
            )
        least = self.min_prefix_v4 if network.version == 4 else self.min_prefix_v6
        if network.prefixlen < least:
            return (
                f"{entry!r} is broader than /{least}, the widest CIDR a descriptor may allow "
                f"(TOOLADAPTER_DESCRIPTOR_CIDR_MIN_PREFIX_IPV{network.version}); list narrower "
                "blocks or name hosts"
            )
        if isinstance(network, ipaddress.IPv6Network):
            for embedding, what in EMBEDS_IPV4:
                if network.overlaps(embedding):
                    return (
                        f"{entry!r} overlaps {embedding} ({what}), IPv6 addresses that carry "
                        "IPv4 ones: refused whatever its size (it would reach IPv4 around the "
                        "IPv4 bound and its exceptions); allow the IPv4 block itself"
                    )
        return None


def cidr_problems(
    entries: Iterable[str], *, where: str, bounds: CidrBounds, literals: bool = False
) -> list[str]:
    """`where[i]: why` for each entry out of `bounds`: CIDRs (`a.b.c.d/n`), and with
    `literals` bare IP addresses too (`http.allowedHosts`, where `host:port` is allowed)."""
    problems: list[str] = []
    for index, entry in enumerate(entries):
        text = entry.strip()
        if literals:
            if text.startswith("["):
                text = text[1:].partition("]")[0]
            elif text.count(":") == 1:
                text = text.partition(":")[0]
        elif "/" not in text:
            continue
        problem = bounds.problem(text)
        if problem is not None:
            problems.append(f"{where}[{index}]: {problem}")
    return problems


def descriptor_cidr_problems(spec: ToolDescriptorSpec, bounds: CidrBounds) -> list[str]:
    """The descriptor's CIDRs out of `bounds`: `sandbox.egress.allow` (and its credential
    hosts: names only), and the IP literals of `http.allowedHosts`."""
    problems: list[str] = []
    if spec.sandbox is not None and spec.sandbox.egress.allow:
        problems.extend(
            cidr_problems(spec.sandbox.egress.allow, where="sandbox.egress.allow", bounds=bounds)
        )
    if spec.http is not None:
        problems.extend(
            cidr_problems(
                spec.http.allowed_hosts, where="http.allowedHosts", bounds=bounds, literals=True
            )
        )
    return problems


def parse_cluster(entries: Iterable[str]) -> tuple[IPNetwork, ...]:
    """The cluster's ranges from settings (unparsable entries skipped)."""
    out: list[IPNetwork] = []
    for entry in entries:
        try:
            out.append(ipaddress.ip_network(entry.strip(), strict=False))
        except ValueError:
            continue
    return tuple(out)


def exceptions_for(cidr: str, cluster: Sequence[IPNetwork] = ()) -> list[str]:
    """The ranges to except from an ipBlock `cidr`: those of `ALWAYS_EXCEPTED` and
    `cluster` strictly inside it (a NetworkPolicy's `except` must be), outermost only."""
    block = ipaddress.ip_network(cidr, strict=False)
    inside = [
        net
        for net in (*ALWAYS_EXCEPTED, *cluster)
        if net.version == block.version and net != block and net.subnet_of(block)  # type: ignore[arg-type]
    ]
    outermost = [
        net
        for net in inside
        if not any(
            other != net and net.subnet_of(other)  # type: ignore[arg-type]
            for other in inside
        )
    ]
    return sorted({str(net) for net in outermost}, key=lambda t: ipaddress.ip_network(t))


def ip_block(cidr: str, cluster: Sequence[IPNetwork] = ()) -> dict[str, Any]:
    """A NetworkPolicy peer for `cidr`, with its exceptions."""
    block: dict[str, Any] = {"cidr": cidr}
    excepted = exceptions_for(cidr, cluster)
    if excepted:
        block["except"] = excepted
    return {"ipBlock": block}


__all__ = [
    "ALWAYS_EXCEPTED",
    "EMBEDS_IPV4",
    "CidrBounds",
    "cidr_problems",
    "descriptor_cidr_problems",
    "exceptions_for",
    "ip_block",
    "parse_cluster",
]
