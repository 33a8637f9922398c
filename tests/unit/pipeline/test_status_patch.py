"""The status write: only what changed, and nothing a reader would parse back anyway."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from tests.unit.fake_cluster import merge_patch as apply_merge_patch
from tooladapter.model import StageEntry, ToolInvocationStatus
from tooladapter.pipeline.status_patch import merge_patch

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=3),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=2), inner),
    max_leaves=8,
)
objects = st.dictionaries(st.text(max_size=2), json_values.filter(lambda v: v is not None))


def without_nulls(value: Any) -> Any:
    """What an object holds after a merge patch: merge patches never store nulls."""
    if isinstance(value, dict):
        return {k: without_nulls(v) for k, v in value.items() if v is not None}
    return value


@given(stored=objects, wanted=objects)
def test_the_patch_turns_what_is_stored_into_what_is_wanted(stored: dict, wanted: dict) -> None:
    stored, wanted = without_nulls(stored), without_nulls(wanted)
    assert apply_merge_patch(stored, merge_patch(stored, wanted)) == wanted


def test_an_unchanged_status_patches_nothing_and_a_change_sends_only_itself() -> None:
    stored = {"state": "Executing", "execution": {"kind": "native", "attempts": 1}, "x": [1]}
    assert merge_patch(stored, stored) == {}
    wanted = {"state": "Observed", "execution": {"kind": "native", "attempts": 2}, "x": [1, 2]}
    assert merge_patch(stored, wanted) == {
        "state": "Observed",
        "execution": {"attempts": 2},
        "x": [1, 2],  # lists are atomic in a merge patch: sent whole
    }
    assert merge_patch(stored, {"state": "Observed"}) == {
        "state": "Observed",
        "execution": None,
        "x": None,
    }


def test_the_sparse_status_parses_back_to_the_same_status() -> None:
    status = ToolInvocationStatus.model_validate(
        {
            "state": "Observed",
            "policyReasons": [],
            "egress": [],
            "execution": {"kind": "native", "startedAt": "2026-12-01T00:00:00Z", "commandLine": []},
            "stages": [{"stage": "validation", "outcome": "passed", "time": "t", "detail": ""}],
            "result": {"content": "", "redactions": []},
        }
    )
    sparse = status.sparse_wire()
    assert "egress" not in sparse and "policyReasons" not in sparse
    assert "commandLine" not in sparse["execution"]
    assert sparse["stages"] == [{"stage": "validation", "outcome": "passed", "time": "t"}]
    assert ToolInvocationStatus.model_validate(sparse) == status
    assert len(json.dumps(sparse)) < len(json.dumps(status.wire()))


def test_required_fields_stay_even_when_empty() -> None:
    entry = StageEntry.model_validate({"stage": "validation", "outcome": "passed", "time": ""})
    assert entry.sparse_wire() == {"stage": "validation", "outcome": "passed", "time": ""}
