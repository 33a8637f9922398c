"""Side-effect classification: never lower, raise by rule, refuse when frozen or blocked."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tooladapter.enums import (
    RISK_TO_CLASS,
    BlockAction,
    EnvironmentClass,
    RiskClass,
    SideEffectClass,
    UnlistedAction,
)
from tooladapter.pipeline.classification import classify, environment_class, mcp_hint_class

C = SideEffectClass
DEV = EnvironmentClass.DEVELOPMENT
PROD = EnvironmentClass.PRODUCTION


@given(
    declared=st.sampled_from(SideEffectClass),
    environment=st.sampled_from(EnvironmentClass),
    frozen=st.booleans(),
    shell_blocked=st.booleans(),
    block_action=st.sampled_from(BlockAction),
    hinted=st.none() | st.sampled_from(SideEffectClass),
    risk=st.none() | st.sampled_from(RiskClass),
    shell_escalate_ok=st.booleans(),
    shell_unlisted=st.booleans(),
    unlisted_action=st.sampled_from(UnlistedAction),
)
def test_the_effective_class_is_never_below_the_declared_one(**inputs: Any) -> None:
    result = classify(**inputs)
    assert result.effective.rank >= inputs["declared"].rank
    assert result.declared == inputs["declared"]
    if inputs["hinted"] is not None:
        assert result.effective.rank >= inputs["hinted"].rank
    if inputs["risk"] is not None:
        assert result.effective.rank >= RISK_TO_CLASS[inputs["risk"]].rank
    assert result.reason


def test_nothing_raises_a_plain_call() -> None:
    result = classify(declared=C.READ, environment=DEV, frozen=False)
    assert (result.effective, result.refused, result.raised_by) == (C.READ, False, ())
    assert result.reason == "declared read; nothing raised it"


@pytest.mark.parametrize(
    ("declared", "effective"),
    [
        (C.READ, C.READ),
        (C.SANDBOX, C.SANDBOX),
        (C.SHARED_WRITE, C.PRODUCTION),
        (C.EXTERNAL, C.PRODUCTION),
        (C.PRODUCTION, C.PRODUCTION),
        (C.SPEND, C.SPEND),
    ],
)
def test_production_environment_raises_writes_to_production(
    declared: SideEffectClass, effective: SideEffectClass
) -> None:
    result = classify(declared=declared, environment=PROD, frozen=False)
    assert result.effective == effective
    if declared != effective:
        assert result.raised_by == (f"the production environment raised {declared} to production",)


def test_risk_class_may_raise_but_never_lower() -> None:
    raised = classify(declared=C.READ, environment=DEV, frozen=False, risk=RiskClass.FINANCIAL)
    assert raised.effective == C.SPEND
    assert raised.raised_by == ("riskClass FINANCIAL raised read to spend",)
    kept = classify(declared=C.PRODUCTION, environment=DEV, frozen=False, risk=RiskClass.READ_ONLY)
    assert kept.effective == C.PRODUCTION and kept.raised_by == ()


def test_mcp_hints_may_raise_but_never_lower() -> None:
    raised = classify(declared=C.READ, environment=DEV, frozen=False, hinted=C.EXTERNAL)
    assert raised.effective == C.EXTERNAL
    assert raised.raised_by == ("MCP tool annotations raised read to external",)
    kept = classify(declared=C.SHARED_WRITE, environment=DEV, frozen=False, hinted=C.READ)
    assert kept.effective == C.SHARED_WRITE


def test_a_hint_raised_class_is_raised_again_by_production() -> None:
    result = classify(declared=C.READ, environment=PROD, frozen=False, hinted=C.SHARED_WRITE)
    assert result.effective == C.PRODUCTION
    assert len(result.raised_by) == 2


def test_frozen_environment_refuses_shared_write() -> None:
    result = classify(declared=C.SHARED_WRITE, environment=DEV, frozen=True)
    assert result.refused
    assert "frozen" in result.reason and "shared-write" in result.reason


def test_frozen_environment_refuses_production() -> None:
    assert classify(declared=C.PRODUCTION, environment=DEV, frozen=True).refused


def test_frozen_production_environment_refuses_external_raised_to_production() -> None:
    result = classify(declared=C.EXTERNAL, environment=PROD, frozen=True)
    assert result.effective == C.PRODUCTION and result.refused


@pytest.mark.parametrize("declared", [C.READ, C.SANDBOX, C.EXTERNAL, C.SPEND])
def test_frozen_development_environment_lets_other_classes_run(declared: SideEffectClass) -> None:
    assert not classify(declared=declared, environment=DEV, frozen=True).refused


def test_block_listed_command_is_refused_when_the_policy_denies() -> None:
    result = classify(declared=C.SANDBOX, environment=DEV, frozen=False, shell_blocked=True)
    assert result.refused and "block list" in result.reason
    assert result.effective == C.SANDBOX


def test_block_listed_command_is_escalated_to_production_when_the_policy_escalates() -> None:
    result = classify(
        declared=C.SANDBOX,
        environment=DEV,
        frozen=False,
        shell_blocked=True,
        block_action=BlockAction.ESCALATE,
    )
    assert not result.refused
    assert result.effective == C.PRODUCTION and result.approval_forced


def test_escalated_command_in_a_frozen_environment_is_refused() -> None:
    result = classify(
        declared=C.SANDBOX,
        environment=DEV,
        frozen=True,
        shell_blocked=True,
        block_action=BlockAction.ESCALATE,
    )
    assert result.refused and result.effective == C.PRODUCTION


def test_structural_shell_refusals_are_never_escalated() -> None:
    result = classify(
        declared=C.SANDBOX,
        environment=DEV,
        frozen=False,
        shell_blocked=True,
        block_action=BlockAction.ESCALATE,
        shell_escalate_ok=False,
    )
    assert result.refused and "refused outright" in result.reason


def test_escalating_a_spend_tool_keeps_spend_and_forces_approval() -> None:
    result = classify(
        declared=C.SPEND,
        environment=DEV,
        frozen=False,
        shell_blocked=True,
        block_action=BlockAction.ESCALATE,
    )
    assert result.effective == C.SPEND and result.approval_forced


@given(
    declared=st.sampled_from(SideEffectClass),
    environment=st.sampled_from(EnvironmentClass),
    frozen=st.booleans(),
    unlisted_action=st.sampled_from(UnlistedAction),
    hinted=st.none() | st.sampled_from(SideEffectClass),
    risk=st.none() | st.sampled_from(RiskClass),
)
def test_an_unlisted_shell_command_never_runs_as_plain_sandbox(**inputs: Any) -> None:
    result = classify(shell_unlisted=True, **inputs)
    assert result.refused or (
        result.effective.rank >= C.SHARED_WRITE.rank and result.approval_forced
    )
    assert result.effective not in (C.READ, C.SANDBOX) or result.refused


@pytest.mark.parametrize("declared", [C.READ, C.SANDBOX])
def test_an_unlisted_command_is_raised_to_shared_write_and_needs_an_approval(
    declared: SideEffectClass,
) -> None:
    result = classify(
        declared=declared,
        environment=DEV,
        frozen=False,
        shell_unlisted=True,
        shell_reason="command `rm x` is not on the shell allow list",
    )
    assert not result.refused
    assert (result.effective, result.approval_forced) == (C.SHARED_WRITE, True)
    assert "not on the allow list" in result.reason
    assert "`rm x`" in result.reason
    assert result.raised_by == (
        "a shell command not on the allow list (command `rm x` is not on the shell allow "
        f"list) raised {declared.value} to shared-write",
    )


def test_an_unlisted_command_is_refused_when_the_policy_denies_it() -> None:
    result = classify(
        declared=C.SANDBOX,
        environment=DEV,
        frozen=False,
        shell_unlisted=True,
        unlisted_action=UnlistedAction.DENY,
        shell_reason="why",
    )
    assert result.refused and result.effective == C.SANDBOX
    assert "not on the allow list and the policy's shell.unlisted is deny (why)" in result.reason


def test_an_unlisted_command_in_production_is_raised_on_to_production() -> None:
    result = classify(declared=C.SANDBOX, environment=PROD, frozen=False, shell_unlisted=True)
    assert result.effective == C.PRODUCTION and result.approval_forced
    assert len(result.raised_by) == 2


def test_an_unlisted_command_in_a_frozen_environment_is_refused() -> None:
    result = classify(declared=C.SANDBOX, environment=DEV, frozen=True, shell_unlisted=True)
    assert result.refused and "frozen" in result.reason


def test_an_unlisted_command_of_a_spend_tool_keeps_spend_and_forces_approval() -> None:
    result = classify(declared=C.SPEND, environment=DEV, frozen=False, shell_unlisted=True)
    assert result.effective == C.SPEND and result.approval_forced


def test_the_block_list_decides_before_the_allow_list() -> None:
    result = classify(
        declared=C.SANDBOX,
        environment=DEV,
        frozen=False,
        shell_blocked=True,
        shell_unlisted=True,
        block_action=BlockAction.ESCALATE,
    )
    assert result.effective == C.PRODUCTION
    assert "allow list" not in result.reason
    denied = classify(
        declared=C.SANDBOX, environment=DEV, frozen=False, shell_blocked=True, shell_unlisted=True
    )
    assert denied.refused and "block list" in denied.reason


@pytest.mark.parametrize(
    ("annotations", "expected"),
    [
        (None, None),
        ({}, None),
        ({"title": "x"}, None),
        ({"readOnlyHint": True}, C.READ),
        ({"readOnlyHint": False}, C.SHARED_WRITE),
        ({"openWorldHint": True}, C.EXTERNAL),
        ({"destructiveHint": True}, C.PRODUCTION),
        ({"readOnlyHint": True, "destructiveHint": True}, C.PRODUCTION),
        ({"readOnlyHint": False, "openWorldHint": True}, C.EXTERNAL),
        ({"readOnlyHint": "true", "destructiveHint": 1}, None),
    ],
)
def test_mcp_hint_class(
    annotations: dict[str, Any] | None, expected: SideEffectClass | None
) -> None:
    assert mcp_hint_class(annotations) == expected


@pytest.mark.parametrize(
    ("label", "expected"),
    [
        (None, (EnvironmentClass.DEVELOPMENT, True)),
        ("", (EnvironmentClass.DEVELOPMENT, True)),
        ("development", (EnvironmentClass.DEVELOPMENT, True)),
        ("staging", (EnvironmentClass.STAGING, True)),
        ("production", (EnvironmentClass.PRODUCTION, True)),
        # Unknown values fail closed: a typo never lowers the protection.
        ("Production", (EnvironmentClass.PRODUCTION, False)),
        ("prod", (EnvironmentClass.PRODUCTION, False)),
        ("dev", (EnvironmentClass.PRODUCTION, False)),
        ("Development", (EnvironmentClass.PRODUCTION, False)),
        (" production", (EnvironmentClass.PRODUCTION, False)),
    ],
)
def test_an_unknown_environment_class_counts_as_production(
    label: str | None, expected: tuple[EnvironmentClass, bool]
) -> None:
    assert environment_class(label) == expected


def test_a_write_in_a_namespace_with_an_unknown_class_is_raised_to_production() -> None:
    environment, known = environment_class("Production")
    assert not known
    result = classify(declared=SideEffectClass.SHARED_WRITE, environment=environment, frozen=False)
    assert result.effective is SideEffectClass.PRODUCTION
