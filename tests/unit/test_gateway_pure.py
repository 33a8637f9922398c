"""The gateway's pure parts: the tool list, MCP hints from side-effect classes, call options,
the invocation it creates, progress and result mapping, problem documents."""

from __future__ import annotations

from typing import Any

import pytest

from tooladapter.pipeline.problems import ProblemKind, kind_for_api_status, problem
from tooladapter.pipeline.toolview import (
    BadCallOptions,
    call_options,
    call_result,
    callable_versions,
    invocation_body,
    mcp_tool,
    parse_descriptors,
    pending_result,
    progress_of,
    tool_detail,
)


def desc(
    tool_id: str = "t",
    version: str = "1.0.0",
    *,
    cls: str = "read",
    kind: str = "native",
    active: bool = True,
    healthy: bool = True,
    **spec: Any,
) -> dict[str, Any]:
    kinds: dict[str, Any] = {
        "native": {"native": {"name": "list-tools"}},
        "http": {"http": {"url": "https://example.com/x", "allowedHosts": ["example.com"]}},
        "shell": {},
    }
    return {
        "metadata": {"name": f"{tool_id}-{version}"},
        "spec": {
            "toolId": tool_id,
            "version": version,
            "kind": kind,
            "sideEffectClass": cls,
            **kinds[kind],
            **spec,
        },
        "status": {"active": active, "healthy": healthy},
    }


def entry(**kwargs: Any) -> Any:
    (parsed,) = parse_descriptors([desc(**kwargs)])
    return parsed


# --------------------------------------------------------------------------- tool list


def test_only_active_healthy_unretired_versions_are_listed_highest_first() -> None:
    versions = callable_versions(
        parse_descriptors(
            [
                desc("a", "1.9.0"),
                desc("a", "1.10.0"),
                desc("a", "2.0.0", active=False),
                desc("b", "1.0.0", healthy=False),
                desc("c", "1.0.0", retired=True),
                {"metadata": {"name": "broken"}, "spec": {"toolId": "d"}},
            ]
        )
    )
    assert list(versions) == ["a"]
    assert [e.spec.version for e in versions["a"]] == ["1.10.0", "1.9.0"]


@pytest.mark.parametrize(
    ("cls", "kind", "extra", "expected"),
    [
        ("read", "native", {}, (True, False, True, False)),
        ("read", "http", {}, (True, False, True, True)),
        ("sandbox", "shell", {}, (False, False, False, False)),
        (
            "sandbox",
            "shell",
            {"sandbox": {"egress": {"allow": ["10.0.0.0/8"]}}},
            (False, False, False, True),
        ),
        ("shared-write", "native", {}, (False, True, False, False)),
        ("external", "native", {}, (False, True, False, True)),
        ("production", "native", {}, (False, True, False, True)),
        ("spend", "native", {}, (False, True, False, True)),
        # The risk class raises the declared class, so the hints follow it.
        ("read", "native", {"riskClass": "IRREVERSIBLE_WRITE"}, (False, True, False, True)),
    ],
)
def test_annotations_follow_the_side_effect_class(
    cls: str, kind: str, extra: dict[str, Any], expected: tuple[bool, bool, bool, bool]
) -> None:
    hints = mcp_tool(entry(cls=cls, kind=kind, **extra))["annotations"]
    assert (
        hints["readOnlyHint"],
        hints["destructiveHint"],
        hints["idempotentHint"],
        hints["openWorldHint"],
    ) == expected


def test_an_mcp_tool_carries_its_version_and_only_an_object_output_schema() -> None:
    tool = mcp_tool(
        entry(outputSchema={"type": "object", "properties": {"n": {"type": "integer"}}})
    )
    assert tool["name"] == "t"
    assert tool["_meta"]["dev.tooladapter/version"] == "1.0.0"
    assert tool["_meta"]["dev.tooladapter/sideEffectClass"] == "read"
    assert tool["inputSchema"] == {"type": "object"}
    assert tool["outputSchema"]["type"] == "object"
    assert "outputSchema" not in mcp_tool(entry(outputSchema={"type": "array"}))


def test_a_tool_detail_names_its_limits_and_versions() -> None:
    one = entry(timeoutSeconds=30)
    detail = tool_detail(one, [one])
    assert detail["timeoutSeconds"] == 30
    assert detail["versions"] == ["1.0.0"]
    assert detail["auditRequirements"]["outputHash"] is True


# --------------------------------------------------------------------------- a call


def test_call_options_come_from_namespaced_meta_keys() -> None:
    options = call_options(
        {
            "dev.tooladapter/idempotencyKey": "k",
            "dev.tooladapter/version": "1.2.0",
            "dev.tooladapter/runId": "run",
            "dev.tooladapter/fencingToken": 7,
            "progressToken": "ignored",
        }
    )
    assert (options.idempotency_key, options.version, options.run_id) == ("k", "1.2.0", "run")
    assert options.fencing_token == 7
    assert call_options(None).version is None


@pytest.mark.parametrize(
    "meta",
    [
        {"dev.tooladapter/version": "not a version"},
        {"dev.tooladapter/idempotencyKey": ""},
        {"dev.tooladapter/idempotencyKey": 3},
        {"dev.tooladapter/fencingToken": -1},
        {"dev.tooladapter/fencingToken": True},
        {"dev.tooladapter/runId": "x" * 129},
    ],
)
def test_bad_call_options_are_refused(meta: dict[str, Any]) -> None:
    with pytest.raises(BadCallOptions):
        call_options(meta)


def test_the_invocation_names_the_reviewed_caller_and_groups() -> None:
    body = invocation_body(
        tool_id="echo",
        version="1.0.0",
        arguments={"a": 1},
        username="system:serviceaccount:team-a:agent-1",
        groups=["system:serviceaccounts", "system:authenticated", "system:serviceaccounts"],
        options=call_options({"dev.tooladapter/idempotencyKey": "k"}),
    )
    assert body["metadata"] == {"generateName": "echo-"}
    caller = body["spec"]["caller"]
    assert caller == {
        "kind": "agent",
        "name": "system:serviceaccount:team-a:agent-1",
        "groups": ["system:serviceaccounts", "system:authenticated"],
    }
    assert body["spec"]["idempotencyKey"] == "k"
    people = invocation_body(
        tool_id="echo",
        version="1.0.0",
        arguments={},
        username="alice",
        groups=[],
        options=call_options(None),
    )
    assert people["spec"]["caller"] == {"kind": "user", "name": "alice"}


def invocation(state: str | None, **status: Any) -> dict[str, Any]:
    return {
        "metadata": {"name": "call-1", "namespace": "team-a"},
        "spec": {"tool": {"id": "t", "version": "1.0.0"}},
        "status": {**({"state": state} if state else {}), **status},
    }


def test_progress_names_the_state_and_what_an_approval_needs() -> None:
    step = progress_of(invocation(None))
    assert step is not None and step[1].startswith("Received")
    waiting = progress_of(
        invocation(
            "AwaitingApproval",
            effectiveClass="shared-write",
            requestHash="sha256:" + "a" * 64,
            descriptorDigest="sha256:" + "b" * 64,
        )
    )
    assert waiting is not None
    assert waiting[1].startswith("awaiting approval (shared-write): ")
    assert "invocation call-1 " in waiting[1] and "a" * 64 in waiting[1]
    assert progress_of(invocation("Observed")) is None


def test_an_observed_call_is_a_success_with_its_receipt() -> None:
    obj = invocation(
        "Observed",
        receiptRef="sha256:" + "c" * 64,
        result={"content": "hi", "structuredContent": {"n": 1}},
    )
    result = call_result(obj, text="hi")
    assert result["isError"] is False
    assert result["content"] == [{"type": "text", "text": "hi"}]
    assert result["structuredContent"] == {"n": 1}
    assert result["_meta"]["dev.tooladapter/invocation"] == "call-1"
    assert result["_meta"]["dev.tooladapter/receiptRef"] == "sha256:" + "c" * 64


def test_an_output_schema_takes_json_text_and_refuses_what_breaks_it() -> None:
    schema = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}
    ok = call_result(invocation("Observed"), text='{"n": 2}', output_schema=schema)
    assert ok["isError"] is False and ok["structuredContent"] == {"n": 2}
    broken = call_result(invocation("Observed"), text='{"n": "x"}', output_schema=schema)
    assert broken["isError"] is True
    assert "outputSchema" in broken["content"][0]["text"]
    plain = call_result(invocation("Observed"), text="not json", output_schema=schema)
    assert plain["isError"] is True and "structuredContent" not in plain


@pytest.mark.parametrize(
    ("state", "status", "expected"),
    [
        (
            "Denied",
            {"deniedStage": "permission", "failureClass": "permission-denied", "message": "no"},
            "Denied at stage permission (permission-denied): no",
        ),
        (
            "Failed",
            {"stages": [{"stage": "execute", "outcome": "failed"}], "message": "exit 2"},
            "Failed at stage execute: exit 2",
        ),
        ("Cancelled", {"stages": [{"stage": "execute"}], "message": "stop"}, "Cancelled at"),
        ("Uncertain", {"stages": [{"stage": "execute"}], "message": "lost"}, "Uncertain at"),
    ],
)
def test_every_other_end_is_an_error_with_its_stage_and_reason(
    state: str, status: dict[str, Any], expected: str
) -> None:
    result = call_result(invocation(state, **status), text=None)
    assert result["isError"] is True
    assert result["content"][0]["text"].startswith(expected)
    assert result["_meta"]["dev.tooladapter/state"] == state


def test_an_uncertain_call_says_it_may_have_happened() -> None:
    result = call_result(invocation("Uncertain", message="operator lost"), text=None)
    assert "may have had its effect" in result["content"][0]["text"]


def test_a_call_still_waiting_is_no_error_and_names_where_to_read_it() -> None:
    result = pending_result(invocation("AwaitingApproval"), 300.4)
    assert result["isError"] is False
    text = result["content"][0]["text"]
    assert text.startswith("awaiting approval after 300s")
    assert "GET /namespaces/team-a/tool-invocations/call-1" in text


# --------------------------------------------------------------------------- problems


def test_problem_documents_have_type_title_status_and_a_redacted_detail() -> None:
    token = "ghp_" + "A1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q7r8"
    doc = problem(ProblemKind.FORBIDDEN, f"refused: {token}", hint="x")
    assert doc["type"] == "https://tooladapter.dev/problems/forbidden"
    assert doc["status"] == 403 and doc["title"]
    assert token not in doc["detail"] and doc["hint"] == "x"
    assert len(problem(ProblemKind.INVALID, "x" * 10_000)["detail"]) <= 1024


@pytest.mark.parametrize(
    ("status", "kind"),
    [
        (401, ProblemKind.UNAUTHENTICATED),
        (403, ProblemKind.FORBIDDEN),
        (404, ProblemKind.NOT_FOUND),
        (409, ProblemKind.CONFLICT),
        (422, ProblemKind.INVALID),
        (429, ProblemKind.UPSTREAM),
        (0, ProblemKind.UPSTREAM),
        (500, ProblemKind.UPSTREAM),
        (418, ProblemKind.INVALID),
    ],
)
def test_api_refusals_map_to_the_callers_problem(status: int, kind: ProblemKind) -> None:
    assert kind_for_api_status(status) == kind
