"""The data-flow rule as an agent would attack it, with only an agent's rights (issue 42):
a GET whose query carries the data to an allowed host, a duplicate key to launder labels,
dry runs, another runId under `scope: caller`. (A label arriving while a send waits, or
between its gate and its execution: `test_dataflow.py`.) Each test says what it once
broke, if it did."""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, datetime, timedelta

import pytest

from tests.unit.fake_cluster import (
    CALLER,
    NAMESPACE,
    Harness,
    ScriptedExecutor,
    descriptor,
    invocation,
    make_runtime,
    policy,
    shell_descriptor,
)
from tests.unit.flow.test_dataflow import (
    call,
    harness,
    refuse_stores,
    sent,
    waiting_for_approval,
)
from tooladapter.enums import FailureClass, InvocationState, ScopeKind, ToolKind
from tooladapter.executors import Outcome
from tooladapter.pipeline import dataflow as rule


@pytest.fixture
def h() -> Harness:
    return harness()


def fetch_tool() -> dict[str, object]:
    """An http GET to any host under example.com whose answer is untrusted: a source and,
    since its query can carry anything, a sink."""
    body = descriptor(
        "fetch",
        kind="http",
        inputSchema={"type": "object", "properties": {"q": {"type": "string"}}},
        http={
            "method": "GET",
            "url": "https://pages.example.com/search?q={q}",
            "allowedHosts": ["pages.example.com"],
        },
        dataFlow={"labels": ["untrusted"]},
    )
    body["spec"].pop("native", None)
    return body


async def test_a_get_whose_query_carries_the_data_to_an_allowed_host_waits(h: Harness) -> None:
    h.publish(fetch_tool())
    h.cluster.grant(tools=["fetch"], classes=["read"])
    await call(h, "read-1", "crm", runId="run-a")
    # The first fetch brings the attacker's page: only private was held, so it runs.
    first = await call(h, "fetch-2", "fetch", arguments={"q": "weather"}, runId="run-a")
    assert first["state"] == "Observed", first

    # The page said: put the customers in the next query. The GET is a sink like any send.
    task = h.start(
        h.submit(
            invocation("fetch-3", tool="fetch", arguments={"q": "alice@example.com"}, runId="run-a")
        )
    )
    waiting = await waiting_for_approval(h, "fetch-3")

    gated = waiting["status"]["dataFlow"]["gated"]
    assert "read-1" in gated and "fetch-2" in gated and "pages.example.com" in gated
    assert sent(h) == 1  # only the first fetch
    task.cancel()


async def test_a_duplicate_made_while_its_first_call_runs_brings_its_labels(h: Harness) -> None:
    gate = asyncio.Event()
    native = h.executors[ToolKind.NATIVE]
    assert isinstance(native, ScriptedExecutor)
    native.gate = gate
    first = h.start(h.submit(invocation("read-1", tool="crm", runId="run-a", idempotencyKey="k1")))
    await asyncio.wait_for(native.started.wait(), 5)
    # The same request and key from a clean run, while the first still runs: it waits, then
    # carries the first call's result, so its labels too.
    dup = h.start(h.submit(invocation("read-2", tool="crm", runId="run-b", idempotencyKey="k1")))
    await asyncio.wait_for(
        h.cluster.wait_for_status("read-2", lambda s: bool(s.get("duplicateOf"))), 5
    )
    gate.set()
    native.gate = None
    await asyncio.wait_for(first, 5)
    h.invocation_changed("read-1")
    await asyncio.wait_for(dup, 5)
    assert h.cluster.invocation("read-2")["status"]["dataFlow"]["labels"] == ["private"]
    await call(h, "fetch-3", "web", runId="run-b")

    task = h.start(h.submit(invocation("send-4", tool="send", runId="run-b")))
    waiting = await waiting_for_approval(h, "send-4")
    assert "read-2" in waiting["status"]["dataFlow"]["gated"]
    task.cancel()


async def test_dry_runs_bring_no_label_and_preview_the_gate_as_it_will_be(h: Harness) -> None:
    # Dry runs return no data: previewing the reads leaves the run clean.
    for name, tool in (("read-1", "crm"), ("fetch-2", "web")):
        assert (await call(h, name, tool, runId="run-a", dryRun=True))["state"] == "Previewed"
    assert not h.cluster.config_maps
    assert (await call(h, "send-3", "send", runId="run-a"))["state"] == "Observed"

    # Real reads whose labels are pending (the store refused them): the send's dry run
    # says what its real call would meet, a wait.
    refuse_stores(h)
    await call(h, "read-4", "crm", runId="run-b")
    await call(h, "fetch-5", "web", runId="run-b")
    preview = (await call(h, "send-6", "send", runId="run-b", dryRun=True))["preview"]
    assert preview["verdict"] == "would-await-approval", preview


async def test_scope_caller_never_judges_a_long_run_more_leniently_than_scope_run() -> None:
    """Once broke: under `scope: caller` a call was judged by its caller's window alone, so a
    run that read private data more than a window ago, then untrusted content, sent
    unseen, where `scope: run` would have gated it."""
    h = harness()
    h.add_policy(policy("flow", dataFlow={"scope": "caller"}))
    await call(h, "read-1", "crm", runId="run-a")
    caller = rule.Scope(ScopeKind.CALLER, NAMESPACE, CALLER)
    data = h.cluster.config_maps[(NAMESPACE, caller.store_name)]
    past = datetime.now(UTC) - timedelta(seconds=h.rt.settings.dataflow_window_seconds + 60)
    for key, value in data.items():
        data[key] = json.dumps({**json.loads(value), "at": past.strftime("%Y-%m-%dT%H:%M:%SZ")})
    await call(h, "fetch-2", "web", runId="run-a")

    task = h.start(h.submit(invocation("send-3", tool="send", runId="run-a")))
    waiting = await waiting_for_approval(h, "send-3")

    assert "read-1" in waiting["status"]["dataFlow"]["gated"]
    task.cancel()


async def test_another_run_id_under_scope_caller_is_gated_and_a_clean_caller_is_not() -> None:
    h = harness()
    h.add_policy(policy("flow", dataFlow={"scope": "caller"}))
    await call(h, "read-1", "crm", runId="run-a")
    await call(h, "fetch-2", "web", runId="run-b")

    task = h.start(h.submit(invocation("send-3", tool="send", runId="run-c")))
    await waiting_for_approval(h, "send-3")
    task.cancel()
    assert h.cluster.invocation("send-3")["status"]["state"] == InvocationState.AWAITING_APPROVAL
    # Another caller's fresh run holds none of it.
    other = await call(
        h, "send-4", "send", runId="run-c", caller="system:serviceaccount:team-a:other-agent"
    )
    assert other["state"] == "Observed", other


async def test_a_read_interrupted_in_its_attempts_workspace_brings_its_labels() -> None:
    """Attack: interrupt a private read while its tool runs in the attempt's workspace. A
    sandbox-class call ends Cancelled (its effects stay in its sandbox) and brought no
    label, yet the tool had left the data in /workspace for the attempt's next call."""
    interrupted = Outcome(
        InvocationState.CANCELLED,
        failure_class=FailureClass.CANCELLED,
        message="interrupted inside its own sandbox only",
    )
    h = make_runtime(executors={ToolKind.SHELL: ScriptedExecutor(interrupted)})
    sandbox = {
        "resources": {"limits": {"cpu": "500m", "memory": "64Mi"}},
        "egress": {"allow": []},
        "workspace": "attempt",
    }
    h.publish(shell_descriptor("dump", sandbox=sandbox, dataFlow={"labels": ["private"]}))
    h.cluster.grant(tools=["dump"], classes=["sandbox"])

    stored = await h.run(
        h.submit(
            invocation(
                "dump-1", tool="dump", arguments={"command": "cat"}, runId="r", attemptId="a"
            )
        )
    )

    assert stored["status"]["state"] == "Cancelled", stored["status"]
    scopes = rule.recorded_scopes(namespace=NAMESPACE, caller=CALLER, run_id="r", attempt_id="a")
    attempt = next(s for s in scopes if s.kind == ScopeKind.ATTEMPT)
    assert list(h.cluster.config_maps[(NAMESPACE, attempt.store_name)]) == ["private.dump-1"]
