"""A 403 names the role to bind: the CLI's table agrees with manifests/rbac/roles.yaml."""

from __future__ import annotations

from pathlib import Path

import yaml

from tooladapter.cli import roles

ROLES_YAML = Path(__file__).resolve().parents[3] / "manifests" / "rbac" / "roles.yaml"


def _grants() -> dict[str, set[tuple[str, str]]]:
    grants: dict[str, set[tuple[str, str]]] = {}
    for doc in yaml.safe_load_all(ROLES_YAML.read_text()):
        if doc and doc.get("kind") == "ClusterRole":
            rules = grants.setdefault(doc["metadata"]["name"], set())
            for rule in doc.get("rules", []):
                if "tooladapter.dev" in rule.get("apiGroups", []):
                    rules.update((r, v) for r in rule["resources"] for v in rule["verbs"])
    return grants


def test_every_role_the_table_names_grants_what_it_is_named_for() -> None:
    grants = _grants()
    for (resource, verb), names in roles.ROLES.items():
        for name in names:
            assert (resource, verb) in grants[name], f"{name} does not grant {verb} {resource}"


def test_a_forbidden_approval_names_the_reviewer_role_and_the_binding_to_make() -> None:
    message = (
        'toolapprovals.tooladapter.dev is forbidden: User "system:serviceaccount:team-a:rev-1" '
        'cannot create resource "toolapprovals" in API group "tooladapter.dev" in the '
        'namespace "team-a"'
    )
    hint = roles.hint(message)
    assert hint is not None
    assert "tooladapter-reviewer" in hint
    assert (
        "kubectl create rolebinding -n team-a rev-1-reviewer --clusterrole=tooladapter-reviewer "
        "--serviceaccount=team-a:rev-1" in hint
    )


def test_listing_calls_names_every_role_that_may_and_a_status_patch_names_operations() -> None:
    listing = roles.hint(
        'User "alice" cannot list resource "toolinvocations" in API group "tooladapter.dev" '
        'in the namespace "team-a"'
    )
    assert listing is not None and "--user=alice" in listing
    assert "tooladapter-requester" in listing and "tooladapter-observer" in listing
    patch = roles.hint(
        'User "bob" cannot patch resource "toolinvocations/status" in API group '
        '"tooladapter.dev" in the namespace "team-a"'
    )
    assert patch is not None and "--clusterrole=tooladapter-operations" in patch


def test_other_refusals_get_no_hint() -> None:
    assert roles.hint('User "x" cannot list resource "pods" in API group ""') is None
    assert roles.hint("the server could not find the requested resource") is None


def test_the_refused_command_picks_the_role_its_user_should_hold() -> None:
    message = (
        'User "system:serviceaccount:team-a:oncall-1" cannot get resource "toolinvocations" '
        'in API group "tooladapter.dev" in the namespace "team-a"'
    )
    confirm = roles.hint(message, "confirm")
    assert confirm is not None and "needs the ClusterRole tooladapter-operations" in confirm
    approvals = roles.hint(message, "approvals")
    assert approvals is not None and "--clusterrole=tooladapter-reviewer" in approvals
    for command, role in roles.COMMAND_ROLES.items():
        assert role in _grants(), command
