"""Builders of tooladapter objects and RBAC grants for the integration tests."""

from __future__ import annotations

import base64
import contextlib
import json
import socket
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, cast

from kubernetes import client

from tooladapter import GROUP, VERSION
from tooladapter.devtools import (
    client_with_token,
    sa_user,
    token_for,
    unique,
    wait_for,
)

TERMINAL = {"Observed", "Failed", "Uncertain", "Cancelled", "Denied", "Previewed"}
SHELL_SCHEMA = {
    "type": "object",
    "properties": {"command": {"type": "string", "maxLength": 4096}},
    "required": ["command"],
    "additionalProperties": False,
}


def custom(api: client.ApiClient) -> client.CustomObjectsApi:
    return client.CustomObjectsApi(api)


def create(
    api: client.ApiClient, namespace: str, plural: str, body: dict[str, Any]
) -> dict[str, Any]:
    body = {"apiVersion": f"{GROUP}/{VERSION}", **body}
    return cast(
        dict[str, Any],
        custom(api).create_namespaced_custom_object(GROUP, VERSION, namespace, plural, body),
    )


def get(api: client.ApiClient, namespace: str, plural: str, name: str) -> dict[str, Any]:
    return cast(
        dict[str, Any],
        custom(api).get_namespaced_custom_object(GROUP, VERSION, namespace, plural, name),
    )


def descriptor(
    api: client.ApiClient,
    namespace: str,
    tool_id: str,
    *,
    kind: str,
    side_effect_class: str = "read",
    version: str = "1.0.0",
    wait_active: bool = True,
    **spec: Any,
) -> dict[str, Any]:
    body = {
        "kind": "ToolDescriptor",
        "metadata": {"name": f"{tool_id}-{version.replace('.', '-')}"},
        "spec": {
            "toolId": tool_id,
            "version": version,
            "kind": kind,
            "sideEffectClass": side_effect_class,
            **spec,
        },
    }
    obj = create(api, namespace, "tooldescriptors", body)
    if wait_active:
        wait_for(
            lambda: (
                get(api, namespace, "tooldescriptors", obj["metadata"]["name"]).get("status") or {}
            ).get("active"),
            # A second operator a module starts may take a while to open its watches on a
            # loaded node (seen in CI: 30 s passed once with nothing handled yet).
            timeout=90,
            what=f"descriptor {tool_id} active",
        )
    return obj


def shell_tool(
    api: client.ApiClient,
    namespace: str,
    tool_id: str = "sh",
    *,
    side_effect_class: str = "sandbox",
    memory: str = "64Mi",
    cpu: str = "500m",
    timeout: int = 60,
    egress: list[str] | None = None,
    cpu_request: str = "50m",
    **spec: Any,
) -> dict[str, Any]:
    """A shell tool; unless `shell=` says otherwise, the commands these tests run are on
    its allow list (a command on no entry needs an approval)."""
    spec.setdefault("shell", {"allow": list(TEST_SHELL_ALLOW)})
    return descriptor(
        api,
        namespace,
        tool_id,
        kind="shell",
        side_effect_class=side_effect_class,
        inputSchema=SHELL_SCHEMA,
        timeoutSeconds=timeout,
        sandbox={
            "resources": {
                "requests": {"cpu": cpu_request, "memory": memory},
                "limits": {"cpu": cpu, "memory": memory},
            },
            "egress": {"allow": egress or []},
        },
        **spec,
    )


#: The allow list of `shell_tool` tools: what the integration tests run in them.
TEST_SHELL_ALLOW = ("echo", "cat", "sleep", "true", "tail", "wget", "ls", "uname")


def container_tool(
    api: client.ApiClient,
    namespace: str,
    tool_id: str,
    command: list[str],
    *,
    side_effect_class: str = "sandbox",
    timeout: int = 60,
    egress: list[str] | None = None,
    **spec: Any,
) -> dict[str, Any]:
    """A container tool: the platform's fixed argv; the arguments arrive as the JSON file
    /tooladapter/arguments.json. The kind that may carry credential files. A tool with
    credentials must set its egress explicitly: `egress` sets `sandbox.egress.allow`
    (`[]`: nothing) and `credentials=` carries `spec.credentials`."""
    sandbox: dict[str, Any] = {
        "command": command,
        "resources": {
            "requests": {"cpu": "50m", "memory": "64Mi"},
            "limits": {"cpu": "500m", "memory": "64Mi"},
        },
    }
    if egress is not None or spec.get("credentials"):
        sandbox["egress"] = {"allow": list(egress or [])}
    return descriptor(
        api,
        namespace,
        tool_id,
        kind="container",
        side_effect_class=side_effect_class,
        inputSchema={"type": "object", "additionalProperties": {"type": "string"}},
        timeoutSeconds=timeout,
        sandbox=sandbox,
        **spec,
    )


@dataclass
class Agent:
    """An agent ServiceAccount with a real token and a client that speaks as it."""

    namespace: str
    name: str
    api: client.ApiClient
    admin: client.ApiClient

    @property
    def user(self) -> str:
        return sa_user(self.namespace, self.name)

    @classmethod
    def create(
        cls,
        admin: client.ApiClient,
        namespace: str,
        name: str,
        role: str = "tooladapter-requester",
    ) -> Agent:
        """A ServiceAccount with a real token, bound to one of tooladapter's ClusterRoles."""
        token = token_for(admin, namespace, name)
        agent = cls(namespace, name, client_with_token(admin, token), admin)
        agent.bind(role)
        return agent

    def bind(self, cluster_role: str) -> None:
        client.RbacAuthorizationV1Api(self.admin).create_namespaced_role_binding(
            self.namespace,
            {  # type: ignore[arg-type]  # the client sends a dict body as is
                "metadata": {"name": f"{self.name}-{cluster_role}"},
                "roleRef": {
                    "apiGroup": "rbac.authorization.k8s.io",
                    "kind": "ClusterRole",
                    "name": cluster_role,
                },
                "subjects": [
                    {"kind": "ServiceAccount", "name": self.name, "namespace": self.namespace}
                ],
            },
        )

    def grant(self, tools: list[str], classes: list[str]) -> None:
        """The platform team's grant: invoke these tools, use these classes."""
        rbac = client.RbacAuthorizationV1Api(self.admin)
        role = unique(f"{self.name}-tools")
        rules = []
        if tools:
            rules.append(
                {
                    "apiGroups": [GROUP],
                    "resources": ["tooldescriptors"],
                    "verbs": ["invoke"],
                    "resourceNames": tools,
                }
            )
        if classes:
            rules.append(
                {
                    "apiGroups": [GROUP],
                    "resources": ["sideeffectclasses"],
                    "verbs": ["use"],
                    "resourceNames": classes,
                }
            )
        rbac.create_namespaced_role(self.namespace, {"metadata": {"name": role}, "rules": rules})  # type: ignore[arg-type]  # the client sends a dict body as is
        rbac.create_namespaced_role_binding(
            self.namespace,
            {  # type: ignore[arg-type]  # the client sends a dict body as is
                "metadata": {"name": role},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": role},
                "subjects": [
                    {"kind": "ServiceAccount", "name": self.name, "namespace": self.namespace}
                ],
            },
        )
        authz = client.AuthorizationV1Api(self.admin)

        def effective() -> bool:
            for tool in tools:
                if not _allowed(
                    authz, self.user, self.namespace, "invoke", "tooldescriptors", tool
                ):
                    return False
            return all(
                _allowed(authz, self.user, self.namespace, "use", "sideeffectclasses", c)
                for c in classes
            )

        wait_for(effective, timeout=30, what="RBAC grant effective")

    def invoke(
        self,
        tool: str,
        arguments: dict[str, Any],
        *,
        version: str = "1.0.0",
        name: str | None = None,
        caller_groups: list[str] | None = None,
        **spec: Any,
    ) -> str:
        name = name or unique(f"call-{tool}")
        caller: dict[str, Any] = {"kind": "agent", "name": self.user}
        if caller_groups:
            caller["groups"] = caller_groups
        create(
            self.api,
            self.namespace,
            "toolinvocations",
            {
                "kind": "ToolInvocation",
                "metadata": {"name": name},
                "spec": {
                    "tool": {"id": tool, "version": version},
                    "arguments": arguments,
                    "caller": caller,
                    **spec,
                },
            },
        )
        return name

    def wait(
        self, name: str, *, timeout: float = 120, states: set[str] | None = None
    ) -> dict[str, Any]:
        wanted = states or TERMINAL

        def done() -> dict[str, Any] | None:
            obj = get(self.api, self.namespace, "toolinvocations", name)
            return obj if (obj.get("status") or {}).get("state") in wanted else None

        return wait_for(done, timeout=timeout, what=f"invocation {name} in {sorted(wanted)}")


def _allowed(
    authz: client.AuthorizationV1Api, user: str, namespace: str, verb: str, resource: str, name: str
) -> bool:
    groups = [
        "system:authenticated",
        "system:serviceaccounts",
        f"system:serviceaccounts:{user.split(':')[2]}",
    ]
    review = authz.create_subject_access_review(
        {  # type: ignore[arg-type]  # the client sends a dict body as is
            "spec": {
                "user": user,
                "groups": groups,
                "resourceAttributes": {
                    "namespace": namespace,
                    "verb": verb,
                    "group": GROUP,
                    "resource": resource,
                    "name": name,
                },
            }
        }
    )
    return bool(review.status.allowed)


def jobs_of(api: client.ApiClient, namespace: str) -> list[Any]:
    return list(
        client.BatchV1Api(api)
        .list_namespaced_job(namespace, label_selector="app.kubernetes.io/managed-by=tooladapter")
        .items
    )


def events_of(api: client.ApiClient, namespace: str, name: str) -> list[str | None]:
    events = client.CoreV1Api(api).list_namespaced_event(
        namespace, field_selector=f"involvedObject.name={name}"
    )
    return [e.reason for e in events.items]


def status_of(obj: dict[str, Any]) -> dict[str, Any]:
    return dict(obj.get("status") or {})


def pretty(obj: Any) -> str:
    with contextlib.suppress(TypeError):
        return json.dumps(obj, indent=1, default=str)[:4000]
    return repr(obj)[:4000]


def approve(
    reviewer: Agent,
    invocation: str,
    *,
    decision: str = "Approved",
    request_hash: str | None = None,
    descriptor_digest: str | None = None,
    version: str = "1.0.0",
    expires_in: int = 600,
    bind_uid: bool = True,
) -> str:
    """`reviewer` approves (or rejects) the invocation's request, with its own token, as
    the CLI does: bound to the invocation's uid and the descriptor digest it shows."""
    obj = get(reviewer.admin, reviewer.namespace, "toolinvocations", invocation)
    body = {
        "kind": "ToolApproval",
        "metadata": {"generateName": "approval-"},
        "spec": {
            "invocation": invocation,
            **({"invocationUid": obj["metadata"]["uid"]} if bind_uid else {}),
            "requestHash": request_hash or status_of(obj)["requestHash"],
            "descriptorDigest": descriptor_digest or status_of(obj)["descriptorDigest"],
            "toolVersion": version,
            "decision": decision,
            "reviewer": reviewer.user,
            "comment": "looked at the arguments",
            "expiresAt": (datetime.now(UTC) + timedelta(seconds=expires_in)).strftime(
                "%Y-%m-%dT%H:%M:%SZ"
            ),
        },
    }

    def created() -> str | None:
        try:
            return str(
                create(reviewer.api, reviewer.namespace, "toolapprovals", body)["metadata"]["name"]
            )
        except client.ApiException as exc:
            if exc.status == 403:  # the RoleBinding is not effective yet
                return None
            raise

    return wait_for(created, timeout=30, what=f"{reviewer.user}'s ToolApproval admitted")


def uncertain_call(
    api: client.ApiClient, namespace: str, agent: Agent, **spec: Any
) -> tuple[str, dict[str, Any]]:
    """An approved `external` call ("deploy") whose effect is Uncertain: its server takes
    the request and never answers, so the call times out after the request was sent.
    Returns the invocation's name and status (`spec`: extra invocation spec, e.g. runId)."""
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen()
        port = silent.getsockname()[1]
        descriptor(
            api,
            namespace,
            "deploy",
            kind="http",
            side_effect_class="external",
            timeoutSeconds=3,
            http={
                "method": "POST",
                "url": f"http://127.0.0.1:{port}/deploy",
                "allowedHosts": [f"127.0.0.1:{port}"],
            },
        )
        agent.grant(["deploy"], ["external"])
        reviewer = Agent.create(api, namespace, "reviewer-1", role="tooladapter-reviewer")
        name = agent.invoke("deploy", {}, **spec)
        agent.wait(name, states={"AwaitingApproval"})
        approve(reviewer, name)
        uncertain = status_of(agent.wait(name))
    assert uncertain["state"] == "Uncertain", pretty(uncertain)
    return name, uncertain


def confirm_effect(
    person: Agent, namespace: str, name: str, *, happened: bool, evidence: str = "looked"
) -> None:
    """`person` records on the status subresource whether the Uncertain call's effect
    happened, in their own name (as `tooladapter confirm` does)."""
    custom(person.api).patch_namespaced_custom_object_status(
        GROUP,
        VERSION,
        namespace,
        "toolinvocations",
        name,
        {
            "status": {
                "effectConfirmation": {
                    "effectHappened": happened,
                    "confirmedBy": person.user,
                    "evidence": evidence,
                }
            }
        },
    )


def secret_file(name: str, secret: str, key: str, path: str | None = None) -> dict[str, Any]:
    """A `spec.credentials` entry: a Secret's key mounted read-only as a file of a container
    tool (at /tooladapter/credentials/<secret>/<key> unless `path` says otherwise)."""
    return {
        "name": name,
        "source": {"secretKeyRef": {"name": secret, "key": key}},
        "inject": {"file": path or f"/tooladapter/credentials/{secret}/{key}"},
    }


def secret_header(
    name: str, secret: str, key: str, hosts: list[str], **inject: Any
) -> dict[str, Any]:
    """A `spec.credentials` entry: a Secret's key sent in a header (default
    `Authorization: Bearer <value>`) of requests to `hosts`."""
    return {
        "name": name,
        "source": {"secretKeyRef": {"name": secret, "key": key}},
        "inject": {"hosts": hosts, **inject},
    }


def stored_receipt(artifacts: Path, status: dict[str, Any]) -> dict[str, Any]:
    """The receipt `status.receiptRef` names, from an operator's artifact directory (a
    signed one unwrapped: DSSE envelope, in-toto statement, its predicate)."""
    digest = status["receiptRef"].split(":")[1]
    document = json.loads((artifacts / "sha256" / digest[:2] / digest).read_bytes())
    if "payload" in document:
        statement = json.loads(base64.b64decode(document["payload"]))
        return dict(statement.get("predicate") or statement)
    return dict(document)
