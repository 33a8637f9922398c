"""The reviewers' page's pure parts: redaction of arguments and changes, timelines,
recent decisions, runs, and the sealed session with its CSRF token."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tooladapter.artifacts import LocalArtifactStore
from tooladapter.gateway.ui.data import _stored, parse_namespaces
from tooladapter.gateway.ui.session import Sealer, nonces_match
from tooladapter.review import page as reviewpage

KEY = b"k" * 32


def call(
    name: str,
    arguments: dict[str, Any],
    *,
    namespace: str = "team-a",
    uid: str | None = None,
    **status: Any,
) -> dict[str, Any]:
    return {
        "metadata": {
            "name": name,
            "namespace": namespace,
            "uid": uid or f"uid-{name}",
            "creationTimestamp": status.pop("created", "2026-01-01T00:00:00Z"),
        },
        "spec": {
            "tool": {"id": "deploy", "version": "1.0.0"},
            "arguments": arguments,
            "caller": {"kind": "agent", "name": "system:serviceaccount:team-a:agent"},
            "runId": status.pop("runId", None),
        },
        "status": status,
    }


def test_arguments_are_shown_whole_whatever_their_keys_or_shapes() -> None:
    """Issue 28: nothing an agent sent is hidden from its reviewer, by key or by pattern."""
    github = "ghp_" + "a" * 36
    view = reviewpage.arguments_view(
        {
            "tag": "v42",
            "dbPassword": "hunter2",
            "nested": {"API_KEY": ["x"], "note": github},
            "list": [{"token": 5}],
        }
    )
    text = view["prettyArguments"]
    assert json.loads(text)["dbPassword"] == "hunter2"
    assert github in text and '"token": 5' in text and "REDACTED" not in text
    assert "".join(s.text for s in view["argumentSegments"]) == text
    flagged = [s.text for s in view["argumentSegments"] if s.kind == "credential-like"]
    assert github in flagged
    assert any("/nested/note" in f for f in view["argumentFlags"])


def test_a_change_shows_both_values_whole_and_is_found_on_raw_values() -> None:
    changes = reviewpage.shown_changes(
        {"tag": "v41", "password": "old", "force": True},
        {"tag": "v42", "password": "new", "extra": {"secretKey": "s"}, "cmd": "a\u200bb"},
    )
    by_path = {c["path"]: c for c in changes}
    assert by_path["/tag"] == {
        "kind": "changed",
        "path": "/tag",
        "before": '"v41"',
        "after": '"v42"',
    }
    assert by_path["/password"] == {
        "kind": "changed",
        "path": "/password",
        "before": '"old"',
        "after": '"new"',
    }
    assert by_path["/force"] == {"kind": "removed", "path": "/force", "before": "true"}
    assert by_path["/extra"]["after"] == '{"secretKey": "s"}'
    assert by_path["/cmd"]["after"] == '"a\u27e8U+200B\u27e9b"'
    # Differing only by an invisible character is a change, shown as one.
    (only,) = reviewpage.shown_changes({"c": "ab"}, {"c": "a\u202eb"})
    assert only["before"] == '"ab"' and only["after"] == '"a\u27e8U+202E\u27e9b"'


def test_pending_calls_carry_the_clis_view_per_namespace_shown_whole() -> None:
    approved = call(
        "old",
        {"tag": "v1", "token": "abc"},
        state="Observed",
        approval={"reviewer": "r", "boundAt": "T1"},
    )
    waiting = call(
        "new",
        {"tag": "v2", "token": "abd"},
        state="AwaitingApproval",
        requestHash="sha256:r",
        descriptorDigest="sha256:d",
        approvalRequestedAt="T2",
        stages=[{"stage": "approval", "outcome": "waiting", "detail": "class external"}],
    )
    # The same names in another namespace are other calls.
    elsewhere = call("old", {"tag": "v0"}, namespace="team-b", state="Observed")
    (view,) = reviewpage.pending_for_page([approved, waiting, elsewhere])
    assert view["namespace"] == "team-a" and view["uid"] == "uid-new"
    assert view["reasons"] == ["class external"]
    assert view["requestHash"] == "sha256:r" and view["descriptorDigest"] == "sha256:d"
    assert '"token": "abd"' in view["prettyArguments"] and '"tag": "v2"' in view["prettyArguments"]
    assert view["lastApproved"]["name"] == "old"
    assert [c["path"] for c in view["changes"]] == ["/tag", "/token"]
    assert view["changes"][1]["before"] == '"abc"' and view["changes"][1]["after"] == '"abd"'


def test_a_timeline_places_each_stage_on_the_calls_time_axis() -> None:
    stages = [
        {"stage": "validation", "outcome": "passed", "time": "2026-01-01T00:00:00Z"},
        {"stage": "approval", "outcome": "waiting", "time": "2026-01-01T00:00:01.000Z"},
        {"stage": "execute", "outcome": "observed", "time": "2026-01-01T00:00:04Z"},
        {"stage": "audit", "outcome": "receipt", "time": "not a time"},
    ]
    entries = reviewpage.timeline({"stages": stages})
    assert [e.offset_ms for e in entries] == [0, 1000, 4000, 0]
    assert entries[0].left == 0 and entries[0].width == 25.0
    assert entries[1].left == 25.0 and entries[1].width == 75.0
    assert entries[2].width == 1.0 and entries[2].left == 99.0  # a thin mark at the end
    assert reviewpage.timeline({}) == []


def test_recent_decisions_runs_and_uncertain_calls() -> None:
    approved = call("a", {}, state="Observed", approval={"reviewer": "r", "boundAt": "T2"})
    rejected = call(
        "b", {}, state="Denied", endedAt="T3", stages=[{"stage": "approval", "outcome": "rejected"}]
    )
    plain = call("c", {}, state="Observed", runId="run-1", created="2026-01-02T00:00:00Z")
    first = call("d", {}, state="Uncertain", runId="run-1", endedAt="T1")
    same_second = call("a0", {}, state="Observed", runId="run-1", startedAt="T0.5")
    done = call(
        "e",
        {},
        state="Uncertain",
        runId="run-0",
        endedAt="T9",
        effectConfirmation={"effectHappened": True, "confirmedBy": "o", "evidence": "x"},
    )
    decided = reviewpage.recent_decisions([approved, rejected, plain])
    assert [(d["name"], d["decision"]) for d in decided] == [("b", "Rejected"), ("a", "Approved")]
    assert reviewpage.run_ids([plain, first, done]) == ["run-1", "run-0"]
    run = reviewpage.run_calls([plain, same_second, first, done], "run-1")
    assert [c["name"] for c in run] == ["d", "a0", "c"]  # same second: by start time
    uncertain = reviewpage.uncertain_calls([plain, done, first])
    assert [(u["name"], u["confirmable"]) for u in uncertain] == [("d", True), ("e", False)]


def test_a_session_opens_only_unchanged_unexpired_and_with_its_key() -> None:
    sealer = Sealer(KEY)
    session = sealer.new("the-token", ("team-a",), 60)
    sealed = sealer.seal(session)
    assert "the-token" not in sealed
    assert sealer.open(sealed) == session
    assert sealer.open(sealed, now=session.expires + 1) is None
    assert Sealer(b"o" * 32).open(sealed) is None
    tampered = sealed[:-2] + ("A" if sealed[-2] != "A" else "B") + sealed[-1]
    assert sealer.open(tampered) is None
    assert sealer.open("") is None and sealer.open("!!!") is None
    with pytest.raises(ValueError):
        Sealer(b"short")


def test_csrf_tokens_belong_to_one_session() -> None:
    sealer = Sealer(KEY)
    one, two = sealer.new("t", (), 60), sealer.new("t", (), 60)
    assert sealer.csrf_ok(one, sealer.csrf(one))
    assert not sealer.csrf_ok(one, sealer.csrf(two))
    assert not sealer.csrf_ok(one, "") and not sealer.csrf_ok(one, None)
    assert nonces_match("n", "n") and not nonces_match("n", "m") and not nonces_match(None, None)


def test_namespaces_are_names_and_bounded() -> None:
    assert parse_namespaces("team-a, team-b team-a") == ("team-a", "team-b")
    assert parse_namespaces("") == ()
    assert parse_namespaces("Team_A") is None
    assert parse_namespaces(" ".join(f"n{i}" for i in range(21))) is None


def test_a_stored_receipt_is_checked_and_a_tampered_one_is_a_mismatch(tmp_path: Path) -> None:
    store = LocalArtifactStore(tmp_path)
    ref = store.put(b'{"schema":"tool-invocation-v1","tenantId":"team-a"}')
    shown = _stored(store, ref, "team-a")
    assert shown is not None and shown.verdict.ok and shown.receipt["tenantId"] == "team-a"
    assert _stored(store, ref, "team-b") is None  # another namespace's receipt: not shown
    assert _stored(store, "sha256:" + "0" * 64, "team-a") is None
    store.path_of(ref).write_bytes(b'{"schema":"tool-invocation-v1","tenantId":"team-a "}')
    tampered = _stored(store, ref, "team-a")
    assert tampered is not None and not tampered.verdict.ok


def test_a_tool_error_is_not_shown_as_a_success_and_duplicates_are_not_uncertain() -> None:
    broken = call(
        "f",
        {},
        state="Observed",
        runId="run-2",
        failureClass="tool-error",
        result={"content": "no", "isError": True, "exitCode": 2},
        approval={"reviewer": "r", "boundAt": "T4"},
    )
    fine = call("g", {}, state="Observed", runId="run-2", created="2026-01-02T00:00:00Z")
    (first_row, second_row) = sorted(
        reviewpage.run_calls([broken, fine], "run-2"), key=lambda c: c["name"]
    )
    assert first_row["outcome"] == "Observed: tool error (exit code 2)" and first_row["toolError"]
    assert second_row["outcome"] == "Observed" and not second_row["toolError"]
    (decided,) = reviewpage.recent_decisions([broken])
    assert decided["outcome"].startswith("Observed: tool error") and decided["toolError"]
    # A duplicate of an Uncertain call ran nothing: only its first call is listed.
    uncertain = call("u", {}, state="Uncertain", endedAt="T1")
    duplicate = call("v", {}, state="Uncertain", endedAt="T2", duplicateOf="u")
    listed = reviewpage.uncertain_calls([uncertain, duplicate])
    assert [u["name"] for u in listed] == ["u"]


def test_the_runs_page_renders_the_tool_error() -> None:
    import jinja2

    # The submodule (the package also imports aiohttp.web under that name).
    import tooladapter.gateway.ui.web as web

    templates = Path(web.__file__).parent / "templates"
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(templates), autoescape=True)
    broken = call("f", {}, state="Observed", runId="r", result={"isError": True, "exitCode": 2})
    html = env.get_template("runs_live.html").render(
        namespace="team-a",
        run_id="r",
        calls=[(c, None) for c in reviewpage.run_calls([broken], "r")],
        runs={},
        refused=[],
        prefix="/ui",
    )
    assert 'class="state tool-error"' in html
    assert "Observed: tool error (exit code 2)" in html
