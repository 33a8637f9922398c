"""manifests/: parse, reference existing files, and grant what the design says (no more)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from tooladapter import model

ROOT = Path(__file__).resolve().parents[3]
MANIFESTS = ROOT / "manifests"
OPERATOR_SA = "system:serviceaccount:tooladapter-system:tooladapter-operator"
PLURALS = [plural for _, _, _, plural, _ in model.RESOURCES]


def _docs(path: Path) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d]


def _all_docs() -> list[dict[str, Any]]:
    return [d for p in sorted(MANIFESTS.rglob("*.yaml")) for d in _docs(p)]


def _by_kind(kind: str) -> dict[str, dict[str, Any]]:
    return {d["metadata"]["name"]: d for d in _all_docs() if d["kind"] == kind}


def _grants(role: dict[str, Any]) -> set[tuple[str, str, str]]:
    """(resource, verb, resourceName or '*') of every tooladapter.dev-or-core rule."""
    out = set()
    for rule in role["rules"]:
        for resource in rule["resources"]:
            for verb in rule["verbs"]:
                for name in rule.get("resourceNames", ["*"]):
                    out.add((resource, verb, name))
    return out


def test_kustomization_lists_existing_files() -> None:
    kustomization = yaml.safe_load((MANIFESTS / "kustomization.yaml").read_text())
    for entry in kustomization["resources"]:
        target = (MANIFESTS / entry).resolve()
        assert target.exists(), entry
        if target.is_dir():
            assert (target / "Kustomization").exists() or (target / "kustomization.yaml").exists()
    listed = {(MANIFESTS / e).resolve() for e in kustomization["resources"]}
    for path in MANIFESTS.rglob("*.yaml"):
        if path.name == "kustomization.yaml" or "examples" in path.parts:
            continue
        assert path.resolve() in listed, f"{path} is not in kustomization.yaml"


def test_every_document_has_kind_and_name() -> None:
    for doc in _all_docs():
        assert doc.get("apiVersion") and doc.get("kind")
        if doc["kind"] != "Kustomization":
            assert doc["metadata"]["name"]


def test_operator_can_run_kopf_on_every_resource() -> None:
    """kopf notes 12: watch + patch every served resource, patch its status, post events."""
    grants = _grants(_by_kind("ClusterRole")["tooladapter-operator"])
    for plural in PLURALS:
        for verb in ("get", "list", "watch", "patch"):
            assert (plural, verb, "*") in grants, (plural, verb)
        assert (f"{plural}/status", "patch", "*") in grants
        assert (plural, "create", "*") not in grants, "the operator never creates CRs"
    for needed in [
        ("events", "create"),
        ("subjectaccessreviews", "create"),
        ("tokenreviews", "create"),
        ("leases", "create"),
        ("leases", "update"),
        ("jobs", "create"),
        ("jobs", "delete"),
        ("pods/log", "get"),
        ("pods", "create"),  # the capacity check's dry runs, and warm sandbox pods
        ("pods", "delete"),  # warm sandbox pods only (executors/warm.py)
        ("pods/exec", "create"),  # a call in a warm sandbox
        ("networkpolicies", "create"),
        ("secrets", "create"),
        ("serviceaccounts/token", "create"),
        ("customresourcedefinitions", "watch"),
    ]:
        assert (*needed, "*") in grants, needed
    for resource, verb, _ in grants:
        assert verb != "*" and resource != "*", "no wildcards for the operator"


def test_operator_binding_names_the_service_account() -> None:
    binding = _by_kind("ClusterRoleBinding")["tooladapter-operator"]
    (subject,) = binding["subjects"]
    username = f"system:serviceaccount:{subject['namespace']}:{subject['name']}"
    assert username == OPERATOR_SA
    assert _by_kind("ServiceAccount")["tooladapter-operator"]["metadata"]["namespace"] == (
        "tooladapter-system"
    )


def test_roles_of_the_reference() -> None:
    roles = _by_kind("ClusterRole")
    requester = _grants(roles["tooladapter-requester"])
    assert ("toolinvocations", "create", "*") in requester
    assert not any(r.startswith("toolinvocations/status") for r, _, _ in requester)
    assert not any(r == "toolapprovals" for r, _, _ in requester)
    reviewer = _grants(roles["tooladapter-reviewer"])
    assert ("toolapprovals", "create", "*") in reviewer
    assert ("toolinvocations", "create", "*") not in reviewer
    operations = _grants(roles["tooladapter-operations"])
    assert ("toolinvocations/status", "patch", "*") in operations
    assert ("toolinvocations/pipeline", "update", "*") not in operations
    workspace = _grants(roles["tooladapter-workspace-admin"])
    assert ("mcpservers", "create", "*") in workspace
    assert ("mcpservers/activation", "update", "*") not in workspace
    assert ("sideeffectclasses", "use", "production") not in workspace
    platform = _grants(roles["tooladapter-platform-admin"])
    assert ("mcpservers/activation", "update", "*") in platform
    observer = _grants(roles["tooladapter-observer"])
    assert {verb for _, verb, _ in observer} == {"get", "list", "watch"}
    for plural in PLURALS:
        assert (plural, "watch", "*") in observer


@pytest.mark.parametrize("cls", ["read", "sandbox", "shared-write", "external", "production"])
def test_one_class_role_per_class(cls: str) -> None:
    role = _by_kind("ClusterRole")[f"tooladapter-class-{cls}"]
    assert _grants(role) == {("sideeffectclasses", "use", cls)}


def test_every_policy_is_bound_fail_closed() -> None:
    policies = _by_kind("ValidatingAdmissionPolicy")
    bindings = _by_kind("ValidatingAdmissionPolicyBinding")
    assert set(policies) == {
        "tooladapter-invocation-caller",
        "tooladapter-invocation-arguments",
        "tooladapter-invocation-arguments-unchanged",
        "tooladapter-invocation-interrupt",
        "tooladapter-approval-reviewer",
        "tooladapter-mcpserver-activation",
        "tooladapter-invocation-status",
        "tooladapter-invocation-metadata",
        "tooladapter-secret-references",
        "tooladapter-issuer-addresses",
        "tooladapter-invocation-release",
    }
    for name, policy in policies.items():
        assert policy["apiVersion"] == "admissionregistration.k8s.io/v1"
        assert policy["spec"]["failurePolicy"] == "Fail"
        for validation in policy["spec"]["validations"]:
            assert validation.get("message") or validation.get("messageExpression"), name
        bound = [b for b in bindings.values() if b["spec"]["policyName"] == name]
        assert bound and bound[0]["spec"]["validationActions"] == ["Deny"], name


def test_arguments_cannot_change_after_create_for_anyone() -> None:
    """The CRD rule cannot compare spec.arguments in full (the API server's CEL compares an
    object that only preserves unknown fields by size and shared keys): this policy does,
    on every update, with no exemption."""
    policy = _by_kind("ValidatingAdmissionPolicy")["tooladapter-invocation-arguments-unchanged"]
    rules = policy["spec"]["matchConstraints"]["resourceRules"]
    assert rules == [
        {
            "apiGroups": ["tooladapter.dev"],
            "apiVersions": ["*"],
            "operations": ["UPDATE"],
            "resources": ["toolinvocations"],
        }
    ]
    assert "matchConditions" not in policy["spec"]
    (check,) = policy["spec"]["validations"]
    assert check["expression"].strip() == (
        "object.spec.?arguments.orValue({}) == oldObject.spec.?arguments.orValue({})"
    )


def test_caller_policy_is_strict() -> None:
    policy = _by_kind("ValidatingAdmissionPolicy")["tooladapter-invocation-caller"]
    assert "matchConditions" not in policy["spec"], "the gateway exemption stays commented out"
    name_rule, groups_rule = policy["spec"]["validations"]
    assert "object.spec.caller.name == request.userInfo.username" in name_rule["expression"]
    # Every claimed group must be one the API server authenticated for the creator.
    assert "g in request.userInfo.groups" in groups_rule["expression"]


def test_status_policy_covers_every_status_field() -> None:
    policy = _by_kind("ValidatingAdmissionPolicy")["tooladapter-invocation-status"]
    expression = policy["spec"]["validations"][0]["expression"]
    compared = set(re.findall(r"object\.\?status\.\?(\w+) == oldObject", expression))
    fields = {info.alias or name for name, info in model.ToolInvocationStatus.model_fields.items()}
    assert compared == fields - {"effectConfirmation"}


def test_issuer_urls_are_judged_in_every_field_that_names_one() -> None:
    """The policy reads every URL the operator posts a client secret or a token to."""
    policy = _by_kind("ValidatingAdmissionPolicy")["tooladapter-issuer-addresses"]
    (rule,) = policy["spec"]["matchConstraints"]["resourceRules"]
    assert set(rule["resources"]) == {"tooldescriptors", "mcpservers"}
    assert set(rule["operations"]) == {"CREATE", "UPDATE"}
    text = yaml.safe_dump(policy["spec"])
    for source in ("oauth2ClientCredentials", "tokenExchange"):
        for field in ("tokenUrl", "revocationUrl"):
            assert f"c.source.{source}.{field}" in text, (source, field)


def test_secret_references_are_authorised_for_the_writer() -> None:
    policy = _by_kind("ValidatingAdmissionPolicy")["tooladapter-secret-references"]
    (rule,) = policy["spec"]["matchConstraints"]["resourceRules"]
    assert set(rule["resources"]) == {"tooldescriptors", "mcpservers"}
    assert set(rule["operations"]) == {"CREATE", "UPDATE"}
    assert "matchConditions" in policy["spec"]
    text = yaml.safe_dump(policy["spec"])
    # Every source of `spec.credentials` (the one declaration of tools and servers).
    for field in ("credentials", "source.secretKeyRef", "source.serviceAccountToken"):
        assert field in text, field
    for removed in ("secretDependencies", "kubernetesIdentity"):
        assert removed not in text, removed
    assert "resource('secrets')" in text and "check('get')" in text
    assert "subresource('token')" in text and "check('create')" in text
    # The operator is not exempted by name: it passes the checks with its own grants.
    assert OPERATOR_SA not in text
    grants = _grants(_by_kind("ClusterRole")["tooladapter-operator"])
    assert ("secrets", "get", "*") in grants
    assert ("serviceaccounts/token", "create", "*") in grants


def test_changing_where_an_activated_server_is_reached_needs_activation() -> None:
    policy = _by_kind("ValidatingAdmissionPolicy")["tooladapter-mcpserver-activation"]
    (condition,) = policy["spec"]["matchConditions"]
    for field in ("url", "credentials", "allowedCidrs"):
        assert f"object.spec.{field}" in condition["expression"] or (
            f"object.spec.?{field}" in condition["expression"]
        ), field
