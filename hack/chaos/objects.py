"""Descriptors, agents with grants, invocations and approvals, as the integration tests
build them (tests/integration/objects.py), with timeouts and retries for a cluster whose
API server may be restarting."""

from __future__ import annotations

import time
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from kubernetes import client

from tooladapter import GROUP, VERSION
from tooladapter.devtools import client_with_token, sa_user, token_for, wait_for

#: Connect and read timeouts of every request: a restarting API server must not hang us.
TIMEOUT = (5, 20)

SHELL_SCHEMA = {
    "type": "object",
    "properties": {"command": {"type": "string", "maxLength": 4096}},
    "required": ["command"],
    "additionalProperties": False,
}
ID_SCHEMA = {
    "type": "object",
    "properties": {"id": {"type": "string", "pattern": "^[a-z0-9-]{1,60}$"}},
    "required": ["id"],
}


def custom(api: client.ApiClient) -> client.CustomObjectsApi:
    return client.CustomObjectsApi(api)


def create(
    api: client.ApiClient, namespace: str, plural: str, body: dict[str, Any]
) -> dict[str, Any]:
    body = {"apiVersion": f"{GROUP}/{VERSION}", **body}
    result: dict[str, Any] = custom(api).create_namespaced_custom_object(
        GROUP, VERSION, namespace, plural, body, _request_timeout=TIMEOUT
    )
    return result


def get(api: client.ApiClient, namespace: str, plural: str, name: str) -> dict[str, Any]:
    result: dict[str, Any] = custom(api).get_namespaced_custom_object(
        GROUP, VERSION, namespace, plural, name, _request_timeout=TIMEOUT
    )
    return result


def list_all(api: client.ApiClient, namespace: str, plural: str) -> list[dict[str, Any]]:
    result = custom(api).list_namespaced_custom_object(
        GROUP, VERSION, namespace, plural, _request_timeout=(5, 60)
    )
    return list(result.get("items") or [])


def descriptor(
    api: client.ApiClient, namespace: str, tool_id: str, *, kind: str, cls: str, **spec: Any
) -> None:
    create(
        api,
        namespace,
        "tooldescriptors",
        {
            "kind": "ToolDescriptor",
            "metadata": {"name": tool_id},
            "spec": {
                "toolId": tool_id,
                "version": "1.0.0",
                "kind": kind,
                "sideEffectClass": cls,
                **spec,
            },
        },
    )


def http_tool(api: client.ApiClient, namespace: str, tool_id: str, cls: str, address: str) -> None:
    """POST http://<address>/<tool_id>/<id>: each call's effect, counted by its path."""
    descriptor(
        api,
        namespace,
        tool_id,
        kind="http",
        cls=cls,
        inputSchema=ID_SCHEMA,
        http={
            "method": "POST",
            "url": f"http://{address}/{tool_id}/{{id}}",
            "allowedHosts": [address],
        },
    )


def shell_tool(api: client.ApiClient, namespace: str, tool_id: str, egress: list[str]) -> None:
    descriptor(
        api,
        namespace,
        tool_id,
        kind="shell",
        cls="sandbox",
        inputSchema=SHELL_SCHEMA,
        timeoutSeconds=180,
        sandbox={
            "resources": {
                "requests": {"cpu": "20m", "memory": "32Mi"},
                "limits": {"cpu": "500m", "memory": "64Mi"},
            },
            "egress": {"allow": egress},
        },
        # Listed, so the call runs as its declared class (sandbox): an unlisted command
        # would be raised to shared-write and need an approval.
        shell={"allow": ["wget -q -O -"]},
    )


def wait_active(api: client.ApiClient, namespace: str, tool_ids: list[str]) -> None:
    for tool_id in tool_ids:
        wait_for(
            lambda t=tool_id: (get(api, namespace, "tooldescriptors", t).get("status") or {}).get(
                "active"
            ),
            timeout=60,
            what=f"descriptor {tool_id} active in {namespace}",
        )


@dataclass
class Agent:
    """A ServiceAccount with a real token and a client that speaks as it."""

    namespace: str
    name: str
    api: client.ApiClient
    admin: client.ApiClient

    @property
    def user(self) -> str:
        return sa_user(self.namespace, self.name)

    @classmethod
    def create(
        cls, admin: client.ApiClient, namespace: str, name: str, role: str = "tooladapter-requester"
    ) -> Agent:
        token = token_for(admin, namespace, name, seconds=4 * 3600)
        agent = cls(namespace, name, client_with_token(admin, token), admin)
        agent.bind("ClusterRole", role)
        return agent

    def bind(self, kind: str, role: str) -> None:
        client.RbacAuthorizationV1Api(self.admin).create_namespaced_role_binding(
            self.namespace,
            {
                "metadata": {"name": f"{self.name}-{role}"},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": kind, "name": role},
                "subjects": [
                    {"kind": "ServiceAccount", "name": self.name, "namespace": self.namespace}
                ],
            },
        )

    def grant(self, tools: list[str], classes: list[str]) -> None:
        """The platform team's grant: invoke these tools, use these classes."""
        role = f"{self.name}-tools"
        client.RbacAuthorizationV1Api(self.admin).create_namespaced_role(
            self.namespace,
            {
                "metadata": {"name": role},
                "rules": [
                    {
                        "apiGroups": [GROUP],
                        "resources": ["tooldescriptors"],
                        "verbs": ["invoke"],
                        "resourceNames": tools,
                    },
                    {
                        "apiGroups": [GROUP],
                        "resources": ["sideeffectclasses"],
                        "verbs": ["use"],
                        "resourceNames": classes,
                    },
                ],
            },
        )
        self.bind("Role", role)
        checks = [("invoke", "tooldescriptors", t) for t in tools]
        checks += [("use", "sideeffectclasses", c) for c in classes]
        wait_for(
            lambda: all(self.allowed(*check) for check in checks),
            timeout=30,
            what=f"RBAC grant of {self.user} effective",
        )

    def allowed(self, verb: str, resource: str, name: str) -> bool:
        review = client.AuthorizationV1Api(self.admin).create_subject_access_review(
            {
                "spec": {
                    "user": self.user,
                    "groups": [
                        "system:authenticated",
                        "system:serviceaccounts",
                        f"system:serviceaccounts:{self.namespace}",
                    ],
                    "resourceAttributes": {
                        "namespace": self.namespace,
                        "verb": verb,
                        "group": GROUP,
                        "resource": resource,
                        "name": name,
                    },
                }
            }
        )
        return bool(review.status.allowed)

    def invocation(
        self, name: str, tool: str, arguments: dict[str, Any], key: str
    ) -> dict[str, Any]:
        return {
            "kind": "ToolInvocation",
            "metadata": {"name": name},
            "spec": {
                "tool": {"id": tool, "version": "1.0.0"},
                "arguments": arguments,
                "caller": {"kind": "agent", "name": self.user},
                "idempotencyKey": key,
            },
        }

    def invoke(self, body: dict[str, Any], *, give_up_after: float) -> tuple[bool, int, str]:
        """Create the invocation, retrying while the API server is away; an AlreadyExists
        after a lost response means an earlier attempt created it. Returns (created,
        attempts, last error)."""
        deadline = time.monotonic() + give_up_after
        attempts, error = 0, ""
        while True:
            attempts += 1
            try:
                create(self.api, self.namespace, "toolinvocations", body)
                return True, attempts, error
            except client.ApiException as exc:
                if exc.status == 409:
                    return True, attempts, error
                error = f"HTTP {exc.status}: {str(exc.body)[:200]}"
                if exc.status not in (0, 401, 403, 429, 500, 502, 503, 504):
                    return False, attempts, error
            except Exception as exc:  # connection refused or reset, timeouts
                error = f"{type(exc).__name__}: {str(exc)[:200]}"
            if time.monotonic() > deadline:
                return False, attempts, error
            time.sleep(min(0.5 * attempts, 3.0))


def approval_body(reviewer: Agent, invocation: dict[str, Any], expires_in: int) -> dict[str, Any]:
    """The reviewer's approval of exactly what the invocation's status shows, bound to its
    uid and the descriptor digest; named after the invocation so a retried create after a
    lost response finds its own approval (AlreadyExists) instead of making a second."""
    status = invocation.get("status") or {}
    name = invocation["metadata"]["name"]
    return {
        "kind": "ToolApproval",
        "metadata": {"name": f"ok-{name}"[:253]},
        "spec": {
            "invocation": name,
            "invocationUid": invocation["metadata"]["uid"],
            "requestHash": status["requestHash"],
            "descriptorDigest": status["descriptorDigest"],
            "toolVersion": invocation["spec"]["tool"]["version"],
            "decision": "Approved",
            "reviewer": reviewer.user,
            "comment": "chaos: automatic reviewer",
            "expiresAt": (datetime.now(UTC) + timedelta(seconds=expires_in)).strftime(
                "%Y-%m-%dT%H:%M:%SZ"
            ),
        },
    }
