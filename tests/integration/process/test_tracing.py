"""Traces on the real cluster: an operator exporting over OTLP to a real OpenTelemetry
Collector on loopback (`hack/otel`, OTLP receiver and file exporter); a sandboxed call and an
http call each leave one trace there, with a span per stage under the root span, the trace
id on the invocation, and the http tool's request carrying the execution's `traceparent`.

The operator here serves `trace-<SESSION>-*`, out of the session operator's scope."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from tests.integration.objects import Agent, descriptor, pretty, shell_tool, status_of
from tests.integration.servers import Recorder, recording_server
from tooladapter import tracing
from tooladapter.devtools import SESSION, Namespace, OperatorProcess, node_ip, wait_for
from tooladapter.devtools.otel import Collector, attributes

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(300)]

SCOPE = f"trace-{SESSION}"


@pytest.fixture(scope="module")
def collector(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Collector]:
    found = Collector(tmp_path_factory.mktemp("otelcol"))
    found.start()
    yield found
    found.stop()


@pytest.fixture(scope="module")
def traced_operator(
    api: client.ApiClient, collector: Collector, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[OperatorProcess]:
    op = OperatorProcess(
        tmp_path_factory.mktemp("traced-operator"),
        {"TOOLADAPTER_NAMESPACES": f"{SCOPE}-*", **collector.operator_env()},
    )
    op.start()
    yield op
    op.stop()


@pytest.fixture(scope="module")
def node_server() -> Iterator[Recorder]:
    with recording_server(node_ip()) as server:
        yield server


def trace_of(collector: Collector, obj: dict[str, Any]) -> list[dict[str, Any]]:
    """The call's spans once the collector has its root span and one per recorded stage."""
    status = status_of(obj)
    wanted = len(status["stages"]) + 1

    def complete() -> list[dict[str, Any]] | None:
        spans = collector.spans(status["traceId"])
        return spans if len(spans) >= wanted else None

    return wait_for(complete, timeout=30, what=f"{wanted} spans of trace {status['traceId']}")


def check_trace(collector: Collector, obj: dict[str, Any], tool: str) -> list[dict[str, Any]]:
    status = status_of(obj)
    assert status["state"] == "Observed", pretty(status)
    uid = obj["metadata"]["uid"]
    assert status["traceId"] == tracing.trace_id_hex(uid)
    spans = trace_of(collector, obj)
    (root,) = [s for s in spans if s["name"] == "invocation"]
    assert root["spanId"] == f"{tracing.root_span_id(uid):016x}"
    assert not root.get("parentSpanId")
    stages = [s for s in spans if s is not root]
    # One span per recorded stage, each under the root, with its outcome.
    assert Counter((s["name"], attributes(s)["tooladapter.stage.outcome"]) for s in stages) == (
        Counter((e["stage"], e["outcome"]) for e in status["stages"])
    )
    assert {s["parentSpanId"] for s in stages} == {root["spanId"]}
    root_attributes = attributes(root)
    assert root_attributes["tooladapter.tool.id"] == tool
    assert root_attributes["tooladapter.state"] == "Observed"
    assert root_attributes["k8s.namespace.name"] == obj["metadata"]["namespace"]
    assert attributes(root["resource"])["service.name"] == "tooladapter"
    assert int(root["startTimeUnixNano"]) <= min(int(s["startTimeUnixNano"]) for s in stages)
    return spans


def test_a_sandboxed_and_an_http_call_each_leave_their_trace_in_the_collector(
    api: client.ApiClient,
    collector: Collector,
    traced_operator: OperatorProcess,
    node_server: Recorder,
) -> None:
    ns = Namespace(api, prefix=SCOPE)
    try:
        agent = Agent.create(api, ns.name, "agent-1")
        shell_tool(api, ns.name, "sh")
        descriptor(
            api,
            ns.name,
            "greet",
            kind="http",
            inputSchema={"type": "object", "properties": {"who": {"type": "string"}}},
            http={
                "method": "GET",
                "url": f"http://{node_server.address}/traced/{{who}}",
                "allowedHosts": [node_server.address],
            },
        )
        agent.grant(["sh", "greet"], ["read", "sandbox"])

        shell = agent.wait(agent.invoke("sh", {"command": "echo traced in the sandbox"}))
        http_call = agent.wait(agent.invoke("greet", {"who": "someone-secret"}))

        shell_spans = check_trace(collector, shell, "sh")
        assert {"execute", "sandbox", "sanitize", "audit"} <= {s["name"] for s in shell_spans}
        http_spans = check_trace(collector, http_call, "greet")

        # The tool's request carried the trace: its parent is the execution's span.
        (headers,) = [
            h
            for path, h in zip(node_server.paths, node_server.headers, strict=True)
            if path == "/traced/someone-secret"
        ]
        uid = http_call["metadata"]["uid"]
        execution = f"{tracing.execution_span_id(uid):016x}"
        assert headers["traceparent"] == f"00-{status_of(http_call)['traceId']}-{execution}-01"
        (executed,) = [s for s in http_spans if s["spanId"] == execution]
        assert executed["name"] == "execute"
        assert attributes(executed)["tooladapter.stage.outcome"] == "observed"
        # Argument values never reach a span.
        exported = Path(collector.traces_path).read_text()
        assert "someone-secret" not in exported
        assert "traced in the sandbox" not in exported
    finally:
        ns.delete()
