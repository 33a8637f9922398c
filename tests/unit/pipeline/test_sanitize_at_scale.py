"""Attacks on wave 4 (an end's artifacts in one store trip, small receipts and structured
results sanitized inline, lazy client packages, memoised descriptor digests).

HIT: a sandboxed tool printed a 32 KB JSON object of ~2,400 keys that all redact alike
(`"://:0@"`, `"://:1@"`, ...). Its structured form was sanitized inline on the event loop
(`structured_bytes` from the executor), and keeping the keys apart appended a quote per
clash: quadratic, ~1.25 s of every tenant's loop per call. Fixed twice over: what a sandbox
prints is sanitized off the loop again (its size says nothing of its cost), and clashing
keys are numbered (`name'2`, `name'3`), linear in time and size.

Not hits (the helper's report): status naming an artifact never stored (the one commit
after the store trip is the only writer); a crash mid-trip (status stays Executing: the call
is followed, never run again); the whole trip retried (every write is idempotent); the
descriptor digest after a change (entries are replaced per watch event, looked up by
identity); the lazy packages under deserialization by name, watches, pickling, star
imports, kopf's model checks and threads.
"""

from __future__ import annotations

import json
import threading
from typing import Any

import pytest

from tests.unit.fake_cluster import (
    FakeCluster,
    finished_job,
    invocation,
    make_runtime,
    pod_result,
    shell_descriptor,
)
from tooladapter.enums import ToolKind
from tooladapter.executors.sandbox import SandboxExecutor
from tooladapter.flow import ending
from tooladapter.pipeline.sanitize.results import sanitize_structured
from tooladapter.settings import Settings

#: Keys the basic-auth rule redacts alike.
CLASHING = 2400


def clashing_object(n: int = CLASHING) -> dict[str, int]:
    return {f"://:{i}@": 0 for i in range(n)}


def test_keys_redacted_alike_stay_apart_in_linear_size() -> None:
    value = sanitize_structured(clashing_object(), max_bytes=1 << 20).value
    assert isinstance(value, dict) and len(value) == CLASHING
    # Each key is the one redacted form plus a short number, never one quote per clash.
    longest = max(len(key) for key in value)
    shortest = min(len(key) for key in value)
    assert longest - shortest <= len(f"'{CLASHING}")
    assert "://:0@" not in json.dumps(value)


def test_a_natural_key_like_a_numbered_one_keeps_both() -> None:
    value = sanitize_structured({"://:1@": 1, "://:2@": 2, "[x]'2": 3}).value
    assert isinstance(value, dict) and len(value) == 3
    assert sorted(value.values()) == [1, 2, 3]


async def test_what_a_sandbox_prints_is_sanitized_off_the_event_loop(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    cluster = FakeCluster()
    h = make_runtime(cluster, executors={ToolKind.SHELL: SandboxExecutor(cluster, Settings())})
    h.publish(shell_descriptor())
    h.cluster.grant(tools=["sh"], classes=["sandbox"])
    body = h.submit(invocation("sh-1", tool="sh", arguments={"command": "cat out.json"}))
    log = json.dumps(clashing_object(1500), separators=(",", ":")).encode()
    cluster.script_job(body["metadata"]["uid"], finished_job(), outcome=pod_result(log=log))
    threads: list[str] = []
    real = sanitize_structured

    def spy(*args: Any, **kwargs: Any) -> Any:
        threads.append(threading.current_thread().name)
        return real(*args, **kwargs)

    monkeypatch.setattr(ending, "sanitize_structured", spy)

    stored = await h.run(body, timeout=30)

    assert stored["status"]["state"] == "Observed"
    assert threads and "MainThread" not in threads, threads
