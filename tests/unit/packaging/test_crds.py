"""The checked-in CRDs match the models and are structural (what the API server requires)."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tooladapter import crdgen, enums, model

ROOT = Path(__file__).resolve().parents[3]
CRDS = ROOT / "crds"
KINDS = {resource.model_fields["kind"].default for resource, *_ in model.RESOURCES}


def _load(path: Path) -> dict[str, Any]:
    text = path.read_text()
    assert text.startswith(crdgen.HEADER), f"{path.name} lacks the generated-file header"
    document: dict[str, Any] = yaml.safe_load(text)
    return document


def _crds() -> dict[str, dict[str, Any]]:
    docs = [_load(p) for p in sorted(CRDS.glob("tooladapter.dev_*.yaml"))]
    return {d["spec"]["names"]["kind"]: d for d in docs}


def _version(crd: dict[str, Any]) -> dict[str, Any]:
    (version,) = crd["spec"]["versions"]
    return dict(version)


def _schema(crd: dict[str, Any]) -> dict[str, Any]:
    return dict(_version(crd)["schema"]["openAPIV3Schema"])


def _nodes(node: dict[str, Any], path: str = "") -> Iterator[tuple[str, dict[str, Any]]]:
    yield path, node
    for name, sub in node.get("properties", {}).items():
        yield from _nodes(sub, f"{path}.{name}")
    if isinstance(node.get("items"), dict):
        yield from _nodes(node["items"], f"{path}[]")
    if isinstance(node.get("additionalProperties"), dict):
        yield from _nodes(node["additionalProperties"], f"{path}.*")


def _rules(node: dict[str, Any]) -> list[str]:
    return [r["rule"] for r in node.get("x-kubernetes-validations", [])]


# --------------------------------------------------------------------------- drift


def test_checked_in_crds_match_the_models() -> None:
    diff = crdgen.check(CRDS)
    assert diff == "", f"crds/ drifted from the models; run `make crds`:\n{diff}"


def test_check_reports_drift_and_stale_files(tmp_path: Path) -> None:
    crdgen.write(tmp_path)
    assert crdgen.check(tmp_path) == ""
    target = tmp_path / crdgen.filename("toolinvocations")
    target.write_text(target.read_text().replace("AwaitingApproval", "Waiting"))
    (tmp_path / "tooladapter.dev_oldthings.yaml").write_text("x: 1\n")
    diff = crdgen.check(tmp_path)
    assert (
        "-                    - Waiting" in diff
        or "+                    - AwaitingApproval" in diff
    )
    assert "stale generated file" in diff
    assert crdgen.main(["--check", str(tmp_path)]) == 1
    assert crdgen.main([str(tmp_path)]) == 0
    assert crdgen.main(["--check", str(tmp_path)]) == 0
    assert not (tmp_path / "tooladapter.dev_oldthings.yaml").exists()


def test_generation_is_deterministic() -> None:
    assert crdgen.generate() == crdgen.generate()


def test_one_file_per_resource_and_a_kustomization() -> None:
    assert set(_crds()) == KINDS
    kustomization = _load(CRDS / crdgen.KUSTOMIZATION)
    assert kustomization["resources"] == sorted(p.name for p in CRDS.glob("tooladapter.dev_*"))


# --------------------------------------------------------------------------- structure


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_schema_is_structural(kind: str) -> None:
    crd = _crds()[kind]
    text = yaml.safe_dump(crd)
    for forbidden in ("$ref", "anyOf", "oneOf", "allOf", "$defs"):
        assert forbidden not in text, f"{kind}: {forbidden} in the schema"
    for path, node in _nodes(_schema(crd)):
        for keyword in ("title", "const", "$ref", "anyOf", "oneOf", "allOf", "not"):
            assert keyword not in node, f"{kind}{path}: {keyword}"
        preserve = node.get("x-kubernetes-preserve-unknown-fields") is True
        # int-or-string (a quantity: 1 or "500m") is structural without a type.
        quantity = node.get("x-kubernetes-int-or-string") is True
        assert "type" in node or preserve or quantity, f"{kind}{path}: no type"
        assert node.get("additionalProperties") is not False, f"{kind}{path}"
        if preserve:
            assert "properties" not in node, f"{kind}{path}: preserve-unknown with properties"
        if node.get("type") == "array":
            assert isinstance(node.get("items"), dict), f"{kind}{path}: array without items"
        if node.get("type") == "object" and not preserve:
            assert "properties" in node or "additionalProperties" in node or path == ".metadata"
        if "default" in node:
            assert isinstance(node["default"], str | int | float | bool), f"{kind}{path}"
        if "enum" in node:
            assert node["type"] == "string", f"{kind}{path}"


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_crd_shape(kind: str) -> None:
    crd = _crds()[kind]
    spec = crd["spec"]
    assert spec["group"] == "tooladapter.dev"
    assert spec["scope"] == "Namespaced"
    assert spec["names"]["categories"] == ["tooladapter"]
    assert spec["names"]["shortNames"]
    version = _version(crd)
    assert version["name"] == "v1alpha1"
    assert version["served"] and version["storage"]
    assert version["subresources"] == {"status": {}}
    assert _schema(crd)["required"] == ["spec"]
    columns = [c["name"] for c in version["additionalPrinterColumns"]]
    assert "Age" in columns
    # Only the free-text columns that say why (as `kubectl get events` ends with MESSAGE)
    # come after Age.
    assert set(columns[columns.index("Age") + 1 :]) <= {"Message", "Reason"}


def test_printer_columns() -> None:
    crds = _crds()

    def columns(kind: str) -> dict[str, str]:
        version = _version(crds[kind])
        return {c["name"]: c["jsonPath"] for c in version["additionalPrinterColumns"]}

    assert columns("ToolInvocation") == {
        "Tool": ".spec.tool.id",
        "Version": ".spec.tool.version",
        "State": ".status.state",
        "Class": ".status.effectiveClass",
        "Reason": ".status.failureClass",
        "Stage": ".status.deniedStage",
        "Duplicate-Of": ".status.duplicateOf",
        "Caller": ".spec.caller.name",
        "Run": ".spec.runId",
        "Age": ".metadata.creationTimestamp",
        "Message": ".status.message",
    }
    descriptor = columns("ToolDescriptor")
    assert descriptor["Tool"] == ".spec.toolId"
    assert descriptor["Class"] == ".spec.sideEffectClass"
    assert descriptor["Active"] == ".status.active"
    assert descriptor["Healthy"] == ".status.healthy"
    assert descriptor["Reason"] == '.status.conditions[?(@.type=="Ready")].reason'
    assert descriptor["Message"] == ".status.message"
    assert columns("ToolApproval")["Bound"] == ".status.bound"
    assert columns("ToolApproval")["Reason"] == ".status.reason"
    assert columns("McpServer")["Phase"] == ".status.phase"
    assert columns("McpServer")["Message"] == ".status.lastProbe.message"
    assert columns("ToolPolicy")["Valid"] == ".status.valid"
    assert columns("ToolPolicy")["Message"] == ".status.message"


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_printer_columns_point_at_declared_fields(kind: str) -> None:
    crd = _crds()[kind]
    schema = _schema(crd)
    for column in _version(crd)["additionalPrinterColumns"]:
        node = schema
        # A filter (`conditions[?(@.type=="Ready")]`) selects list items: walk into them.
        path = re.sub(r"\[\?\(@\.[a-zA-Z]+==\"[A-Za-z]+\"\)\]", "[]", column["jsonPath"])
        *parents, leaf = path.lstrip(".").split(".")
        if parents == ["metadata"]:
            continue
        for part in parents:
            node = node["properties"][part.removesuffix("[]")]
            if part.endswith("[]"):
                node = node["items"]
        assert leaf in node["properties"], f"{kind}: {column['jsonPath']} not in the schema"


def test_status_declares_every_model_field() -> None:
    """kopf notes: status fields not in the schema are pruned silently."""
    crds = _crds()
    for resource, _, status_model, _, _ in model.RESOURCES:
        status = _schema(crds[resource.model_fields["kind"].default])["properties"]["status"]
        wire = {info.alias or name for name, info in status_model.model_fields.items()}
        assert wire == set(status["properties"]), resource.__name__


def test_enums_ranges_and_free_form_fields() -> None:
    crds = _crds()
    descriptor = _schema(crds["ToolDescriptor"])["properties"]["spec"]["properties"]
    assert descriptor["sideEffectClass"]["enum"] == [c.value for c in enums.SideEffectClass]
    assert descriptor["kind"]["enum"] == [k.value for k in enums.ToolKind]
    assert descriptor["timeoutSeconds"]["minimum"] == 1
    assert descriptor["timeoutSeconds"]["maximum"] == 86_400
    assert {k: v for k, v in descriptor["inputSchema"].items() if k != "description"} == {
        "type": "object",
        "x-kubernetes-preserve-unknown-fields": True,
    }
    assert descriptor["outputSchema"]["x-kubernetes-preserve-unknown-fields"] is True
    assert descriptor["http"]["properties"]["headers"]["additionalProperties"] == {"type": "string"}
    assert descriptor["riskClass"]["nullable"] is True
    invocation = _schema(crds["ToolInvocation"])["properties"]
    assert invocation["status"]["properties"]["state"]["enum"] == [
        s.value for s in enums.InvocationState
    ]
    assert invocation["status"]["properties"]["result"]["properties"]["provenance"]["enum"] == [
        "tool-result"
    ]
    policy = _schema(crds["ToolPolicy"])["properties"]["spec"]["properties"]
    value = policy["conditions"]["items"]["properties"]["value"]
    assert value == {
        "x-kubernetes-preserve-unknown-fields": True,
        "description": "The value to compare with.",
    }


def test_what_one_writer_writes_whole_is_one_managed_field() -> None:
    """Every object below a status field, and an invocation's arguments, are atomic maps:
    an agent's argument keys or a tool's output keys never become managedFields entries
    (each stored, served and diffed on every write of the object: issue 17)."""
    for kind, crd in _crds().items():
        status = _schema(crd)["properties"]["status"]
        objects = [
            (path, node)
            for path, node in _nodes(status)
            if path.count(".") >= 1 and node.get("type") == "object"
        ]
        assert objects or kind in ("ToolApproval", "ToolPolicy"), kind  # all scalars there
        for path, node in objects:
            assert node.get("x-kubernetes-map-type") == "atomic", f"{kind} .status{path}"
        assert "x-kubernetes-map-type" not in status, kind  # its fields are owned one by one
    spec = _schema(_crds()["ToolInvocation"])["properties"]["spec"]["properties"]
    assert spec["arguments"]["x-kubernetes-map-type"] == "atomic"
    assert spec["tool"].get("x-kubernetes-map-type") is None


def test_a_stage_without_detail_is_stored_without_one() -> None:
    """No CRD default for a stage's detail: the API server would add `detail: ""` to each
    of a call's dozen stages, in storage and in every watch event."""
    status = _schema(_crds()["ToolInvocation"])["properties"]["status"]["properties"]
    assert "default" not in status["stages"]["items"]["properties"]["detail"]
    assert model.StageEntry(stage="audit", outcome="receipt", time="t").sparse_wire() == {
        "stage": "audit",
        "outcome": "receipt",
        "time": "t",
    }


# --------------------------------------------------------------------------- CEL rules


ONE_WAY = ("interrupt", "releaseWorkspace")


def test_invocation_spec_immutable_except_its_one_way_flags() -> None:
    spec = _schema(_crds()["ToolInvocation"])["properties"]["spec"]
    rules = _rules(spec)
    for name in spec["properties"]:
        mentioned = [r for r in rules if f"self.{name} == oldSelf.{name}" in r]
        if name in ONE_WAY:
            assert not mentioned
        else:
            assert mentioned, f"spec.{name} has no immutability rule"
    for flag in ONE_WAY:
        assert any(f"oldSelf.{flag}" in r and f"self.{flag}" in r for r in rules), flag
    # A release names the attempt whose workspace it releases.
    assert (
        "!has(self.releaseWorkspace) || !self.releaseWorkspace || "
        "(has(self.attemptId) && size(self.attemptId) > 0)"
    ) in rules


def test_invocation_immutability_is_one_rule_that_short_circuits_on_an_unchanged_spec() -> None:
    """Each status write re-runs the spec's rules: one rule whose first term settles it."""
    spec = _schema(_crds()["ToolInvocation"])["properties"]["spec"]
    (immutability,) = [v for v in spec["x-kubernetes-validations"] if "oldSelf" in v["rule"]]
    assert immutability["rule"].startswith("self == oldSelf || (")
    for name in spec["properties"]:
        text = (
            f"spec.{name} cannot be reset to false once set"
            if name in ONE_WAY
            else f"spec.{name} is immutable (only spec.interrupt, spec.releaseWorkspace may change)"
        )
        assert f"'{text}'" in immutability["messageExpression"]


def test_approval_spec_immutable() -> None:
    spec = _schema(_crds()["ToolApproval"])["properties"]["spec"]
    assert "self == oldSelf" in _rules(spec)
    assert spec["properties"]["reviewerGroups"]["maxItems"] == 64


def test_descriptor_rules() -> None:
    spec = _schema(_crds()["ToolDescriptor"])["properties"]["spec"]
    rules = _rules(spec)
    for kind, block in (
        ("http", "http"),
        ("mcp", "mcp"),
        ("native", "native"),
        ("container", "sandbox"),
    ):
        assert any(f"self.kind != '{kind}'" in r and f"has(self.{block})" in r for r in rules)
    # A shell tool runs in the default sandbox; its shell block (lists) is optional.
    assert not any("self.kind != 'shell'" in r and "has(self.shell)" in r for r in rules)
    # Its command comes from the agent: never beside a credential file (HTTP injection by
    # the egress proxy is fine: the value never enters the pod).
    shell_rules = [r for r in rules if r.startswith("self.kind != 'shell' || !(")]
    assert any("self.credentials.exists(c, has(c.inject.file))" in r for r in shell_rules), rules
    assert "self.toolId == oldSelf.toolId" in rules
    assert "self.version == oldSelf.version" in rules


def _validation(node: dict[str, Any], needle: str) -> dict[str, Any]:
    (found,) = [v for v in node.get("x-kubernetes-validations", []) if needle in v["rule"]]
    return dict(found)


def test_descriptor_credential_rules_are_refused_at_apply() -> None:
    """The API server refuses what `pipeline.validation.credentials` says (without CEL
    evaluation here: each rule is there, on the right node, naming its field)."""
    spec = _schema(_crds()["ToolDescriptor"])["properties"]["spec"]
    native = _validation(spec, "self.kind in ['native', 'mcp']")
    assert "McpServer" in native["message"] and native["fieldPath"] == ".credentials"
    attempt = _validation(spec, "self.sandbox.workspace == 'attempt'")
    assert "has(c.inject.file)" in attempt["rule"] and "attempt" in attempt["message"]
    explicit = _validation(spec, "size(self.http.allowedHosts) > 0")
    assert "has(self.sandbox.egress.allow)" in explicit["rule"]
    assert "egress explicitly" in explicit["message"]
    covered = _validation(spec, "c.inject.hosts.all(h, ")
    # An entry of the egress covers a host exactly, or as `*.suffix` (the port compared
    # with the rest of the text), of the list the tool's kind uses.
    assert "e == h" in covered["rule"] and "h.endsWith(e.substring(1))" in covered["rule"]
    assert "self.http.allowedHosts" in covered["rule"]
    assert "self.sandbox.egress.allow" in covered["rule"]
    for rule in (native, attempt, explicit, covered):
        assert rule["message"].startswith("spec.credentials")

    credentials = spec["properties"]["credentials"]
    assert credentials["x-kubernetes-list-type"] == "map"
    assert credentials["x-kubernetes-list-map-keys"] == ["name"]
    assert credentials["maxItems"] == 8
    item = credentials["items"]
    assert set(item["required"]) == {"name", "source", "inject"}
    source = item["properties"]["source"]
    one_source = _validation(source, "has(self.secretKeyRef)")
    assert one_source["rule"] == (
        "[has(self.secretKeyRef), has(self.serviceAccountToken), "
        "has(self.oauth2ClientCredentials), has(self.tokenExchange)].filter(x, x).size() == 1"
    )
    issuer = source["properties"]["oauth2ClientCredentials"]
    assert set(issuer["required"]) == {"tokenUrl", "clientId", "clientSecretRef"}
    https = _validation(issuer["properties"]["tokenUrl"], "isURL(self)")
    assert https["rule"] == "isURL(self) && url(self).getScheme() == 'https'"
    exchange = source["properties"]["tokenExchange"]
    assert set(exchange["required"]) == {
        "tokenUrl",
        "clientId",
        "clientSecretRef",
        "subjectAudience",
    }
    inject = item["properties"]["inject"]
    one_form = _validation(inject, "[has(self.hosts), has(self.file)]")
    assert one_form["rule"].endswith(".filter(x, x).size() == 1")
    http_only = _validation(inject, "!has(self.file) || !(")
    for name in ("header", "scheme", "basicUsername", "methods", "paths"):
        assert f"has(self.{name})" in http_only["rule"]
    basic = _validation(inject, "!has(self.basicUsername) || !has(self.scheme)")
    assert basic["fieldPath"] == ".scheme"
    fields = inject["properties"]
    assert not re.search(fields["basicUsername"]["pattern"], "user:name")
    assert re.search(fields["basicUsername"]["pattern"], "user")
    file_pattern = fields["file"]["pattern"]
    assert re.search(file_pattern, "/tooladapter/credentials/db/.password")
    for bad in (
        "/tooladapter/credentials",
        "/tooladapter/credentials/",
        "/tooladapter/credentials/../etc/passwd",
        "/tooladapter/credentials/./x",
        "/etc/passwd",
        "/tooladapter/credentialsx/y",
    ):
        assert not re.search(file_pattern, bad), bad
    assert fields["methods"]["items"]["enum"] == [
        "GET",
        "HEAD",
        "POST",
        "PUT",
        "PATCH",
        "DELETE",
        "OPTIONS",
    ]


def test_mcp_server_credentials_take_no_file_methods_or_paths() -> None:
    spec = _schema(_crds()["McpServer"])["properties"]["spec"]
    rule = _validation(spec, "self.credentials.all(c, ")
    assert "!has(c.inject.file)" in rule["rule"] and "!has(c.inject.paths)" in rule["rule"]
    assert spec["properties"]["credentials"]["x-kubernetes-list-map-keys"] == ["name"]


def test_mcp_server_url_rule() -> None:
    url = _schema(_crds()["McpServer"])["properties"]["spec"]["properties"]["url"]
    assert url["pattern"] == "^https?://"
    assert any("isURL(self)" in r for r in _rules(url))


def test_every_rule_has_a_message() -> None:
    for kind, crd in _crds().items():
        for path, node in _nodes(_schema(crd)):
            for rule in node.get("x-kubernetes-validations", []):
                assert rule.get("message"), f"{kind}{path}: {rule['rule']}"


# --------------------------------------------------------------------------- converter


def test_converter_rejects_unions_it_cannot_express() -> None:
    schema = {"anyOf": [{"type": "string"}, {"type": "integer"}]}
    with pytest.raises(crdgen.SchemaError, match="non-null branches"):
        crdgen.structural(schema, {}, ".x")


def test_converter_rejects_unknown_keywords() -> None:
    with pytest.raises(crdgen.SchemaError, match="unsupported"):
        crdgen.structural({"type": "string", "contentEncoding": "base64"}, {}, ".x")


def test_converter_inlines_refs_and_nullable() -> None:
    defs = {
        "Color": {"enum": ["red", "blue"], "type": "string", "description": "Python detail."},
        "Box": {
            "type": "object",
            "title": "Box",
            "additionalProperties": False,
            "properties": {"color": {"$ref": "#/$defs/Color", "default": "red"}},
        },
    }
    node = {"anyOf": [{"$ref": "#/$defs/Box"}, {"type": "null"}], "default": None, "title": "B"}
    assert crdgen.structural(node, defs) == {
        "type": "object",
        "nullable": True,
        "properties": {"color": {"type": "string", "enum": ["red", "blue"], "default": "red"}},
    }


def test_converter_exclusive_bounds_and_const() -> None:
    assert crdgen.structural({"type": "integer", "exclusiveMinimum": 0}, {}) == {
        "type": "integer",
        "minimum": 0,
        "exclusiveMinimum": True,
    }
    assert crdgen.structural({"const": "x"}, {}) == {"type": "string", "enum": ["x"]}


# --------------------------------------------------------------------------- kubectl explain


def _properties(node: dict[str, Any], path: str) -> Iterator[tuple[str, dict[str, Any]]]:
    """Every named property under `node` (through list items and map values)."""
    for name, sub in node.get("properties", {}).items():
        yield f"{path}.{name}", sub
        yield from _properties(sub, f"{path}.{name}")
    if isinstance(node.get("items"), dict):
        yield from _properties(node["items"], f"{path}[]")
    if isinstance(node.get("additionalProperties"), dict):
        yield from _properties(node["additionalProperties"], f"{path}.*")


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_kubectl_explain_describes_every_field(kind: str) -> None:
    """`kubectl explain` prints `<no description>` for a property without one."""
    schema = _schema(_crds()[kind])
    assert schema.get("description"), kind
    missing = [
        path
        for path, node in _properties(schema, kind)
        # The API server refuses a description of metadata (explain shows ObjectMeta's).
        if not node.get("description") and path != f"{kind}.metadata"
    ]
    assert missing == [], f"{len(missing)} fields without a description: {missing}"
