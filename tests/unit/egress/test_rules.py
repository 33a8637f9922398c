"""The egress proxy's pure rules: allow-lists, addresses, ClientHello SNI, request heads."""

from __future__ import annotations

import ssl

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tooladapter.egress.core.lease import (
    LeaseGrant,
    build_grant_secret,
    proxy_env,
    proxy_url,
    records_from,
    token_of,
)
from tooladapter.egress.core.rules import (
    AddressPolicy,
    AllowList,
    BadRequest,
    HostEntry,
    NotClientHello,
    effective_allow,
    forward_target,
    judge_hello,
    judge_target,
    parse_client_hello,
    parse_hosts_override,
    parse_request_head,
    proxy_credentials,
    split_entries,
    upstream_head,
)
from tooladapter.enums import EgressVerdict
from tooladapter.sandbox.job import ProxyPeer, build_network_policy


def client_hello(server_name: str | None) -> bytes:
    """The first bytes a real TLS client (Python's ssl) sends for `server_name`."""
    context = ssl.create_default_context()
    context.check_hostname = False
    incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
    tls = context.wrap_bio(incoming, outgoing, server_hostname=server_name)
    with pytest.raises(ssl.SSLWantReadError):
        tls.do_handshake()
    return outgoing.read()


ALLOW = AllowList.parse(["api.example.test:18089", "*.pkg.test", "github.com", "10.1.0.0/16"])


@pytest.mark.parametrize(
    ("host", "port", "default", "verdict"),
    [
        ("api.example.test", 18089, 443, EgressVerdict.ALLOWED),
        ("API.Example.Test.", 18089, 443, EgressVerdict.ALLOWED),
        ("api.example.test", 443, 443, EgressVerdict.NOT_ALLOWED),
        ("github.com", 443, 443, EgressVerdict.ALLOWED),
        ("github.com", 80, 80, EgressVerdict.ALLOWED),
        ("github.com", 8443, 443, EgressVerdict.NOT_ALLOWED),
        ("a.pkg.test", 443, 443, EgressVerdict.ALLOWED),
        ("a.b.pkg.test", 443, 443, EgressVerdict.ALLOWED),
        ("pkg.test", 443, 443, EgressVerdict.NOT_ALLOWED),
        ("evilpkg.test", 443, 443, EgressVerdict.NOT_ALLOWED),
        ("github.com.evil.test", 443, 443, EgressVerdict.NOT_ALLOWED),
        ("10.1.2.3", 443, 443, EgressVerdict.ALLOWED),
        ("10.2.0.1", 443, 443, EgressVerdict.IP_LITERAL),
        ("140.82.112.3", 443, 443, EgressVerdict.IP_LITERAL),
        ("[::1]", 443, 443, EgressVerdict.IP_LITERAL),
    ],
)
def test_a_target_is_allowed_only_by_a_matching_entry(
    host: str, port: int, default: int, verdict: EgressVerdict
) -> None:
    assert judge_target(ALLOW, host, port, default_port=default).verdict == verdict


def test_a_name_resolving_to_loopback_or_a_private_range_is_refused_unless_a_cidr_allows_it() -> (
    None
):
    policy = AddressPolicy(cluster=(__import__("ipaddress").ip_network("100.96.0.0/12"),))
    ok, verdict = policy.permitted(ALLOW, "x.pkg.test", ["127.0.0.1"], mapped=False)
    assert not ok and verdict.verdict == EgressVerdict.PRIVATE_ADDRESS
    assert "loopback" in verdict.reason
    ok, verdict = policy.permitted(ALLOW, "x.pkg.test", ["10.1.0.7"], mapped=False)
    assert ok == ["10.1.0.7"] and verdict.allowed
    ok, verdict = policy.permitted(ALLOW, "x.pkg.test", ["100.97.0.1"], mapped=False)
    assert not ok and "cluster range" in verdict.reason
    # Public and private together: only the public address is dialled.
    ok, _ = policy.permitted(ALLOW, "x.pkg.test", ["192.168.1.1", "140.82.112.3"], mapped=False)
    assert ok == ["140.82.112.3"]
    # The operator's own mapping skips the check, never the metadata service.
    assert policy.permitted(ALLOW, "x.pkg.test", ["127.0.0.1"], mapped=True)[0] == ["127.0.0.1"]
    ok, verdict = policy.permitted(ALLOW, "x.pkg.test", ["169.254.169.254"], mapped=True)
    assert not ok and "metadata" in verdict.reason
    ok, verdict = policy.permitted(ALLOW, "x.pkg.test", [], mapped=False)
    assert verdict.verdict == EgressVerdict.UPSTREAM_FAILED


def test_ipv4_mapped_ipv6_loopback_is_judged_as_loopback() -> None:
    ok, verdict = AddressPolicy().permitted(ALLOW, "x.pkg.test", ["::ffff:127.0.0.1"], mapped=False)
    assert not ok and verdict.verdict == EgressVerdict.PRIVATE_ADDRESS


def test_the_sni_of_a_real_client_hello_is_read_and_must_equal_the_connect_host() -> None:
    hello = parse_client_hello(client_hello("api.example.test"))
    assert hello is not None and hello.server_name == "api.example.test"
    assert judge_hello(hello, "API.example.test").allowed
    other = parse_client_hello(client_hello("other.example.test"))
    assert other is not None
    verdict = judge_hello(other, "api.example.test")
    assert verdict.verdict == EgressVerdict.SNI_MISMATCH and "other.example.test" in verdict.reason
    bare = parse_client_hello(client_hello(None))
    assert bare is not None and bare.server_name is None
    assert judge_hello(bare, "api.example.test").verdict == EgressVerdict.SNI_MISMATCH
    assert judge_hello(bare, "10.1.2.3").allowed


def test_a_client_hello_arriving_in_pieces_needs_more_bytes_until_whole() -> None:
    data = client_hello("api.example.test")
    for cut in (0, 1, 5, 9, len(data) - 1):
        assert parse_client_hello(data[:cut]) is None
    assert parse_client_hello(data) is not None


def test_bytes_that_are_not_a_client_hello_are_refused() -> None:
    with pytest.raises(NotClientHello):
        parse_client_hello(b"GET / HTTP/1.1\r\nHost: api.example.test\r\n\r\n")
    with pytest.raises(NotClientHello):
        parse_client_hello(b"\x16\x03\x01\x00\x05\x02\x00\x00\x01\x00")  # a ServerHello


@given(st.binary(max_size=600))
def test_the_client_hello_parser_never_fails_other_than_by_refusing(data: bytes) -> None:
    try:
        parse_client_hello(data)
    except NotClientHello:
        pass


def test_a_forwarded_request_must_name_one_host_in_its_target_and_host_header() -> None:
    head = parse_request_head(
        b"GET http://api.example.test:18089/v1?q=1 HTTP/1.1\r\nHost: api.example.test:18089\r\n"
        b"Proxy-Authorization: Basic dWlkOnRvaw==\r\nConnection: keep-alive, X-Drop\r\n"
        b"X-Drop: 1\r\nAuthorization: Bearer from-the-sandbox\r\nAccept: */*\r\n\r\n"
    )
    target = forward_target(head)
    assert (target.host, target.port, target.path) == ("api.example.test", 18089, "/v1?q=1")
    assert proxy_credentials(head) == ("uid", "tok")
    sent = upstream_head(head, target, inject=("Authorization", "Bearer injected")).decode()
    assert sent.startswith("GET /v1?q=1 HTTP/1.1\r\nHost: api.example.test:18089\r\n")
    assert "Proxy-Authorization" not in sent and "X-Drop" not in sent
    assert "from-the-sandbox" not in sent and "Authorization: Bearer injected" in sent
    assert "Connection: close" in sent and "Accept: */*" in sent
    lying = parse_request_head(
        b"GET http://api.example.test/ HTTP/1.1\r\nHost: metadata.internal\r\n\r\n"
    )
    with pytest.raises(BadRequest):
        forward_target(lying)
    with pytest.raises(BadRequest):
        forward_target(parse_request_head(b"GET https://api.example.test/ HTTP/1.1\r\n\r\n"))
    with pytest.raises(BadRequest):
        forward_target(parse_request_head(b"GET http://user@api.example.test/ HTTP/1.1\r\n\r\n"))
    with pytest.raises(BadRequest):
        parse_request_head(b"GET /\r\n\r\n")


def test_the_default_list_applies_when_unset_and_policies_only_narrow_it() -> None:
    default = ["github.com", "dev.azure.com", "api.nuget.org"]
    assert effective_allow(None, default) == default
    assert effective_allow([], default) == []
    declared = ["api.example.test:18089", "a.pkg.test", "*.pkg.test", "10.1.0.0/24", "github.com"]
    narrowed = effective_allow(declared, default, [["*.pkg.test", "10.0.0.0/8", "github.com"]])
    assert narrowed == ["a.pkg.test", "*.pkg.test", "10.1.0.0/24", "github.com"]
    assert effective_allow(declared, default, [["*.pkg.test"], ["github.com"]]) == []
    assert HostEntry("*.test").covers(HostEntry("*.pkg.test"))
    assert not HostEntry("*.pkg.test").covers(HostEntry("*.test"))
    assert not HostEntry("github.com").covers(HostEntry("github.com", 8443))


def test_hosts_override_pairs_are_parsed_and_checked() -> None:
    assert parse_hosts_override("API.example.test=192.0.2.2, b.test=::1") == {
        "api.example.test": "192.0.2.2",
        "b.test": "::1",
    }
    with pytest.raises(ValueError, match="not an IP"):
        parse_hosts_override("a.test=somewhere")


def test_a_lease_gets_the_proxy_as_its_only_peer_besides_its_cidrs_and_no_dns() -> None:
    owner = {"apiVersion": "v1", "kind": "X", "name": "n", "uid": "u"}
    host_mode = build_network_policy(
        namespace="t",
        uid="u",
        owner=owner,
        egress_allow=["api.example.test:18089", "10.1.0.0/24"],
        proxy=ProxyPeer(address="192.0.2.2", port=3128),
    )
    egress = host_mode["spec"]["egress"]
    assert {"to": [{"ipBlock": {"cidr": "10.1.0.0/24"}}]} in egress
    assert {
        "to": [{"ipBlock": {"cidr": "192.0.2.2/32"}}],
        "ports": [{"protocol": "TCP", "port": 3128}],
    } in egress
    assert len(egress) == 2  # no rule for port 53 anywhere
    in_cluster = ProxyPeer(
        address="10.0.0.77", port=3128, namespace="tooladapter-system", pod_labels=(("a", "b"),)
    ).rule()
    assert in_cluster["to"] == [
        {
            "podSelector": {"matchLabels": {"a": "b"}},
            "namespaceSelector": {
                "matchLabels": {"kubernetes.io/metadata.name": "tooladapter-system"}
            },
        }
    ]


def test_the_grant_holds_the_token_hash_and_the_pod_only_a_secret_reference() -> None:
    grant = LeaseGrant("u", "t", "call", ("a.test",), (), "2030-01-01T00:00:00Z")
    secret = build_grant_secret(
        namespace="tooladapter-system", grant=grant, token="tok", values={"credential-0": "v"}
    )
    import base64

    decoded = {k: base64.b64decode(v).decode() for k, v in secret["data"].items()}
    assert "tok" not in decoded.values() and decoded["credential-0"] == "v"
    assert LeaseGrant.from_document(decoded["lease.json"]) == grant
    url = proxy_url(address="192.0.2.2", port=3128, uid="u", token="tok")
    assert url == "http://u:tok@192.0.2.2:3128" and token_of(url) == "tok"
    env = proxy_env("u", ["10.1.0.0/24"])
    assert all(
        "value" not in e
        for e in env
        if "PROXY" in e["name"].upper() and "NO" not in e["name"].upper()
    )
    assert {"name": "no_proxy", "value": "10.1.0.0/24"} in env
    assert split_entries(["a.test:81", "10.1.0.0/24"]) == (["10.1.0.0/24"], ["a.test:81"])


def test_records_of_every_replica_are_merged_oldest_first() -> None:
    data = {
        "records.b": '[{"host":"b","at":"2030-01-01T00:00:02Z"}]',
        "records.a": '[{"host":"a","at":"2030-01-01T00:00:01Z"}]',
        "records.bad": "not json",
        "other": "[]",
    }
    assert [r["host"] for r in records_from(data)] == ["a", "b"]
    assert records_from(None) == []
