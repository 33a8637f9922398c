"""Tenant policy: lists, ranges, conditions, spend, shell lists, combination, fail-closed."""

from __future__ import annotations

from typing import Any

import pytest

from tooladapter.enums import BlockAction, SideEffectClass, UnlistedAction
from tooladapter.model import ToolPolicySpec
from tooladapter.pipeline.policy import (
    MISSING,
    check_ceiling,
    check_policy,
    evaluate_policies,
    parse_pointer,
    resolve_pointer,
    spend_gated,
    version_in_range,
)
from tooladapter.pipeline.shell.block import DEFAULT_BLOCK_LIST

HASH = "sha256:" + "a" * 64


def policy(**wire: Any) -> ToolPolicySpec:
    return ToolPolicySpec.model_validate(wire)


def evaluate(
    *policies: tuple[str, ToolPolicySpec],
    tool: str = "deploy",
    version: str = "2.0.0",
    arguments: dict[str, Any] | None = None,
    request_hash: str = HASH,
) -> Any:
    return evaluate_policies(
        list(policies),
        namespace="team-a",
        tool_id=tool,
        tool_version=version,
        arguments=arguments or {},
        request_hash=request_hash,
    )


def test_no_policies_allow_with_defaults() -> None:
    decision = evaluate()
    assert decision.allowed and not decision.requires_approval
    assert decision.approval_timeout_seconds == 3600
    assert decision.shell_block == DEFAULT_BLOCK_LIST
    assert decision.block_action is BlockAction.DENY
    assert decision.max_class is None
    assert decision.reasons == ("no ToolPolicy in namespace team-a: only the default rules apply",)


def test_deny_list_reason_names_the_policy_tool_and_reason() -> None:
    p = policy(tools={"deny": [{"id": "deploy", "reason": "freeze week"}]})
    decision = evaluate(("team-a/no-deploy", p))
    assert not decision.allowed
    assert decision.denials == (
        "ToolPolicy team-a/no-deploy: tool deploy@2.0.0 is on the deny list (reason: freeze week)",
    )


@pytest.mark.parametrize(
    ("versions", "version", "denied"),
    [
        (">=2,<3", "2.0.0", True),
        (">=2,<3", "3.0.0", False),
        (">=2,<3", "2.5.0-rc.1", True),
        ("1.0.0", "1.0.0", True),
        ("1.0.0", "1.0.1", False),
        ("*", "9.9.9", True),
        ("", "0.0.1", True),
        ("~=2.1", "2.9.0", True),
    ],
)
def test_deny_list_honours_version_ranges(versions: str, version: str, denied: bool) -> None:
    p = policy(tools={"deny": [{"id": "deploy", "versions": versions}]})
    assert evaluate(("ns/p", p), version=version).allowed is not denied


def test_deny_entries_support_globs() -> None:
    p = policy(tools={"deny": [{"id": "deploy-*"}]})
    assert not evaluate(("ns/p", p), tool="deploy-prod").allowed
    assert evaluate(("ns/p", p), tool="deployer").allowed


def test_an_allow_list_admits_only_listed_tools() -> None:
    p = policy(tools={"allow": [{"id": "read-logs"}, {"id": "deploy", "versions": "<2"}]})
    assert evaluate(("ns/p", p), tool="read-logs").allowed
    decision = evaluate(("ns/p", p), tool="deploy", version="2.0.0")
    assert not decision.allowed
    assert "do not include tool deploy@2.0.0" in decision.denials[0]
    assert "'deploy' versions <2" in decision.denials[0]


def test_an_empty_allow_list_admits_nothing() -> None:
    assert not evaluate(("ns/p", policy(tools={"allow": []}))).allowed


def test_allow_lists_of_several_policies_add_up() -> None:
    a = policy(tools={"allow": [{"id": "read-logs"}]})
    b = policy(tools={"allow": [{"id": "deploy"}]})
    decision = evaluate(("ns/a", a), ("ns/b", b))
    assert decision.allowed
    assert any("matches allow entry 'deploy'" in r for r in decision.reasons)


def test_deny_wins_over_allow() -> None:
    a = policy(tools={"allow": [{"id": "deploy"}]})
    b = policy(tools={"deny": [{"id": "deploy"}]})
    assert not evaluate(("ns/a", a), ("ns/b", b)).allowed


def test_an_invalid_version_range_is_a_policy_problem_and_fails_closed() -> None:
    p = policy(tools={"deny": [{"id": "other", "versions": "^1.2"}]})
    assert check_policy(p) == [
        "tools.deny[0].versions: version range '^1.2' is not valid: use comma-separated "
        "specifiers such as '>=1.0,<2', '~=1.4', '!=1.3.*', or an exact version"
    ]
    decision = evaluate(("ns/broken", p))
    assert not decision.allowed
    assert decision.invalid_policies == ("ns/broken",)
    assert decision.denials[0].startswith("ToolPolicy ns/broken is invalid and denies every call")


def test_an_unparseable_tool_version_fails_closed_against_a_ranged_deny_entry() -> None:
    p = policy(tools={"deny": [{"id": "deploy", "versions": ">=3"}]})
    decision = evaluate(("ns/p", p), version="1.0.0-weird")
    assert not decision.allowed and "not a valid version" in decision.denials[0]


@pytest.mark.parametrize(
    ("spec", "needle"),
    [
        (
            {"conditions": [{"path": "env", "operator": "equals", "value": 1}]},
            "must be empty or start",
        ),
        ({"conditions": [{"path": "/a~2", "operator": "exists"}]}, "'~' not followed"),
        ({"conditions": [{"path": "/a", "operator": "in", "value": "x"}]}, "needs a list"),
        ({"conditions": [{"path": "/a", "operator": "matches", "value": "("}]}, "does not compile"),
        (
            {"conditions": [{"path": "/a", "operator": "greaterThan", "value": "5"}]},
            "needs a number",
        ),
        ({"conditions": [{"path": "/a", "operator": "exists", "value": "yes"}]}, "true, false"),
        ({"shell": {"block": ["rm 'x"]}}, "shell.block[0]"),
        ({"spend": {"argument": ""}}, "spend.argument"),
        ({"spend": {"argument": "/x~"}}, "spend.argument"),
        ({"tools": {"deny": [{"id": " "}]}}, "tools.deny[0].id"),
        ({"approval": {"reviewerGroups": [""]}}, "approval.reviewerGroups"),
    ],
)
def test_check_policy_reports_each_invalid_rule(spec: dict[str, Any], needle: str) -> None:
    problems = check_policy(policy(**spec))
    assert len(problems) == 1 and needle in problems[0], problems


def test_a_valid_policy_has_no_problems() -> None:
    p = policy(
        tools={"allow": [{"id": "*", "versions": ">=1"}], "deny": [{"id": "x"}]},
        maxClass="production",
        shell={"allow": ["git status"], "block": ["git push --force"], "blockAction": "escalate"},
        spend={"argument": "/payment/amount", "threshold": 100},
        approval={"timeoutSeconds": 600, "reviewerGroups": ["sre"]},
        conditions=[{"path": "/env", "operator": "in", "value": ["prod"]}],
    )
    assert check_policy(p) == []


@pytest.mark.parametrize(
    ("condition", "arguments", "holds"),
    [
        ({"operator": "equals", "value": "prod"}, {"target": {"env": "prod"}}, True),
        ({"operator": "equals", "value": "prod"}, {"target": {"env": "dev"}}, False),
        ({"operator": "equals", "value": "prod"}, {}, False),
        ({"operator": "notEquals", "value": "dev"}, {"target": {"env": "prod"}}, True),
        ({"operator": "notEquals", "value": "dev"}, {}, True),
        ({"operator": "in", "value": ["prod", "stage"]}, {"target": {"env": "stage"}}, True),
        ({"operator": "matches", "value": "^prod-"}, {"target": {"env": "prod-eu"}}, True),
        ({"operator": "matches", "value": "^prod-"}, {"target": {"env": "eu-prod"}}, False),
        ({"operator": "exists"}, {"target": {"env": None}}, True),
        ({"operator": "exists"}, {"target": {}}, False),
        ({"operator": "exists", "value": False}, {"target": {}}, True),
        ({"operator": "greaterThan", "value": 10}, {"target": {"env": 11}}, True),
        ({"operator": "greaterThan", "value": 10}, {"target": {"env": "11"}}, True),
        ({"operator": "greaterThan", "value": 10}, {"target": {"env": 10}}, False),
        ({"operator": "greaterThan", "value": 10}, {"target": {"env": "lots"}}, True),
        ({"operator": "lessThan", "value": 10}, {"target": {"env": 9.5}}, True),
        ({"operator": "equals", "value": 1}, {"target": {"env": 1.0}}, True),
        ({"operator": "equals", "value": 1}, {"target": {"env": True}}, False),
    ],
)
def test_argument_conditions_deny(
    condition: dict[str, Any], arguments: dict[str, Any], holds: bool
) -> None:
    p = policy(conditions=[{"path": "/target/env", "reason": "prod is special", **condition}])
    decision = evaluate(("ns/cond", p), arguments=arguments)
    assert decision.allowed is not holds
    if holds:
        assert decision.denials[0].startswith("ToolPolicy ns/cond: argument condition 0")
        assert "prod is special" in decision.denials[0]


def test_argument_conditions_apply_only_to_their_tool() -> None:
    p = policy(conditions=[{"tool": "other", "path": "", "operator": "exists"}])
    assert evaluate(("ns/p", p)).allowed


def test_require_approval_conditions_gate_without_denying() -> None:
    p = policy(
        conditions=[
            {"path": "/env", "operator": "equals", "value": "prod", "effect": "requireApproval"}
        ]
    )
    decision = evaluate(("ns/p", p), arguments={"env": "prod"})
    assert decision.allowed and decision.requires_approval
    assert decision.approval_reasons[0].endswith("approval required")
    assert not evaluate(("ns/p", p), arguments={"env": "dev"}).requires_approval


def test_json_pointers_follow_rfc_6901() -> None:
    doc = {"a/b": {"m~n": [10, 20]}, "": 1}
    assert parse_pointer("/a~1b/m~0n/1") == ["a/b", "m~n", "1"]
    assert resolve_pointer(doc, "/a~1b/m~0n/1") == 20
    assert resolve_pointer(doc, "") is doc
    assert resolve_pointer(doc, "/") == 1
    assert resolve_pointer(doc, "/a~1b/m~0n/01") is MISSING
    assert resolve_pointer(doc, "/a~1b/m~0n/-") is MISSING
    assert resolve_pointer(doc, "/nope/x") is MISSING


def test_spend_is_gated_above_the_threshold() -> None:
    p = [("ns/p", policy(spend={"argument": "amount", "threshold": 100}))]
    assert not spend_gated(p, {"amount": 100})
    assert spend_gated(p, {"amount": 100.01})
    assert spend_gated(p, {"amount": "250"})
    assert spend_gated(p, {"amount": -500})
    assert spend_gated(p, {})
    assert spend_gated(p, {"amount": "a lot"})


def test_spend_without_a_threshold_is_always_gated() -> None:
    assert spend_gated([], {"amount": 1})


def test_spend_amount_may_be_a_json_pointer() -> None:
    p = [("ns/p", policy(spend={"argument": "/payment/value", "threshold": 5}))]
    assert not spend_gated(p, {"payment": {"value": 5}})
    assert spend_gated(p, {"payment": {"value": 6}})


def test_decision_records_spend_and_the_strictest_threshold() -> None:
    a = policy(spend={"argument": "amount", "threshold": 1000})
    b = policy(spend={"argument": "amount", "threshold": 50, "prohibited": False})
    decision = evaluate(("ns/a", a), ("ns/b", b), arguments={"amount": 75})
    assert decision.spend_threshold == 50
    assert decision.spend_amount == 75
    assert decision.spend_requires_approval
    assert any("above the threshold 50" in r for r in decision.reasons)


def test_spend_prohibition_denies_spend_calls_only() -> None:
    p = policy(spend={"prohibited": True})
    decision = evaluate(("ns/no-spend", p))
    assert decision.allowed and decision.spend_prohibited
    assert check_ceiling(decision, SideEffectClass.SPEND) == (
        "ToolPolicy ns/no-spend: spend calls are prohibited"
    )
    assert check_ceiling(decision, SideEffectClass.PRODUCTION) is None


def test_the_lowest_class_ceiling_applies() -> None:
    a = policy(maxClass="production")
    b = policy(maxClass="shared-write")
    decision = evaluate(("ns/a", a), ("ns/b", b))
    assert decision.max_class is SideEffectClass.SHARED_WRITE
    assert check_ceiling(decision, SideEffectClass.SHARED_WRITE) is None
    assert check_ceiling(decision, SideEffectClass.EXTERNAL) == (
        "ToolPolicy ns/b: effective class external exceeds the ceiling shared-write"
    )


def test_approval_settings_combine_strictly() -> None:
    a = policy(approval={"timeoutSeconds": 600, "reviewerGroups": ["sre"]})
    b = policy(approval={"reviewerGroups": ["dba"], "productionReviewerGroups": ["admins"]})
    decision = evaluate(("ns/a", a), ("ns/b", b))
    assert decision.approval_timeout_seconds == 600
    assert decision.reviewer_groups == ("dba", "sre")
    assert decision.production_reviewer_groups == ("admins",)
    assert decision.reviewer_groups_for(SideEffectClass.PRODUCTION) == ("admins",)
    assert decision.reviewer_groups_for(SideEffectClass.SHARED_WRITE) == ("dba", "sre")


def test_shell_lists_union_and_always_include_the_default_block_list() -> None:
    a = policy(shell={"allow": ["git status"], "block": ["git push --force", "rm -rf"]})
    b = policy(shell={"allow": ["npm test", "git status"]})
    decision = evaluate(("ns/a", a), ("ns/b", b))
    assert decision.shell_allow == ("git status", "npm test")
    assert decision.shell_block == (*DEFAULT_BLOCK_LIST, "git push --force")


def test_no_policy_allow_list_means_no_narrowing_and_an_empty_one_lists_nothing() -> None:
    assert evaluate().shell_allow is None
    assert evaluate(("ns/a", policy(shell={"block": ["x"]}))).shell_allow is None
    assert evaluate(("ns/a", policy(shell={"allow": []}))).shell_allow == ()


def test_unlisted_commands_escalate_unless_any_policy_denies_them() -> None:
    assert evaluate().unlisted_action is UnlistedAction.ESCALATE
    esc = policy(shell={"unlisted": "escalate"})
    deny = policy(shell={"unlisted": "deny"})
    assert evaluate(("ns/a", esc)).unlisted_action is UnlistedAction.ESCALATE
    assert evaluate(("ns/a", esc), ("ns/b", deny)).unlisted_action is UnlistedAction.DENY
    assert ToolPolicySpec().shell.unlisted is UnlistedAction.ESCALATE


def test_block_action_escalates_only_when_every_setter_says_escalate() -> None:
    esc = policy(shell={"blockAction": "escalate"})
    deny = policy(shell={"blockAction": "deny"})
    silent = policy(shell={"allow": ["ls"]})
    assert evaluate(("ns/a", esc), ("ns/c", silent)).block_action is BlockAction.ESCALATE
    assert evaluate(("ns/a", esc), ("ns/b", deny)).block_action is BlockAction.DENY
    assert evaluate(("ns/c", silent)).block_action is BlockAction.DENY


def test_decision_id_is_deterministic_and_tracks_policies_and_request() -> None:
    p = policy(tools={"deny": [{"id": "x"}]})
    first = evaluate(("ns/p", p)).decision_id
    assert first == evaluate(("ns/p", p)).decision_id
    assert first != evaluate(("ns/p", p), request_hash="sha256:" + "b" * 64).decision_id
    assert first != evaluate(("ns/q", p)).decision_id
    assert first != evaluate(("ns/p", policy(tools={"deny": [{"id": "y"}]}))).decision_id
    assert len(first) == 36


def test_version_in_range_is_none_for_unparseable_versions() -> None:
    assert version_in_range("1.0.0-weird", ">=1") is None
    assert version_in_range("1.0.0", "not a range") is None
    assert version_in_range("whatever", "") is True
