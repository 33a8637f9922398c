"""`tooladapter approvals` says which credentials a waiting call will carry and where,
labelled as the descriptor's, and says so when they cannot be known."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from typing import Any

import pytest

from tests.unit.fake_cluster import http_descriptor
from tooladapter import cli
from tooladapter.cli import context
from tooladapter.cli.approvals import carried_lines
from tooladapter.enums import Resource
from tooladapter.kube.errors import UserApiError
from tooladapter.model import ToolDescriptorSpec
from tooladapter.pipeline.hashing import descriptor_digest

NAMESPACE = "team-a"


def tool() -> dict[str, Any]:
    body = http_descriptor(
        "deploy",
        "https://api.example.com/v1/deploy",
        credentials=[
            {
                "name": "api",
                "source": {"secretKeyRef": {"name": "api-creds", "key": "token"}},
                "inject": {"hosts": ["api.example.com"], "methods": ["POST"]},
            },
            {
                "name": "audit",
                "source": {"serviceAccountToken": {"serviceAccountName": "auditor"}},
                "inject": {"hosts": ["api.example.com"], "scheme": ""},
            },
        ],
    )
    body["spec"]["sideEffectClass"] = "external"
    return body


def waiting(body: dict[str, Any]) -> dict[str, Any]:
    digest = descriptor_digest(ToolDescriptorSpec.model_validate(body["spec"]).wire())
    return {
        "metadata": {"name": "call-1", "namespace": NAMESPACE, "uid": "uid-1"},
        "spec": {
            "tool": {"id": "deploy", "version": "1.0.0"},
            "arguments": {"tag": "v1"},
            "caller": {"kind": "agent", "name": "agent-1"},
        },
        "status": {
            "state": "AwaitingApproval",
            "requestHash": "sha256:" + "1" * 64,
            "descriptorDigest": digest,
            "approvalRequestedAt": "2026-01-01T00:00:00Z",
        },
    }


class FakeApi:
    """The user's API client: one namespace's invocations and descriptors."""

    def __init__(self, objects: Mapping[Resource, list[dict[str, Any]]], refused: set[str]) -> None:
        self.namespace = NAMESPACE
        self.objects = objects
        self.refused = refused
        self.listed: list[str] = []

    async def list_all(self, plural: str, **_: Any) -> list[dict[str, Any]]:
        self.listed.append(plural)
        if plural in self.refused:
            raise UserApiError(403, f"{plural} is forbidden")
        return self.objects.get(Resource(plural), [])


def run(
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    objects: Mapping[Resource, list[dict[str, Any]]],
    *argv: str,
    refused: set[str] | None = None,
) -> tuple[int, str, FakeApi]:
    api = FakeApi(objects, refused or set())

    @asynccontextmanager
    async def connected(**_: Any) -> AsyncIterator[FakeApi]:
        yield api

    monkeypatch.setattr(context, "connect", connected)
    with pytest.raises(SystemExit) as done:
        cli.main([*argv, "approvals"])
    return int(done.value.code or 0), capsys.readouterr().out, api


def test_approvals_list_each_credential_and_where_it_goes(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    body = tool()
    objects = {Resource.INVOCATIONS: [waiting(body)], Resource.DESCRIPTORS: [body]}
    code, out, _ = run(monkeypatch, capsys, objects)
    assert code == 0, out
    lines = out.splitlines()
    label = lines.index("  credentials (declared by the descriptor, not the agent):")
    assert lines[label + 1 : label + 3] == [
        "    api: Secret api-creds key token, as header Authorization (Bearer) on requests "
        "to api.example.com (POST; every path)",
        "    audit: a token of ServiceAccount auditor, as header Authorization (the value "
        "alone) on requests to api.example.com (every method; every path)",
    ]


def test_structured_output_carries_the_same_view(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    body = tool()
    objects = {Resource.INVOCATIONS: [waiting(body)], Resource.DESCRIPTORS: [body]}
    code, out, _ = run(monkeypatch, capsys, objects, "-o", "json")
    assert code == 0
    (view,) = json.loads(out)
    carries = view["carries"]
    assert carries["declaredBy"] == "descriptor" and carries["descriptor"] == "validated"
    assert carries["credentials"][0]["source"] == {
        "kind": "secretKeyRef",
        "secret": "api-creds",
        "key": "token",
    }


def test_descriptors_the_user_may_not_read_make_the_credentials_unknown_not_an_error(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    body = tool()
    objects = {Resource.INVOCATIONS: [waiting(body)], Resource.DESCRIPTORS: [body]}
    code, out, _ = run(monkeypatch, capsys, objects, refused={Resource.DESCRIPTORS})
    assert code == 0
    assert "the namespace's tool descriptors could not be read" in out
    assert "api-creds" not in out


def test_no_waiting_call_reads_no_descriptors(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, api = run(monkeypatch, capsys, {Resource.DESCRIPTORS: [tool()]})
    assert code == 0
    assert api.listed == [Resource.INVOCATIONS]


def test_a_descriptor_without_credentials_says_none() -> None:
    known_none = {"known": True, "credentials": [], "note": None, "mcpServer": None}
    assert carried_lines(known_none)[1:] == ["    none"]
