"""Dry runs decide what real calls decide, and never act: the pure preview and `spec.dryRun`
against the in-memory cluster, side by side with a real call of the same spec."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest
from prometheus_client import REGISTRY

from tests.unit.fake_cluster import (
    CALLER,
    NAMESPACE,
    Harness,
    ScriptedExecutor,
    descriptor,
    hash_of,
    invocation,
    make_runtime,
    policy,
    shell_descriptor,
)
from tooladapter.enums import InvocationState, PreviewVerdict, Stage, ToolKind
from tooladapter.model import ToolPolicySpec
from tooladapter.pipeline.permission import Permission
from tooladapter.pipeline.preview import PreviewSettings, evaluate, preview

pytestmark = [pytest.mark.timeout(20), pytest.mark.usefixtures("fast_retries")]

PATH_SCHEMA = {
    "type": "object",
    "properties": {"path": {"type": "string"}},
    "required": ["path"],
}


@dataclass(frozen=True)
class Case:
    """One row of the table: how the namespace is set up and what the call sends."""

    name: str
    setup: Callable[[Harness], None]
    tool: str
    arguments: dict[str, Any]
    #: Where a real call stops: a terminal state, or AwaitingApproval.
    state: InvocationState
    verdict: PreviewVerdict
    stage: Stage | None = None


def _reader(h: Harness) -> None:
    h.publish(descriptor("lister", inputSchema=PATH_SCHEMA))
    h.cluster.grant(tools=["lister"], classes=["read"])


def _denied_by_policy(h: Harness) -> None:
    _reader(h)
    h.add_policy(policy("no-lister", tools={"deny": [{"id": "lister", "reason": "retired"}]}))


def _no_grant(h: Harness) -> None:
    h.publish(descriptor("lister", inputSchema=PATH_SCHEMA))
    h.cluster.grant(tools=["lister"], classes=[])  # may invoke it, but not use class read


def _writer(h: Harness) -> None:
    h.publish(descriptor("writer", side_effect_class="shared-write", inputSchema=PATH_SCHEMA))
    h.cluster.grant(tools=["writer"], classes=["shared-write"])


def _gated_by_policy(h: Harness) -> None:
    _reader(h)
    h.add_policy(
        policy(
            "etc-needs-review",
            conditions=[
                {
                    "path": "/path",
                    "operator": "matches",
                    "value": "^/etc/",
                    "effect": "requireApproval",
                }
            ],
        )
    )


def _blocked_shell(h: Harness) -> None:
    h.publish(shell_descriptor("sh"))
    h.cluster.grant(tools=["sh"], classes=["sandbox", "shared-write"])
    h.add_policy(policy("no-curl", shell={"block": ["curl"]}))


def _frozen(h: Harness) -> None:
    _writer(h)
    h.label_namespace({"tooladapter.dev/frozen": "true"})


CASES = [
    Case("allowed", _reader, "lister", {"path": "/data"}, InvocationState.OBSERVED,
         PreviewVerdict.WOULD_RUN),
    Case("schema-invalid", _reader, "lister", {"path": 7}, InvocationState.DENIED,
         PreviewVerdict.WOULD_BE_DENIED, Stage.VALIDATION),
    Case("unknown-version", _reader, "lister@9.9.9", {"path": "/x"}, InvocationState.DENIED,
         PreviewVerdict.WOULD_BE_DENIED, Stage.VALIDATION),
    Case("policy-denied", _denied_by_policy, "lister", {"path": "/x"}, InvocationState.DENIED,
         PreviewVerdict.WOULD_BE_DENIED, Stage.POLICY),
    Case("permission-denied", _no_grant, "lister", {"path": "/x"}, InvocationState.DENIED,
         PreviewVerdict.WOULD_BE_DENIED, Stage.PERMISSION),
    Case("gated-by-class", _writer, "writer", {"path": "/x"},
         InvocationState.AWAITING_APPROVAL, PreviewVerdict.WOULD_AWAIT_APPROVAL),
    Case("gated-by-policy", _gated_by_policy, "lister", {"path": "/etc/passwd"},
         InvocationState.AWAITING_APPROVAL, PreviewVerdict.WOULD_AWAIT_APPROVAL),
    Case("shell-blocked", _blocked_shell, "sh", {"command": "curl http://x"},
         InvocationState.DENIED, PreviewVerdict.WOULD_BE_DENIED, Stage.CLASSIFICATION),
    Case("frozen", _frozen, "writer", {"path": "/x"}, InvocationState.DENIED,
         PreviewVerdict.WOULD_BE_DENIED, Stage.CLASSIFICATION),
]  # fmt: skip


def _call(case: Case, name: str, **spec: Any) -> dict[str, Any]:
    tool, _, version = case.tool.partition("@")
    return invocation(name, tool=tool, version=version or "1.0.0", arguments=case.arguments, **spec)


async def _real(h: Harness, body: dict[str, Any]) -> dict[str, Any]:
    """Where the real call stops: its terminal state or its wait for an approval."""
    task = h.start(body)
    try:
        stored = await h.cluster.wait_for_status(
            body["metadata"]["name"],
            lambda s: (
                s.get("state") == "AwaitingApproval"
                or InvocationState(s.get("state") or "Received").terminal
            ),
        )
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
    return dict(stored["status"])


def _invocations_counted() -> float:
    total = 0.0
    for metric in REGISTRY.collect():
        if metric.name == "tooladapter_invocations":
            total += sum(s.value for s in metric.samples if s.name.endswith("_total"))
    return total


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
async def test_a_dry_run_decides_what_the_real_call_decides(case: Case) -> None:
    h = make_runtime()
    executor = h.executors[ToolKind.NATIVE]
    assert isinstance(executor, ScriptedExecutor)
    case.setup(h)

    dry = h.submit(_call(case, "dry", dryRun=True, idempotencyKey="k-1"))
    counted = _invocations_counted()
    stored = await h.run(dry)
    assert _invocations_counted() == counted  # a preview is no invocation in the metrics
    status = stored["status"]
    real = await _real(h, h.submit(_call(case, "real")))

    assert real["state"] == case.state
    assert status["state"] == "Previewed"
    shown = status["preview"]
    assert shown["verdict"] == case.verdict
    assert shown.get("deniedStage") == real.get("deniedStage") == case.stage
    assert shown.get("failureClass") == real.get("failureClass")
    if case.stage is not None:
        assert shown["message"] == real["message"]
        assert status["message"].startswith("dry run, would be denied: ")
    else:
        assert real.get("effectiveClass") == shown["classification"]["effective"]
        assert real.get("policyDecisionId") == shown["policy"]["decisionId"]
    if real.get("requestHash"):
        assert shown["validation"]["requestHash"] == real["requestHash"]
        assert shown["validation"]["descriptorDigest"] == real["descriptorDigest"]
    # Written once, with its end; nothing claimed, executed, stored or announced as a call.
    assert [w["state"] for w in h.cluster.writes_of("dry")] == ["Previewed"]
    assert h.cluster.calls_of("claim_idempotency_key") == []
    assert [c for c in executor.executed if c.name == "dry"] == []
    assert status.get("receiptRef") is None and status.get("stages") in (None, [])
    conditions = {c["type"]: (c["status"], c["reason"]) for c in status["conditions"]}
    assert conditions == {"Finished": ("True", "Previewed"), "Succeeded": ("False", "DryRun")}
    assert [e.reason for e in h.events.posted if e.obj["metadata"]["name"] == "dry"] == [
        "ToolInvocationPreviewed"
    ]


async def test_a_preview_names_the_published_versions_of_an_unknown_one(h: Harness) -> None:
    h.publish(descriptor("lister", version="1.0.0"))
    h.publish(descriptor("lister", version="2.1.0"))
    h.cluster.grant(tools=["lister"], classes=["read"])

    stored = await h.run(h.submit(invocation("old", version="0.9.0", dryRun=True)))

    shown = stored["status"]["preview"]
    assert shown["validation"]["publishedVersions"] == ["2.1.0", "1.0.0"]
    assert "published versions: 2.1.0, 1.0.0" in shown["message"]
    real = await h.run(h.submit(invocation("real", version="0.9.0")))
    assert "published versions: 2.1.0, 1.0.0" in real["status"]["message"]


async def test_a_shell_denial_names_the_policy_and_the_pattern(h: Harness) -> None:
    _blocked_shell(h)
    body = h.submit(invocation("curl", tool="sh", arguments={"command": "curl http://x"}))

    status = (await h.run(body))["status"]

    assert status["deniedStage"] == "classification"
    assert "block-list pattern 'curl'" in status["message"]
    assert "a pattern of ToolPolicy team-a/no-curl" in status["message"]
    assert "(the default: no ToolPolicy sets blockAction: escalate)" in status["message"]


async def test_an_approval_wait_is_announced_with_who_may_approve_and_until_when(
    h: Harness,
) -> None:
    _writer(h)
    h.add_policy(policy("reviews", approval={"reviewerGroups": ["sre"], "timeoutSeconds": 600}))
    task = h.start(h.submit(invocation("w", tool="writer", arguments={"path": "/x"})))
    try:
        waiting = await h.cluster.wait_for_state("w", InvocationState.AWAITING_APPROVAL)
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)

    (event,) = h.events.of("ToolApprovalRequested")
    status = waiting["status"]
    assert f"by a member of sre, other than the caller {CALLER}" in event.message
    assert status["requestHash"] in event.message and status["descriptorDigest"] in event.message
    assert "until 20" in event.message  # an RFC 3339 deadline, 600 s after the request
    conditions = {c["type"]: c["status"] for c in status["conditions"]}
    assert conditions == {"Finished": "False", "Succeeded": "Unknown"}


async def test_a_finished_call_carries_finished_and_succeeded_conditions(h: Harness) -> None:
    _reader(h)
    ok = (await h.run(h.submit(invocation("ok", arguments={"path": "/x"}))))["status"]
    bad = (await h.run(h.submit(invocation("bad", arguments={}))))["status"]

    def of(status: dict[str, Any]) -> dict[str, tuple[str, str]]:
        return {c["type"]: (c["status"], c["reason"]) for c in status["conditions"]}

    assert of(ok) == {"Finished": ("True", "Observed"), "Succeeded": ("True", "Observed")}
    assert of(bad) == {"Finished": ("True", "Denied"), "Succeeded": ("False", "Validation")}
    assert all(c["lastTransitionTime"] for c in bad["conditions"])


# --------------------------------------------------------------------------- pure, plain data


def _plain_descriptor(**spec: Any) -> dict[str, Any]:
    body = descriptor("writer", side_effect_class="shared-write", inputSchema=PATH_SCHEMA, **spec)
    body["status"] = {"active": True, "healthy": True}
    return body


def _plain_spec(**arguments: Any) -> dict[str, Any]:
    return invocation("x", tool="writer", arguments=arguments)["spec"]


def test_the_pure_preview_takes_plain_data_and_a_permission_answer() -> None:
    policies: list[tuple[str, ToolPolicySpec | str]] = [
        ("team-a/reviews", ToolPolicySpec.model_validate({"approval": {"reviewerGroups": ["sre"]}}))
    ]
    common: dict[str, Any] = {
        "namespace": NAMESPACE,
        "spec": _plain_spec(path="/x"),
        "descriptor": _plain_descriptor(),
        "policies": policies,
        "settings": PreviewSettings(default_approval_timeout_seconds=60),
    }

    allowed = preview(**common, permission=True)
    refused = preview(**common, permission=Permission(invoke=True, use=False))
    unchecked = preview(**common, permission=None)

    assert allowed.verdict is PreviewVerdict.WOULD_AWAIT_APPROVAL
    assert allowed.approval is not None and allowed.approval.reviewer_groups == ["sre"]
    assert allowed.approval.timeout_seconds == 60
    assert allowed.permission is not None and allowed.permission.asked == [
        "invoke tooldescriptors/writer",
        "use sideeffectclasses/shared-write",
    ]
    assert refused.verdict is PreviewVerdict.WOULD_BE_DENIED
    assert refused.denied_stage is Stage.PERMISSION
    assert "may not use sideeffectclasses/shared-write" in refused.message
    assert unchecked.permission is not None and unchecked.permission.checked is False
    assert unchecked.verdict is PreviewVerdict.WOULD_AWAIT_APPROVAL
    assert allowed.validation.request_hash == hash_of(
        invocation("y", tool="writer", arguments={"path": "/x"})
    )


def test_a_preview_goes_on_past_schema_errors_and_lists_every_path() -> None:
    shown = preview(
        namespace=NAMESPACE,
        spec=_plain_spec(path=7, extra=True),
        descriptor=_plain_descriptor(),
        policies=[],
        permission=True,
    )

    assert shown.denied_stage is Stage.VALIDATION
    assert [e.path for e in shown.validation.errors] == ["$.path"]
    # The later stages are still shown, so one dry run says everything to fix.
    assert shown.classification is not None and shown.classification.effective == "shared-write"
    assert shown.approval is not None and shown.approval.required


def test_an_unreadable_policy_denies_a_preview_as_it_denies_a_call() -> None:
    evaluation = evaluate(
        namespace=NAMESPACE,
        spec=_plain_spec(path="/x"),
        descriptor=_plain_descriptor(),
        policies=[("team-a/broken", "spec.maxClass: bad value")],
    )

    assert evaluation.questions == ()
    (refusal,) = evaluation.refusals
    assert refusal.stage is Stage.POLICY
    assert "ToolPolicy team-a/broken is invalid" in refusal.reason


def test_a_sandboxed_tool_shows_its_sandbox_kind_runtime_class_and_egress() -> None:
    body = shell_descriptor("sh", sandbox={"kind": "GVisor", "egress": {"allow": ["10.0.0.0/8"]}})
    body["status"] = {"active": True, "healthy": True}
    shown = preview(
        namespace=NAMESPACE,
        spec=invocation("x", tool="sh", arguments={"command": "echo hi"})["spec"],
        descriptor=body,
        policies=[],
        permission=True,
        settings=PreviewSettings(runtime_classes=(("GVisor", "gvisor"),), sandbox_image="img"),
    )

    assert shown.verdict is PreviewVerdict.WOULD_RUN
    assert shown.sandbox is not None
    assert (shown.sandbox.kind, shown.sandbox.runtime_class) == ("GVisor", "gvisor")
    assert shown.egress == ["10.0.0.0/8"]
    assert shown.not_evaluated == ["idempotency", "fencing", "rate-limit", "credentials"]
