"""Issue 28: descriptor CIDRs cannot reopen what the egress proxy closes."""

from __future__ import annotations

import ipaddress
from typing import Any

import pytest

from tooladapter.egress.core.cidr_bounds import CidrBounds, exceptions_for, ip_block, parse_cluster
from tooladapter.handlers.descriptors import desired_status
from tooladapter.sandbox.job import build_network_policy
from tooladapter.settings import EgressSettings

CLUSTER = parse_cluster(["10.244.0.0/16", "10.0.0.0/24"])
OWNER = {"apiVersion": "v1", "kind": "X", "name": "x", "uid": "u"}


def body(spec: dict[str, Any]) -> dict[str, Any]:
    base: dict[str, Any] = {
        "toolId": "t",
        "version": "1.0.0",
        "kind": "shell",
        "sideEffectClass": "sandbox",
        "inputSchema": {"type": "object", "properties": {"command": {"type": "string"}}},
        "shell": {"allow": ["wget"]},
    }
    return {"metadata": {"name": "t", "namespace": "n", "generation": 1}, "spec": base | spec}


def sandbox(*allow: str) -> dict[str, Any]:
    return {"sandbox": {"egress": {"allow": list(allow)}}}


@pytest.mark.parametrize(
    "entry", ["0.0.0.0/1", "128.0.0.0/1", "10.0.0.0/8", "192.168.0.0/23", "2001:db8::/48"]
)
def test_a_cidr_broader_than_the_default_is_refused_naming_the_field(entry: str) -> None:
    status = desired_status(body(sandbox("github.com", entry)))
    assert not status.active
    assert status.conditions[0].reason == "Invalid"
    assert "sandbox.egress.allow[1]" in (status.message or "")
    assert "broader than /" in (status.message or "")


@pytest.mark.parametrize("entry", ["192.0.2.0/24", "192.0.2.7/32", "2001:db8::/64"])
def test_a_narrow_cidr_is_active(entry: str) -> None:
    assert desired_status(body(sandbox(entry))).active


def bounds_of(settings: EgressSettings) -> CidrBounds:
    """The bounds as the descriptor controller and the brokering build them."""
    return CidrBounds(
        settings.descriptor_cidrs,
        settings.descriptor_cidr_min_prefix_v4,
        settings.descriptor_cidr_min_prefix_v6,
    )


def test_the_bound_is_a_setting(monkeypatch: pytest.MonkeyPatch) -> None:
    bounds = bounds_of(EgressSettings(descriptor_cidr_min_prefix_v4=16))
    monkeypatch.setenv("TOOLADAPTER_DESCRIPTOR_CIDR_MIN_PREFIX_IPV4", "16")
    assert bounds_of(EgressSettings.from_env()) == bounds
    assert desired_status(body(sandbox("10.1.0.0/16")), cidr_bounds=bounds).active
    assert not desired_status(body(sandbox("10.0.0.0/15")), cidr_bounds=bounds).active
    monkeypatch.setenv("TOOLADAPTER_DESCRIPTOR_CIDR_MIN_PREFIX_IPV4", "0")
    with pytest.raises(ValueError, match="prefix length"):
        EgressSettings.from_env()


def test_forbid_refuses_every_descriptor_cidr_and_http_ip_literal(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    bounds = bounds_of(EgressSettings(descriptor_cidrs="forbid"))
    assert bounds.mode == "forbid"
    monkeypatch.setenv("TOOLADAPTER_DESCRIPTOR_CIDRS", "forbid")
    assert bounds_of(EgressSettings.from_env()) == bounds
    status = desired_status(body(sandbox("github.com", "192.0.2.7/32")), cidr_bounds=bounds)
    assert not status.active and "sandbox.egress.allow[1]" in (status.message or "")
    assert "forbid" in (status.message or "")
    assert desired_status(body(sandbox("github.com")), cidr_bounds=bounds).active
    http = body(
        {
            "kind": "http",
            "sideEffectClass": "read",
            "inputSchema": {"type": "object"},
            "shell": None,
            "http": {
                "method": "GET",
                "url": "http://192.0.2.7:8080/x",
                "allowedHosts": ["192.0.2.7:8080"],
            },
        }
    )
    http["spec"].pop("shell")
    assert desired_status(http).active
    refused = desired_status(http, cidr_bounds=bounds)
    assert not refused.active and "http.allowedHosts[0]" in (refused.message or "")
    monkeypatch.setenv("TOOLADAPTER_DESCRIPTOR_CIDRS", "maybe")
    with pytest.raises(ValueError, match="allow or forbid"):
        EgressSettings.from_env()


def test_mcp_server_cidrs_are_not_bounded() -> None:
    # `cidr_problems` sees only descriptor fields; McpServer spec.allowedCidrs never pass.
    assert CidrBounds().problem("10.0.0.0/8") is not None
    assert CidrBounds().problem("github.com") is None


def test_ip_blocks_except_link_local_metadata_loopback_and_cluster_ranges() -> None:
    # A broad block (an operator default, or a relaxed bound) excepts every sensitive range
    # strictly inside it, outermost only.
    assert exceptions_for("0.0.0.0/1", CLUSTER) == [
        "10.0.0.0/24",
        "10.244.0.0/16",
        "100.100.100.200/32",
        "127.0.0.0/8",
    ]
    assert exceptions_for("128.0.0.0/1", CLUSTER) == ["169.254.0.0/16", "192.0.0.192/32"]
    assert exceptions_for("100.100.100.0/24") == ["100.100.100.200/32"]
    assert exceptions_for("169.254.169.0/24") == ["169.254.169.254/32"]
    assert exceptions_for("::/1") == ["::1/128"]
    assert exceptions_for("fe80::/9") == ["fe80::/10"]
    assert exceptions_for("fd00:ec2::/64") == ["fd00:ec2::254/128"]
    # Named exactly (or lying inside an excepted range): kept as written.
    assert exceptions_for("169.254.169.254/32") == []
    assert exceptions_for("10.0.0.0/24", CLUSTER) == []
    assert exceptions_for("10.244.3.0/24", CLUSTER) == []
    assert exceptions_for("192.0.2.0/24", CLUSTER) == []
    assert ip_block("192.0.2.0/24") == {"ipBlock": {"cidr": "192.0.2.0/24"}}
    for cidr in ("0.0.0.0/1", "128.0.0.0/1", "169.254.169.0/24"):
        block = ipaddress.ip_network(cidr)
        for excepted in exceptions_for(cidr, CLUSTER):
            inner = ipaddress.ip_network(excepted)
            assert inner != block and inner.subnet_of(block)  # type: ignore[arg-type]


def test_the_lease_network_policy_carries_the_exceptions() -> None:
    policy = build_network_policy(
        namespace="n",
        uid="u",
        owner=OWNER,
        egress_allow=["0.0.0.0/1", "192.0.2.0/24", "github.com"],
        cluster=CLUSTER,
    )
    (rule,) = policy["spec"]["egress"]
    assert rule["to"] == [
        {
            "ipBlock": {
                "cidr": "0.0.0.0/1",
                "except": ["10.0.0.0/24", "10.244.0.0/16", "100.100.100.200/32", "127.0.0.0/8"],
            }
        },
        {"ipBlock": {"cidr": "192.0.2.0/24"}},
    ]
