"""The invocations' own list-and-watch: event dispatch and what a relisting forgets."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.unit.fake_cluster import NAMESPACE, make_runtime
from tooladapter.handlers.routing import invocations_listed
from tooladapter.kube.errors import VersionExpired
from tooladapter.kube.watching import Watcher, watched_namespace


def test_one_exact_namespace_is_watched_alone_and_anything_else_everywhere() -> None:
    assert watched_namespace(("team-a",)) == "team-a"
    assert watched_namespace(("team-*",)) is None
    assert watched_namespace(("team-a", "team-b")) is None
    assert watched_namespace(()) is None


def watcher(seen: list[dict[str, Any]], serves: Any = lambda ns: ns == "mine") -> Watcher:
    w = Watcher.__new__(Watcher)
    w.serves, w.handle, w.plural = serves, seen.append, "toolinvocations"
    return w


def line(kind: str, obj: dict[str, Any]) -> bytes:
    return json.dumps({"type": kind, "object": obj}).encode()


def meta(namespace: str, version: str) -> dict[str, Any]:
    return {
        "metadata": {"namespace": namespace, "name": "x", "uid": "u", "resourceVersion": version}
    }


def test_events_of_served_namespaces_are_handled_and_every_event_moves_the_version() -> None:
    seen: list[dict[str, Any]] = []
    w = watcher(seen)
    assert w.dispatch(line("ADDED", meta("mine", "5")), "1") == "5"
    assert w.dispatch(line("MODIFIED", meta("theirs", "6")), "5") == "6"
    assert w.dispatch(line("BOOKMARK", {"metadata": {"resourceVersion": "9"}}), "6") == "9"
    assert [e["type"] for e in seen] == ["ADDED"]


def test_an_expired_version_lists_again_and_other_errors_raise() -> None:
    w = watcher([])
    with pytest.raises(VersionExpired):
        w.dispatch(line("ERROR", {"code": 410, "message": "too old"}), "1")
    with pytest.raises(RuntimeError, match="boom"):
        w.dispatch(line("ERROR", {"code": 500, "message": "boom"}), "1")


def test_a_relisting_forgets_calls_deleted_while_no_watch_ran() -> None:
    h = make_runtime()
    for name in ("kept", "gone"):
        body = {
            "metadata": {"name": name, "namespace": NAMESPACE, "uid": f"uid-{name}"},
            "status": {"state": "Observed"},
        }
        h.rt.census.update("ADDED", body)
    h.rt.unfinished["uid-gone"] = (NAMESPACE, "gone")

    invocations_listed(h.rt, {"uid-kept"})

    assert set(h.rt.census.rows) == {"uid-kept"}
    assert "uid-gone" not in h.rt.unfinished
