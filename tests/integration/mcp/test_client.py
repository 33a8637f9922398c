"""`tooladapter.mcp.client` against real MCP servers (the SDK's server side) on loopback.

No Kubernetes: the servers of `tests/mcp_servers.py` run as subprocesses on 127.0.0.1 with a
port of their choosing; tests wait on their output lines (READY, CALLED, REQUEST) with
deadlines, never on sleeps.
"""

from __future__ import annotations

import asyncio
import functools
import importlib.util
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from tooladapter.egress.core.addresses import AddressRule
from tooladapter.mcp import client as mcp_client
from tooladapter.mcp.client import IDEMPOTENCY_META_KEY
from tooladapter.mcp.core.rules import (
    detect_shadowing,
    tool_digest,
    tool_digests,
    validate_structured_output,
)
from tooladapter.mcp.core.types import (
    McpAddressRefused,
    McpBrokenMidCall,
    McpCallTimeout,
    McpResponseTooLarge,
    McpToolChanged,
    McpToolNotListed,
    McpUnavailable,
)


def _load_servers() -> ModuleType:
    path = Path(__file__).resolve().parents[2] / "mcp_servers.py"
    spec = importlib.util.spec_from_file_location("tooladapter_test_mcp_servers", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


servers = _load_servers()
ServerProcess = servers.ServerProcess

TOKEN = "test-token-" + uuid.uuid4().hex[:8]
AUTH = {"Authorization": f"Bearer {TOKEN}"}
MODES = ["current", "legacy"]
MODERN = "2026-07-28"
HANDSHAKE_ERA = {"2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25"}

pytestmark = pytest.mark.timeout(60)

#: The servers listen on loopback, which the client connects to only when it is allowed
#: explicitly (an McpServer's spec.allowedCidrs).
LOOPBACK = AddressRule.of(["127.0.0.1/32"])
discover = functools.partial(mcp_client.discover, addresses=LOOPBACK)
call_tool = functools.partial(mcp_client.call_tool, addresses=LOOPBACK)
probe = functools.partial(mcp_client.probe, addresses=LOOPBACK)


@pytest.fixture(scope="module", params=MODES)
def server(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Any]:
    """One long-lived server per mode, requiring a bearer token, counting `counter` calls."""
    counter = tmp_path_factory.mktemp("mcp") / "counter"
    with ServerProcess(
        "--mode", request.param, "--token", TOKEN, "--counter-file", str(counter), "--log-requests"
    ) as proc:
        proc.mode = request.param
        proc.counter_file = counter
        yield proc


def _key() -> str:
    return "idem-" + uuid.uuid4().hex


async def _wait_line(proc: Any, prefix: str, *, since: int = 0, within: float = 20) -> str:
    line: str = await asyncio.to_thread(proc.wait_for, prefix, within, since=since)
    return line


# --------------------------------------------------------------------------- discovery


async def test_discovery_lists_everything_with_the_negotiated_protocol(server: Any) -> None:
    found = await discover(server.url, headers=AUTH, timeout=20)

    if server.mode == "current":
        assert found.protocol_version == MODERN
    else:
        assert found.protocol_version in HANDSHAKE_ERA
        assert found.protocol_version == "2025-06-18"  # the server's counter-offer
    assert found.server_name == servers.SERVER_NAME
    assert found.server_version == servers.SERVER_VERSION
    assert found.instructions == servers.INSTRUCTIONS
    # All pages (the server lists 3 tools per page), whole wire objects.
    assert [t["name"] for t in found.tools] == [t["name"] for t in servers.TOOLS]
    echo = next(t for t in found.tools if t["name"] == "echo")
    assert echo == next(t for t in servers.TOOLS if t["name"] == "echo")
    assert echo["_meta"] == {"dev.tooladapter.test/owner": "team-a"}
    assert found.resources == [
        {"uri": "file:///docs/readme.md", "name": "readme", "description": "What this server does."}
    ]
    assert found.prompts == [{"name": "greet", "description": "Greet someone."}]
    # The digests are those of the server's own definitions, whatever the protocol era.
    assert tool_digests(found.tools) == tool_digests(servers.TOOLS)


@pytest.mark.parametrize("mode", MODES)
async def test_the_client_speaks_each_servers_protocol_era(mode: str) -> None:
    with ServerProcess("--mode", mode, "--log-requests") as proc:
        since = proc.mark()
        result = await call_tool(proc.url, tool="echo", arguments={"text": "era"}, timeout=20)
        await _wait_line(proc, "CALLED echo", since=since)
        lines = proc.requests(since)
    methods = [line.split()[1] for line in lines]
    sessions = {line.split()[2] for line in lines}
    if mode == "current":
        assert result.protocol_version == MODERN
        # 2026-07-28: server/discover, no initialize, no session.
        assert methods[0] == "server/discover"
        assert "initialize" not in methods
        assert sessions == {"session=-"}
    else:
        assert result.protocol_version == "2025-06-18"
        # The discover probe is refused; the client falls back to initialize + session.
        assert methods[:2] == ["server/discover", "initialize"]
        after_init = lines[methods.index("initialize") + 1 :]
        assert after_init and all(not line.split()[2].endswith("=-") for line in after_init)
        assert all("version=2025-06-18" in line for line in after_init)
    assert methods[-1] == "tools/call"


async def test_probe_reports_the_protocol(server: Any) -> None:
    result = await probe(server.url, headers=AUTH, timeout=20)
    assert result.ok, result.message
    assert result.protocol_version == (MODERN if server.mode == "current" else "2025-06-18")


# --------------------------------------------------------------------------- calls


async def test_echo_returns_text_and_structured_content_and_carries_the_key(server: Any) -> None:
    key = _key()
    since = server.mark()
    result = await call_tool(
        server.url,
        headers=AUTH,
        tool="echo",
        arguments={"text": "hello"},
        meta={"dev.example/trace": "t-1"},
        idempotency_key=key,
        timeout=20,
    )
    assert result.content_text == "hello"
    assert result.structured_content == {"echo": "hello"}
    assert result.is_error is False
    assert result.raw["structuredContent"] == {"echo": "hello"}
    assert result.tool is not None and result.tool["name"] == "echo"
    # The idempotency key reached the tool, in the namespaced _meta entry.
    await _wait_line(server, f"CALLED echo {key}", since=since)
    assert IDEMPOTENCY_META_KEY == "dev.tooladapter/idempotencyKey"


async def test_a_response_larger_than_the_bound_is_refused_not_read(server: Any) -> None:
    """The tool ran (effect possible); its answer is not read into memory past the bound."""
    with pytest.raises(McpResponseTooLarge) as refused:
        await call_tool(
            server.url,
            headers=AUTH,
            tool="echo",
            arguments={"text": "x" * 200_000},
            timeout=20,
            max_response_bytes=100_000,
        )
    assert refused.value.effect_possible is True
    assert "larger than 100000 bytes" in refused.value.message
    small = await call_tool(
        server.url,
        headers=AUTH,
        tool="echo",
        arguments={"text": "x" * 1000},
        timeout=20,
        max_response_bytes=100_000,
    )
    assert small.content_text == "x" * 1000
    # A handshake or listing larger than the bound: nothing was called.
    since = server.mark()
    with pytest.raises(McpResponseTooLarge) as unsent:
        await call_tool(
            server.url,
            headers=AUTH,
            tool="echo",
            arguments={"text": "hi"},
            timeout=20,
            max_response_bytes=200,
        )
    assert unsent.value.effect_possible is False
    server.mark()
    assert not any(line.startswith("CALLED") for line in server.seen[since:])


async def test_add_and_counter_count_executions(server: Any) -> None:
    added = await call_tool(
        server.url, headers=AUTH, tool="add", arguments={"a": 2, "b": 40}, timeout=20
    )
    assert added.structured_content == {"sum": 42}
    first = await call_tool(server.url, headers=AUTH, tool="counter", arguments={}, timeout=20)
    second = await call_tool(server.url, headers=AUTH, tool="counter", arguments={}, timeout=20)
    assert first.structured_content is not None and second.structured_content is not None
    assert second.structured_content["count"] == first.structured_content["count"] + 1
    assert int(server.counter_file.read_text()) == second.structured_content["count"]


async def test_tool_errors_and_secrets_come_back_as_data(server: Any) -> None:
    failed = await call_tool(server.url, headers=AUTH, tool="fail", arguments={}, timeout=20)
    assert failed.is_error is True
    assert "failed on purpose" in failed.content_text
    # Redaction is the sanitizer's job; the client hands back what the server said.
    leaked = await call_tool(server.url, headers=AUTH, tool="leak", arguments={}, timeout=20)
    assert servers.FAKE_AWS_ACCESS_KEY in leaked.content_text
    assert servers.FAKE_GITHUB_TOKEN in leaked.content_text


async def test_an_output_schema_violation_is_returned_unvalidated(server: Any) -> None:
    result = await call_tool(server.url, headers=AUTH, tool="bad-output", arguments={}, timeout=20)
    assert result.structured_content == {"count": "many"}
    assert result.tool is not None
    violations = validate_structured_output(
        result.tool.get("outputSchema"), result.structured_content
    )
    assert len(violations) == 1 and violations[0].startswith("$.count:")


async def test_a_call_past_its_deadline_is_a_timeout_with_unknown_effect(server: Any) -> None:
    with pytest.raises(McpCallTimeout) as caught:
        await call_tool(
            server.url, headers=AUTH, tool="slow-read", arguments={"seconds": 30}, timeout=2
        )
    assert caught.value.effect_possible is True


async def test_an_unknown_tool_is_not_called(server: Any) -> None:
    with pytest.raises(McpToolNotListed) as caught:
        await call_tool(server.url, headers=AUTH, tool="no-such-tool", arguments={}, timeout=20)
    assert caught.value.effect_possible is False


# --------------------------------------------------------------------------- credentials


async def test_the_server_credentials_reach_the_server(server: Any) -> None:
    # With the header: discovery works (every fixture call above relies on it, too).
    assert (await discover(server.url, headers=AUTH, timeout=20)).tools
    # Without it, or with a wrong one: the handshake is refused, no effect possible.
    for headers in ({}, {"Authorization": "Bearer wrong"}):
        with pytest.raises(McpUnavailable) as caught:
            await discover(server.url, headers=headers, timeout=20)
        assert "401" in str(caught.value)
        probed = await probe(server.url, headers=headers, timeout=20)
        assert probed.ok is False and "401" in probed.message
        assert caught.value.http_status == 401
    since = server.mark()
    with pytest.raises(McpUnavailable) as refused:
        await call_tool(
            server.url, tool="counter", arguments={}, idempotency_key=_key(), timeout=20
        )
    assert refused.value.effect_possible is False
    assert not [line for line in server.requests(since) if " tools/call " in line]


# --------------------------------------------------------------------------- schema change


@pytest.mark.parametrize("mode", MODES)
async def test_a_changed_input_schema_changes_only_that_digest_and_blocks_the_call(
    mode: str,
) -> None:
    with ServerProcess("--mode", mode) as proc:
        pinned = tool_digests((await discover(proc.url, timeout=20)).tools)
    with ServerProcess("--mode", mode, "--variant", "changed-schema") as proc:
        now = await discover(proc.url, timeout=20)
        current = tool_digests(now.tools)
        assert {n for n in pinned if pinned[n] != current[n]} == {"echo"}
        echo = next(t for t in now.tools if t["name"] == "echo")
        assert echo["description"] == "Echo the given text back."
        assert "uppercase" in echo["inputSchema"]["properties"]

        since = proc.mark()
        with pytest.raises(McpToolChanged) as caught:
            await call_tool(
                proc.url,
                tool="echo",
                arguments={"text": "x"},
                expected_digest=pinned["echo"],
                timeout=20,
            )
        assert caught.value.pinned == pinned["echo"]
        assert caught.value.current == current["echo"]
        assert caught.value.effect_possible is False
        # Re-approved with the new digest: the call goes through.
        result = await call_tool(
            proc.url,
            tool="echo",
            arguments={"text": "x", "uppercase": True},
            expected_digest=current["echo"],
            timeout=20,
        )
        assert result.structured_content == {"echo": "X"}
        assert result.tool is not None and tool_digest(result.tool) == current["echo"]
        await _wait_line(proc, "CALLED echo", since=since)
        proc.mark()
        lines = [line for line in proc.seen[since:] if line.startswith("CALLED ")]
        assert lines == ["CALLED echo -"]  # once: the changed-digest call never reached it


# --------------------------------------------------------------------------- failures


@pytest.mark.parametrize("mode", MODES)
async def test_a_server_killed_mid_call_leaves_the_effect_unknown(mode: str) -> None:
    with ServerProcess("--mode", mode) as proc:
        since = proc.mark()
        call = asyncio.create_task(
            call_tool(
                proc.url,
                tool="slow-write",
                arguments={"seconds": 45},
                idempotency_key=_key(),
                timeout=40,
            )
        )
        try:
            await _wait_line(proc, "CALLED slow-write", since=since)
        except BaseException:
            call.cancel()
            raise
        proc.kill()
        with pytest.raises(McpBrokenMidCall) as caught:
            await asyncio.wait_for(call, 30)
    assert not isinstance(caught.value, McpCallTimeout)
    assert caught.value.effect_possible is True


async def test_a_server_that_is_not_running_is_unavailable() -> None:
    with ServerProcess("--mode", "current") as proc:
        url = proc.url
    # The process is gone and its port closed: nothing listens there now.
    with pytest.raises(McpUnavailable) as caught:
        await call_tool(url, tool="counter", arguments={}, timeout=10)
    assert caught.value.effect_possible is False
    with pytest.raises(McpUnavailable):
        await discover(url, timeout=10)
    probed = await probe(url, timeout=10)
    assert probed.ok is False and probed.message


async def test_a_loopback_server_not_allowed_explicitly_is_never_contacted(server: Any) -> None:
    since = server.mark()
    for url in (server.url, server.url.replace("127.0.0.1", "localhost")):
        with pytest.raises(McpAddressRefused) as caught:
            await mcp_client.discover(url, headers=AUTH, timeout=10)
        assert "loopback" in str(caught.value) and caught.value.effect_possible is False
        with pytest.raises(McpAddressRefused):
            await mcp_client.call_tool(url, headers=AUTH, tool="counter", arguments={}, timeout=10)
        refused = await mcp_client.probe(url, headers=AUTH, timeout=10)
        assert refused.ok is False and "loopback" in refused.message
    # Allowed: another network than the server's does not help.
    with pytest.raises(McpAddressRefused):
        await mcp_client.discover(
            server.url, headers=AUTH, timeout=10, addresses=AddressRule.of(["10.0.0.0/8"])
        )
    server.mark()
    assert server.requests(since) == []


async def test_reserved_headers_are_refused_before_connecting() -> None:
    with pytest.raises(McpUnavailable, match="reserved"):
        await discover("http://127.0.0.1:9/mcp", headers={"Mcp-Session-Id": "forged"}, timeout=5)


async def test_a_shadowing_description_is_found_in_a_real_listing() -> None:
    with ServerProcess("--mode", "current", "--shadow-mention", "send_email") as proc:
        found = await discover(proc.url, timeout=20)
    shadowing = detect_shadowing("notes-server", found.tools, {"mail": ["send_email", "inbox"]})
    assert len(shadowing) == 1
    assert "'notes'" in shadowing[0] and "'send_email'" in shadowing[0]
