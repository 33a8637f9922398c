"""Traces of invocations: one trace per call whose id comes from the uid, a span per
recorded stage under the root span, the root once the end is persisted, a `traceparent`
for the tool's request, and nothing at all while tracing is off."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import AsyncIterator, Mapping
from typing import Any

import pytest
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode

from tests.unit.fake_cluster import Harness, ScriptedExecutor, descriptor, invocation, make_runtime
from tests.unit.flow.test_restart import restart, run_until_stopped, stop_after_writing, writer_call
from tooladapter import tracing
from tooladapter.enums import InvocationState, Stage, StageOutcome, ToolKind
from tooladapter.executors import Outcome
from tooladapter.model import StageEntry

pytestmark = [pytest.mark.timeout(10), pytest.mark.usefixtures("fast_retries")]

SECRET_ARGUMENT = "do-not-trace-this-value"


def attributes(span: ReadableSpan) -> Mapping[str, Any]:
    assert span.attributes is not None, span.name
    return span.attributes


@pytest.fixture
async def spans() -> AsyncIterator[InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    stop = tracing.start(SimpleSpanProcessor(exporter), "test")
    yield exporter
    await stop()
    assert not tracing.enabled()


def by_name(exported: tuple[ReadableSpan, ...], name: str) -> list[ReadableSpan]:
    return [s for s in exported if s.name == name]


def read_tool(h: Harness) -> None:
    h.publish(descriptor())
    h.cluster.grant(tools=["lister"], classes=["read"])


def test_ids_are_derived_from_the_uid_alone() -> None:
    assert tracing.trace_id_hex("uid-1") == tracing.trace_id_hex("uid-1")
    assert tracing.trace_id_hex("uid-1") != tracing.trace_id_hex("uid-2")
    assert len(tracing.trace_id_hex("uid-1")) == 32
    assert tracing.root_span_id("uid-1") != tracing.execution_span_id("uid-1")


def test_tracing_is_requested_only_by_an_otlp_endpoint() -> None:
    assert not tracing.requested({})
    assert tracing.requested({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318"})
    assert tracing.requested({"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://x/v1/traces"})
    assert not tracing.requested(
        {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://x", "OTEL_SDK_DISABLED": "true"}
    )


def test_with_tracing_off_nothing_is_emitted_and_no_traceparent_is_made(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for name in tracing.ENDPOINT_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    assert tracing.configure() is None
    assert not tracing.enabled()
    assert tracing.traceparent("uid-1") is None


@pytest.mark.timeout(60)  # a fresh interpreter imports the operator: seconds on a loaded node
def test_off_the_operator_never_imports_the_sdk() -> None:
    code = (
        "import sys, tooladapter.tracing as t, tooladapter.flow, tooladapter.handlers.lifecycle\n"
        "assert t.configure() is None\n"
        "print(sorted(m for m in sys.modules if m.startswith('opentelemetry.sdk')"
        " or m.startswith('opentelemetry.exporter')))\n"
    )
    env = {"PATH": "/usr/bin:/bin"}
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
    )
    assert out.stdout.strip() == "[]"


def test_an_attempts_end_spans_the_attempt_not_the_stage_before() -> None:
    stages = [
        StageEntry(stage=Stage.EXECUTE, outcome=StageOutcome.STARTED, time="2026-01-01T00:00:01Z"),
        StageEntry(stage=Stage.SANITIZE, outcome=StageOutcome.DONE, time="2026-01-01T00:00:05Z"),
        StageEntry(stage=Stage.EXECUTE, outcome=StageOutcome.OBSERVED, time="2026-01-01T00:00:06Z"),
    ]
    assert tracing.stage_start(stages, 2, "2026-01-01T00:00:00Z") == "2026-01-01T00:00:01Z"
    assert tracing.stage_start(stages, 1, "2026-01-01T00:00:00Z") == "2026-01-01T00:00:01Z"
    assert tracing.stage_start(stages, 0, "2026-01-01T00:00:00Z") == "2026-01-01T00:00:00Z"


async def test_a_call_is_one_trace_with_a_span_per_stage_under_its_root(
    spans: InMemorySpanExporter, h: Harness
) -> None:
    read_tool(h)
    body = h.submit(invocation(arguments={"q": SECRET_ARGUMENT}))

    stored = await h.run(body)

    status = stored["status"]
    uid = stored["metadata"]["uid"]
    assert status["traceId"] == tracing.trace_id_hex(uid)
    exported = spans.get_finished_spans()
    assert {f"{s.context.trace_id:032x}" for s in exported} == {status["traceId"]}
    (root,) = by_name(exported, "invocation")
    assert root.parent is None
    assert root.context.span_id == tracing.root_span_id(uid)
    stage_spans = [s for s in exported if s is not root]
    assert [(s.name, attributes(s)["tooladapter.stage.outcome"]) for s in stage_spans] == [
        (e["stage"], e["outcome"]) for e in status["stages"]
    ]
    assert all(s.parent is not None for s in stage_spans)
    assert {s.parent.span_id for s in stage_spans if s.parent} == {root.context.span_id}
    (execution,) = [
        s
        for s in by_name(exported, "execute")
        if attributes(s)["tooladapter.stage.outcome"] == "observed"
    ]
    assert execution.context.span_id == tracing.execution_span_id(uid)
    assert attributes(root)["tooladapter.tool.id"] == "lister"
    assert attributes(root)["tooladapter.state"] == "Observed"
    assert attributes(root)["tooladapter.class.effective"] == "read"
    assert attributes(root)["k8s.namespace.name"] == stored["metadata"]["namespace"]
    assert root.resource.attributes["service.name"] == "tooladapter"
    assert root.start_time is not None and root.end_time is not None
    assert root.start_time <= root.end_time
    assert all(SECRET_ARGUMENT not in str(dict(s.attributes or {})) for s in exported)
    assert all(SECRET_ARGUMENT not in s.name for s in exported)


async def test_the_tool_request_carries_the_traceparent_of_the_execution(
    spans: InMemorySpanExporter, h: Harness
) -> None:
    read_tool(h)
    stored = await h.run(h.submit(invocation()))

    executor = h.executors[ToolKind.NATIVE]
    assert isinstance(executor, ScriptedExecutor)
    (call,) = executor.executed
    uid = stored["metadata"]["uid"]
    assert call.traceparent == (
        f"00-{tracing.trace_id_hex(uid)}-{tracing.execution_span_id(uid):016x}-01"
    )


async def test_a_failed_call_marks_its_root_and_execution_as_errors(
    spans: InMemorySpanExporter,
) -> None:
    from tooladapter.enums import FailureClass

    h = make_runtime(
        executors={
            ToolKind.NATIVE: ScriptedExecutor(Outcome.failed(FailureClass.TOOL_ERROR, "boom"))
        }
    )
    read_tool(h)
    await h.run(h.submit(invocation()))

    exported = spans.get_finished_spans()
    (root,) = by_name(exported, "invocation")
    assert root.status.status_code == StatusCode.ERROR
    assert attributes(root)["tooladapter.failure_class"] == "tool-error"
    assert by_name(exported, "execute")[-1].status.status_code == StatusCode.ERROR


async def test_a_denied_call_has_its_trace_and_the_denying_stage(
    spans: InMemorySpanExporter, h: Harness
) -> None:
    h.publish(descriptor())  # no grant: permission denies

    stored = await h.run(h.submit(invocation()))

    assert stored["status"]["state"] == "Denied"
    exported = spans.get_finished_spans()
    denied = [s for s in exported if attributes(s).get("tooladapter.stage.outcome") == "denied"]
    assert [s.name for s in denied] == ["permission"]
    (root,) = by_name(exported, "invocation")
    assert attributes(root)["tooladapter.state"] == str(InvocationState.DENIED)
    assert stored["status"]["traceId"] == f"{root.context.trace_id:032x}"


async def test_a_call_resumed_after_a_restart_continues_the_same_trace(
    spans: InMemorySpanExporter,
) -> None:
    first = make_runtime()
    first.publish(
        descriptor(
            "writer",
            side_effect_class="shared-write",
            inputSchema={"type": "object", "properties": {"path": {"type": "string"}}},
        )
    )
    first.cluster.grant(tools=["writer"], classes=["shared-write"])
    stop_after_writing(first.cluster, "AwaitingApproval")
    await run_until_stopped(first, first.submit(writer_call()))
    waiting = first.cluster.invocation("write-1")
    trace_id = waiting["status"]["traceId"]
    before = len(spans.get_finished_spans())

    second = restart(first)
    second.approve_waiting("write-1", name="yes")
    stored = await second.run(first.cluster.invocation("write-1"))

    assert stored["status"]["traceId"] == trace_id
    later = spans.get_finished_spans()[before:]
    assert later and {f"{s.context.trace_id:032x}" for s in later} == {trace_id}
    bound = [s for s in later if attributes(s).get("tooladapter.stage.outcome") == "bound"]
    assert [s.name for s in bound] == ["approval"]
    # The approval span covers the wait: from the stored `waiting` entry to the binding.
    waited = next(e for e in waiting["status"]["stages"] if e["outcome"] == "waiting")
    assert bound[0].start_time == tracing._ns(waited["time"])


async def test_a_dry_run_has_a_root_span_and_a_trace_id(
    spans: InMemorySpanExporter, h: Harness
) -> None:
    read_tool(h)
    stored = await h.run(h.submit(invocation(dryRun=True)))

    assert stored["status"]["state"] == "Previewed"
    (root,) = by_name(spans.get_finished_spans(), "invocation")
    assert attributes(root)["tooladapter.dry_run"] is True
    assert stored["status"]["traceId"] == f"{root.context.trace_id:032x}"


async def test_without_tracing_status_has_no_trace_id(h: Harness) -> None:
    read_tool(h)
    stored = await h.run(h.submit(invocation()))
    assert "traceId" not in stored["status"]
