"""No agent input stalls the operator: every regex over agent text is RE2, patterns RE2
cannot run (or that nest quantifiers) are refused where they are written, the validator has
no quadratic keyword, arguments are bounded before anything walks them (at admission too),
and CPU-heavy work leaves the event loop. No timed assertions: `python -m bench
adversarial` measures the times."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path
from typing import Any

import pytest
import yaml

from tooladapter import offload
from tooladapter.catalog import thaw
from tooladapter.launcher import RECURSION_LIMIT
from tooladapter.model import ArgumentCondition, ToolDescriptorSpec, ToolPolicySpec
from tooladapter.pipeline import linear_regex
from tooladapter.pipeline.policy import check_policy, evaluate_policies
from tooladapter.pipeline.validation.admission import admission_bounds_cel, admission_flat_cel
from tooladapter.pipeline.validation.arguments import check_bounds, validate_arguments
from tooladapter.pipeline.validation.descriptor import check_descriptor
from tooladapter.pipeline.validation.linear_keywords import LinearValidator
from tooladapter.pipeline.validation.schemas import check_schema
from tooladapter.receipts.core.record import build_receipt

ROOT = Path(__file__).resolve().parents[3]


def descriptor(schema: dict[str, Any]) -> ToolDescriptorSpec:
    return ToolDescriptorSpec.model_validate(
        {
            "toolId": "t",
            "version": "1.0.0",
            "kind": "native",
            "sideEffectClass": "read",
            "native": {"name": "list-tools"},
            "inputSchema": schema,
        }
    )


# --------------------------------------------------------------------------- schema patterns


def test_a_descriptor_with_a_nested_quantifier_pattern_is_inactive_naming_the_pattern() -> None:
    spec = descriptor(
        {"type": "object", "properties": {"name": {"type": "string", "pattern": "^(a+)+$"}}}
    )
    problems = check_descriptor(spec)
    assert len(problems) == 1
    assert "'^(a+)+$'" in problems[0] and "$.properties.name.pattern" in problems[0]
    assert "nests unbounded quantifiers" in problems[0]


@pytest.mark.parametrize(
    "pattern",
    ["^(a+)+$", "(a*)*", "(\\w+\\s?)+$", "(?:x+)+y", "((ab)+)+", "^(a{2,})+$", "(a|b?)+"],
)
def test_patterns_that_match_one_string_in_many_ways_are_refused(pattern: str) -> None:
    assert linear_regex.pattern_problem(pattern)
    assert check_schema({"type": "string", "pattern": pattern})


@pytest.mark.parametrize(
    "pattern",
    ["^[a-z]+$", "([a-z0-9]+\\.)+[a-z]{2,}", "(\\d+\\.){3}\\d+", "^(a|aa)+$", "\\pL+", "^v\\d+$"],
)
def test_ordinary_patterns_are_accepted(pattern: str) -> None:
    assert linear_regex.pattern_problem(pattern) is None


@pytest.mark.parametrize("pattern", ["(a)\\1", "a(?=b)", "(?<!x)y", "a{1001}"])
def test_a_pattern_the_linear_engine_cannot_run_makes_the_descriptor_inactive(
    pattern: str,
) -> None:
    problems = check_descriptor(
        descriptor({"type": "object", "patternProperties": {pattern: {"type": "string"}}})
    )
    assert problems and "does not compile on the linear regex engine (re2)" in problems[0]


def test_schema_patterns_run_on_re2_in_every_keyword() -> None:
    validator = LinearValidator({})
    for keyword in (
        "pattern",
        "patternProperties",
        "additionalProperties",
        "unevaluatedProperties",
    ):
        assert validator.VALIDATORS[keyword].__module__ == (
            "tooladapter.pipeline.validation.linear_keywords"
        )
    assert type(linear_regex.compile_linear("^a$")).__module__.startswith("re2")


def test_an_exponential_pattern_for_backtracking_engines_is_linear_here() -> None:
    """`^(a|aa)*$` is accepted (no nesting) but exponential in Python's re: RE2 runs it."""
    schema = {"type": "object", "properties": {"s": {"type": "string", "pattern": "^(a|aa)*$"}}}
    problems = validate_arguments(schema, {"s": "a" * 200_000 + "b"})
    assert [p.rule for p in problems] == ["pattern"]


def test_pattern_properties_additional_and_unevaluated_properties_keep_their_meaning() -> None:
    schema = {
        "type": "object",
        "properties": {"id": {"type": "integer"}},
        "patternProperties": {"^x-": {"type": "string"}},
        "additionalProperties": False,
    }
    assert validate_arguments(schema, {"id": 1, "x-a": "b"}) == []
    assert [p.rule for p in validate_arguments(schema, {"id": 1, "x-a": 2})] == ["type"]
    assert [p.rule for p in validate_arguments(schema, {"id": 1, "y": 2})] == [
        "additionalProperties"
    ]
    uneval = {
        "type": "object",
        "allOf": [{"properties": {"a": {}}}, {"patternProperties": {"^b": {}}}],
        "unevaluatedProperties": False,
    }
    assert validate_arguments(uneval, {"a": 1, "bb": 2}) == []
    assert [p.rule for p in validate_arguments(uneval, {"a": 1, "c": 2})] == [
        "unevaluatedProperties"
    ]


def test_format_regex_is_checked_with_re2() -> None:
    schema = {"type": "object", "properties": {"r": {"type": "string", "format": "regex"}}}
    assert validate_arguments(schema, {"r": "^[a-z]+$"}) == []
    assert [p.rule for p in validate_arguments(schema, {"r": "(a)\\1"})] == ["format"]
    assert [p.rule for p in validate_arguments(schema, {"r": "(" * 5000})] == ["format"]


# --------------------------------------------------------------------------- quadratic keywords


def test_unique_items_compares_by_json_equality_in_one_pass() -> None:
    schema = {"type": "object", "properties": {"a": {"type": "array", "uniqueItems": True}}}
    many = [{"k": i, "v": [i, str(i)]} for i in range(20_000)]
    assert validate_arguments(schema, {"a": many}) == []
    for duplicate in ([{"a": 1, "b": 2}, {"b": 2, "a": 1}], [1, 1.0], [[1, [2]], [1, [2]]]):
        assert [p.rule for p in validate_arguments(schema, {"a": duplicate})] == ["uniqueItems"]
    for distinct in ([True, 1], [False, 0], [None, False], ["1", 1], [{"a": 1}, {"a": "1"}]):
        assert validate_arguments(schema, {"a": distinct}) == []


def test_unevaluated_items_and_properties_are_checked_with_sets() -> None:
    items = {
        "type": "object",
        "properties": {
            "a": {"type": "array", "prefixItems": [{}], "unevaluatedItems": {"type": "integer"}}
        },
    }
    assert validate_arguments(items, {"a": ["x", *range(50_000)]}) == []
    assert [p.rule for p in validate_arguments(items, {"a": ["x", 1, "y"]})] == ["unevaluatedItems"]
    props = {
        "type": "object",
        "properties": {"x": {}},
        "unevaluatedProperties": {"type": "integer"},
    }
    assert validate_arguments(props, {str(i): i for i in range(20_000)}) == []


def test_a_flood_of_schema_errors_is_cut_short() -> None:
    schema = {"type": "object", "properties": {"a": {"type": "array", "items": {"type": "string"}}}}
    problems = validate_arguments(schema, {"a": [0] * 50_000})
    assert len(problems) == 51 and problems[-1].message.startswith("and at least")


# --------------------------------------------------------------------------- bounds


def test_integers_without_an_exact_json_form_are_refused_before_hashing() -> None:
    assert check_bounds({"n": 2**53}) == []
    (problem,) = check_bounds({"n": 2**53 + 1})
    assert "beyond +-2**53" in problem and "$.n" in problem


def test_the_receipt_of_a_call_with_unbounded_arguments_does_not_walk_them() -> None:
    from tooladapter.model import ToolInvocationSpec, ToolInvocationStatus

    deep: Any = 1
    for _ in range(5000):
        deep = [deep]
    for arguments in ({"d": deep}, {"n": 2**60}):
        # Only the arguments matter to the receipt here; model_construct validates nothing.
        spec = ToolInvocationSpec.model_construct(arguments=arguments)  # type: ignore[call-arg]
        status = ToolInvocationStatus.model_validate({"state": "Denied"})
        receipt = build_receipt(
            namespace="n",
            name="i",
            uid="u",
            spec=spec,
            status=status,
            tool_kind="shell",
            written_at="2026-01-01T00:00:00Z",
        )
        assert receipt["argumentsHash"] is None


def test_the_admission_policy_is_the_generated_depth_bound() -> None:
    path = ROOT / "manifests" / "admission" / "invocation-arguments.yaml"
    policy, binding = list(yaml.safe_load_all(path.read_text()))
    assert policy["spec"]["validations"][0]["expression"] == admission_bounds_cel()
    assert policy["spec"]["failurePolicy"] == "Fail"
    (flat,) = policy["spec"]["matchConditions"]
    assert flat["expression"] == admission_flat_cel()
    assert policy["spec"]["variables"] == [
        {"name": "arguments", "expression": "object.spec.?arguments.orValue({})"}
    ]
    assert binding["spec"]["validationActions"] == ["Deny"]
    # The Helm chart renders this same file (tests/unit/packaging/test_chart.py compares them).


def test_the_admission_expression_names_each_level_once() -> None:
    """CEL has no recursion: the walk is unrolled, and must stay linear in the depth."""
    shallow, deep = admission_bounds_cel(max_depth=4), admission_bounds_cel(max_depth=8)
    assert len(deep) < 2.5 * len(shallow)
    assert "v33" in admission_bounds_cel() and "v34" not in admission_bounds_cel()


def test_a_body_nested_as_deep_as_the_api_server_allows_is_copied_without_recursion() -> None:
    deep: Any = {"leaf": [1, 2]}
    for _ in range(9_990):
        deep = [deep]
    body = {"metadata": {"name": "x"}, "spec": {"arguments": {"d": deep}}}
    copy = thaw(body)
    assert copy is not body and copy["spec"]["arguments"]["d"] is not deep
    node = copy["spec"]["arguments"]["d"]
    for _ in range(9_990):
        node = node[0]
    assert node == {"leaf": [1, 2]}
    assert check_bounds(copy["spec"]["arguments"])  # and validation denies it


def test_the_operator_decodes_what_the_api_server_accepts() -> None:
    """kopf decodes watch events with json.loads (C recursion counted against the limit)."""
    import subprocess
    import sys

    code = (
        "import json, sys\n"
        f"sys.setrecursionlimit({RECURSION_LIMIT})\n"
        "json.loads('[' * 10000 + ']' * 10000)\n"
        "print('decoded')\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.stdout.strip() == "decoded", done.stderr


# --------------------------------------------------------------------------- policy conditions


def policy(operator: str, value: Any) -> ToolPolicySpec:
    return ToolPolicySpec.model_validate(
        {
            "conditions": [
                ArgumentCondition.model_validate(
                    {
                        "tool": "*",
                        "path": "/q",
                        "operator": operator,
                        "value": value,
                        "effect": "deny",
                    }
                ).model_dump(by_alias=True)
            ]
        }
    )


def test_a_policy_condition_re2_cannot_run_makes_the_policy_invalid() -> None:
    problems = check_policy(policy("matches", "(a)\\1"))
    assert problems and "linear regex engine (re2)" in problems[0]


def test_policy_conditions_match_on_re2() -> None:
    decision = evaluate_policies(
        [("ns/p", policy("matches", "^(a|aa)*$"))],
        namespace="ns",
        tool_id="t",
        tool_version="1.0.0",
        arguments={"q": "a" * 100_000 + "b"},
        request_hash="sha256:x",
    )
    assert decision.allowed  # no match, found in linear time
    decision = evaluate_policies(
        [("ns/p", policy("matches", "^(a|aa)*$"))],
        namespace="ns",
        tool_id="t",
        tool_version="1.0.0",
        arguments={"q": "a" * 1000},
        request_hash="sha256:x",
    )
    assert not decision.allowed


# --------------------------------------------------------------------------- off the loop


async def test_small_jobs_run_inline_and_large_ones_on_a_worker() -> None:
    here = threading.get_ident()
    assert await offload.run("a", 10, threading.get_ident) == here
    assert await offload.run("a", offload.INLINE_BYTES + 1, threading.get_ident) != here


async def test_one_tenant_runs_one_large_job_at_a_time_and_others_are_not_queued() -> None:
    started: list[str] = []
    release = threading.Event()

    def job(name: str) -> str:
        started.append(name)
        release.wait(10)
        return name

    big = offload.INLINE_BYTES + 1
    a1 = asyncio.create_task(offload.run("tenant-a", big, job, "a1"))
    a2 = asyncio.create_task(offload.run("tenant-a", big, job, "a2"))
    b1 = asyncio.create_task(offload.run("tenant-b", big, job, "b1"))
    for _ in range(200):
        if len(started) >= 2:
            break
        await asyncio.sleep(0.01)
    assert sorted(started) == ["a1", "b1"]  # a2 waits for a1; b1 does not wait for a
    release.set()
    assert list(await asyncio.gather(a1, a2, b1)) == ["a1", "a2", "b1"]


# --------------------------------------------------------------------------- shell check


def test_the_shell_checks_quadratic_rules_run_on_re2() -> None:
    from tooladapter.pipeline.shell import block, interpreters

    for regex in (block._SQL_BLOCK_COMMENT, interpreters._AWK_CODE):
        assert type(regex).__module__.startswith("re2")


@pytest.mark.parametrize("unit", ["/* ", "/*! ", "print "])
def test_a_command_made_of_comment_openers_is_checked(unit: str) -> None:
    """`echo '/* /* ...'` (64 KiB) took ~6 s in the SQL-comment rule on Python `re`,
    holding the GIL; the whole check now runs off the event loop too (`shell_verdict`)."""
    from tooladapter.pipeline.shell.block import DEFAULT_BLOCK_LIST
    from tooladapter.pipeline.shell.check import check_command

    command = "echo '" + (unit * 21_000)[:64_000] + "'"
    verdict = check_command(command, allow=["echo"], block=list(DEFAULT_BLOCK_LIST))
    assert verdict.argv[0] == "echo"


def test_an_in_condition_canonicalises_the_agents_value_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """200 KB of arguments against a 100-item `in` list was 100 canonicalisations (~3 s
    on the event loop); the agent's value is canonicalised once."""
    from tooladapter.pipeline import policy as policy_module
    from tooladapter.pipeline.hashing import canonical_json

    big = [{"k": i} for i in range(2000)]
    seen: list[Any] = []
    real = canonical_json

    def counting(value: Any) -> bytes:
        seen.append(value)
        return real(value)

    monkeypatch.setattr(policy_module, "canonical_json", counting)
    evaluate_policies(
        [("ns/p", policy("in", [f"v{i}" for i in range(100)]))],
        namespace="ns",
        tool_id="t",
        tool_version="1.0.0",
        arguments={"q": big},
        request_hash="sha256:x",
    )
    assert sum(1 for value in seen if value is big) == 1
