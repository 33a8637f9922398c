"""Issue 44 at the command line without a cluster: `invoke --attempt-id`, the usage and
the result-not-inline note of `invoke`, `result`, and `workspace release` without a
gateway asking the gateway's question before deleting anything."""

from __future__ import annotations

import hashlib
import json
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from tooladapter import cli
from tooladapter.artifacts import LocalArtifactStore, Space
from tooladapter.cli import bodies, views
from tooladapter.cli.context import Settings
from tooladapter.cli.exitcodes import ExitCode
from tooladapter.cli.gateway import result_url
from tooladapter.kube.errors import UserApiError
from tooladapter.kube.user import Identity
from tooladapter.sandbox.warm import LABEL_WORKSPACE, workspace_key

ME = "system:serviceaccount:t:agent-1"


def exit_of(argv: list[str]) -> int:
    with pytest.raises(SystemExit) as done:
        cli.main(argv)
    return int(done.value.code or 0)


def test_an_invocation_carries_its_attempt_id_only_when_given() -> None:
    common: dict[str, Any] = {
        "tool_id": "sh",
        "version": "1",
        "arguments": {},
        "username": ME,
        "groups": [],
        "generate_name": "sh-",
    }
    assert bodies.invocation_body(**common, attempt_id="a1")["spec"]["attemptId"] == "a1"
    assert "attemptId" not in bodies.invocation_body(**common)["spec"]


def test_the_attempt_id_comes_from_the_environment_as_the_run_id_does(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    seen: list[Any] = []

    def record(coro: Any) -> ExitCode:
        seen.append(coro.cr_frame.f_locals["call"])
        coro.close()
        return ExitCode.OK

    monkeypatch.setattr(sys.modules["tooladapter.cli.invoke"], "run_async", record)
    monkeypatch.setenv("TOOLADAPTER_ATTEMPT_ID", "from-env")
    monkeypatch.setenv("TOOLADAPTER_RUN_ID", "run-env")
    assert exit_of(["invoke", "sh"]) == 0
    assert exit_of(["invoke", "sh", "--attempt-id", "given"]) == 0
    assert [(c.attempt_id, c.run_id) for c in seen] == [
        ("from-env", "run-env"),
        ("given", "run-env"),
    ]


def _ran(**status: Any) -> dict[str, Any]:
    return {
        "metadata": {"name": "c1", "namespace": "t"},
        "spec": {"tool": {"id": "sh", "version": "1"}, "attemptId": "a1"},
        "status": {"state": "Observed", **status},
    }


def test_the_outcome_shows_usage_as_the_receipt_meters_it() -> None:
    obj = _ran(
        execution={"kind": "shell", "startedAt": "x", "sandboxSeconds": 1.25},
        egress=[
            {
                "verdict": "allowed",
                "host": "a",
                "port": 443,
                "connections": 2,
                "bytesUp": 10,
                "bytesDown": 300,
            },
            {
                "verdict": "refused",
                "host": "b",
                "port": 443,
                "connections": 1,
                "bytesUp": 0,
                "bytesDown": 0,
                "reason": "not allowed",
            },
        ],
        receiptRef="sha256:" + "a" * 64,
        result={"content": "hi", "inline": True},
    )
    out = views.outcome(obj)
    assert out["attemptId"] == "a1" and out["receiptRef"] == "sha256:" + "a" * 64
    assert out["usage"] == {
        "sandboxSeconds": 1.25,
        "egressBytesUp": 10,
        "egressBytesDown": 300,
        "egressConnections": 3,
    }
    assert out["resultInline"] is True
    assert views.usage_text(out["usage"]) == (
        "sandbox 1.250s, egress 3 connection(s), 10 B up, 300 B down"
    )
    # A call that never ran has no usage to show (not zeros that claim a meter).
    assert "usage" not in views.outcome(_ran())
    assert views.outcome(_ran(result={"content": "", "inline": False}))["resultInline"] is False


def test_invoke_says_where_a_result_too_large_to_inline_is(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from tooladapter.cli.invoke import _report

    obj = _ran(
        execution={"kind": "shell", "startedAt": "x", "sandboxSeconds": 0.5},
        result={"content": "", "inline": False, "originalBytes": 100_000},
        resultRef="sha256:" + "b" * 64,
        receiptRef="sha256:" + "c" * 64,
    )
    assert _report(Settings(), obj, finished=True, dry_run=False) is ExitCode.OK
    err = capsys.readouterr().err
    assert "receipt sha256:" + "c" * 64 in err
    assert "usage: sandbox 0.500s" in err
    assert "tooladapter result c1 -n t" in err and "100000 bytes" in err


def test_the_result_url_quotes_its_parts() -> None:
    assert (
        result_url("http://gw/", "t", "c1") == "http://gw/namespaces/t/tool-invocations/c1/result"
    )


# --------------------------------------------------------------------------- a fake user


@dataclass
class FakeUser:
    """The calls `result` and `workspace release` make, answered from memory."""

    namespace: str = "t"
    allowed: set[tuple[str, str]] = field(default_factory=set)
    pods: dict[str, str] = field(default_factory=dict)  # name -> workspace label
    pod_rights: bool = True
    objects: dict[str, dict[str, Any]] = field(default_factory=dict)
    deleted: list[str] = field(default_factory=list)
    asked: list[tuple[str, str]] = field(default_factory=list)

    async def whoami(self) -> Identity:
        return Identity(ME, ())

    patches: list[tuple[str, list[dict[str, Any]]]] = field(default_factory=list)
    #: What the operator does on spec.releaseWorkspace of an ended call: records the time.
    operator_records: bool = True

    async def can_i(
        self, verb: str, resource: str, name: str | None = None, *, group: str = "x"
    ) -> bool:
        if resource == "pods":
            assert group == "", "pods are in the core group"
            return self.pod_rights
        self.asked.append((verb, resource))
        return (verb, resource) in self.allowed

    async def list_where(self, plural: str, path: str, value: str) -> list[dict[str, Any]]:
        assert (plural, path) == ("toolinvocations", "spec.caller.name")
        return [o for o in self.objects.values() if o["spec"]["caller"]["name"] == value]

    async def json_patch(self, plural: str, name: str, ops: list[dict[str, Any]]) -> dict[str, Any]:
        self.patches.append((name, ops))
        obj = self.objects[name]
        obj["spec"]["releaseWorkspace"] = True
        if self.operator_records and obj["status"]["state"] == "Observed":
            obj["status"]["workspaceReleasedAt"] = "2026-12-06T10:00:00.000000Z"
        return obj

    async def pod_names(self, selector: str) -> list[str]:
        if not self.pod_rights:
            raise UserApiError(403, 'pods is forbidden: User "x" cannot list resource "pods"')
        label, _, value = selector.partition("=")
        assert label == LABEL_WORKSPACE
        return [name for name, key in self.pods.items() if key == value]

    async def delete_pod(self, name: str) -> bool:
        self.deleted.append(name)
        return self.pods.pop(name, None) is not None

    async def follow(self, plural: str, name: str) -> AsyncIterator[dict[str, Any]]:
        yield await self.get(plural, name)

    async def get(self, plural: str, name: str) -> dict[str, Any]:
        if name not in self.objects:
            raise UserApiError(404, f"{plural} {name!r} not found")
        return self.objects[name]

    async def bearer_token(self) -> str | None:
        return "token"


@pytest.fixture
def user(monkeypatch: pytest.MonkeyPatch) -> FakeUser:
    fake = FakeUser()

    @asynccontextmanager
    async def connect(_settings: Settings) -> AsyncIterator[FakeUser]:
        yield fake

    monkeypatch.setattr(Settings, "connect", connect)
    monkeypatch.delenv("TOOLADAPTER_GATEWAY_URL", raising=False)
    return fake


def test_release_without_a_gateway_deletes_only_that_workspace_as_the_user(
    user: FakeUser, capsys: pytest.CaptureFixture[str]
) -> None:
    user.allowed = {("create", "toolinvocations")}
    mine = workspace_key("t", ME, "a1")
    user.pods = {"ta-warm-1": mine, "ta-warm-2": workspace_key("t", "someone", "a1")}
    assert exit_of(["workspace", "release", "a1", "-o", "json"]) == 0
    answer = json.loads(capsys.readouterr().out)
    assert answer == {"namespace": "t", "attemptId": "a1", "caller": ME, "released": ["ta-warm-1"]}
    assert user.deleted == ["ta-warm-1"] and "ta-warm-2" in user.pods
    # Released already: 8, as the gateway's 404.
    assert exit_of(["workspace", "release", "a1"]) == ExitCode.NOT_FOUND


def test_release_without_a_gateway_asks_the_gateways_question_first(user: FakeUser) -> None:
    user.pods = {"ta-warm-1": workspace_key("t", ME, "a1")}
    # No create on toolinvocations: refused before anything is listed or deleted.
    assert exit_of(["workspace", "release", "a1"]) == ExitCode.FORBIDDEN
    assert user.asked == [("create", "toolinvocations")] and user.deleted == []
    # Another caller's takes release on workspaces; create on toolinvocations is not enough.
    user.allowed = {("create", "toolinvocations")}
    user.pods = {"ta-warm-3": workspace_key("t", "bob", "a1")}
    assert exit_of(["workspace", "release", "a1", "--caller", "bob"]) == ExitCode.FORBIDDEN
    assert user.asked[-1] == ("release", "workspaces") and user.deleted == []
    user.allowed.add(("release", "workspaces"))
    assert exit_of(["workspace", "release", "a1", "--caller", "bob"]) == 0
    assert user.deleted == ["ta-warm-3"]


def attempt_call(name: str, attempt: str, created: str, state: str = "Observed") -> dict[str, Any]:
    return {
        "metadata": {"name": name, "uid": f"uid-{name}", "creationTimestamp": created},
        "spec": {"caller": {"name": ME}, "attemptId": attempt},
        "status": {"state": state},
    }


def test_release_without_pod_rights_asks_the_operator_through_the_attempts_newest_call(
    user: FakeUser, capsys: pytest.CaptureFixture[str]
) -> None:
    """An agent's ServiceAccount: no pod rights, no gateway."""
    user.allowed = {("create", "toolinvocations")}
    user.pod_rights = False
    # No call of the attempt: nothing to release, nothing patched.
    assert exit_of(["workspace", "release", "a1"]) == ExitCode.NOT_FOUND
    assert "no call of attempt 'a1'" in capsys.readouterr().err and user.patches == []
    user.objects["c1"] = attempt_call("c1", "a1", "2026-12-06T09:00:00Z")
    user.objects["c2"] = attempt_call("c2", "a1", "2026-12-06T09:05:00Z")
    user.objects["dry"] = attempt_call("dry", "a1", "2026-12-06T09:09:00Z")
    user.objects["dry"]["spec"]["dryRun"] = True
    user.objects["b"] = attempt_call("b", "b1", "2026-12-06T09:10:00Z")
    assert exit_of(["workspace", "release", "a1", "-o", "json"]) == 0
    answer = json.loads(capsys.readouterr().out)
    assert answer == {
        "namespace": "t",
        "attemptId": "a1",
        "caller": ME,
        "throughCall": "c2",
        "releasedAt": "2026-12-06T10:00:00.000000Z",
    }
    ((name, ops),) = user.patches
    assert name == "c2"
    assert ops == [
        {"op": "test", "path": "/metadata/uid", "value": "uid-c2"},
        {"op": "add", "path": "/spec/releaseWorkspace", "value": True},
    ]
    # Recorded already, and no call of the attempt since: 8, as the gateway's 404.
    assert exit_of(["workspace", "release", "a1"]) == ExitCode.NOT_FOUND
    assert "was released at" in capsys.readouterr().err
    # A call still running: released once it ends.
    user.objects["c3"] = attempt_call("c3", "a1", "2026-12-06T09:20:00Z", state="Executing")
    assert exit_of(["workspace", "release", "a1"]) == 0
    assert "is released once call c3 ends" in capsys.readouterr().out


def test_result_prints_an_inline_result_and_reads_a_large_one_checked(
    user: FakeUser, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    user.objects["small"] = _ran(
        result={"content": "hello\n", "inline": True}, resultRef="sha256:" + "0" * 64
    )
    assert exit_of(["result", "small"]) == 0
    assert capsys.readouterr().out == "hello\n"

    text = "line\n" * 20_000
    store = LocalArtifactStore(tmp_path)
    ref = store.put(text.encode(), Space.RESULTS)
    assert ref == "sha256:" + hashlib.sha256(text.encode()).hexdigest()
    user.objects["large"] = _ran(result={"content": "", "inline": False}, resultRef=ref)
    # Neither a gateway nor a store: says how, prints nothing.
    assert exit_of(["result", "large"]) == ExitCode.USAGE
    assert "--gateway" in capsys.readouterr().err
    assert exit_of(["result", "large", "--artifact-dir", str(tmp_path)]) == 0
    assert capsys.readouterr().out == text
    assert exit_of(["result", "large", "--artifact-dir", str(tmp_path), "-o", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["content"] == text and doc["resultRef"] == ref and doc["inline"] is False

    # Not ended yet: 7; ended without a result: 8; not readable: the API server's answer.
    user.objects["running"] = {"metadata": {"name": "running"}, "status": {"state": "Executing"}}
    user.objects["denied"] = {"metadata": {"name": "denied"}, "status": {"state": "Denied"}}
    assert exit_of(["result", "running"]) == ExitCode.PENDING
    assert exit_of(["result", "denied"]) == ExitCode.NOT_FOUND
    assert exit_of(["result", "nothing"]) == ExitCode.NOT_FOUND
