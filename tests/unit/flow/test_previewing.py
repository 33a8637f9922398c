"""One dry run from lookups to preview (`previewing.dry_run`), the seam every door uses:
what it looks up, what it asks, and the REST dry run's options and OpenAPI schema."""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import pytest

from tests.unit.fake_cluster import CALLER, NAMESPACE, descriptor, http_descriptor, invocation
from tooladapter.enums import DataLabel, PreviewVerdict, ScopeKind, SideEffectClass, Stage
from tooladapter.gateway.openapi import SCHEMAS, document
from tooladapter.gateway.routes import MODULES
from tooladapter.gateway.views.tools import BadCallOptions, CallOptions, call_options
from tooladapter.model import Caller, InvocationPreview, ToolPolicySpec
from tooladapter.pipeline import dataflow as rule
from tooladapter.pipeline.permission import Question
from tooladapter.pipeline.preview import PreviewSettings
from tooladapter.previewing import Found, Policies, dry_run

SCHEMA = {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}


def _active(body: dict[str, Any]) -> dict[str, Any]:
    return {**body, "status": {"active": True, "healthy": True}}


@dataclass
class Recording:
    """Lookups from plain data that remember what was looked up and asked."""

    descriptors: list[dict[str, Any]] = field(default_factory=list)
    policies_: Policies = ()
    labels: dict[str, str] = field(default_factory=dict)
    annotations: dict[str, Any] | None = None
    grants: set[str] = field(default_factory=set)
    looked_up: list[tuple[str, str]] = field(default_factory=list)
    asked: list[tuple[str, str]] = field(default_factory=list)
    mcp_asked: list[tuple[str, str]] = field(default_factory=list)
    #: requestHash -> the names of Uncertain, unconfirmed calls of that request.
    uncertain: dict[str, list[str]] = field(default_factory=dict)
    #: Data-flow scope stores by ConfigMap name.
    stores: dict[str, dict[str, str]] = field(default_factory=dict)

    async def scope_store(self, namespace: str, name: str) -> Mapping[str, str] | None:
        return self.stores.get(name)

    async def unconfirmed(self, namespace: str, tool_id: str, hashes: Sequence[str]) -> list[str]:
        return [name for h in hashes for name in self.uncertain.get(h, [])]

    async def descriptor(self, namespace: str, tool_id: str, version: str) -> Found:
        self.looked_up.append((tool_id, version))
        for body in self.descriptors:
            if (body["spec"]["toolId"], body["spec"]["version"]) == (tool_id, version):
                return Found(body)
        return Found(None, [b["spec"]["version"] for b in self.descriptors])

    async def policies(self, namespace: str) -> Policies:
        return self.policies_

    async def namespace_labels(self, namespace: str) -> Mapping[str, str]:
        return self.labels

    async def mcp_annotations(
        self, namespace: str, server: str, tool: str
    ) -> Mapping[str, Any] | None:
        self.mcp_asked.append((server, tool))
        return self.annotations

    async def allowed(self, namespace: str, caller: Caller, question: Question) -> bool:
        self.asked.append((caller.name, str(question)))
        return str(question) in self.grants


async def _preview(lookups: Recording, spec: dict[str, Any]) -> InvocationPreview:
    return await dry_run(lookups, namespace=NAMESPACE, spec=spec, settings=PreviewSettings())


async def test_it_asks_the_caller_exactly_the_permission_stages_questions() -> None:
    lookups = Recording(
        descriptors=[_active(descriptor("lister", inputSchema=SCHEMA))],
        grants={"invoke tooldescriptors/lister", "use sideeffectclasses/read"},
    )
    shown = await _preview(lookups, invocation(arguments={"path": "/a"})["spec"])
    assert shown.verdict is PreviewVerdict.WOULD_RUN, shown
    assert lookups.looked_up == [("lister", "1.0.0")]
    assert lookups.asked == [
        (CALLER, "invoke tooldescriptors/lister"),
        (CALLER, "use sideeffectclasses/read"),
    ]
    lookups.grants.discard("use sideeffectclasses/read")
    refused = await _preview(lookups, invocation(arguments={"path": "/a"})["spec"])
    assert refused.denied_stage is Stage.PERMISSION


async def test_mcp_annotations_raise_the_class_that_permission_is_asked_about() -> None:
    mcp = descriptor(
        "deployer",
        kind="mcp",
        mcp={"server": "srv", "tool": "deploy", "pinnedDigest": "sha256:" + "a" * 64},
    )
    lookups = Recording(descriptors=[_active(mcp)], annotations={"destructiveHint": True})
    shown = await _preview(lookups, invocation(tool="deployer")["spec"])
    assert lookups.mcp_asked == [("srv", "deploy")]
    assert shown.classification is not None
    assert shown.classification.effective is SideEffectClass.PRODUCTION
    assert (CALLER, "use sideeffectclasses/production") in lookups.asked


async def test_an_invalid_spec_looks_nothing_up_and_asks_nothing() -> None:
    lookups = Recording()
    shown = await _preview(lookups, {"arguments": {}, "caller": {"name": CALLER}})
    assert shown.denied_stage is Stage.VALIDATION
    assert lookups.looked_up == [] and lookups.asked == []


async def test_an_unpublished_version_names_the_published_ones_and_asks_nothing() -> None:
    lookups = Recording(descriptors=[_active(descriptor("lister", inputSchema=SCHEMA))])
    shown = await _preview(lookups, invocation(version="2.0.0", arguments={"path": "/a"})["spec"])
    assert shown.denied_stage is Stage.VALIDATION
    assert shown.validation.published_versions == ["1.0.0"]
    assert lookups.asked == []


async def test_an_unreadable_policy_fails_the_preview_closed() -> None:
    lookups = Recording(
        descriptors=[_active(descriptor("lister", inputSchema=SCHEMA))],
        policies_=[("team-a/broken", "spec.tools: not a list")],
        grants={"invoke tooldescriptors/lister", "use sideeffectclasses/read"},
    )
    shown = await _preview(lookups, invocation(arguments={"path": "/a"})["spec"])
    assert shown.verdict is PreviewVerdict.WOULD_BE_DENIED
    assert shown.denied_stage is Stage.POLICY and "team-a/broken" in shown.message


def test_the_rest_body_takes_the_tools_call_options_without_their_prefix() -> None:
    body = {"version": "1.2.0", "runId": "r", "attemptId": "a", "idempotencyKey": "k",
            "fencingToken": 3}  # fmt: skip
    assert call_options(body, prefix="", where="body") == CallOptions(
        idempotency_key="k", version="1.2.0", run_id="r", attempt_id="a", fencing_token=3
    )
    with pytest.raises(BadCallOptions, match=r"body\['version'\] is not a version"):
        call_options({"version": "x y"}, prefix="", where="body")
    with pytest.raises(BadCallOptions, match=r"body\['fencingToken'\]"):
        call_options({"fencingToken": True}, prefix="", where="body")
    # The MCP _meta form is unchanged.
    assert call_options({"dev.tooladapter/runId": "r"}).run_id == "r"


def _refs(node: Any) -> Iterator[str]:
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "$ref" and isinstance(value, str):
                yield value
            else:
                yield from _refs(value)
    elif isinstance(node, list):
        for item in node:
            yield from _refs(item)


def test_the_preview_schema_is_the_models_and_every_reference_resolves() -> None:
    doc = document(module.PATHS for module in MODULES)
    post = doc["paths"]["/namespaces/{namespace}/tools/{toolId}/dry-run"]["post"]
    answer = post["responses"]["200"]["content"]["application/json"]["schema"]
    assert answer == {"$ref": "#/components/schemas/InvocationPreview"}
    preview = SCHEMAS["InvocationPreview"]
    assert {"verdict", "deniedStage", "validation", "notEvaluated"} <= set(preview["properties"])
    assert "$defs" not in preview
    names = set(doc["components"]["schemas"])
    for ref in set(_refs(doc)):
        assert ref.removeprefix("#/components/schemas/") in names, ref


async def test_a_dry_run_reports_an_unconfirmed_identical_call() -> None:
    lookups = Recording(
        descriptors=[_active(descriptor("lister", inputSchema=SCHEMA))],
        grants={"invoke tooldescriptors/lister", "use sideeffectclasses/read"},
    )
    spec = invocation("x", arguments={"path": "/a"})["spec"]
    clean = await _preview(lookups, spec)
    assert clean.verdict == "would-run"
    assert clean.validation.request_hash
    lookups.uncertain[clean.validation.request_hash] = ["first"]

    preview = await _preview(lookups, spec)

    assert preview.verdict == "would-be-denied"
    assert (preview.denied_stage, preview.failure_class) == ("idempotency", "unconfirmed-effect")
    assert "first" in preview.message


@pytest.mark.parametrize(
    ("flow", "verdict"),
    [
        ({}, PreviewVerdict.WOULD_AWAIT_APPROVAL),
        ({"onPrivateAndUntrusted": "deny"}, PreviewVerdict.WOULD_BE_DENIED),
        ({"onPrivateAndUntrusted": "allow"}, PreviewVerdict.WOULD_RUN),
    ],
)
async def test_every_doors_dry_run_says_a_send_would_be_gated_by_the_data_flow_rule(
    flow: dict[str, str], verdict: PreviewVerdict
) -> None:
    send = http_descriptor("send", "https://api.example.com/x")
    scope = rule.Scope(ScopeKind.RUN, NAMESPACE, CALLER, "run-a")
    at = "2099-01-01T00:00:00Z"
    lookups = Recording(
        descriptors=[_active(send)],
        policies_=[("team-a/flow", ToolPolicySpec.model_validate({"dataFlow": flow}))],
        grants={"invoke tooldescriptors/send", "use sideeffectclasses/read"},
        stores={
            scope.store_name: {
                rule.entry_key(DataLabel.PRIVATE, "read-1"): rule.entry_value(tool="crm", at=at),
                rule.entry_key(DataLabel.UNTRUSTED, "fetch-2"): rule.entry_value(tool="web", at=at),
            }
        },
    )
    shown = await _preview(lookups, invocation(tool="send", runId="run-a")["spec"])
    assert shown.verdict is verdict, shown
    if verdict is PreviewVerdict.WOULD_AWAIT_APPROVAL:
        assert shown.approval is not None and shown.approval.required
        assert any("read-1" in r and "fetch-2" in r for r in shown.approval.reasons)
    if verdict is PreviewVerdict.WOULD_BE_DENIED:
        assert shown.denied_stage is Stage.POLICY and "read-1" in shown.message
    # Another run of the same caller holds nothing: it would run.
    clean = await _preview(lookups, invocation(tool="send", runId="run-b")["spec"])
    assert clean.verdict is PreviewVerdict.WOULD_RUN
