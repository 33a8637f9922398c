"""The one authorization sequence, pure: every refusal in the order a call meets it, and the
re-check's recorded class (kept, and refused when the class rose above it)."""

from __future__ import annotations

from typing import Any

from tooladapter.enums import FailureClass, SideEffectClass, Stage
from tooladapter.model import ToolInvocationSpec, ToolPolicySpec
from tooladapter.pipeline.authorization import authorize, effective_class
from tooladapter.pipeline.classification import Classification
from tooladapter.pipeline.permission import Permission
from tooladapter.pipeline.policy import PolicyDecision, evaluate_policies

CALL = ToolInvocationSpec.model_validate(
    {"tool": {"id": "writer", "version": "1.0.0"}, "caller": {"name": "agent"}, "arguments": {}}
)


def _decision(**spec: Any) -> PolicyDecision:
    return evaluate_policies(
        [("n/tenant", ToolPolicySpec.model_validate(spec))],
        namespace="n",
        tool_id="writer",
        tool_version="1.0.0",
        arguments={},
        request_hash="",
    )


def _class(effective: SideEffectClass, *, refused: bool = False) -> Classification:
    raised = () if effective is SideEffectClass.SHARED_WRITE else ("the namespace is production",)
    return Classification(
        declared=SideEffectClass.SHARED_WRITE,
        effective=effective,
        refused=refused,
        reason="frozen: production calls are refused until it is unfrozen" if refused else "",
        raised_by=raised,
    )


def _authorize(
    decision: PolicyDecision,
    classification: Classification,
    permission: Permission | None,
    recorded: SideEffectClass | None = None,
) -> list[tuple[Stage, str, FailureClass]]:
    refused = authorize(
        namespace="n",
        call=CALL,
        decision=decision,
        classification=classification,
        verdict=None,
        permission=permission,
        recorded=recorded,
    )
    return [(r.stage, r.reason, r.failure) for r in refused]


def test_nothing_refuses_an_allowed_call() -> None:
    allowed = Permission(invoke=True, use=True)
    assert _authorize(_decision(), _class(SideEffectClass.SHARED_WRITE), allowed) == []


def test_every_refusal_is_listed_in_the_order_a_call_meets_it() -> None:
    decision = _decision(
        tools={"deny": [{"id": "writer", "reason": "retired"}]}, maxClass="shared-write"
    )
    found = _authorize(
        decision, _class(SideEffectClass.PRODUCTION, refused=True), Permission(False, False)
    )
    assert [stage for stage, _, _ in found] == [
        Stage.PERMISSION,
        Stage.POLICY,
        Stage.POLICY,
        Stage.CLASSIFICATION,
    ]
    assert "may not invoke tooldescriptors/writer in n" in found[0][1]
    assert found[0][2] is FailureClass.PERMISSION_DENIED
    assert "retired" in found[1][1]
    assert "exceeds the ceiling shared-write" in found[2][1]
    assert found[2][1].endswith("(the call's class was raised: the namespace is production)")
    assert found[3] == (
        Stage.CLASSIFICATION,
        "frozen: production calls are refused until it is unfrozen",
        FailureClass.POLICY_DENIED,
    )


def test_no_answers_no_permission_refusal() -> None:
    decision = _decision(maxClass="shared-write")
    found = _authorize(decision, _class(SideEffectClass.PRODUCTION), None)
    assert [stage for stage, _, _ in found] == [Stage.POLICY]


def test_the_recheck_keeps_the_recorded_class_and_refuses_a_class_that_rose() -> None:
    allowed = Permission(invoke=True, use=True)
    rose = _authorize(
        _decision(), _class(SideEffectClass.PRODUCTION), allowed, SideEffectClass.SHARED_WRITE
    )
    assert rose == [
        (
            Stage.CLASSIFICATION,
            "the call's class rose from shared-write to production while it waited (the "
            "namespace's environment changed): call again",
            FailureClass.POLICY_DENIED,
        )
    ]
    # A class that fell since does not lower the one the call was authorized (and approved) at.
    fell = _class(SideEffectClass.SHARED_WRITE)
    assert effective_class(fell, SideEffectClass.PRODUCTION) is SideEffectClass.PRODUCTION
    no_use = _authorize(
        _decision(), fell, Permission(invoke=True, use=False), SideEffectClass.PRODUCTION
    )
    assert "may not use sideeffectclasses/production" in no_use[0][1]
