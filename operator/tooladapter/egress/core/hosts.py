"""Host names and egress allow entries, as the authors of descriptors write them.

Shared by the checks at apply (an http tool's `allowedHosts`, `sandbox.egress.allow`) and
the egress proxy, which judges connections against the same parsed entries.
"""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass
from typing import Literal

_HOST_LABEL = re.compile(r"^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$")


@dataclass(frozen=True)
class EgressEntry:
    """One parsed egress allow entry: a CIDR (NetworkPolicy) or a host name (proxy)."""

    kind: Literal["cidr", "host"]
    value: str
    port: int | None = None


def parse_egress_entry(entry: str) -> EgressEntry:
    """Parse an egress allow entry; raises `ValueError` with an actionable message.

    CIDRs must be canonical (no host bits) and narrower than the whole address space.
    Host names are RFC 1123 names, optionally with `:port`, optionally with a single
    leading `*.` wildcard over at least two labels (`*.example.com`). Bare IP addresses
    are refused: write them as `/32` (or `/128`) CIDRs.
    """
    text = entry.strip()
    if not text:
        raise ValueError("egress entry is empty")
    if "/" in text:
        try:
            network = ipaddress.ip_network(text, strict=True)
        except ValueError as err:
            hint = ""
            try:
                hint = f"; did you mean {ipaddress.ip_network(text, strict=False)}?"
            except ValueError:
                pass
            raise ValueError(f"egress entry {entry!r} is not a valid CIDR ({err}){hint}") from err
        if network.prefixlen == 0:
            raise ValueError(
                f"egress entry {entry!r} allows every address: arbitrary internet access is "
                "denied by design; list the networks or hosts the tool needs"
            )
        return EgressEntry(kind="cidr", value=str(network))
    try:
        address = ipaddress.ip_address(text.strip("[]"))
    except ValueError:
        pass
    else:
        suffix = 32 if address.version == 4 else 128
        raise ValueError(
            f"egress entry {entry!r} is a bare IP address: write it as a CIDR, "
            f"e.g. {address}/{suffix}"
        )
    host, port = text, None
    if ":" in text:
        host, _, port_text = text.rpartition(":")
        if not port_text.isdigit() or not 1 <= int(port_text) <= 65535:
            raise ValueError(f"egress entry {entry!r} has an invalid port {port_text!r}")
        port = int(port_text)
    host = host.lower()
    problem = host_name_problem(host)
    if problem:
        raise ValueError(f"egress entry {entry!r} {problem}")
    return EgressEntry(kind="host", value=host, port=port)


def host_name_problem(host: str) -> str | None:
    name = host[2:] if host.startswith("*.") else host
    if "*" in name:
        return "has a wildcard that is not a single leading '*.' (e.g. '*.example.com')"
    if host.startswith("*.") and name.count(".") < 1:
        return "wildcards a whole top-level domain: use at least '*.example.com'"
    if len(name) > 253 or not name:
        return "is not a valid host name (1 to 253 characters)"
    labels = name.split(".")
    if not all(_HOST_LABEL.match(label) for label in labels):
        return (
            "is not a valid host name: labels are 1-63 letters, digits or '-', "
            "not starting or ending with '-'"
        )
    if labels[-1].isdigit():
        return "is not a valid host name (the last label is numeric)"
    return None


def is_ip(host: str) -> bool:
    """Whether `host` is an IP literal (no brackets), not a name to resolve."""
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True
