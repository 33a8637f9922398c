"""Permission honours the caller's groups, which admission checks against the creator's."""

from __future__ import annotations

import pytest
from kubernetes import client

from tests.integration.objects import create, descriptor, get, pretty, status_of
from tooladapter import GROUP
from tooladapter.devtools import Namespace, wait_for

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(300)]


def grant_group(api: client.ApiClient, namespace: str, group: str, tool: str) -> None:
    rbac = client.RbacAuthorizationV1Api(api)
    rbac.create_namespaced_role(
        namespace,
        {  # type: ignore[arg-type]  # the client sends a dict body as is
            "metadata": {"name": "group-grant"},
            "rules": [
                {
                    "apiGroups": [GROUP],
                    "resources": ["tooldescriptors"],
                    "verbs": ["invoke"],
                    "resourceNames": [tool],
                },
                {
                    "apiGroups": [GROUP],
                    "resources": ["sideeffectclasses"],
                    "verbs": ["use"],
                    "resourceNames": ["read"],
                },
            ],
        },
    )
    rbac.create_namespaced_role_binding(
        namespace,
        {  # type: ignore[arg-type]  # the client sends a dict body as is
            "metadata": {"name": "group-grant"},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "Role",
                "name": "group-grant",
            },
            "subjects": [{"kind": "Group", "name": group, "apiGroup": "rbac.authorization.k8s.io"}],
        },
    )


def as_person(api: client.ApiClient, user: str, group: str) -> client.ApiClient:
    """The admin's client impersonating a person in one group (as an OIDC login would be)."""
    person = client.ApiClient(api.configuration)
    person.set_default_header("Impersonate-User", user)
    person.set_default_header("Impersonate-Group", group)
    return person


def invoke(api: client.ApiClient, namespace: str, name: str, caller: dict[str, object]) -> None:
    create(
        api,
        namespace,
        "toolinvocations",
        {
            "kind": "ToolInvocation",
            "metadata": {"name": name},
            "spec": {
                "tool": {"id": "list-tools", "version": "1.0.0"},
                "arguments": {},
                "caller": {"kind": "user", **caller},
            },
        },
    )


def test_a_grant_to_a_group_applies_only_when_the_caller_lists_it_and_is_in_it(
    api: client.ApiClient, ns: Namespace
) -> None:
    descriptor(api, ns.name, "list-tools", kind="native", native={"name": "list-tools"})
    grant_group(api, ns.name, "team-leads", "list-tools")
    client.RbacAuthorizationV1Api(api).create_namespaced_role_binding(
        ns.name,
        {  # type: ignore[arg-type]  # the client sends a dict body as is
            "metadata": {"name": "team-leads-request"},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "ClusterRole",
                "name": "tooladapter-requester",
            },
            "subjects": [
                {"kind": "Group", "name": "team-leads", "apiGroup": "rbac.authorization.k8s.io"}
            ],
        },
    )
    alice = as_person(api, "alice@example.com", "team-leads")

    def final(name: str) -> dict[str, object]:
        def done() -> dict[str, object] | None:
            status = status_of(get(api, ns.name, "toolinvocations", name))
            return status if status.get("state") in ("Observed", "Denied") else None

        return wait_for(done, timeout=60, what=f"{name} ended")

    invoke(alice, ns.name, "with-groups", {"name": "alice@example.com", "groups": ["team-leads"]})
    status = final("with-groups")
    assert status["state"] == "Observed", pretty(status)

    invoke(alice, ns.name, "without-groups", {"name": "alice@example.com"})
    status = final("without-groups")
    assert status["state"] == "Denied" and status["deniedStage"] == "permission", pretty(status)
    assert "no spec.caller.groups were given" in str(status["message"])

    with pytest.raises(client.ApiException) as refused:
        invoke(
            alice,
            ns.name,
            "claims-admin",
            {"name": "alice@example.com", "groups": ["team-leads", "platform-admins"]},
        )
    assert refused.value.status in (403, 422)
    assert "not a member of: platform-admins" in str(refused.value.body)
