"""The data-flow rule, pure: labels, sinks, scopes, the stores' entries and the verdict."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from tooladapter.enums import (
    DataFlowAction,
    DataFlowScope,
    DataLabel,
    InvocationState,
    ScopeKind,
    SideEffectClass,
)
from tooladapter.model import LabelSource, ToolDescriptorSpec, ToolPolicySpec
from tooladapter.pipeline import dataflow as rule
from tooladapter.pipeline.policy import PolicyDecision, evaluate_policies
from tooladapter.timeutil import to_iso

NOW = datetime(2026, 12, 6, 12, 0, tzinfo=UTC)


def tool(kind: str = "native", cls: str = "read", **spec: object) -> ToolDescriptorSpec:
    body: dict[str, object] = {
        "toolId": "t",
        "version": "1.0.0",
        "kind": kind,
        "sideEffectClass": cls,
    }
    if kind == "native":
        body["native"] = {"name": "read-configmap"}
    if kind == "mcp":
        body["mcp"] = {"server": "web", "tool": "fetch", "pinnedDigest": "sha256:" + "0" * 64}
    if kind == "http":
        body["http"] = {"url": "https://api.example.com/x", "allowedHosts": ["api.example.com"]}
    if kind in ("shell", "container"):
        body["sandbox"] = {"command": ["true"]} if kind == "container" else {}
    body.update(spec)
    return ToolDescriptorSpec.model_validate(body)


def src(label: DataLabel, name: str, tool_id: str = "t") -> LabelSource:
    return LabelSource(label=label, invocation=name, tool=tool_id, at=to_iso(NOW))


def test_labels_are_what_the_descriptor_says_and_mcp_tools_are_untrusted_unless_it_says() -> None:
    assert rule.labels_of(tool()) == []
    assert rule.labels_of(tool(dataFlow={"labels": ["private"]})) == [DataLabel.PRIVATE]
    assert rule.labels_of(tool("mcp")) == [DataLabel.UNTRUSTED]
    assert rule.labels_of(tool("mcp", dataFlow={"labels": []})) == []
    assert rule.labels_of(tool("mcp", dataFlow={"sink": None})) == [DataLabel.UNTRUSTED]


@pytest.mark.parametrize(
    ("descriptor", "cls", "default", "sink"),
    [
        (tool(), SideEffectClass.READ, (), False),
        (tool(), SideEffectClass.EXTERNAL, (), True),
        (tool("http"), SideEffectClass.READ, (), True),
        (tool("mcp"), SideEffectClass.READ, (), True),
        (
            tool("shell", sandbox={"egress": {"allow": []}}),
            SideEffectClass.SANDBOX,
            ("github.com",),
            False,
        ),
        # No egress of its own: the operator's default list is what its lease gets.
        (tool("shell"), SideEffectClass.SANDBOX, ("github.com",), True),
        (tool("shell"), SideEffectClass.SANDBOX, (), False),
        (
            tool("container", sandbox={"command": ["x"], "egress": {"allow": ["pypi.org"]}}),
            SideEffectClass.SANDBOX,
            (),
            True,
        ),
    ],
    ids=[
        "native-read",
        "class-external",
        "http",
        "mcp",
        "no-egress",
        "default-egress",
        "no-default",
        "container-egress",
    ],
)
def test_sinks_are_calls_that_can_send_data_out(
    descriptor: ToolDescriptorSpec, cls: SideEffectClass, default: tuple[str, ...], sink: bool
) -> None:
    reach = rule.reach_of(descriptor, default_allow=default)
    assert rule.is_sink(descriptor, cls, reach) is sink


def test_a_policy_narrowing_egress_narrows_the_reach_as_the_lease_would() -> None:
    shell = tool("shell")
    assert rule.reach_of(
        shell, default_allow=("github.com", "pypi.org"), narrowing=[["pypi.org"]]
    ) == ["pypi.org"]
    assert not rule.is_sink(
        shell,
        SideEffectClass.SANDBOX,
        rule.reach_of(shell, default_allow=("github.com",), narrowing=[[]]),
    )


def test_a_sink_in_a_scope_with_both_labels_is_gated_naming_the_calls_and_the_hosts() -> None:
    verdict = rule.judge(
        sink=True,
        reach=["api.example.com"],
        sources=[
            src(DataLabel.PRIVATE, "read-1", "crm"),
            src(DataLabel.UNTRUSTED, "fetch-2", "web"),
        ],
        action=DataFlowAction.APPROVE,
    )
    assert verdict.needs_approval and not verdict.denies
    assert "read-1 (crm)" in verdict.reason and "fetch-2 (web)" in verdict.reason
    assert "api.example.com" in verdict.reason


@pytest.mark.parametrize(
    ("sink", "labels", "action", "gated"),
    [
        (False, [DataLabel.PRIVATE, DataLabel.UNTRUSTED], DataFlowAction.APPROVE, None),
        (True, [DataLabel.PRIVATE], DataFlowAction.APPROVE, None),
        (True, [DataLabel.UNTRUSTED], DataFlowAction.DENY, None),
        (True, [], DataFlowAction.APPROVE, None),
        (True, [DataLabel.PRIVATE, DataLabel.UNTRUSTED], DataFlowAction.DENY, DataFlowAction.DENY),
        (True, [DataLabel.PRIVATE, DataLabel.UNTRUSTED], DataFlowAction.ALLOW, None),
    ],
)
def test_only_a_sink_with_both_labels_is_gated_and_the_policy_says_how(
    sink: bool, labels: list[DataLabel], action: DataFlowAction, gated: DataFlowAction | None
) -> None:
    sources = [src(label, f"c-{i}") for i, label in enumerate(labels)]
    verdict = rule.judge(sink=sink, reach=["h"], sources=sources, action=action)
    assert verdict.action is gated


def test_a_call_is_judged_by_its_run_and_attempt_or_by_its_callers_window() -> None:
    run = rule.judged_scopes(
        namespace="ns", caller="a", run_id="r", attempt_id="", scope=DataFlowScope.RUN
    )
    assert [s.kind for s in run] == [ScopeKind.RUN]
    both = rule.judged_scopes(
        namespace="ns", caller="a", run_id="r", attempt_id="w", scope=DataFlowScope.RUN
    )
    assert [s.kind for s in both] == [ScopeKind.RUN, ScopeKind.ATTEMPT]
    neither = rule.judged_scopes(
        namespace="ns", caller="a", run_id="", attempt_id="", scope=DataFlowScope.RUN
    )
    assert [s.kind for s in neither] == [ScopeKind.CALLER]
    caller = rule.judged_scopes(
        namespace="ns", caller="a", run_id="r", attempt_id="w", scope=DataFlowScope.CALLER
    )
    # `scope: caller` widens: the run and attempt still count (they keep what left the window).
    assert [s.kind for s in caller] == [ScopeKind.CALLER, ScopeKind.RUN, ScopeKind.ATTEMPT]
    # Every labelled call reaches its caller's scope, whatever the policy says later.
    kinds = [
        s.kind for s in rule.recorded_scopes(namespace="ns", caller="a", run_id="r", attempt_id="")
    ]
    assert kinds == [ScopeKind.CALLER, ScopeKind.RUN]


def test_scopes_of_other_callers_runs_and_namespaces_have_other_stores() -> None:
    names = {
        rule.Scope(ScopeKind.RUN, "ns", "a", "r").store_name,
        rule.Scope(ScopeKind.RUN, "ns", "b", "r").store_name,
        rule.Scope(ScopeKind.RUN, "ns2", "a", "r").store_name,
        rule.Scope(ScopeKind.ATTEMPT, "ns", "a", "r").store_name,
        rule.Scope(ScopeKind.CALLER, "ns", "a").store_name,
    }
    assert len(names) == 5 and all(len(n) <= 63 for n in names)


def test_the_stores_entries_round_trip_and_a_callers_window_drops_old_ones() -> None:
    scope = rule.Scope(ScopeKind.CALLER, "ns", "a")
    old = to_iso(NOW - timedelta(seconds=7200))
    data = {
        rule.entry_key(DataLabel.PRIVATE, "read-1"): rule.entry_value(tool="crm", at=to_iso(NOW)),
        rule.entry_key(DataLabel.UNTRUSTED, "old-1"): rule.entry_value(tool="web", at=old),
        "garbage": "{",
    }
    held = rule.held([(scope, data)], now=NOW, window_seconds=3600)
    assert [(s.label, s.invocation, s.tool) for s in held] == [(DataLabel.PRIVATE, "read-1", "crm")]
    assert rule.expired_keys(data, now=NOW, window_seconds=3600) == ["untrusted.old-1"]
    # A run's scope keeps everything: the window is a caller's.
    run = rule.Scope(ScopeKind.RUN, "ns", "a", "r")
    assert len(rule.held([(run, data)], now=NOW, window_seconds=3600)) == 2
    # A call is judged by what came before it, never by itself.
    assert (
        rule.held([(run, data)], now=NOW, window_seconds=3600, exclude="read-1")[0].invocation
        == "old-1"
    )


def test_labels_that_arrived_since_are_found() -> None:
    before = [src(DataLabel.PRIVATE, "a")]
    now = [src(DataLabel.PRIVATE, "a"), src(DataLabel.UNTRUSTED, "b")]
    assert [s.invocation for s in rule.arrived_since(before, now)] == ["b"]


def test_policies_combine_deny_over_approve_over_allow_and_caller_over_run() -> None:
    def decide(*flows: dict[str, str]) -> PolicyDecision:
        specs = [
            (f"ns/p{i}", ToolPolicySpec.model_validate({"dataFlow": f}))
            for i, f in enumerate(flows)
        ]
        return evaluate_policies(
            specs, namespace="ns", tool_id="t", tool_version="1.0.0", arguments={}, request_hash="h"
        )

    assert decide().dataflow_action is DataFlowAction.APPROVE
    assert decide({"onPrivateAndUntrusted": "allow"}).dataflow_action is DataFlowAction.ALLOW
    assert decide({"onPrivateAndUntrusted": "allow"}, {}).dataflow_action is DataFlowAction.APPROVE
    assert (
        decide(
            {"onPrivateAndUntrusted": "deny"}, {"onPrivateAndUntrusted": "allow"}
        ).dataflow_action
        is DataFlowAction.DENY
    )
    assert decide({"scope": "caller"}, {}).dataflow_scope is DataFlowScope.CALLER


# --------------------------------------------------------------------------- a server's word


def test_a_servers_annotation_adds_labels_to_its_tools_and_never_removes_one() -> None:
    annotated = {rule.SERVER_LABELS_ANNOTATION: "private"}
    added, unknown = rule.server_labels(annotated)
    assert (added, unknown) == ([DataLabel.PRIVATE], [])
    # The mcp default (untrusted) stays; the annotation adds private.
    assert rule.labels_of(tool("mcp"), added=added) == [DataLabel.PRIVATE, DataLabel.UNTRUSTED]
    # A descriptor that says "none" (reviewed server) still gains what the server adds.
    assert rule.labels_of(tool("mcp", dataFlow={"labels": []}), added=added) == [DataLabel.PRIVATE]
    # Nothing a server says removes a label: an empty annotation adds nothing, removes nothing.
    empty, _ = rule.server_labels({rule.SERVER_LABELS_ANNOTATION: ""})
    assert rule.labels_of(tool("mcp"), added=empty) == [DataLabel.UNTRUSTED]
    assert rule.server_labels({rule.SERVER_LABELS_ANNOTATION: " private , untrusted "})[0] == [
        DataLabel.PRIVATE,
        DataLabel.UNTRUSTED,
    ]
    assert rule.server_labels({"other": "private"}) == ([], [])
    assert rule.server_labels(None) == ([], [])


def test_a_value_that_is_no_label_counts_as_both_and_the_status_names_the_annotation() -> None:
    annotated = {rule.SERVER_LABELS_ANNOTATION: "privat"}
    assert rule.server_labels(annotated) == (
        [DataLabel.PRIVATE, DataLabel.UNTRUSTED],
        ["privat"],
    )
    (problem,) = rule.server_label_problems(annotated)
    assert f"metadata.annotations[{rule.SERVER_LABELS_ANNOTATION}]" in problem
    assert "'privat'" in problem
    assert rule.server_label_problems({rule.SERVER_LABELS_ANNOTATION: "private"}) == []


def test_an_open_world_hint_adds_untrusted_and_other_hints_add_nothing() -> None:
    assert rule.hinted_labels({"openWorldHint": True}) == [DataLabel.UNTRUSTED]
    assert rule.hinted_labels({"openWorldHint": "true"}) == []  # only an explicit boolean
    assert rule.hinted_labels({"readOnlyHint": True, "openWorldHint": False}) == []
    assert rule.hinted_labels(None) == []


def test_a_pending_write_is_read_back_from_an_ended_calls_body() -> None:
    flow: dict[str, object] = {"labels": ["private", "bogus"], "pending": True}
    body = {
        "metadata": {"namespace": "ns", "name": "read-1", "uid": "u1"},
        "spec": {"tool": {"id": "crm"}, "caller": {"name": "a"}, "runId": "r"},
        "status": {
            "state": "Observed",
            "endedAt": to_iso(NOW),
            "dataFlow": flow,
        },
    }
    write = rule.pending_write_of(body)
    assert write is not None and write.labels == (DataLabel.PRIVATE,)
    assert [s.kind for s in write.scopes] == [ScopeKind.CALLER, ScopeKind.RUN]
    pending = rule.PendingLabels()
    pending.add(write)
    run = rule.Scope(ScopeKind.RUN, "ns", "a", "r")
    assert list(pending.data_for(run)) == ["private.read-1"]
    assert pending.data_for(rule.Scope(ScopeKind.RUN, "ns", "a", "other")) == {}
    assert pending.data_for(rule.Scope(ScopeKind.RUN, "ns2", "a", "r")) == {}
    del flow["pending"]
    assert rule.pending_write_of(body) is None


# --------------------------------------------------------------------------- stores collected


def stored(*entries: tuple[str, str, datetime]) -> dict[str, str]:
    return {
        f"{label}.{name}": rule.entry_value(tool="t", at=to_iso(at)) for label, name, at in entries
    }


def collectable(kind: str, data: dict[str, str], present: set[str] | None = None) -> bool:
    return rule.store_collectable(
        kind,
        data,
        now=NOW,
        window_seconds=3600,
        retention_seconds=86_400,
        present=lambda name: name in (present or set()),
    )


def test_a_callers_store_goes_once_every_label_left_the_window() -> None:
    old = NOW - timedelta(seconds=3601)
    assert collectable("caller", stored(("private", "a", old), ("untrusted", "b", old)))
    assert not collectable("caller", stored(("private", "a", old), ("untrusted", "b", NOW)))
    assert collectable("caller", {})


def test_a_runs_labels_outlive_their_calls_retention_by_a_window() -> None:
    # Retention deletes a call a day after it ended: its run's labels stay a window more.
    after_retention = NOW - timedelta(seconds=86_400 + 60)
    assert not collectable("run", stored(("private", "a", after_retention)))
    long_ago = NOW - timedelta(seconds=86_400 + 3600 + 1)
    assert collectable("run", stored(("private", "a", long_ago)))
    assert collectable("attempt", stored(("private", "a", long_ago)))
    # A call still stored (an unconfirmed Uncertain one, which retention keeps) keeps it.
    assert not collectable("run", stored(("private", "a", long_ago)), present={"a"})
    # One recent label keeps the whole store.
    assert not collectable("run", stored(("private", "a", long_ago), ("untrusted", "b", NOW)))


def test_what_cannot_be_read_is_kept_and_retention_off_keeps_runs() -> None:
    long_ago = NOW - timedelta(days=30)
    assert not collectable("nonsense", stored(("private", "a", long_ago)))
    unreadable = {"private.a": '{"tool": "t", "at": "yesterday"}'}
    assert not collectable("run", unreadable)
    assert not rule.store_collectable(
        "run",
        stored(("private", "a", long_ago)),
        now=NOW,
        window_seconds=3600,
        retention_seconds=0,
        present=lambda _: False,
    )


def test_a_call_interrupted_in_its_attempts_workspace_after_it_started_brings_its_labels() -> None:
    """Attack: an agent interrupts its private read while the tool runs in the attempt's
    workspace (a sandbox-class tool ends Cancelled: its effects stay in its sandbox). The
    tool had copied the data into /workspace; the attempt's next call, a sink, read it and
    sent it out unseen, since a Cancelled call brought no label."""
    assert rule.brings_labels(InvocationState.CANCELLED, executed=True, attempt_workspace=True)
    # Nothing ran, or nothing of it stays behind (its own sandbox is gone): no label.
    assert not rule.brings_labels(InvocationState.CANCELLED, executed=False, attempt_workspace=True)
    assert not rule.brings_labels(InvocationState.CANCELLED, executed=True, attempt_workspace=False)
    for state in (InvocationState.OBSERVED, InvocationState.UNCERTAIN):
        assert rule.brings_labels(state, executed=True, attempt_workspace=False)
    for state in (InvocationState.DENIED, InvocationState.FAILED):
        assert not rule.brings_labels(state, executed=False, attempt_workspace=True)
