"""The data-flow rule in the flow, on the fake cluster: a run that read private data and
untrusted content cannot send it out unseen (issue 42)."""

from __future__ import annotations

import asyncio
import json
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from prometheus_client import REGISTRY

from tests.unit.fake_cluster import (
    CALLER,
    NAMESPACE,
    FakeCluster,
    Harness,
    ScriptedExecutor,
    descriptor,
    http_descriptor,
    invocation,
    make_runtime,
    policy,
)
from tooladapter.enums import InvocationState, Resource, ScopeKind, ToolKind
from tooladapter.flow import dataflow as flowdataflow
from tooladapter.handlers import workers
from tooladapter.kube.errors import Forbidden
from tooladapter.pipeline import dataflow as rule

OTHER = "system:serviceaccount:team-a:other-agent"


def harness(cluster: FakeCluster | None = None) -> Harness:
    h = make_runtime(
        cluster, executors={ToolKind.NATIVE: ScriptedExecutor(), ToolKind.HTTP: ScriptedExecutor()}
    )
    h.publish(descriptor("crm", dataFlow={"labels": ["private"]}))
    h.publish(descriptor("web", dataFlow={"labels": ["untrusted"]}))
    h.publish(http_descriptor("send", "https://api.example.com/x"))
    for user in (CALLER, OTHER):
        h.cluster.grant(user, tools=["crm", "web", "send"], classes=["read"])
    return h


@pytest.fixture
def h() -> Harness:
    return harness()


async def call(h: Harness, name: str, tool: str, **spec: Any) -> dict[str, Any]:
    stored = await h.run(h.submit(invocation(name, tool=tool, **spec)))
    return stored["status"]


def gated(action: str) -> float:
    """Sink calls the rule gated in the namespace with `action` (the metric)."""
    value = REGISTRY.get_sample_value(
        "tooladapter_dataflow_gated_total", {"tenant": NAMESPACE, "action": action}
    )
    return value or 0.0


async def waiting_for_approval(h: Harness, name: str) -> dict[str, Any]:
    """The stored call once it waits for an approval (bounded: a call that never waits
    fails the test instead of hanging it)."""
    return await asyncio.wait_for(
        h.cluster.wait_for_state(name, InvocationState.AWAITING_APPROVAL), 5
    )


def sent(h: Harness) -> int:
    executor = h.executors[ToolKind.HTTP]
    assert isinstance(executor, ScriptedExecutor)
    return len(executor.executed)


async def test_private_then_untrusted_then_a_send_waits_with_reasons_naming_both_calls(
    h: Harness,
) -> None:
    assert (await call(h, "read-1", "crm", runId="run-a"))["state"] == "Observed"
    assert (await call(h, "fetch-2", "web", runId="run-a"))["state"] == "Observed"

    task = h.start(h.submit(invocation("send-3", tool="send", runId="run-a")))
    waiting = await waiting_for_approval(h, "send-3")

    status = waiting["status"]
    (detail,) = [s["detail"] for s in status["stages"] if s["outcome"] == "waiting"]
    assert "read-1 (crm)" in detail and "fetch-2 (web)" in detail and "api.example.com" in detail
    assert status["dataFlow"]["sink"] is True and status["dataFlow"]["gated"]
    assert {(s["label"], s["invocation"]) for s in status["dataFlow"]["sources"]} == {
        ("private", "read-1"),
        ("untrusted", "fetch-2"),
    }
    assert sent(h) == 0

    h.approve_waiting("send-3")
    await asyncio.wait_for(task, 5)
    assert h.cluster.invocation("send-3")["status"]["state"] == "Observed"
    assert sent(h) == 1


@pytest.mark.parametrize(
    ("first", "send"),
    [
        ({"runId": "run-a"}, {"runId": "run-b"}),  # a clean run
        ({"runId": "run-a", "only": "crm"}, {"runId": "run-a"}),  # one label only
        ({"runId": "run-a"}, {"runId": "run-a", "caller": OTHER}),  # another caller's run
    ],
    ids=["clean-run", "one-label", "other-caller"],
)
async def test_a_send_without_both_labels_in_its_scope_runs_without_approval(
    h: Harness, first: dict, send: dict
) -> None:
    only = first.pop("only", None)
    for name, tool in (("read-1", "crm"), ("fetch-2", "web")):
        if only is None or only == tool:
            await call(h, name, tool, **first)

    status = await call(h, "send-3", "send", **send)

    assert status["state"] == "Observed", status
    assert [s["outcome"] for s in status["stages"] if s["stage"] == "approval"] == ["not-required"]
    assert sent(h) == 1


async def test_with_scope_caller_a_clean_runs_send_waits_too(h: Harness) -> None:
    h.add_policy(policy("flow", dataFlow={"scope": "caller"}))
    await call(h, "read-1", "crm", runId="run-a")
    await call(h, "fetch-2", "web", runId="run-a")

    task = h.start(h.submit(invocation("send-3", tool="send", runId="run-b")))
    await waiting_for_approval(h, "send-3")
    task.cancel()


async def test_calls_without_a_run_are_judged_by_their_callers_window(h: Harness) -> None:
    await call(h, "read-1", "crm")
    await call(h, "fetch-2", "web")

    task = h.start(h.submit(invocation("send-3", tool="send")))
    await waiting_for_approval(h, "send-3")
    task.cancel()


async def test_deny_ends_the_send_denied_at_policy_with_the_reason(h: Harness) -> None:
    h.add_policy(policy("flow", dataFlow={"onPrivateAndUntrusted": "deny"}))
    await call(h, "read-1", "crm", runId="run-a")
    await call(h, "fetch-2", "web", runId="run-a")

    before = gated("deny")
    status = await call(h, "send-3", "send", runId="run-a")

    assert status["state"] == "Denied" and status["deniedStage"] == "policy", status
    assert gated("deny") - before == 1
    assert "read-1" in status["message"] and "fetch-2" in status["message"]
    assert sent(h) == 0


async def test_allow_lets_the_send_run(h: Harness) -> None:
    h.add_policy(policy("flow", dataFlow={"onPrivateAndUntrusted": "allow"}))
    await call(h, "read-1", "crm", runId="run-a")
    await call(h, "fetch-2", "web", runId="run-a")

    assert (await call(h, "send-3", "send", runId="run-a"))["state"] == "Observed"


async def test_a_label_that_arrives_while_the_send_waits_denies_it_at_the_recheck(
    h: Harness,
) -> None:
    await call(h, "read-1", "crm", runId="run-a")
    await call(h, "fetch-2", "web", runId="run-a")
    task = h.start(h.submit(invocation("send-3", tool="send", runId="run-a")))
    await waiting_for_approval(h, "send-3")

    await call(h, "fetch-4", "web", runId="run-a")  # more attacker content, after the ask
    h.approve_waiting("send-3")
    await asyncio.wait_for(task, 5)

    status = h.cluster.invocation("send-3")["status"]
    assert status["state"] == "Denied", status
    assert "fetch-4" in status["message"] and "call again" in status["message"]
    assert sent(h) == 0


async def test_the_gate_holds_after_a_restart_and_the_invocations_retention() -> None:
    first = harness()
    await call(first, "read-1", "crm", runId="run-a")
    await call(first, "fetch-2", "web", runId="run-a")
    # Retention deleted the invocations; a new operator process starts on the same cluster.
    for name in ("read-1", "fetch-2"):
        first.cluster.objects.pop((str(Resource.INVOCATIONS), NAMESPACE, name))
    h = harness(first.cluster)

    task = h.start(h.submit(invocation("send-3", tool="send", runId="run-a")))
    waiting = await waiting_for_approval(h, "send-3")
    assert "read-1" in str(waiting["status"]["dataFlow"])
    task.cancel()


async def test_a_failed_call_brings_no_label(h: Harness) -> None:
    # A call denied before it ran returned nothing: its labels never enter the scope.
    h.publish(descriptor("secret", dataFlow={"labels": ["private"]}))  # not granted
    await call(h, "read-1", "secret", runId="run-a")
    await call(h, "fetch-2", "web", runId="run-a")

    assert (await call(h, "send-3", "send", runId="run-a"))["state"] == "Observed"


async def test_the_labels_are_stored_per_scope_with_their_call(h: Harness) -> None:
    await call(h, "read-1", "crm", runId="run-a", attemptId="att-1")

    for scope in rule.recorded_scopes(
        namespace=NAMESPACE, caller=CALLER, run_id="run-a", attempt_id="att-1"
    ):
        data = h.cluster.config_maps[(NAMESPACE, scope.store_name)]
        assert list(data) == ["private.read-1"], scope


async def test_a_dry_run_says_the_send_would_wait_and_why(h: Harness) -> None:
    await call(h, "read-1", "crm", runId="run-a")
    await call(h, "fetch-2", "web", runId="run-a")

    status = await call(h, "send-3", "send", runId="run-a", dryRun=True)

    preview = status["preview"]
    assert status["state"] == "Previewed"
    assert preview["verdict"] == "would-await-approval", preview
    assert preview["approval"]["required"] is True
    assert any("read-1" in r and "fetch-2" in r for r in preview["approval"]["reasons"])
    assert sent(h) == 0


async def test_an_attempt_that_read_private_and_untrusted_in_other_runs_gates_its_sends(
    h: Harness,
) -> None:
    # The workspace carries data between runs: the attempt is a scope of its own.
    await call(h, "read-1", "crm", runId="run-1", attemptId="att-1")
    await call(h, "fetch-2", "web", runId="run-2", attemptId="att-1")

    task = h.start(h.submit(invocation("send-3", tool="send", runId="run-3", attemptId="att-1")))
    waiting = await waiting_for_approval(h, "send-3")
    assert "attempt att-1" in waiting["status"]["dataFlow"]["gated"]
    task.cancel()

    # Another attempt of a fresh run holds nothing.
    other = await call(h, "send-4", "send", runId="run-4", attemptId="att-2")
    assert other["state"] == "Observed", other


async def test_a_duplicate_brings_its_first_calls_labels_into_its_own_run(h: Harness) -> None:
    await call(h, "read-1", "crm", runId="run-a", idempotencyKey="k1")
    # The same request and key in another run: it ran nothing, but it returned the data.
    dup = await call(h, "read-2", "crm", runId="run-b", idempotencyKey="k1")
    assert dup.get("duplicateOf") == "read-1", dup
    await call(h, "fetch-3", "web", runId="run-b")

    task = h.start(h.submit(invocation("send-4", tool="send", runId="run-b")))
    waiting = await waiting_for_approval(h, "send-4")
    assert "read-2" in waiting["status"]["dataFlow"]["gated"]
    task.cancel()


# --------------------------------------------------------------------------- liveness


def deferred() -> float:
    value = REGISTRY.get_sample_value(
        "tooladapter_dataflow_labels_deferred_total", {"tenant": NAMESPACE}
    )
    return value or 0.0


def refuse_stores(h: Harness) -> None:
    """Every write of a scope's store refused (a quota on ConfigMaps, say): reads still work."""

    def refused(**_: Any) -> None:
        raise Forbidden("configmaps is forbidden: exceeded quota")

    h.cluster.hooks["merge_config_map"] = refused


async def test_a_label_write_that_fails_never_holds_the_calls_end(h: Harness) -> None:
    refuse_stores(h)
    before = deferred()

    status = await call(h, "read-1", "crm", runId="run-a")

    assert status["state"] == "Observed", status
    assert status["dataFlow"]["pending"] is True
    assert status.get("receiptRef"), status
    assert deferred() - before == 1
    assert h.rt.pending_labels.holds(NAMESPACE, "read-1")
    assert not h.cluster.config_maps  # nothing stored: the labels wait


async def test_a_label_write_that_hangs_never_holds_the_calls_end(
    h: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(flowdataflow, "WRITE_SECONDS", 0.05)

    async def hangs(**_: Any) -> None:
        await asyncio.Event().wait()

    h.cluster.hooks["merge_config_map"] = hangs

    status = await call(h, "read-1", "crm", runId="run-a")

    assert status["state"] == "Observed" and status["dataFlow"]["pending"] is True, status


async def test_pending_labels_gate_a_send_as_if_stored(h: Harness) -> None:
    refuse_stores(h)
    await call(h, "read-1", "crm", runId="run-a")
    await call(h, "fetch-2", "web", runId="run-a")

    task = h.start(h.submit(invocation("send-3", tool="send", runId="run-a")))
    waiting = await waiting_for_approval(h, "send-3")

    assert "read-1" in waiting["status"]["dataFlow"]["gated"]
    assert "fetch-2" in waiting["status"]["dataFlow"]["gated"]
    assert sent(h) == 0
    task.cancel()


async def test_pending_labels_are_written_by_the_retry_and_the_flag_cleared(h: Harness) -> None:
    refuse_stores(h)
    await call(h, "read-1", "crm", runId="run-a", attemptId="att-1")
    assert (await flowdataflow.retry_pending(h.rt)) == 0  # still refused: still pending
    assert h.rt.pending_labels.holds(NAMESPACE, "read-1")

    del h.cluster.hooks["merge_config_map"]
    assert (await flowdataflow.retry_pending(h.rt)) == 1

    assert not h.rt.pending_labels.holds(NAMESPACE, "read-1")
    for scope in rule.recorded_scopes(
        namespace=NAMESPACE, caller=CALLER, run_id="run-a", attempt_id="att-1"
    ):
        assert list(h.cluster.config_maps[(NAMESPACE, scope.store_name)]) == ["private.read-1"]
    assert "pending" not in h.cluster.invocation("read-1")["status"]["dataFlow"]


async def test_a_restarted_operator_takes_up_the_pending_labels_from_status(h: Harness) -> None:
    refuse_stores(h)
    await call(h, "read-1", "crm", runId="run-a")
    await call(h, "fetch-2", "web", runId="run-a")
    # A new process on the same cluster: its listing delivers the ended calls.
    after = harness(h.cluster)
    for name in ("read-1", "fetch-2"):
        flowdataflow.observe_pending(after.rt, h.cluster.invocation(name))

    task = after.start(after.submit(invocation("send-3", tool="send", runId="run-a")))
    await waiting_for_approval(after, "send-3")
    task.cancel()

    del h.cluster.hooks["merge_config_map"]
    assert (await flowdataflow.retry_pending(after.rt)) == 2


async def test_retention_keeps_a_call_whose_labels_are_pending(h: Harness) -> None:
    refuse_stores(h)
    await call(h, "read-1", "crm", runId="run-a")
    h.rt.settings = replace(
        h.rt.settings, retention=replace(h.rt.settings.retention, invocation_seconds=60)
    )
    stored = h.cluster.objects[(str(Resource.INVOCATIONS), NAMESPACE, "read-1")]
    stored["status"]["endedAt"] = "2020-01-01T00:00:00Z"  # long past its retention
    h.rt.census.update("MODIFIED", stored)

    assert await workers.apply_retention(h.rt) == 0
    h.rt.pending_labels.discard(NAMESPACE, "read-1")
    assert await workers.apply_retention(h.rt) == 1


# --------------------------------------------------------------------------- right before acting


async def test_a_label_that_arrives_before_an_ungated_send_executes_denies_it(
    h: Harness,
) -> None:
    """A send judged clean at its gate; the run's private and untrusted reads end while it
    is brokered: it never acts on the stale judgement (it did not wait for any approval)."""

    arrived = False

    async def labels_arrive(*_: Any, **__: Any) -> None:
        nonlocal arrived
        if arrived:
            return
        arrived = True
        await call(h, "read-1", "crm", runId="run-a")
        await call(h, "fetch-2", "web", runId="run-a")

    # The first store read is the send's gate: the run's reads end right after it.
    h.cluster.after["read_config_map"] = labels_arrive

    status = await call(h, "send-3", "send", runId="run-a")

    assert status["state"] == "Denied", status
    assert "read-1" in status["message"] and "fetch-2" in status["message"]
    assert "after it was judged without them" in status["message"]
    assert sent(h) == 0


# --------------------------------------------------------------------------- a server's word


def mcp_server(annotations: dict[str, str], tool_annotations: dict[str, Any] | None = None) -> Any:
    return {
        "apiVersion": "tooladapter.dev/v1alpha1",
        "kind": "McpServer",
        "metadata": {"name": "srv", "namespace": NAMESPACE, "annotations": annotations},
        "spec": {"url": "https://mcp.example.com/mcp"},
        "status": {
            "tools": [
                {
                    "name": "t",
                    "digest": "sha256:" + "a" * 64,
                    **({"annotations": tool_annotations} if tool_annotations else {}),
                }
            ]
        },
    }


@pytest.mark.parametrize(
    ("annotations", "hints", "declared", "brought"),
    [
        ({rule.SERVER_LABELS_ANNOTATION: "private"}, None, [], ["private"]),
        ({rule.SERVER_LABELS_ANNOTATION: "private"}, None, None, ["private", "untrusted"]),
        ({}, {"openWorldHint": True}, [], ["untrusted"]),
        ({}, None, ["private"], ["private"]),  # nothing added, nothing removed
    ],
    ids=["annotation-adds", "annotation-adds-to-default", "open-world-hint", "none-added"],
)
async def test_an_mcp_tools_server_adds_labels_to_what_its_calls_bring(
    annotations: dict[str, str], hints: dict[str, Any] | None, declared: Any, brought: list[str]
) -> None:
    h = make_runtime(executors={ToolKind.MCP: ScriptedExecutor()})
    server = h.cluster.put(Resource.MCP_SERVERS, mcp_server(annotations, hints))
    h.catalog.update(Resource.MCP_SERVERS, "ADDED", server)
    flow = {"labels": declared} if declared is not None else {}
    mcp = {"server": "srv", "tool": "t", "pinnedDigest": "sha256:" + "a" * 64}
    h.publish(descriptor("remote", kind="mcp", mcp=mcp, dataFlow=flow))
    h.cluster.grant(tools=["remote"], classes=["read", "external"])

    body = h.submit(invocation("mcp-1", tool="remote", runId="run-a"))
    h.pre_approve(body)  # an open-world hint raises the class to external: gated
    status = (await h.run(body))["status"]

    assert status["state"] == "Observed", status
    assert status["dataFlow"]["labels"] == brought


# --------------------------------------------------------------------------- stores collected


def age_store(h: Harness, scope: rule.Scope, seconds: int) -> None:
    """Make every label of the scope's store look `seconds` old."""
    data = h.cluster.config_maps[(NAMESPACE, scope.store_name)]
    at = (datetime.now(UTC) - timedelta(seconds=seconds)).strftime("%Y-%m-%dT%H:%M:%SZ")
    for key, value in data.items():
        data[key] = json.dumps({**json.loads(value), "at": at})


async def test_old_stores_of_gone_calls_are_collected_and_recent_ones_kept(h: Harness) -> None:
    await call(h, "read-1", "crm", runId="run-a")
    await call(h, "fetch-2", "web", runId="run-b")
    run_a, run_b = (rule.Scope(ScopeKind.RUN, NAMESPACE, CALLER, run) for run in ("run-a", "run-b"))
    caller = rule.Scope(ScopeKind.CALLER, NAMESPACE, CALLER)
    window = h.rt.settings.dataflow_window_seconds
    retention = h.rt.settings.retention.invocation_seconds
    age_store(h, run_a, window + retention + 60)
    age_store(h, caller, window + 60)
    h.rt.census.update("ADDED", h.cluster.invocation("read-1"))

    # read-1 is still stored: its run's labels stay, however old.
    assert await workers.collect_scope_stores(h.rt) == 1  # the caller's, out of its window
    assert (NAMESPACE, caller.store_name) not in h.cluster.config_maps
    assert (NAMESPACE, run_a.store_name) in h.cluster.config_maps

    h.rt.census.update("DELETED", h.cluster.invocation("read-1"))  # retention took it
    assert await workers.collect_scope_stores(h.rt) == 1
    assert (NAMESPACE, run_a.store_name) not in h.cluster.config_maps
    assert (NAMESPACE, run_b.store_name) in h.cluster.config_maps  # recent: kept


async def test_a_store_written_since_it_was_listed_is_kept(h: Harness) -> None:
    await call(h, "read-1", "crm")
    caller = rule.Scope(ScopeKind.CALLER, NAMESPACE, CALLER)
    age_store(h, caller, h.rt.settings.dataflow_window_seconds + 60)

    async def written_meanwhile(*_: Any, **__: Any) -> None:
        await call(h, "fetch-2", "web")  # a label lands between the list and the delete

    h.cluster.after["list_scope_stores"] = written_meanwhile

    assert await workers.collect_scope_stores(h.rt) == 0
    assert "untrusted.fetch-2" in h.cluster.config_maps[(NAMESPACE, caller.store_name)]


async def test_a_store_a_pending_write_adds_to_is_kept(h: Harness) -> None:
    await call(h, "read-1", "crm")
    caller = rule.Scope(ScopeKind.CALLER, NAMESPACE, CALLER)
    age_store(h, caller, h.rt.settings.dataflow_window_seconds + 60)
    refuse_stores(h)
    await call(h, "fetch-2", "web")  # its write is pending

    assert await workers.collect_scope_stores(h.rt) == 0
