"""Where the operator may connect for a tool or an MCP server: the address rule, and that the
http executor and the MCP client apply it to the address they connect to."""

from __future__ import annotations

import dataclasses
import socket
from types import SimpleNamespace
from typing import Any

import httpcore2
import pytest

from tooladapter.catalog import Catalog
from tooladapter.egress.core.addresses import (
    AddressRefused,
    AddressRule,
    address_kind,
    parse_networks,
)
from tooladapter.enums import FailureClass, InvocationState, SideEffectClass, ToolKind
from tooladapter.events import namespace_ref
from tooladapter.executors import Call
from tooladapter.executors.http import GuardedResolver, HttpExecutor, allowances
from tooladapter.executors.limits import CallLimits
from tooladapter.executors.mcp import McpExecutor
from tooladapter.handlers.routing import warn_unknown_environment
from tooladapter.mcp.client import _GuardedBackend
from tooladapter.model import Egress, HttpSpec, McpBinding, SandboxSpec, ToolDescriptorSpec
from tooladapter.settings import Settings

# --------------------------------------------------------------------------- the rule


@pytest.mark.parametrize(
    ("address", "kind"),
    [
        ("127.0.0.1", "loopback"),
        ("127.5.6.7", "loopback"),
        ("::1", "loopback"),
        ("0.0.0.0", "unspecified"),
        ("::", "unspecified"),
        ("169.254.169.254", "metadata"),
        ("169.254.170.2", "metadata"),
        ("fd00:ec2::254", "metadata"),
        ("100.100.100.200", "metadata"),
        ("169.254.1.1", "link-local"),
        ("fe80::1", "link-local"),
        ("fe80::1%eth0", "link-local"),
        ("10.96.0.1", "private"),
        ("172.16.0.1", "private"),
        ("192.168.1.1", "private"),
        ("100.64.0.1", "private"),
        ("fd12:3456::1", "private"),
        ("224.0.0.1", "multicast"),
        ("ff02::1", "multicast"),
        ("240.0.0.1", "reserved"),
        ("198.18.0.1", "reserved"),
        # IPv4 inside IPv6 is judged as the IPv4 address it reaches.
        ("::ffff:127.0.0.1", "loopback"),
        ("::ffff:169.254.169.254", "metadata"),
        ("64:ff9b::a9fe:a9fe", "metadata"),
        ("2002:7f00:1::", "loopback"),
        ("::ffff:10.0.0.1", "private"),
        # Public addresses.
        ("93.184.216.34", None),
        ("8.8.8.8", None),
        ("2606:4700::1111", None),
        ("::ffff:8.8.8.8", None),
    ],
)
def test_address_kinds(address: str, kind: str | None) -> None:
    assert address_kind(address) == kind


def test_public_addresses_need_no_allowance_and_others_do() -> None:
    strict = AddressRule()
    assert strict.refusal("93.184.216.34") is None
    reason = strict.refusal("127.0.0.1")
    assert reason is not None and "loopback" in reason and "allowedHosts" in reason
    allowed = AddressRule.of(["127.0.0.1/32", "10.96.0.0/12"])
    assert allowed.refusal("127.0.0.1") is None
    assert allowed.refusal("::ffff:127.0.0.1") is None  # the same destination
    assert allowed.refusal("10.100.0.1") is None
    assert allowed.refusal("127.0.0.2") is not None
    assert allowed.refusal("10.0.0.1") is not None


def test_blocked_addresses_stay_refused_even_when_allowed() -> None:
    rule = AddressRule.of(["169.254.0.0/16", "8.8.8.8"], ["169.254.169.254", "8.8.8.0/24"])
    assert rule.refusal("169.254.1.1") is None
    assert "blocked for every tool" in (rule.refusal("169.254.169.254") or "")
    assert "blocked for every tool" in (rule.refusal("::ffff:169.254.169.254") or "")
    assert "blocked" in (rule.refusal("8.8.8.8") or "")


def test_host_names_never_allow_an_address() -> None:
    assert parse_networks(["localhost", "localhost:8080", "api.example.com", "*.x.y"]) == ()
    nets = parse_networks(["127.0.0.1:8080", "[::1]:9000", "10.0.0.0/8", "fd00::1"])
    assert [str(n) for n in nets] == ["127.0.0.1/32", "::1/128", "10.0.0.0/8", "fd00::1/128"]


def test_permitted_keeps_only_allowed_addresses_and_refuses_when_none_remain() -> None:
    rule = AddressRule()
    assert rule.permitted("mixed.example", ["127.0.0.1", "93.184.216.34"]) == ["93.184.216.34"]
    with pytest.raises(AddressRefused) as caught:
        rule.permitted("rebound.example", ["127.0.0.1", "10.0.0.1", "127.0.0.1"])
    assert caught.value.host == "rebound.example"
    assert "loopback" in str(caught.value) and "private" in str(caught.value)
    assert isinstance(caught.value, OSError)


# --------------------------------------------------------------------------- http executor


def http_tool(url: str, **http: Any) -> ToolDescriptorSpec:
    return ToolDescriptorSpec(
        tool_id="fetch",
        version="1.0.0",
        kind=ToolKind.HTTP,
        side_effect_class=SideEffectClass.READ,
        http=HttpSpec(url=url, **http),
    )


def call_of(descriptor: ToolDescriptorSpec) -> Call:
    return Call(
        namespace="team-a",
        name="call-1",
        uid="uid-1",
        caller="agent",
        descriptor=descriptor,
        arguments={},
        effective_class=SideEffectClass.READ,
        limits=CallLimits(timeout_seconds=5, max_result_bytes=1024),
    )


def test_the_descriptor_allows_ip_literals_and_egress_cidrs_but_no_names() -> None:
    spec = ToolDescriptorSpec(
        tool_id="fetch",
        version="1.0.0",
        kind=ToolKind.HTTP,
        side_effect_class=SideEffectClass.READ,
        http=HttpSpec(url="http://x/", allowed_hosts=["x", "localhost:80", "10.1.2.3:8080"]),
        sandbox=SandboxSpec(egress=Egress(allow=["172.20.0.0/16", "svc.example.com"])),
    )
    assert allowances(spec) == ("10.1.2.3/32", "172.20.0.0/16")


class FakeResolver:
    def __init__(self, addresses: list[str]) -> None:
        self.addresses = addresses

    async def resolve(self, host: str, port: int = 0, family: Any = socket.AF_INET) -> Any:
        return [
            {"hostname": host, "host": a, "port": port, "family": family, "proto": 0, "flags": 0}
            for a in self.addresses
        ]

    async def close(self) -> None:
        return None


async def test_the_resolver_hands_the_connector_only_permitted_addresses() -> None:
    mixed = GuardedResolver(AddressRule(), FakeResolver(["10.0.0.7", "93.184.216.34"]))  # type: ignore[arg-type]
    assert [r["host"] for r in await mixed.resolve("api.example", 443)] == ["93.184.216.34"]
    rebound = GuardedResolver(AddressRule(), FakeResolver(["169.254.169.254"]))  # type: ignore[arg-type]
    with pytest.raises(AddressRefused):
        await rebound.resolve("api.example", 443)


@pytest.mark.parametrize(
    "url",
    [
        "http://localhost:1/x",  # a name: refused by the resolver, on its resolved address
        "http://127.0.0.1:1/x",  # a literal in the URL alone is no explicit allowance
        "http://[::ffff:127.0.0.1]:1/x",
        "http://[::1]:1/x",
        "http://0.0.0.0:1/x",
    ],
)
async def test_an_http_tool_reaching_loopback_without_an_allowance_is_policy_denied(
    url: str,
) -> None:
    executor = HttpExecutor(Settings().blocked_http_hosts)
    try:
        outcome = await executor.execute(call_of(http_tool(url)))
    finally:
        await executor.close()
    assert outcome.state is InvocationState.FAILED
    assert outcome.failure_class is FailureClass.POLICY_DENIED, outcome.message
    assert "not sent" in outcome.message and not outcome.retryable


@pytest.mark.parametrize("host", ["2130706433", "127.1", "017700000001", "0"])
async def test_a_legacy_numeric_address_is_refused_before_sending_and_never_uncertain(
    host: str,
) -> None:
    # aiohttp refuses these spellings of 127.0.0.1 before connecting; an effectful call must
    # then end Failed (nothing was sent), not Uncertain.
    executor = HttpExecutor()
    call = dataclasses.replace(
        call_of(http_tool(f"http://{host}:1/x")), effective_class=SideEffectClass.EXTERNAL
    )
    try:
        outcome = await executor.execute(call)
    finally:
        await executor.close()
    assert outcome.state is InvocationState.FAILED, outcome
    assert "not sent" in outcome.message


async def test_a_host_name_in_allowed_hosts_does_not_allow_its_loopback_address() -> None:
    executor = HttpExecutor()
    try:
        outcome = await executor.execute(
            call_of(http_tool("http://localhost:1/x", allowed_hosts=["localhost:1"]))
        )
    finally:
        await executor.close()
    assert outcome.failure_class is FailureClass.POLICY_DENIED, outcome.message


async def test_an_explicitly_allowed_loopback_address_is_connected_to() -> None:
    # Nothing listens on port 1: getting as far as "could not connect" proves the guard let
    # the address through.
    executor = HttpExecutor()
    try:
        outcome = await executor.execute(
            call_of(http_tool("http://127.0.0.1:1/x", allowed_hosts=["127.0.0.1:1"]))
        )
    finally:
        await executor.close()
    assert outcome.failure_class is FailureClass.TRANSIENT and outcome.retryable, outcome


async def test_metadata_stays_blocked_even_with_an_explicit_allowance() -> None:
    executor = HttpExecutor(Settings().blocked_http_hosts)
    try:
        outcome = await executor.execute(
            call_of(
                http_tool(
                    "http://[::ffff:169.254.169.254]/latest",
                    allowed_hosts=["[::ffff:169.254.169.254]"],
                )
            )
        )
    finally:
        await executor.close()
    assert outcome.failure_class is FailureClass.POLICY_DENIED
    assert "blocked" in outcome.message


async def test_one_session_per_address_rule() -> None:
    executor = HttpExecutor()
    try:
        a = executor.session_for(AddressRule())
        b = executor.session_for(AddressRule.of(["127.0.0.1"]))
        assert a is executor.session_for(AddressRule()) and a is not b
    finally:
        await executor.close()
    assert a.closed and b.closed


# --------------------------------------------------------------------------- MCP client


async def test_the_mcp_backend_connects_only_to_permitted_addresses() -> None:
    with pytest.raises(AddressRefused):
        await _GuardedBackend(AddressRule()).connect_tcp("localhost", 1, timeout=5)
    with pytest.raises(AddressRefused):
        await _GuardedBackend(AddressRule.of(["10.0.0.0/8"])).connect_tcp("127.0.0.1", 1)
    # Allowed: it connects (and fails, nothing listens on port 1).
    with pytest.raises(httpcore2.ConnectError):
        await _GuardedBackend(AddressRule.of(["127.0.0.0/8"])).connect_tcp(
            "localhost", 1, timeout=5
        )


# --------------------------------------------------------------------------- environment


def test_an_unknown_environment_class_is_warned_about_once_per_namespace_and_value() -> None:
    posted: list[tuple[dict[str, Any], str, bool]] = []

    class Events:
        def post(self, obj: dict[str, Any], *, reason: str, message: str, warning: bool = False):
            posted.append((obj, reason, warning))

    rt = SimpleNamespace(
        settings=Settings(namespaces=("team-*",)), events=Events(), warned_environments=set()
    )

    def seen(name: str, value: str | None) -> None:
        labels = {} if value is None else {"tooladapter.dev/environment-class": value}
        body = {"metadata": {"name": name, "uid": f"uid-{name}", "labels": labels}}
        warn_unknown_environment(rt, body)  # type: ignore[arg-type]

    seen("team-a", "Production")
    seen("team-a", "Production")  # the same value again: no second event
    seen("team-a", "production")  # known
    seen("team-b", None)  # no label
    seen("other", "prod")  # not served by this operator
    seen("team-a", "prod")  # another unknown value
    assert [(o["metadata"]["name"], r, w) for o, r, w in posted] == [
        ("team-a", "UnknownEnvironmentClass", True),
        ("team-a", "UnknownEnvironmentClass", True),
    ]
    assert posted[0][0] == namespace_ref({"name": "team-a", "uid": "uid-team-a"})
    assert posted[0][0]["kind"] == "Namespace" and posted[0][0]["apiVersion"] == "v1"


# --------------------------------------------------------------------------- MCP credentials


class SecretReads:
    def __init__(self) -> None:
        self.read: list[str] = []

    async def read_secret(self, namespace: str, name: str) -> dict[str, str]:
        self.read.append(name)
        return {"token": "czNjcmV0"}


@pytest.mark.parametrize(
    ("activated", "verified", "reads"),
    [
        (False, "http://127.0.0.1:1/mcp", []),  # nobody activated it
        (True, None, []),  # activated, but the url was never probed without credentials
        (True, "http://10.0.0.1/mcp", []),  # the url changed since
        (True, "http://127.0.0.1:1/mcp", ["mcp-token"]),
    ],
)
async def test_an_mcp_call_reads_and_sends_credentials_only_to_an_activated_verified_url(
    activated: bool, verified: str | None, reads: list[str]
) -> None:
    catalog = Catalog()
    catalog.servers.put(
        {
            "metadata": {"namespace": "team-a", "name": "tools"},
            "spec": {
                "url": "http://127.0.0.1:1/mcp",
                "activated": activated,
                "allowedCidrs": ["127.0.0.1/32"],
                "credentials": [
                    {
                        "name": "mcp-token",
                        "source": {"secretKeyRef": {"name": "mcp-token", "key": "token"}},
                        "inject": {"hosts": ["127.0.0.1:1"]},
                    }
                ],
            },
            "status": {"verifiedUrl": verified} if verified else {},
        }
    )
    cluster = SecretReads()
    spec = ToolDescriptorSpec(
        tool_id="echo",
        version="1.0.0",
        kind=ToolKind.MCP,
        side_effect_class=SideEffectClass.READ,
        mcp=McpBinding(server="tools", tool="echo", pinned_digest="sha256:" + "0" * 64),
    )
    outcome = await McpExecutor(cluster, catalog).execute(call_of(spec))  # type: ignore[arg-type]
    assert cluster.read == reads
    assert outcome.state is InvocationState.FAILED
    if not reads:
        assert "not activated at a verified url" in outcome.message
    else:  # got as far as connecting (nothing listens on port 1)
        assert outcome.failure_class is FailureClass.TRANSIENT and outcome.retryable
