"""Which request carries which credential (`credentials.requests`): the one judgement the
http executor and the egress proxy share."""

from __future__ import annotations

from typing import Any

import pytest

from tooladapter.credentials.requests import (
    carries,
    carries_url,
    hosts_allowed,
    method_overrides,
    normalize_path,
    remove_dot_segments,
)
from tooladapter.model import CredentialInjection


def inject(*hosts: str, **fields: Any) -> CredentialInjection:
    return CredentialInjection.model_validate({"hosts": list(hosts), **fields})


# --------------------------------------------------------------------------- hosts and ports


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("https://api.example.com/v1", True),
        ("https://api.example.com:443/v1", True),  # the scheme's default port, spelt out
        ("https://API.Example.com./v1", True),  # one host, however written
        ("http://api.example.com/v1", True),  # 80 is http's default port
        ("http://api.example.com:443/v1", False),  # not http's default port
        ("https://api.example.com:8443/v1", False),
        ("https://other.example.com/v1", False),  # another host gets nothing
        ("https://api.example.com.evil.test/v1", False),
        ("https://evil.test/api.example.com", False),
        ("ftp://api.example.com/v1", False),
    ],
)
def test_an_entry_without_a_port_means_the_schemes_default_port(url: str, expected: bool) -> None:
    assert carries_url(inject("api.example.com"), "GET", url) is expected


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("https://api.example.com:8443/", True),
        ("http://api.example.com:8443/", True),
        ("https://api.example.com/", False),
        ("https://api.example.com:443/", False),
        ("https://api.example.com:9443/", False),
    ],
)
def test_an_entrys_port_is_honoured_exactly(url: str, expected: bool) -> None:
    assert carries_url(inject("api.example.com:8443"), "GET", url) is expected


def test_a_wildcard_covers_names_below_it_not_itself() -> None:
    wild = inject("*.example.com")
    assert carries_url(wild, "GET", "https://a.example.com/")
    assert carries_url(wild, "GET", "https://a.b.example.com/")
    assert not carries_url(wild, "GET", "https://example.com/")
    assert not carries_url(wild, "GET", "https://a.example.com:8443/")
    assert not carries_url(wild, "GET", "https://aexample.com/")


def test_an_ipv4_literal_entry_is_an_exact_host() -> None:
    # An McpServer's url (or an http tool's allowedHosts) may name an address.
    ip = inject("127.0.0.1:8080")
    assert carries_url(ip, "POST", "http://127.0.0.1:8080/mcp")
    assert not carries_url(ip, "POST", "http://127.0.0.1/mcp")
    assert not carries_url(ip, "POST", "http://127.0.0.2:8080/mcp")


def test_carries_takes_the_port_the_caller_resolved() -> None:
    entry = inject("api.example.com")
    kwargs: dict[str, Any] = {"host": "api.example.com", "method": "GET", "path": "/"}
    assert carries(entry, port=443, default_port=443, **kwargs)
    assert carries(entry, port=80, default_port=80, **kwargs)
    assert not carries(entry, port=80, default_port=443, **kwargs)


def test_a_file_injection_carries_no_request() -> None:
    file = CredentialInjection(file="/tooladapter/credentials/x")
    assert not carries_url(file, "GET", "https://api.example.com/")


# --------------------------------------------------------------------------- methods and paths


def test_methods_narrow_which_requests_carry_it() -> None:
    reads = inject("api.example.com", methods=["GET", "HEAD"])
    assert carries_url(reads, "GET", "https://api.example.com/")
    assert carries_url(reads, "head", "https://api.example.com/")
    assert not carries_url(reads, "POST", "https://api.example.com/")
    assert carries_url(inject("api.example.com"), "DELETE", "https://api.example.com/")


@pytest.mark.parametrize("name", ["X-HTTP-Method-Override", "x-http-method", "X-Method-Override"])
def test_a_method_override_header_naming_a_method_not_allowed_carries_nothing(name: str) -> None:
    # A GET that asks the server to DELETE is a DELETE to a server that honours it.
    reads = inject("api.example.com", methods=["GET", "HEAD"])
    url = "https://api.example.com/"
    assert not carries_url(reads, "GET", url, method_overrides([(name, "DELETE")]))
    assert not carries_url(reads, "GET", url, method_overrides([(name, "GET, DELETE")]))
    assert not carries_url(reads, "GET", url, method_overrides([(name, "")]))
    # Both the method and every override allowed: it carries.
    assert carries_url(reads, "GET", url, method_overrides([(name, "head")]))
    # Without `methods` any method may have it, overridden or not.
    assert carries_url(inject("api.example.com"), "GET", url, ("DELETE",))


def test_method_overrides_reads_every_override_header_and_nothing_else() -> None:
    headers = [
        ("Accept", "DELETE"),
        ("X-HTTP-Method-Override", " put "),
        ("X-Method-Override", "patch,delete"),
        ("x-http-method", "post"),
    ]
    assert method_overrides(headers) == ("PUT", "PATCH", "DELETE", "POST")
    assert method_overrides([("Accept", "*/*")]) == ()


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("https://api.example.com/v1/", True),
        ("https://api.example.com/v1/items?admin=1", True),  # the query is not the path
        ("https://api.example.com/v1/a/../b", True),
        ("https://api.example.com/%76%31/items", True),  # %76%31 is v1, unreserved
        ("https://api.example.com/v1/%2e%2e/admin", False),  # /admin
        ("https://api.example.com/v1/%2E%2E/admin", False),
        ("https://api.example.com/v1/../admin", False),
        ("https://api.example.com/v1/./../admin", False),
        ("https://api.example.com/v1", False),  # the prefix is `/v1/`
        ("https://api.example.com/v10/", False),
        ("https://api.example.com/admin?p=/v1/", False),
        ("https://api.example.com/v1%2fitems", False),  # an escaped slash stays escaped
    ],
)
def test_paths_are_compared_after_normalizing(url: str, expected: bool) -> None:
    assert carries_url(inject("api.example.com", paths=["/v1/"]), "GET", url) is expected


def test_a_prefix_is_normalized_too() -> None:
    assert carries_url(
        inject("api.example.com", paths=["/a/./v1/"]), "GET", "https://api.example.com/a/v1/x"
    )


@pytest.mark.parametrize(
    ("path", "normal"),
    [
        ("/", "/"),
        ("", "/"),
        ("/v1/%2e%2e/admin", "/admin"),
        ("/v1/%7euser", "/v1/~user"),
        ("/v1/%2fx", "/v1/%2Fx"),  # reserved: stays escaped, upper-cased
        ("/a/b/../../../c", "/c"),
        ("/a/.", "/a/"),
        ("/a/..", "/"),
        ("/a?b=/../c", "/a"),
        ("/a#/../c", "/a"),
    ],
)
def test_normalize_path(path: str, normal: str) -> None:
    assert normalize_path(path) == normal


def test_remove_dot_segments_is_rfc_3986() -> None:
    # RFC 3986 5.4.2's examples, on their paths.
    assert remove_dot_segments("/a/b/c/./../../g") == "/a/g"
    assert remove_dot_segments("/b/c/d;p/../../g") == "/b/g"


# --------------------------------------------------------------------------- hosts_allowed


@pytest.mark.parametrize(
    ("hosts", "allow", "missing"),
    [
        (["api.example.com"], ["api.example.com"], []),
        (["api.example.com"], ["*.example.com"], []),
        (["a.b.example.com"], ["*.example.com"], []),
        (["*.a.example.com"], ["*.example.com"], []),  # a wildcard only below a wildcard
        (["*.example.com"], ["*.example.com"], []),
        (["*.example.com"], ["api.example.com"], ["*.example.com"]),
        (["example.com"], ["*.example.com"], ["example.com"]),
        (["api.example.com:8443"], ["api.example.com"], ["api.example.com:8443"]),
        (["api.example.com"], ["api.example.com:443"], ["api.example.com"]),  # ports exact
        (["api.example.com:8443"], ["*.example.com:8443"], []),
        (["api.example.com"], ["10.0.0.0/8"], ["api.example.com"]),  # a CIDR names no host
        (["api.example.com", "b.test"], ["api.example.com"], ["b.test"]),
        (["10.0.0.5:8080"], ["10.0.0.5:8080"], []),  # an http tool's allowedHosts address
        (["not a host"], ["*.example.com"], ["not a host"]),
    ],
)
def test_hosts_allowed(hosts: list[str], allow: list[str], missing: list[str]) -> None:
    assert hosts_allowed(hosts, allow) == missing
