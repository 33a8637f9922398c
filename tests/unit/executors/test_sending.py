"""What "sent" means, decided once (`executors.sending`) and used by every executor: a
request whose last byte was written is sent, and whatever breaks after that (a reset, a
timeout, a close) settles Uncertain for a class that can have effects and is never sent
again by `retryPolicy`; a read may still end Failed. Over real sockets on 127.0.0.1.

Once broke: an http request read whole by its server and then lost to a connection reset
was recorded Failed ("nothing was sent"), and sent again, twice over: by aiohttp itself for
an idempotent method (GET, PUT, DELETE), and by the descriptor's `retryPolicy`."""

from __future__ import annotations

import asyncio
import dataclasses
import socket
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import pytest

from tests.unit.executors.wire_servers import (
    MCP_TOOL,
    Behaviour,
    WireServer,
    mcp_answer,
    serving,
)
from tests.unit.fake_cluster import (
    NAMESPACE,
    FakeCluster,
    Harness,
    descriptor,
    invocation,
    make_runtime,
)
from tooladapter.catalog import Catalog
from tooladapter.enums import (
    FailureClass,
    InvocationState,
    SideEffectClass,
    ToolKind,
    Transmission,
)
from tooladapter.executors import Call, Outcome, lost, unconfirmed_for
from tooladapter.executors.http import HttpExecutor, Wire
from tooladapter.executors.limits import CallLimits
from tooladapter.executors.mcp import McpExecutor
from tooladapter.executors.sandbox import SandboxExecutor
from tooladapter.executors.sending import settle
from tooladapter.kube.client import Refused
from tooladapter.mcp.core.rules import tool_digest
from tooladapter.model import HttpSpec, McpBinding, ToolDescriptorSpec
from tooladapter.settings import Settings

pytestmark = pytest.mark.timeout(20)

S = SideEffectClass
T = Transmission
CONTAINED = [S.READ, S.SANDBOX]
EFFECTFUL = [S.SHARED_WRITE, S.EXTERNAL, S.PRODUCTION, S.SPEND]

# --------------------------------------------------------------------------- the rule


def test_only_a_request_whose_last_byte_was_written_counts_as_sent() -> None:
    assert {t for t in Transmission if t.sent} == {T.WRITTEN, T.ANSWERED}


@pytest.mark.parametrize("effective", list(SideEffectClass))
@pytest.mark.parametrize("transmission", [T.NOT_WRITTEN, T.PARTLY_WRITTEN])
def test_a_request_never_sent_is_failed_and_may_be_sent_again_whatever_its_class(
    effective: SideEffectClass, transmission: Transmission
) -> None:
    settled = settle(transmission, effective)
    assert (settled.state, settled.failure, settled.resend) == (
        InvocationState.FAILED,
        FailureClass.TRANSIENT,
        True,
    )


@pytest.mark.parametrize("effective", EFFECTFUL)
@pytest.mark.parametrize("transmission", [T.WRITTEN, T.ANSWERED])
@pytest.mark.parametrize("failure", [FailureClass.TRANSIENT, FailureClass.TIMEOUT])
def test_a_sent_request_of_a_class_with_effects_is_uncertain_and_never_sent_again(
    effective: SideEffectClass, transmission: Transmission, failure: FailureClass
) -> None:
    settled = settle(transmission, effective, failure)
    assert (settled.state, settled.failure, settled.resend) == (
        InvocationState.UNCERTAIN,
        FailureClass.EFFECT_UNCONFIRMED,
        False,
    )


@pytest.mark.parametrize("effective", CONTAINED)
@pytest.mark.parametrize("transmission", [T.WRITTEN, T.ANSWERED])
def test_a_sent_request_of_a_class_without_effects_is_failed_but_not_resent_by_retry_policy(
    effective: SideEffectClass, transmission: Transmission
) -> None:
    settled = settle(transmission, effective, FailureClass.TIMEOUT)
    assert (settled.state, settled.failure, settled.resend) == (
        InvocationState.FAILED,
        FailureClass.TIMEOUT,
        False,
    )


@pytest.mark.parametrize("effective", list(SideEffectClass))
def test_unconfirmed_settles_as_sent_and_lost_follows_the_rule(effective: SideEffectClass) -> None:
    assert unconfirmed_for(effective, "x") == lost(effective, T.WRITTEN, "x")
    never = lost(effective, T.NOT_WRITTEN, "x")
    assert never.state == InvocationState.FAILED and never.resendable
    assert not lost(effective, T.ANSWERED, "x").resendable


def test_an_uncertain_outcome_is_never_resendable_even_if_marked_retryable() -> None:
    marked = dataclasses.replace(lost(S.EXTERNAL, T.WRITTEN, "x"), retryable=True)
    assert not marked.resendable


# --------------------------------------------------------------------------- the http wire


def test_the_wire_counts_written_only_once_every_body_byte_was_handed_over() -> None:
    wire = Wire(body_size=10)
    state: T = wire.state  # read afresh after each step (mypy keeps an assert's narrowing)
    assert state == T.NOT_WRITTEN
    wire.headers_sent("10")
    state = wire.state
    assert state == T.PARTLY_WRITTEN
    wire.chunk_sent(9)
    state = wire.state
    assert state == T.PARTLY_WRITTEN and not state.sent
    wire.chunk_sent(1)
    state = wire.state
    assert state == T.WRITTEN
    wire.headers_sent("10")  # never moves back (a second attempt cannot unsend the first)
    state = wire.state
    assert state == T.WRITTEN


def test_a_request_without_a_body_is_written_with_its_headers() -> None:
    for length in (None, "0"):
        wire = Wire(body_size=0)
        wire.headers_sent(length)
        assert wire.state == T.WRITTEN


def test_the_announced_content_length_decides_the_bodys_size() -> None:
    wire = Wire(body_size=3)
    wire.headers_sent("6")  # encoded differently than guessed: the header is what goes out
    wire.chunk_sent(3)
    state: T = wire.state  # read afresh after each step (mypy keeps an assert's narrowing)
    assert state == T.PARTLY_WRITTEN
    wire.chunk_sent(3)
    state = wire.state
    assert state == T.WRITTEN


# --------------------------------------------------------------------------- http, real sockets


def http_call(
    url: str,
    effective: SideEffectClass,
    *,
    method: str = "GET",
    body: str | None = None,
    timeout: int = 5,
) -> Call:
    host = url.split("/")[2]
    spec = ToolDescriptorSpec(
        tool_id="fetch",
        version="1.0.0",
        kind=ToolKind.HTTP,
        side_effect_class=effective,
        http=HttpSpec(method=method, url=url, body=body, allowed_hosts=[host]),
    )
    return Call(
        namespace=NAMESPACE,
        name="call-1",
        uid="uid-1",
        caller="agent",
        descriptor=spec,
        arguments={},
        effective_class=effective,
        limits=CallLimits(timeout_seconds=timeout, max_result_bytes=1024),
    )


async def run_http(call: Call) -> Outcome:
    executor = HttpExecutor()
    try:
        return await asyncio.wait_for(executor.execute(call), 15)
    finally:
        await executor.close()


METHODS = [("GET", None), ("PUT", None), ("DELETE", None), ("POST", '{"amount": 5}')]


@pytest.mark.parametrize(("method", "body"), METHODS, ids=[m for m, _ in METHODS])
@pytest.mark.parametrize("effective", [S.SHARED_WRITE, S.EXTERNAL, S.SPEND])
async def test_an_http_request_read_whole_then_reset_is_uncertain_and_reached_the_server_once(
    method: str, body: str | None, effective: SideEffectClass
) -> None:
    async with serving(Behaviour.RESET_AFTER_READING) as server:
        outcome = await run_http(
            http_call(f"{server.url}/pay", effective, method=method, body=body)
        )

    assert outcome.state == InvocationState.UNCERTAIN, outcome
    assert outcome.failure_class == FailureClass.EFFECT_UNCONFIRMED
    assert not outcome.resendable
    assert "sent, then the connection failed" in outcome.message
    # aiohttp resends an idempotent method on a reset by itself unless told not to.
    assert len(server.requests) == 1 and server.connections == 1
    if body is not None:
        assert server.requests[0].body == body.encode()


async def test_an_http_request_whose_server_resets_before_reading_counts_as_sent() -> None:
    # The client handed the whole request to its connection before the reset came: it cannot
    # know the server never read it, so it counts as sent (the safe side).
    async with serving(Behaviour.CLOSE_BEFORE_READING) as server:
        outcome = await run_http(http_call(f"{server.url}/x", S.EXTERNAL, method="PUT"))

    assert outcome.state == InvocationState.UNCERTAIN, outcome
    assert not outcome.resendable
    assert server.connections == 1


async def test_an_http_request_read_whole_and_never_answered_is_uncertain_at_its_deadline() -> None:
    async with serving(Behaviour.HANG_AFTER_READING) as server:
        outcome = await run_http(http_call(f"{server.url}/x", S.PRODUCTION, timeout=1))

    assert outcome.state == InvocationState.UNCERTAIN, outcome
    assert not outcome.resendable
    assert len(server.requests) == 1


@pytest.mark.parametrize("behaviour", list(Behaviour))
@pytest.mark.parametrize("effective", CONTAINED)
async def test_an_http_read_lost_after_sending_is_failed_but_never_resent_by_the_executor(
    behaviour: Behaviour, effective: SideEffectClass
) -> None:
    async with serving(behaviour) as server:
        outcome = await run_http(http_call(f"{server.url}/x", effective, timeout=1))

    assert outcome.state == InvocationState.FAILED, outcome
    assert outcome.failure_class == FailureClass.TRANSIENT
    assert not outcome.resendable  # sent: an agent may call again, retryPolicy does not
    assert server.connections == 1 and len(server.requests) <= 1


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.mark.parametrize("effective", [S.READ, S.EXTERNAL])
async def test_an_http_connection_refused_is_failed_and_may_be_sent_again(
    effective: SideEffectClass,
) -> None:
    outcome = await run_http(http_call(f"http://127.0.0.1:{free_port()}/x", effective))

    assert outcome.state == InvocationState.FAILED, outcome
    assert outcome.failure_class == FailureClass.TRANSIENT
    assert outcome.resendable
    assert "could not connect" in outcome.message


# --------------------------------------------------------------------------- retryPolicy


def retrying_http(url: str, effective: SideEffectClass) -> dict[str, Any]:
    host = url.split("/")[2]
    return descriptor(
        "pay",
        kind="http",
        side_effect_class=effective.value,
        http={"method": "PUT", "url": url, "allowedHosts": [host]},
        retryPolicy={"maxAttempts": 3, "backoffSeconds": 0},
    )


@asynccontextmanager
async def http_harness() -> AsyncIterator[Harness]:
    executor = HttpExecutor()
    try:
        yield make_runtime(FakeCluster(), executors={ToolKind.HTTP: executor})
    finally:
        await executor.close()


async def run_with_retry_policy(h: Harness, url: str, effective: SideEffectClass) -> dict:
    h.publish(retrying_http(url, effective))
    h.cluster.grant(tools=["pay"], classes=[effective.value])
    body = h.submit(invocation("pay-1", tool="pay", arguments={}))
    h.pre_approve(body)
    return (await h.run(body, timeout=15))["status"]


@pytest.mark.parametrize("effective", [S.SHARED_WRITE, S.EXTERNAL])
async def test_retry_policy_never_resends_a_request_read_whole_then_reset(
    effective: SideEffectClass,
) -> None:
    async with serving(Behaviour.RESET_AFTER_READING) as server, http_harness() as h:
        status = await run_with_retry_policy(h, f"{server.url}/pay", effective)

    assert (status["state"], status["failureClass"]) == ("Uncertain", "effect-unconfirmed")
    assert status["execution"].get("attempts", 1) == 1
    assert len(server.requests) == 1 and server.connections == 1


async def test_retry_policy_does_not_resend_a_sent_read_either() -> None:
    async with serving(Behaviour.RESET_AFTER_READING) as server, http_harness() as h:
        status = await run_with_retry_policy(h, f"{server.url}/pay", S.READ)

    assert status["state"] == "Failed"
    assert len(server.requests) == 1


async def test_retry_policy_sends_again_what_was_never_sent() -> None:
    async with http_harness() as h:
        status = await run_with_retry_policy(h, f"http://127.0.0.1:{free_port()}/pay", S.EXTERNAL)

    assert (status["state"], status["failureClass"]) == ("Failed", "transient")
    assert status["execution"]["attempts"] == 3
    retries = [s for s in status["stages"] if s["outcome"] == "retry"]
    assert len(retries) == 2


# --------------------------------------------------------------------------- MCP, real sockets


def mcp_call(effective: SideEffectClass, *, arguments: dict[str, Any] | None = None) -> Call:
    spec = ToolDescriptorSpec(
        tool_id="echo",
        version="1.0.0",
        kind=ToolKind.MCP,
        side_effect_class=effective,
        mcp=McpBinding(server="wire", tool="echo", pinned_digest=tool_digest(MCP_TOOL)),
    )
    return Call(
        namespace=NAMESPACE,
        name="call-1",
        uid="uid-1",
        caller="agent",
        descriptor=spec,
        arguments=arguments or {},
        effective_class=effective,
        limits=CallLimits(timeout_seconds=2, max_result_bytes=1024),
    )


async def run_mcp(server: WireServer, call: Call) -> Outcome:
    catalog = Catalog()
    url = f"{server.url}/mcp"
    catalog.servers.put(
        {
            "metadata": {"name": "wire", "namespace": NAMESPACE},
            "spec": {"url": url, "activated": True, "allowedCidrs": ["127.0.0.1/32"]},
            "status": {"verifiedUrl": url},
        },
    )
    executor = McpExecutor(FakeCluster(), catalog)
    return await asyncio.wait_for(executor.execute(call), 15)


def tool_calls(server: WireServer) -> int:
    return sum(1 for r in server.requests if r.json().get("method") == "tools/call")


@pytest.mark.parametrize("behaviour", [Behaviour.RESET_AFTER_READING, Behaviour.HANG_AFTER_READING])
@pytest.mark.parametrize("effective", [S.EXTERNAL, S.PRODUCTION])
async def test_an_mcp_tools_call_read_whole_then_lost_is_uncertain_and_reached_the_server_once(
    behaviour: Behaviour, effective: SideEffectClass
) -> None:
    async with serving(behaviour, mcp_answer) as server:
        outcome = await run_mcp(server, mcp_call(effective))

    assert outcome.state == InvocationState.UNCERTAIN, outcome
    assert not outcome.resendable
    assert tool_calls(server) == 1


async def test_an_mcp_read_lost_after_sending_is_failed_but_never_resent() -> None:
    async with serving(Behaviour.RESET_AFTER_READING, mcp_answer) as server:
        outcome = await run_mcp(server, mcp_call(S.READ))

    assert outcome.state == InvocationState.FAILED, outcome
    assert not outcome.resendable
    assert tool_calls(server) == 1


async def test_an_mcp_server_closing_before_reading_anything_fails_and_may_be_sent_again() -> None:
    async with serving(Behaviour.CLOSE_BEFORE_READING, mcp_answer) as server:
        outcome = await run_mcp(server, mcp_call(S.EXTERNAL))

    assert outcome.state == InvocationState.FAILED, outcome
    assert outcome.resendable
    assert server.requests == []


async def test_an_mcp_tools_call_cut_short_before_its_last_byte_is_not_sent() -> None:
    # The server reads a large tools/call's headers and resets: the client's write of the
    # body fails partway, which httpcore reports, so the request was never whole.
    async with serving(Behaviour.RESET_AFTER_READING, mcp_answer, cut_over=1 << 20) as server:
        outcome = await run_mcp(server, mcp_call(S.EXTERNAL, arguments={"text": "x" * (32 << 20)}))

    assert outcome.state == InvocationState.FAILED, outcome
    assert outcome.resendable
    assert "was not sent" in outcome.message
    assert tool_calls(server) == 0 and len(server.cut) == 1


async def test_an_mcp_connection_refused_is_failed_and_may_be_sent_again() -> None:
    server = WireServer(Behaviour.RESET_AFTER_READING, mcp_answer, port=free_port())
    outcome = await run_mcp(server, mcp_call(S.EXTERNAL))

    assert outcome.state == InvocationState.FAILED, outcome
    assert outcome.resendable


# --------------------------------------------------------------------------- sandbox


def sandbox_call(effective: SideEffectClass) -> Call:
    from tests.unit.executors.test_settlement import make_call

    return make_call(effective)


@pytest.mark.parametrize("effective", [S.SANDBOX, S.EXTERNAL])
async def test_a_sandbox_job_the_api_server_refused_was_never_sent_and_may_be_sent_again(
    effective: SideEffectClass,
) -> None:
    cluster = FakeCluster()
    cluster.fail_next["create"] = Refused("403: exceeded quota")
    outcome = await SandboxExecutor(cluster, Settings()).execute(sandbox_call(effective))

    assert (outcome.state, outcome.failure_class) == (
        InvocationState.FAILED,
        FailureClass.TRANSIENT,
    )
    assert outcome.resendable


@pytest.mark.parametrize(
    ("effective", "state"),
    [(S.SANDBOX, InvocationState.FAILED), (S.EXTERNAL, InvocationState.UNCERTAIN)],
)
async def test_a_sandbox_job_whose_tool_may_have_started_is_never_sent_again(
    effective: SideEffectClass, state: InvocationState
) -> None:
    cluster = FakeCluster()
    call = sandbox_call(effective)
    cluster.script_job(call.uid, None)  # created, then gone without a trace
    outcome = await SandboxExecutor(cluster, Settings()).execute(call)

    assert outcome.state == state
    assert not outcome.resendable
