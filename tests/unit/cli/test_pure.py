"""The command line's pure parts: parsing, the objects it writes, views, diff, output,
receipt verification and exit codes."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import pytest

from tooladapter.cli import bodies, views
from tooladapter.cli.exitcodes import (
    CliError,
    ExitCode,
    for_api_status,
    for_outcome,
    for_state,
)
from tooladapter.cli.follow import StageDisplay, finished
from tooladapter.cli.parsing import (
    looks_like_ref,
    name_prefix,
    parse_arguments,
    parse_duration,
    parse_expiry,
    parse_ref,
)
from tooladapter.cli.render import Output, cell, document, new_stage_lines, table
from tooladapter.enums import ApprovalDecision
from tooladapter.pipeline.hashing import canonical_json, request_hash, sha256_ref
from tooladapter.receipts.core.check import Match, ref_from_filename, verify
from tooladapter.review import texts as review
from tooladapter.review.argdiff import Change, ChangeKind, diff, render

NOW = datetime(2026, 12, 1, 12, 0, 0, tzinfo=UTC)
HEX = "ab" * 32
#: The hash the operator fixed for `waiting_call()`'s request.
REQUEST_HASH = request_hash(
    namespace="t", tool_id="deploy", tool_version="1.2.0", arguments={"tag": "v2"}
)


# --------------------------------------------------------------------------- parsing


def test_arguments_are_text_by_default_json_after_colon_equals_and_later_keys_win() -> None:
    args = parse_arguments(
        ["branch=main", "count:=3", 'tags:=["a"]', "expr=a=b", "branch=dev"],
        '{"branch": "x", "nested": {"k": 1}}',
    )
    assert args == {
        "branch": "dev",
        "count": 3,
        "tags": ["a"],
        "expr": "a=b",
        "nested": {"k": 1},
    }


@pytest.mark.parametrize(
    ("pairs", "args_json"),
    [(["novalue"], None), (["=x"], None), (["n:=nope"], None), ([], "[1]"), ([], "{bad")],
)
def test_malformed_arguments_are_usage_errors(pairs: list[str], args_json: str | None) -> None:
    with pytest.raises(CliError) as caught:
        parse_arguments(pairs, args_json)
    assert caught.value.code is ExitCode.USAGE


def test_durations_and_expiry_times() -> None:
    assert parse_duration("90s").total_seconds() == 90
    assert parse_duration("2h").total_seconds() == 7200
    assert parse_expiry("15m", now=NOW) == "2026-12-01T12:15:00Z"
    assert parse_expiry("2026-12-02T00:00:00+01:00", now=NOW) == "2026-12-01T23:00:00Z"
    for bad in ("0s", "5 minutes", "2026-11-30T00:00:00Z", "2026-12-02T00:00:00"):
        with pytest.raises(CliError) as caught:
            parse_expiry(bad, now=NOW)
        assert caught.value.code is ExitCode.USAGE


def test_receipt_references_with_or_without_prefix() -> None:
    assert parse_ref(HEX) == f"sha256:{HEX}"
    assert parse_ref(f"SHA256:{HEX.upper()}") == f"sha256:{HEX}"
    assert looks_like_ref(f"sha256:{HEX}") and not looks_like_ref("receipt.json")
    with pytest.raises(CliError):
        parse_ref("sha256:1234")


def test_generated_names_are_valid_object_name_prefixes() -> None:
    assert name_prefix("read_configmap.v2") == "read-configmap-v2-"
    assert name_prefix("__") == "call-"


# --------------------------------------------------------------------------- bodies


def waiting_call(**status: Any) -> dict[str, Any]:
    return {
        "metadata": {"name": "call-1", "namespace": "t", "uid": "u-1"},
        "spec": {
            "tool": {"id": "deploy", "version": "1.2.0"},
            "arguments": {"tag": "v2"},
            "caller": {"kind": "agent", "name": "system:serviceaccount:t:agent"},
        },
        "status": {
            "state": "AwaitingApproval",
            "requestHash": REQUEST_HASH,
            "descriptorDigest": f"sha256:{'cd' * 32}",
            **status,
        },
    }


def test_an_invocation_names_its_creator_as_caller() -> None:
    body = bodies.invocation_body(
        tool_id="deploy",
        version="1.2.0",
        arguments={"tag": "v2"},
        username="system:serviceaccount:t:agent",
        groups=[],
        generate_name="deploy-",
        run_id="r1",
        idempotency_key="k1",
    )
    assert body["metadata"] == {"generateName": "deploy-"}
    assert body["spec"]["caller"] == {"kind": "agent", "name": "system:serviceaccount:t:agent"}
    assert body["spec"]["runId"] == "r1" and body["spec"]["idempotencyKey"] == "k1"
    assert "dryRun" not in body["spec"]
    preview = bodies.invocation_body(
        tool_id="deploy",
        version="1",
        arguments={},
        username="alice",
        groups=["devs"],
        generate_name="deploy-",
        name="mine",
        dry_run=True,
    )
    assert preview["metadata"] == {"name": "mine"} and preview["spec"]["dryRun"] is True
    assert preview["spec"]["caller"] == {"kind": "user", "name": "alice", "groups": ["devs"]}


def test_only_groups_grants_may_name_are_claimed() -> None:
    groups = ("system:authenticated", "system:serviceaccounts", "oidc:platform", "x" * 300)
    assert bodies.claimable_groups(groups) == ["oidc:platform"]
    assert len(bodies.claimable_groups([f"g{i}" for i in range(100)])) == review.MAX_GROUPS


def test_an_approval_binds_to_the_exact_request_descriptor_version_and_uid() -> None:
    body = bodies.approval_body(
        waiting_call(),
        decision=ApprovalDecision.APPROVED,
        reviewer="alice",
        reviewer_groups=["system:authenticated", "reviewers"],
        comment="ok",
        expires_at="2026-12-01T13:00:00Z",
    )
    assert body["metadata"] == {"generateName": "call-1-approve-"}
    assert body["spec"] == {
        "invocation": "call-1",
        "invocationUid": "u-1",
        "requestHash": REQUEST_HASH,
        "descriptorDigest": f"sha256:{'cd' * 32}",
        "toolVersion": "1.2.0",
        "decision": "Approved",
        "reviewer": "alice",
        "reviewerGroups": ["system:authenticated", "reviewers"],
        "comment": "ok",
        "expiresAt": "2026-12-01T13:00:00Z",
    }


def test_no_approval_for_a_call_not_waiting_or_by_its_own_caller() -> None:
    with pytest.raises(CliError) as not_waiting:
        bodies.approval_body(
            waiting_call(state="Observed"),
            decision=ApprovalDecision.APPROVED,
            reviewer="alice",
            reviewer_groups=[],
            comment="",
            expires_at=None,
        )
    assert not_waiting.value.code is ExitCode.ERROR
    with pytest.raises(CliError) as own:
        bodies.approval_body(
            waiting_call(),
            decision=ApprovalDecision.REJECTED,
            reviewer="system:serviceaccount:t:agent",
            reviewer_groups=[],
            comment="",
            expires_at=None,
        )
    assert own.value.code is ExitCode.FORBIDDEN


@pytest.mark.parametrize(
    "arguments",
    [
        {"url": "http://elsewhere.example/"},  # renamed after validation: hashes differently
        {"n": 2**60},  # RFC 8785 cannot hash it at all
    ],
)
def test_no_approval_when_the_stored_arguments_are_not_the_validated_request(
    arguments: dict[str, Any],
) -> None:
    """A reviewer reads the stored spec; the approval binds the hash the operator validated.
    Admission keeps them the same; if it did not, an approval would bind a request nobody
    was shown."""
    changed = waiting_call()
    changed["spec"]["arguments"] = arguments
    with pytest.raises(review.Undecidable) as refused:
        review.approval_body(
            changed,
            decision=ApprovalDecision.APPROVED,
            reviewer="alice",
            reviewer_groups=[],
            comment="",
            expires_at=None,
        )
    assert refused.value.refusal is review.Refusal.CHANGED
    assert "cannot be approved" in refused.value.message


def test_a_confirmation_patches_only_effect_confirmation_in_the_users_name() -> None:
    uncertain = waiting_call(state="Uncertain")
    patch = bodies.confirmation_patch(
        uncertain, happened=False, confirmed_by="bob", evidence="  no release  "
    )
    assert patch == {
        "effectConfirmation": {
            "effectHappened": False,
            "confirmedBy": "bob",
            "evidence": "no release",
        }
    }
    with pytest.raises(CliError):
        bodies.confirmation_patch(waiting_call(), happened=True, confirmed_by="b", evidence="e")
    recorded = waiting_call(state="Uncertain", effectConfirmation={"recorded": True})
    with pytest.raises(CliError):
        bodies.confirmation_patch(recorded, happened=True, confirmed_by="b", evidence="e")
    with pytest.raises(CliError) as empty:
        bodies.confirmation_patch(uncertain, happened=True, confirmed_by="b", evidence=" ")
    assert empty.value.code is ExitCode.USAGE


# --------------------------------------------------------------------------- diff


def test_diff_lists_changes_by_json_pointer_in_canonical_form() -> None:
    before = {"tag": "v1", "replicas": 2, "opts": {"a/b": 1, "gone": True}, "l": [1, 2]}
    after = {"tag": "v2", "replicas": 2.0, "opts": {"a/b": 1}, "l": [1, 3, 4], "force": True}
    changes = diff(before, after)
    assert [c.wire() for c in changes] == [
        {"kind": "added", "path": "/force", "after": True},
        {"kind": "changed", "path": "/l/1", "before": 2, "after": 3},
        {"kind": "added", "path": "/l/2", "after": 4},
        {"kind": "removed", "path": "/opts/gone", "before": True},
        {"kind": "changed", "path": "/tag", "before": "v1", "after": "v2"},
    ]
    assert render(changes) == [
        "+ /force: true",
        "~ /l/1: 2 -> 3",
        "+ /l/2: 4",
        "- /opts/gone: true",
        '~ /tag: "v1" -> "v2"',
    ]


def test_diff_of_equal_arguments_is_empty_and_types_matter() -> None:
    assert diff({"a": [1, {"b": None}]}, {"a": [1, {"b": None}]}) == []
    assert diff({"a": 1}, {"a": True}) == [Change(ChangeKind.CHANGED, "/a", 1, True)]
    assert diff({"a": 1}, {"a": {"x": 1}})[0].kind is ChangeKind.CHANGED
    assert render([Change(ChangeKind.ADDED, "/x", after="y" * 500)], width=20) == [
        '+ /x: "yyyyyyyyyy...'
    ]


# --------------------------------------------------------------------------- views


def invocation(name: str, uid: str, args: dict[str, Any], **status: Any) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "uid": uid, "creationTimestamp": f"2026-12-01T00:00:0{uid}Z"},
        "spec": {
            "tool": {"id": "deploy", "version": "1.0.0"},
            "arguments": args,
            "caller": {"name": "agent-a"},
            "runId": "run-1",
        },
        "status": status,
    }


def test_pending_approvals_show_hashes_reasons_and_the_change_since_the_last_approval() -> None:
    old = invocation(
        "old", "1", {"tag": "v1"}, state="Observed", approval={"reviewer": "r", "boundAt": "T1"}
    )
    older = invocation(
        "older", "2", {"tag": "v0"}, state="Observed", approval={"reviewer": "r", "boundAt": "T0"}
    )
    unapproved = invocation("plain", "3", {"tag": "v9"}, state="Observed")
    waiting = invocation(
        "new",
        "4",
        {"tag": "v2"},
        state="AwaitingApproval",
        requestHash="sha256:r",
        descriptorDigest="sha256:d",
        effectiveClass="shared-write",
        # Notes of the policy that are no reason to wait (issue 28) stay out of the reasons.
        policyReasons=["no ToolPolicy in namespace t: only the default rules apply"],
        approvalForced=True,
        stages=[
            {
                "stage": "classification",
                "outcome": "passed",
                "detail": "raised by a shell command not on the allow list raised sandbox to "
                "shared-write",
            },
            {"stage": "approval", "outcome": "waiting", "detail": "class needs approval"},
        ],
        approvalRequestedAt="T2",
    )
    (view,) = review.pending_approvals([old, older, unapproved, waiting])
    assert view["name"] == "new" and view["requestHash"] == "sha256:r"
    assert view["descriptorDigest"] == "sha256:d"
    assert view["canonicalArguments"] == '{"tag":"v2"}'
    assert view["shownArguments"] == '{"tag":"v2"}' and view["warnings"] == []
    assert view["reasons"] == [
        "its class was raised: a shell command not on the allow list raised sandbox to "
        "shared-write",
        "class needs approval",
    ]
    assert not any("block-listed" in r or "no ToolPolicy" in r for r in view["reasons"])
    assert view["lastApproved"]["name"] == "old"
    assert view["changes"] == [{"kind": "changed", "path": "/tag", "before": "v1", "after": "v2"}]
    first = review.pending_view(waiting, None)
    assert first["lastApproved"] is None and first["changes"] is None


def test_tools_keep_active_unretired_descriptors_and_pick_the_newest_version() -> None:
    def td(tool: str, version: str, active: bool = True, retired: bool = False) -> dict[str, Any]:
        return {
            "spec": {"toolId": tool, "version": version, "retired": retired},
            "status": {"active": active},
        }

    found = [
        td("b", "1.10.0"),
        td("b", "1.9.0"),
        td("a", "2.0.0", active=False),
        td("b", "3.0.0", retired=True),
    ]
    assert [d["spec"]["version"] for d in views.callable_descriptors(found)] == ["1.9.0", "1.10.0"]
    assert views.latest_version(found, "b") == "1.10.0"
    assert views.latest_version(found, "a") is None


def test_approval_rules_name_the_class_shell_list_and_policy_conditions() -> None:
    shell = {
        "spec": {
            "toolId": "sh",
            "kind": "shell",
            "sideEffectClass": "sandbox",
            "shell": {"allow": ["ls"]},
        }
    }
    policy = {
        "metadata": {"name": "p"},
        "spec": {
            "conditions": [
                {
                    "tool": "sh",
                    "path": "/command",
                    "operator": "matches",
                    "value": "^rm",
                    "effect": "requireApproval",
                },
                {"tool": "other", "path": "/x", "operator": "exists", "effect": "requireApproval"},
            ],
            "approval": {"reviewerGroups": ["leads"]},
        },
    }
    rules = views.approval_rules(shell, [policy])
    assert any("no allow list (ls)" in r for r in rules), rules
    assert any('policy p: arguments /command matches "^rm"' in r for r in rules), rules
    assert not any("/x" in r for r in rules)
    assert any("reviewers from leads" in r for r in rules)
    gated = views.approval_rules({"spec": {"toolId": "w", "sideEffectClass": "external"}}, [])
    assert gated[0] == "every call waits for an approval (class external)"


def test_receipts_of_a_run_in_creation_order_and_the_holder_of_a_reference() -> None:
    a = invocation("a", "2", {}, state="Observed", receiptRef="sha256:a", auditRef="sha256:a")
    b = invocation("b", "1", {}, state="Denied", receiptRef="sha256:a", auditRef="sha256:b")
    assert [r["name"] for r in views.run_receipts([a, b])] == ["b", "a"]
    assert views.holding_ref([a, b], "sha256:b") is b
    assert views.holding_ref([a, b], "sha256:c") is None


def test_the_preview_prints_in_pipeline_order_and_says_when_a_call_would_be_denied() -> None:
    preview = {
        "sandbox": {"kind": "Container"},
        "extra": [1, 2],
        "validation": {"valid": True, "errors": []},
        "approval": {"required": True, "reviewers": ["leads"]},
    }
    assert views.preview_lines(preview) == [
        "validation:",
        "  valid: yes",
        "  errors: -",
        "approval:",
        "  required: yes",
        "  reviewers: leads",
        "sandbox:",
        "  kind: Container",
        "extra: 1, 2",
    ]
    assert not views.preview_denied(preview)
    assert views.preview_denied({"allowed": False})
    assert views.preview_denied({"outcome": "Denied"})
    assert views.preview_denied({"verdict": "would-be-denied", "deniedStage": "policy"})
    assert not views.preview_denied({"verdict": "would-await-approval"})


# --------------------------------------------------------------------------- output


def test_tables_align_columns_and_cells_are_one_line() -> None:
    out = table(["name", "state"], [["a", "Observed"], ["longer", None]])
    assert out.splitlines() == ["NAME     STATE", "a        Observed", "longer   -"]
    assert cell({"a": [1]}) == '{"a":[1]}' and cell("x\ny") == "x y" and cell(True) == "yes"
    assert json.loads(document({"b": 1, "a": 2}, Output.JSON)) == {"b": 1, "a": 2}
    assert document({"b": 1}, Output.YAML) == "b: 1"


def test_stage_lines_are_printed_once_each_as_they_arrive() -> None:
    status = {
        "stages": [
            {"stage": "validation", "outcome": "passed", "time": "2026-12-01T12:00:01.5Z"},
            {
                "stage": "permission",
                "outcome": "passed",
                "time": "2026-12-01T12:00:02Z",
                "detail": "ok\n",
            },
        ]
    }
    lines, seen = new_stage_lines(status, 0)
    assert seen == 2 and lines[0].startswith("12:00:01  validation") and lines[1].endswith("ok")
    assert new_stage_lines(status, 2) == ([], 2)


def test_the_display_writes_plain_lines_without_a_terminal_and_hints_at_approval() -> None:
    written: list[str] = []
    display = StageDisplay(write=written.append, tty=False, namespace="t")
    call = waiting_call(stages=[{"stage": "validation", "outcome": "passed", "time": "T"}])
    display.update(call)
    display.update(call)  # nothing new: nothing written
    display.close()
    text = "".join(written)
    assert "\r" not in text and "\x1b" not in text
    assert text.count("validation") == 1 and text.count("state: AwaitingApproval") == 1
    assert "tooladapter approve call-1 -n t" in text
    tty: list[str] = []
    StageDisplay(write=tty.append, tty=True, namespace="t").update(call)
    assert "\r\x1b[K" in "".join(tty)


def test_finished_means_terminal_previewed_included() -> None:
    assert finished({"status": {"state": "Denied"}})
    assert not finished({"status": {"state": "AwaitingApproval"}})
    # Previewed is a terminal state of the operator's (InvocationState.PREVIEWED).
    assert finished({"status": {"state": "Previewed"}})
    assert finished({"status": {"state": "Previewed"}}, dry_run=True)


# --------------------------------------------------------------------------- receipts


def test_verify_accepts_the_exact_bytes_or_their_canonical_form_and_nothing_else() -> None:
    receipt = {"state": "Observed", "schema": "tool-invocation-v1", "n": 1}
    data = canonical_json(receipt)
    ref = sha256_ref(data)
    assert verify(data, ref).match is Match.BYTES
    assert verify(json.dumps(receipt, indent=2).encode(), ref).match is Match.CANONICAL
    tampered = verify(data.replace(b"Observed", b"Observer"), ref)
    assert not tampered.ok and tampered.wire()["verified"] is False
    assert not verify(b"not json", ref).ok
    assert ref_from_filename(f"/store/sha256/ab/{HEX}") == f"sha256:{HEX}"
    assert ref_from_filename("receipt.json") is None


# --------------------------------------------------------------------------- exit codes


def test_exit_codes_are_distinct_and_follow_the_terminal_state() -> None:
    assert len({int(c) for c in ExitCode}) == len(ExitCode)
    assert for_state("Observed") is ExitCode.OK
    assert for_state("Denied") is ExitCode.DENIED
    assert for_state("Failed") is ExitCode.FAILED
    assert for_state("Uncertain") is ExitCode.UNCERTAIN
    assert for_state("Cancelled") is ExitCode.CANCELLED
    assert for_state("AwaitingApproval") is ExitCode.PENDING
    assert for_state(None) is ExitCode.PENDING
    assert for_api_status(404) is ExitCode.NOT_FOUND
    assert for_api_status(403) is ExitCode.FORBIDDEN and for_api_status(401) is ExitCode.FORBIDDEN
    assert for_api_status(422) is ExitCode.USAGE
    assert for_api_status(500) is ExitCode.ERROR and for_api_status(0) is ExitCode.ERROR


@pytest.mark.parametrize(
    ("status", "code"),
    [
        ({"state": "Observed", "result": {"content": "ok"}}, ExitCode.OK),
        (
            {"state": "Observed", "failureClass": "tool-error", "result": {"isError": True}},
            ExitCode.TOOL_ERROR,
        ),
        (
            {"state": "Observed", "result": {"isError": True, "httpStatus": 500}},
            ExitCode.TOOL_ERROR,
        ),
        ({"state": "Observed", "failureClass": "output-invalid"}, ExitCode.TOOL_ERROR),
        ({"state": "Failed", "failureClass": "transient"}, ExitCode.FAILED),
        # A duplicate exits as its first call ended; one whose first call was deleted before
        # it ended is Denied `duplicate`.
        ({"state": "Observed", "duplicateOf": "call-0"}, ExitCode.OK),
        ({"state": "Uncertain", "duplicateOf": "call-0"}, ExitCode.UNCERTAIN),
        ({"state": "Denied", "failureClass": "duplicate", "duplicateOf": "c0"}, ExitCode.DENIED),
        ({"state": "Denied", "failureClass": "unconfirmed-effect"}, ExitCode.DENIED),
        ({"state": "Denied", "failureClass": "key-reused"}, ExitCode.DENIED),
    ],
)
def test_a_tool_error_has_its_own_exit_code(status: dict[str, Any], code: ExitCode) -> None:
    assert for_outcome(status) is code
    assert ExitCode.TOOL_ERROR not in (ExitCode.OK, ExitCode.FAILED, ExitCode.DENIED)


def test_outcome_and_receipt_rows_show_a_tool_error_and_a_duplicate() -> None:
    obj = {
        "metadata": {"name": "c1", "namespace": "t"},
        "spec": {"tool": {"id": "sh", "version": "1"}},
        "status": {
            "state": "Observed",
            "failureClass": "tool-error",
            "result": {"content": "no", "isError": True, "exitCode": 2},
            "duplicateOf": "c0",
            "duplicateOfUid": "u0",
        },
    }
    out = views.outcome(obj)
    assert out["toolError"] is True and out["duplicateOfUid"] == "u0"
    row = views.receipt_row(obj)
    assert row["outcome"] == "Observed: tool error (exit code 2), duplicate of c0"
    clean = {**obj, "status": {"state": "Observed"}}
    assert views.receipt_row(clean)["outcome"] == "Observed"
    assert views.outcome(clean)["toolError"] is False
    # A row of a call retention deleted (from its receipt) has no outcome: its state stands in.
    assert views.gateway_receipt_row({"state": "Failed"})["outcome"] == "Failed"
    assert (
        views.gateway_receipt_row({"state": "Observed", "outcome": "Observed: x"})["outcome"]
        == "Observed: x"
    )


def test_invoke_reports_a_tool_error_and_exits_with_its_code(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from tooladapter.cli.context import Settings
    from tooladapter.cli.invoke import _report

    obj = {
        "metadata": {"name": "sh-1"},
        "status": {
            "state": "Observed",
            "failureClass": "tool-error",
            "message": "exit code 2",
            "receiptRef": "sha256:" + HEX,
            "result": {"content": "ls: /nope\n", "isError": True, "exitCode": 2},
        },
    }
    assert _report(Settings(), obj, finished=True, dry_run=False) is ExitCode.TOOL_ERROR
    out, err = capsys.readouterr()
    assert out == "ls: /nope\n"
    assert "sh-1: Observed: tool error (exit code 2)" in err and "tool-error" in err
    old = {"metadata": {"name": "d"}, "status": {"state": "Denied", "failureClass": "duplicate"}}
    old["status"]["duplicateOf"] = "first"
    assert _report(Settings(), old, finished=True, dry_run=False) is ExitCode.DENIED


def test_invoke_lists_the_egress_refusals_beside_the_result() -> None:
    """Issue 44: what the proxy refused, one line each (the tool said only "response 502")."""
    row = {
        "host": "github.com",
        "port": 443,
        "verdict": "upstream-failed",
        "reason": "github.com did not resolve",
        "connections": 1,
    }
    obj: dict[str, Any] = {"status": {"result": {"egressRefused": [row, {"verdict": "?"}]}}}
    assert views.egress_lines(obj) == [
        "github.com:443 upstream-failed: github.com did not resolve (1 connection)"
    ]
    assert views.egress_lines({"status": {"result": {"content": "x"}}}) == []
