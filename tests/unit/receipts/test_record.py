"""The tool-invocation-v1 receipt."""

from __future__ import annotations

import json

from tooladapter.enums import InvocationState, SandboxKind, SideEffectClass, ToolKind
from tooladapter.model import (
    ApprovalBinding,
    EffectConfirmation,
    InvocationResult,
    LeaseLimits,
    SandboxLease,
    StageEntry,
    ToolInvocationSpec,
    ToolInvocationStatus,
)
from tooladapter.pipeline.hashing import digest
from tooladapter.receipts.core.record import build_receipt

SPEC = ToolInvocationSpec.model_validate(
    {
        "tool": {"id": "propose-change-set", "version": "1.2.0"},
        "arguments": {"repo": "x"},
        "caller": {"kind": "agent", "name": "system:serviceaccount:team-a:agent-1"},
        "runId": "run-1",
        "attemptId": "att-1",
        "idempotencyKey": "key-1",
    }
)

REFERENCE_KEYS = {
    "schema",
    "invocationId",
    "tenantId",
    "projectId",
    "toolId",
    "toolVersion",
    "declaredClass",
    "effectiveClass",
    "policyDecisionId",
    "approvalId",
    "requestHash",
    "idempotencyKey",
    "caller",
    "runId",
    "attemptId",
    "state",
    "failureClass",
    "resultHash",
    "resultRef",
    "sandbox",
    "commandLine",
    "redactions",
    "stages",
    "startedAt",
    "endedAt",
    "auditRef",
    "effectConfirmation",
}


def observed_status() -> ToolInvocationStatus:
    return ToolInvocationStatus(
        state=InvocationState.OBSERVED,
        request_hash="sha256:" + "1" * 64,
        declared_class=SideEffectClass.SHARED_WRITE,
        effective_class=SideEffectClass.PRODUCTION,
        policy_decision_id="7a0c",
        approval=ApprovalBinding(
            name="apr-1",
            reviewer="alice",
            bound_at="2026-01-01T12:00:00Z",
            request_hash="sha256:" + "1" * 64,
            tool_version="1.2.0",
        ),
        sandbox_lease=SandboxLease(
            lease_id="lease-1",
            kind=SandboxKind.GVISOR,
            pool_id="default",
            limits=LeaseLimits(timeout_seconds=60),
            leased_at="2026-01-01T12:00:01Z",
        ),
        result=InvocationResult(content="ok", original_bytes=2, redactions=["github-token"]),
        result_hash="sha256:" + "2" * 64,
        result_ref="artifact://sha256/22",
        stages=[StageEntry(stage="validation", outcome="passed", time="2026-01-01T12:00:00Z")],
        started_at="2026-01-01T12:00:00Z",
        ended_at="2026-01-01T12:00:05Z",
        audit_ref="audit://x",
    )


def test_receipt_has_every_field_of_the_reference() -> None:
    receipt = build_receipt(
        namespace="team-a",
        name="inv-1",
        uid="3f0e-uid",
        spec=SPEC,
        status=observed_status(),
        tool_kind=ToolKind.SHELL,
        command_line=["git", "status"],
        written_at="2026-01-01T12:00:06Z",
    )
    assert REFERENCE_KEYS <= set(receipt)
    assert receipt["schema"] == "tool-invocation-v1"
    assert receipt["invocationId"] == "3f0e-uid"
    assert receipt["tenantId"] == receipt["projectId"] == "team-a"
    assert (receipt["toolId"], receipt["toolVersion"]) == ("propose-change-set", "1.2.0")
    assert (receipt["declaredClass"], receipt["effectiveClass"]) == ("shared-write", "production")
    assert receipt["approvalId"] == "apr-1"
    assert receipt["state"] == "Observed"
    assert receipt["sandbox"] == {
        "kind": "GVisor",
        "poolId": "default",
        "leaseId": "lease-1",
        "runtimeClass": None,
    }
    assert receipt["commandLine"] == ["git", "status"]
    assert receipt["redactions"] == ["github-token"]
    assert receipt["caller"] == {"kind": "agent", "name": "system:serviceaccount:team-a:agent-1"}
    assert receipt["stages"] == [
        {"stage": "validation", "outcome": "passed", "time": "2026-01-01T12:00:00Z", "detail": ""}
    ]
    assert receipt["effectConfirmation"] is None
    json.dumps(receipt)  # plain JSON
    digest(receipt)  # has a canonical form, so it can be stored by content hash


def test_a_denied_invocation_without_lease_gets_the_given_sandbox_or_none() -> None:
    status = ToolInvocationStatus(state=InvocationState.DENIED, failure_class="policy-denied")
    receipt = build_receipt(
        namespace="team-a",
        name="inv-2",
        uid="u2",
        spec=SPEC,
        status=status,
        tool_kind="http",
        written_at="t",
    )
    assert receipt["sandbox"] == {
        "kind": "None",
        "poolId": None,
        "leaseId": None,
        "runtimeClass": None,
    }
    assert receipt["failureClass"] == "policy-denied"
    assert receipt["approvalId"] is None and receipt["redactions"] == []
    with_pool = build_receipt(
        namespace="team-a",
        name="inv-2",
        uid="u2",
        spec=SPEC,
        status=status,
        tool_kind=ToolKind.CONTAINER,
        sandbox_kind=SandboxKind.CONTAINER,
        sandbox_pool="default",
        written_at="t",
    )
    assert with_pool["sandbox"] == {
        "kind": "Container",
        "poolId": "default",
        "leaseId": None,
        "runtimeClass": None,
    }


def test_a_receipt_can_be_built_when_the_spec_never_parsed() -> None:
    for spec in (None, ToolInvocationSpec.model_construct()):  # type: ignore[call-arg]
        receipt = build_receipt(
            namespace="team-a",
            name="bad",
            uid="u3",
            spec=spec,
            status=ToolInvocationStatus(state=InvocationState.DENIED),
            tool_kind=None,
            written_at="t",
        )
        assert receipt["toolId"] is None and receipt["caller"] is None
        assert receipt["toolKind"] is None and receipt["state"] == "Denied"


def test_an_effect_confirmation_is_on_the_receipt() -> None:
    status = ToolInvocationStatus(
        state=InvocationState.UNCERTAIN,
        effect_confirmation=EffectConfirmation(
            effect_happened=True, confirmed_by="bob", evidence="row present"
        ),
    )
    receipt = build_receipt(
        namespace="n", name="i", uid="u", spec=SPEC, status=status, tool_kind="mcp", written_at="t"
    )
    assert receipt["effectConfirmation"] == {
        "effectHappened": True,
        "confirmedBy": "bob",
        "evidence": "row present",
        "recorded": False,
    }


def test_audit_requirements_decide_what_the_receipt_records() -> None:
    from tooladapter.model import AuditRequirements, ToolInvocationSpec, ToolInvocationStatus
    from tooladapter.receipts.core.record import build_receipt

    spec = ToolInvocationSpec.model_validate(
        {"tool": {"id": "t", "version": "1.0.0"}, "caller": {"name": "a"}, "arguments": {"x": 1}}
    )
    status = ToolInvocationStatus.model_validate(
        {"state": "Observed", "resultHash": "sha256:" + "1" * 64}
    )

    def receipt(audit: AuditRequirements | None) -> dict[str, object]:
        return build_receipt(
            namespace="ns",
            name="n",
            uid="u",
            spec=spec,
            status=status,
            tool_kind="shell",
            command_line=["echo", "hi"],
            written_at="2026-01-01T00:00:00Z",
            audit=audit,
        )

    full = receipt(None)
    assert full["argumentsHash"] and full["resultHash"] and full["commandLine"] == ["echo", "hi"]
    bare = receipt(AuditRequirements(arguments_hash=False, output_hash=False, command_line=False))
    assert bare["argumentsHash"] is None and bare["resultHash"] is None
    assert bare["commandLine"] is None
    assert bare["audit"] == {"argumentsHash": False, "outputHash": False, "commandLine": False}
