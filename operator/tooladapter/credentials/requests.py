"""Which request carries which credential: scheme, host and port against `inject.hosts`,
then `methods` and `paths`.

An entry without a port means the scheme's default port (443 for https, 80 for http), as
in egress allow entries; an entry's port is honoured exactly. Paths are compared after
percent-decoding unreserved characters and removing dot segments (RFC 3986 6.2.2.2 and
5.2.4), so `/v1/%2e%2e/admin` is `/admin` and does not match a `/v1/` prefix. A path must
also match as a lenient server may read it (`lenient_path`: `%2F` as `/`, `\\` as `/`,
`;params` dropped): `/v1/..%2Fadmin` is `/admin` to such a server, which would otherwise
get the credential for a path outside `paths` (an http tool's argument `../admin` renders
as exactly that).

A request naming another method in a method-override header (`X-HTTP-Method-Override`,
`X-HTTP-Method`, `X-Method-Override`: many frameworks act on it in place of the request
line's) carries a credential limited by `methods` only when that method is allowed too: a
GET with `X-HTTP-Method-Override: DELETE` would otherwise take a GET-only credential to a
server that deletes.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from urllib.parse import urlsplit

from tooladapter.egress.core.hosts import is_ip, parse_egress_entry
from tooladapter.egress.core.rules import HostEntry, normalize_host
from tooladapter.model import CredentialInjection

DEFAULT_PORTS = {"http": 80, "https": 443}
_PERCENT = re.compile(r"%([0-9A-Fa-f]{2})")
#: How many times `lenient_path` decodes (a server decoding more often is not assumed).
_DECODINGS = 3
_UNRESERVED = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~")
#: Headers by which a server may take another method than the request line's (lower case).
METHOD_OVERRIDE_HEADERS = frozenset(
    {"x-http-method-override", "x-http-method", "x-method-override"}
)


def method_overrides(headers: Iterable[tuple[str, str]]) -> tuple[str, ...]:
    """Every method the request's override headers name, upper-cased (a list value split
    at its commas; an empty one kept, as "", which no `methods` allows)."""
    return tuple(
        part.strip().upper()
        for name, value in headers
        if name.strip().lower() in METHOD_OVERRIDE_HEADERS
        for part in value.split(",")
    )


def host_entry(text: str) -> HostEntry | None:
    """One `host`, `host:port` or `*.suffix[:port]` entry (None: it names no host). An IPv4
    literal is an exact host here: an http tool's `allowedHosts` and an McpServer's url may
    name one, and egress allow entries (which refuse it) never cover it anyway."""
    try:
        parsed = parse_egress_entry(text)
    except ValueError:
        address, _, port = text.partition(":")
        if is_ip(address) and "." in address and (not port or port.isdigit()):
            return HostEntry(address, int(port) if port else None)
        return None
    return HostEntry(parsed.value, parsed.port) if parsed.kind == "host" else None


def host_entries(inject: CredentialInjection) -> list[HostEntry]:
    """The parsed `inject.hosts` (entries that do not parse carry nothing)."""
    return [entry for text in inject.hosts or [] if (entry := host_entry(text)) is not None]


def normalize_path(path: str) -> str:
    """The path with unreserved characters percent-decoded (other escapes upper-cased) and
    dot segments removed; the query, if any, dropped."""
    path = path.split("?", 1)[0].split("#", 1)[0] or "/"

    def decode(match: re.Match[str]) -> str:
        char = chr(int(match.group(1), 16))
        return char if char in _UNRESERVED else "%" + match.group(1).upper()

    return remove_dot_segments(_PERCENT.sub(decode, path))


def lenient_path(path: str) -> str:
    """The path as a lenient server may read it: every escape decoded, again while any is
    left (`%2F` a slash, `%252e` a dot), backslashes as slashes, each segment's `;params`
    dropped, then dot segments removed."""
    decoded = path.split("?", 1)[0].split("#", 1)[0] or "/"
    for _ in range(_DECODINGS):
        again = _PERCENT.sub(lambda match: chr(int(match.group(1), 16)), decoded)
        if again == decoded:
            break
        decoded = again
    decoded = decoded.replace("\\", "/")
    segments = [segment.split(";", 1)[0] for segment in decoded.split("/")]
    return remove_dot_segments("/".join(segments))


def remove_dot_segments(path: str) -> str:
    """RFC 3986 5.2.4, on an absolute path."""
    output: list[str] = []
    segments = path.split("/")
    for index, segment in enumerate(segments[1:], start=1):
        last = index == len(segments) - 1
        if segment == ".":
            if last:
                output.append("")
            continue
        if segment == "..":
            if output:
                output.pop()
            if last:
                output.append("")
            continue
        output.append(segment)
    return "/" + "/".join(output)


def carries(
    inject: CredentialInjection,
    *,
    host: str,
    port: int,
    default_port: int,
    method: str,
    path: str,
    overrides: Iterable[str] = (),
) -> bool:
    """Whether a request to `host:port` (its scheme's default port `default_port`) with
    `method` and `path` carries the credential; `overrides` are the methods its override
    headers name (`method_overrides`), each of which `methods` must allow as well."""
    if inject.hosts is None:
        return False
    host = normalize_host(host)
    if not any(entry.matches(host, port, default_port) for entry in host_entries(inject)):
        return False
    if inject.methods is not None and any(
        wanted.upper() not in inject.methods for wanted in (method, *overrides)
    ):
        return False
    if inject.paths is not None:
        # Under one prefix in both readings: the RFC's, and a lenient server's.
        path = path or "/"
        if not any(
            normalize_path(path).startswith(normalize_path(prefix))
            and lenient_path(path).startswith(lenient_path(prefix))
            for prefix in inject.paths
        ):
            return False
    return True


def carries_url(
    inject: CredentialInjection, method: str, url: str, overrides: Iterable[str] = ()
) -> bool:
    """`carries` for an absolute http(s) URL."""
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    if scheme not in DEFAULT_PORTS or not parts.hostname:
        return False
    default = DEFAULT_PORTS[scheme]
    return carries(
        inject,
        host=parts.hostname,
        port=parts.port or default,
        default_port=default,
        method=method,
        path=parts.path or "/",
        overrides=overrides,
    )


def hosts_allowed(hosts: Iterable[str], allow: Iterable[str]) -> list[str]:
    """The `hosts` entries no entry of `allow` covers (same port; `*.suffix` only below a
    wildcard of the egress): empty when every one is allowed."""
    allowed = [entry for text in allow if (entry := host_entry(text)) is not None]
    missing = []
    for text in hosts:
        entry = host_entry(text)
        if entry is None or not any(a.covers(entry) for a in allowed):
            missing.append(text)
    return missing
