"""Issue 6: MCP servers registered, verified, activated, pinned and called through the operator.

The MCP servers are `tests/mcp_servers.py` (the official SDK's server side) run as
subprocesses on 127.0.0.1; the operator is the session's real process against the real
cluster. A server that "changes" or "comes back" is a new process on the same port. Every
wait is bounded and waits for something observable (a phase, a condition, a `CALLED` line
from the server), never for time to pass.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Iterator
from typing import Any, cast
from urllib.parse import urlsplit

import pytest
from kubernetes import client

from tests.integration.objects import (
    Agent,
    approve,
    create,
    custom,
    descriptor,
    get,
    pretty,
    status_of,
)
from tests.mcp_servers import (
    FAKE_AWS_ACCESS_KEY,
    FAKE_AWS_SECRET_KEY,
    FAKE_GITHUB_TOKEN,
    TOOLS,
    ServerProcess,
)
from tooladapter import GROUP, VERSION
from tooladapter.devtools import Namespace, wait_for
from tooladapter.mcp.core.rules import tool_digest

pytestmark = [pytest.mark.cluster]

#: The arguments of `slow-write`, closed: a descriptor of a class that can have effects
#: declares `additionalProperties: false` on every object of its input schema.
SLEEP_SCHEMA = {
    "type": "object",
    "properties": {"seconds": {"type": "number"}},
    "required": ["seconds"],
    "additionalProperties": False,
}
MODERN = "2026-07-28"
LEGACY = "2025-06-18"
Servers = Callable[..., ServerProcess]


# --------------------------------------------------------------------------- fixtures


@pytest.fixture
def servers() -> Iterator[Servers]:
    """Start test MCP servers (`servers("--mode", "legacy")`); all are killed afterwards."""
    started: list[ServerProcess] = []

    def start(*args: str) -> ServerProcess:
        proc = ServerProcess(*args)
        started.append(proc)
        return proc.start()

    yield start
    for proc in started:
        proc.kill()


def restart(servers: Servers, old: ServerProcess, *args: str) -> ServerProcess:
    """The server comes back (or is replaced) on the same address."""
    old.kill()
    return servers("--port", str(old.port), *args)


# --------------------------------------------------------------------------- helpers


def register(
    api: client.ApiClient,
    namespace: str,
    name: str,
    url: str,
    *,
    activated: bool = True,
    interval: int = 1,
    threshold: int = 2,
    **spec: Any,
) -> None:
    create(
        api,
        namespace,
        "mcpservers",
        {
            "kind": "McpServer",
            "metadata": {"name": name},
            "spec": {
                "url": url,
                "activated": activated,
                # The test servers listen on loopback: an address the operator connects to
                # only when the McpServer allows it explicitly.
                "allowedCidrs": ["127.0.0.1/32"],
                "probe": {
                    "intervalSeconds": interval,
                    "timeoutSeconds": 3,
                    "failureThreshold": threshold,
                },
                **spec,
            },
        },
    )


def by_name(url: str) -> str:
    """A test server's url by host name: an `inject.hosts` entry is a host name
    (`localhost:<port>`), not an IP literal."""
    return url.replace("//127.0.0.1:", "//localhost:")


def server_credential(secret: str, url: str) -> dict[str, Any]:
    """A `spec.credentials` entry: the Secret's `token` key as `Authorization: Bearer`, to
    the server's own host (and port)."""
    return {
        "name": secret,
        "source": {"secretKeyRef": {"name": secret, "key": "token"}},
        "inject": {"hosts": [urlsplit(url).netloc]},
    }


def server_status(api: client.ApiClient, namespace: str, name: str) -> dict[str, Any]:
    return status_of(get(api, namespace, "mcpservers", name))


def wait_phase(
    api: client.ApiClient, namespace: str, name: str, phase: str, timeout: float = 60
) -> dict[str, Any]:
    return wait_for(
        lambda: (s := server_status(api, namespace, name)).get("phase") == phase and s,
        timeout=timeout,
        what=f"McpServer {name} {phase}",
    )


def pinned_digest(api: client.ApiClient, namespace: str, server: str, tool: str) -> str:
    tools = server_status(api, namespace, server).get("tools") or []
    return str(next(t["digest"] for t in tools if t["name"] == tool))


def descriptor_status(api: client.ApiClient, namespace: str, tool_id: str) -> dict[str, Any]:
    return status_of(get(api, namespace, "tooldescriptors", f"{tool_id}-1-0-0"))


def wait_descriptor(
    api: client.ApiClient, namespace: str, tool_id: str, *, healthy: bool, reason: str | None = None
) -> dict[str, Any]:
    def matches() -> dict[str, Any] | None:
        status = descriptor_status(api, namespace, tool_id)
        ready: dict[str, Any] = next(
            (c for c in status.get("conditions") or [] if c["type"] == "Ready"), {}
        )
        if status.get("healthy") is healthy and reason in (None, ready.get("reason")):
            return status
        return None

    return wait_for(
        matches,
        timeout=60,
        what=f"descriptor {tool_id} healthy={healthy} reason={reason}",
    )


def bind(
    api: client.ApiClient,
    namespace: str,
    tool_id: str,
    server: str,
    tool: str,
    *,
    side_effect_class: str = "read",
    healthy: bool = True,
    **spec: Any,
) -> None:
    """An `mcp` descriptor pinned to the digest the server's status shows for `tool`."""
    descriptor(
        api,
        namespace,
        tool_id,
        kind="mcp",
        side_effect_class=side_effect_class,
        mcp={
            "server": server,
            "tool": tool,
            "pinnedDigest": pinned_digest(api, namespace, server, tool),
        },
        **spec,
    )
    if healthy:
        wait_descriptor(api, namespace, tool_id, healthy=True, reason="Bound")


def wait_events(
    api: client.ApiClient, namespace: str, name: str, reasons: set[str]
) -> dict[str, str]:
    """reason -> message of the McpServer's Events, once all `reasons` were posted."""

    def posted() -> dict[str, str] | None:
        events = client.CoreV1Api(api).list_namespaced_event(
            namespace, field_selector=f"involvedObject.kind=McpServer,involvedObject.name={name}"
        )
        # The operator's Events all carry a reason and a message.
        found = cast(dict[str, str], {e.reason: e.message for e in events.items})
        return found if reasons <= set(found) else None

    return wait_for(posted, timeout=60, what=f"events {sorted(reasons)} of McpServer {name}")


def descriptor_events(api: client.ApiClient, namespace: str, name: str) -> dict[str, str]:
    """reason -> message of a ToolDescriptor's Events."""
    events = client.CoreV1Api(api).list_namespaced_event(
        namespace, field_selector=f"involvedObject.kind=ToolDescriptor,involvedObject.name={name}"
    )
    return cast(dict[str, str], {e.reason: e.message for e in events.items})


def secret_values() -> list[str]:
    return [FAKE_AWS_ACCESS_KEY, FAKE_AWS_SECRET_KEY, FAKE_GITHUB_TOKEN]


# --------------------------------------------------------------------------- tests


@pytest.mark.timeout(180)
def test_a_server_is_verified_then_activated_by_an_admin_and_a_pinned_tool_call_is_observed(
    api: client.ApiClient, ns: Namespace, agent: Agent, servers: Servers
) -> None:
    server = servers("--mode", "current")
    register(api, ns.name, "tools", server.url, activated=False, interval=30)

    verified = wait_phase(api, ns.name, "tools", "Verified")
    assert verified["protocolVersion"] == MODERN
    assert verified["serverDigest"].startswith("sha256:")
    tools = {t["name"]: t for t in verified["tools"]}
    assert {"echo", "add", "leak", "bad-output", "slow-write", "slow-read"} <= set(tools)
    # Each digest covers the tool's whole wire object, exactly as the server lists it.
    assert {name: t["digest"] for name, t in tools.items()} == {
        t["name"]: tool_digest(t) for t in TOOLS
    }
    assert tools["echo"]["annotations"] == {"readOnlyHint": True, "openWorldHint": False}
    assert [r["uri"] for r in verified["resources"]] == ["file:///docs/readme.md"]
    assert [p["name"] for p in verified["prompts"]] == ["greet"]

    # Bound while only Verified: the descriptor exists but is not callable yet.
    bind(api, ns.name, "echo", "tools", "echo", healthy=False)
    waiting = wait_descriptor(api, ns.name, "echo", healthy=False, reason="ServerVerified")
    assert "Verified" in waiting["message"]

    # Activation is the platform admin's act (update on mcpservers/activation).
    custom(api).patch_namespaced_custom_object(
        GROUP, VERSION, ns.name, "mcpservers", "tools", {"spec": {"activated": True}}
    )
    active = wait_phase(api, ns.name, "tools", "Active")
    bindings = [(b["descriptor"], b["tool"], b["bound"]) for b in active["bindings"]]
    assert bindings == [("echo-1-0-0", "echo", True)]
    wait_descriptor(api, ns.name, "echo", healthy=True, reason="Bound")
    events = wait_events(api, ns.name, "tools", {"McpServerVerified", "McpServerActive"})
    assert events["McpServerVerified"].startswith("Registered -> Verified")
    assert events["McpServerActive"].startswith("Verified -> Active")

    agent.grant(["echo"], ["read"])
    key = f"idem-{uuid.uuid4().hex}"
    mark = server.mark()
    status = status_of(agent.wait(agent.invoke("echo", {"text": "hello mcp"}, idempotencyKey=key)))
    assert status["state"] == "Observed", pretty(status)
    assert status["result"]["content"] == "hello mcp"
    assert status["result"]["structuredContent"] == {"echo": "hello mcp"}
    assert status["receiptRef"].startswith("sha256:")
    # The idempotency key travelled in the request's namespaced _meta entry.
    assert server.wait_for("CALLED echo", since=mark) == f"CALLED echo {key}"


@pytest.mark.timeout(120)
def test_a_server_on_loopback_without_allowed_cidrs_says_why_it_stays_registered(
    api: client.ApiClient, ns: Namespace, servers: Servers
) -> None:
    """Issue 32: the address rule's refusal is said in status.message, the Reachable
    condition and a Warning event, each naming spec.allowedCidrs (nothing was sent)."""
    server = servers("--mode", "current")
    create(
        api,
        ns.name,
        "mcpservers",
        {
            "kind": "McpServer",
            "metadata": {"name": "private"},
            "spec": {"url": server.url, "probe": {"intervalSeconds": 30, "timeoutSeconds": 3}},
        },
    )
    status = wait_for(
        lambda: (s := server_status(api, ns.name, "private")).get("message") and s,
        timeout=60,
        what="McpServer private's status.message",
    )
    assert status["phase"] == "Registered"
    assert "spec.allowedCidrs" in status["message"] and "127.0.0.1" in status["message"]
    reachable = {c["type"]: c for c in status["conditions"]}["Reachable"]
    assert (reachable["status"], reachable["reason"]) == ("False", "AddressRefused")
    assert "spec.allowedCidrs" in reachable["message"]
    events = wait_events(api, ns.name, "private", {"McpServerAddressRefused"})
    assert "spec.allowedCidrs" in events["McpServerAddressRefused"]


@pytest.mark.timeout(120)
def test_a_server_speaking_an_earlier_protocol_revision_is_activated_and_called(
    api: client.ApiClient, ns: Namespace, agent: Agent, servers: Servers
) -> None:
    server = servers("--mode", "legacy")
    register(api, ns.name, "old", server.url, interval=30)

    active = wait_phase(api, ns.name, "old", "Active")
    assert active["protocolVersion"] == LEGACY
    bind(api, ns.name, "add", "old", "add")
    agent.grant(["add"], ["read"])

    status = status_of(agent.wait(agent.invoke("add", {"a": 2, "b": 40})))
    assert status["state"] == "Observed", pretty(status)
    assert status["result"]["content"] == "42"
    assert status["result"]["structuredContent"] == {"sum": 42}


#: `add`'s arguments closed as the descriptor declares them: only the server's schema is open.
ADD_SCHEMA = {
    "type": "object",
    "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
    "required": ["a", "b"],
    "additionalProperties": False,
}


@pytest.mark.timeout(180)
def test_effectful_tools_whose_schema_admits_unknown_keys_are_refused_at_apply_naming_the_path(
    api: client.ApiClient, ns: Namespace, agent: Agent, servers: Servers
) -> None:
    """Issue 37: the unconfirmed-effect block compares a container or mcp tool's arguments
    whole, so a key the tool ignores must be one it refuses. An external `mcp` descriptor
    bound to a server tool whose inputSchema admits unknown keys (`add`: no
    additionalProperties) is held back naming the tool and the path, and runs nothing; a
    `container` tool of class external whose own inputSchema has an open object is refused
    at apply naming its path."""
    server = servers("--mode", "current")
    register(api, ns.name, "tools", server.url, interval=30)
    active = wait_phase(api, ns.name, "tools", "Active")
    listed = {t["name"]: t.get("openObjects") for t in active["tools"]}
    assert listed["add"] == ["$"] and not listed["echo"], listed

    # The descriptor's own schema is closed: the server's is what the tool takes.
    bind(
        api,
        ns.name,
        "add",
        "tools",
        "add",
        side_effect_class="external",
        inputSchema=ADD_SCHEMA,
        healthy=False,
    )
    held = wait_descriptor(api, ns.name, "add", healthy=False, reason="OpenSchema")
    assert "tool 'add' of the server: inputSchema at $:" in held["message"], pretty(held)
    assert "additionalProperties: false" in held["message"]
    ready = next(c for c in held["conditions"] if c["type"] == "Ready")
    assert ready["status"] == "False" and "'add'" in ready["message"], pretty(held)
    # The server's bindings are written with its next probe.
    binding = wait_for(
        lambda: next(iter(server_status(api, ns.name, "tools").get("bindings") or []), None),
        timeout=60,
        what="the binding of add on McpServer tools",
    )
    assert (binding["descriptor"], binding["bound"]) == ("add-1-0-0", False), binding
    events = wait_for(
        lambda: (
            e
            if (e := descriptor_events(api, ns.name, "add-1-0-0")).get("ToolDescriptorOpenSchema")
            else None
        ),
        timeout=60,
        what="the Warning event ToolDescriptorOpenSchema",
    )
    assert "inputSchema at $" in events["ToolDescriptorOpenSchema"]

    # A call names it: refused at validation, the server never sees it.
    agent.grant(["add"], ["external"])
    mark = server.mark()
    denied = status_of(agent.wait(agent.invoke("add", {"a": 2, "b": 40})))
    assert denied["state"] == "Denied" and denied["deniedStage"] == "validation", pretty(denied)
    assert "inputSchema at $" in denied["message"], pretty(denied)
    # Not transient: only a person closing the server's schema ends it.
    assert denied["failureClass"] == "validation", pretty(denied)
    server.mark()
    assert not [line for line in server.seen[mark:] if line.startswith("CALLED add")]

    # A container tool of class external, an object in its own inputSchema left open.
    descriptor(
        api,
        ns.name,
        "deploy",
        kind="container",
        side_effect_class="external",
        wait_active=False,
        inputSchema={
            "type": "object",
            "properties": {"target": {"type": "string"}, "options": {"type": "object"}},
            "additionalProperties": False,
        },
        timeoutSeconds=30,
        sandbox={
            "command": ["/bin/sh", "-c", "cat /tooladapter/arguments.json"],
            "resources": {"limits": {"cpu": "100m", "memory": "32Mi"}},
        },
    )
    invalid = wait_descriptor(api, ns.name, "deploy", healthy=False, reason="Invalid")
    assert invalid["active"] is False, pretty(invalid)
    assert "inputSchema at $.properties.options:" in invalid["message"], pretty(invalid)
    assert "class external" in invalid["message"]


@pytest.mark.timeout(180)
def test_a_changed_input_schema_unbinds_the_tool_until_the_pinned_digest_is_updated(
    api: client.ApiClient, ns: Namespace, agent: Agent, servers: Servers
) -> None:
    server = servers("--mode", "current")
    register(api, ns.name, "tools", server.url, threshold=10)
    wait_phase(api, ns.name, "tools", "Active")
    bind(api, ns.name, "echo", "tools", "echo")
    agent.grant(["echo"], ["read"])
    old_digest = pinned_digest(api, ns.name, "tools", "echo")
    old_description = next(
        t["description"]
        for t in server_status(api, ns.name, "tools")["tools"]
        if t["name"] == "echo"
    )

    # Same server, same description; echo's inputSchema gains an optional property.
    server = restart(servers, server, "--mode", "current", "--variant", "changed-schema")
    changed = wait_descriptor(api, ns.name, "echo", healthy=False, reason="SchemaChanged")
    new_digest = pinned_digest(api, ns.name, "tools", "echo")
    assert new_digest != old_digest
    assert old_digest in changed["message"] and new_digest in changed["message"], changed
    echo = next(t for t in server_status(api, ns.name, "tools")["tools"] if t["name"] == "echo")
    assert echo["description"] == old_description
    binding = server_status(api, ns.name, "tools")["bindings"][0]
    assert binding["bound"] is False

    denied = status_of(agent.wait(agent.invoke("echo", {"text": "after the change"})))
    assert denied["state"] == "Denied" and denied["deniedStage"] == "validation", pretty(denied)
    assert new_digest in denied["message"], denied
    # Not transient: retrying cannot help until someone re-pins the digest.
    assert denied["failureClass"] == "validation"
    assert "CALLED echo" not in "\n".join(server.seen[: server.mark()])

    # Re-approval: someone pins the new digest.
    custom(api).patch_namespaced_custom_object(
        GROUP,
        VERSION,
        ns.name,
        "tooldescriptors",
        "echo-1-0-0",
        {"spec": {"mcp": {"pinnedDigest": new_digest}}},
    )
    wait_descriptor(api, ns.name, "echo", healthy=True, reason="Bound")
    status = status_of(agent.wait(agent.invoke("echo", {"text": "shout", "uppercase": True})))
    assert status["state"] == "Observed", pretty(status)
    assert status["result"]["structuredContent"] == {"echo": "SHOUT"}


@pytest.mark.timeout(180)
def test_a_stopped_server_degrades_calls_fail_fast_as_transient_and_it_recovers_to_active(
    api: client.ApiClient, ns: Namespace, agent: Agent, servers: Servers
) -> None:
    server = servers("--mode", "current")
    register(api, ns.name, "tools", server.url, interval=1, threshold=2)
    wait_phase(api, ns.name, "tools", "Active")
    bind(api, ns.name, "echo", "tools", "echo")
    agent.grant(["echo"], ["read"])

    server.kill()
    degraded = wait_phase(api, ns.name, "tools", "Degraded")
    assert degraded["consecutiveFailures"] >= 2
    assert degraded["lastProbe"]["ok"] is False
    wait_descriptor(api, ns.name, "echo", healthy=False, reason="ServerDegraded")
    wait_events(api, ns.name, "tools", {"McpServerDegraded"})

    failed = status_of(agent.wait(agent.invoke("echo", {"text": "anyone?"}), timeout=60))
    assert failed["state"] == "Denied", pretty(failed)
    assert failed["deniedStage"] == "validation"
    assert failed["failureClass"] == "transient"
    assert "Degraded" in failed["message"]

    server = restart(servers, server, "--mode", "current")
    wait_phase(api, ns.name, "tools", "Active")
    wait_descriptor(api, ns.name, "echo", healthy=True, reason="Bound")
    status = status_of(agent.wait(agent.invoke("echo", {"text": "welcome back"})))
    assert status["state"] == "Observed", pretty(status)
    assert status["result"]["content"] == "welcome back"


@pytest.mark.timeout(240)
def test_a_server_dying_mid_call_leaves_a_write_uncertain_and_a_read_failed(
    api: client.ApiClient, ns: Namespace, agent: Agent, servers: Servers
) -> None:
    writer = servers("--mode", "current")
    reader = servers("--mode", "current")
    register(api, ns.name, "writer", writer.url, interval=30)
    register(api, ns.name, "reader", reader.url, interval=30)
    wait_phase(api, ns.name, "writer", "Active")
    wait_phase(api, ns.name, "reader", "Active")
    bind(
        api,
        ns.name,
        "write",
        "writer",
        "slow-write",
        side_effect_class="shared-write",
        inputSchema=SLEEP_SCHEMA,
    )
    bind(api, ns.name, "read", "reader", "slow-read", side_effect_class="read")
    # slow-write says destructiveHint: the untrusted hint raises shared-write to production.
    agent.grant(["write", "read"], ["shared-write", "production", "read"])

    write = agent.invoke("write", {"seconds": 120})
    waiting = status_of(agent.wait(write, states={"AwaitingApproval", "Denied", "Failed"}))
    assert waiting["state"] == "AwaitingApproval", pretty(waiting)
    assert waiting["declaredClass"] == "shared-write"
    approve(Agent.create(api, ns.name, "reviewer-1", role="tooladapter-reviewer"), write)
    writer.wait_for("CALLED slow-write", timeout=60)
    assert status_of(get(api, ns.name, "toolinvocations", write))["state"] == "Executing"
    writer.kill()
    uncertain = status_of(agent.wait(write, timeout=60))
    assert uncertain["state"] == "Uncertain", pretty(uncertain)
    assert uncertain["failureClass"] == "effect-unconfirmed"
    assert "broke" in uncertain["message"], uncertain["message"]

    read = agent.invoke("read", {"seconds": 120})
    reader.wait_for("CALLED slow-read", timeout=60)
    reader.kill()
    failed = status_of(agent.wait(read, timeout=60))
    assert failed["state"] == "Failed", pretty(failed)
    assert failed["failureClass"] == "transient"
    assert "broke" in failed["message"], failed["message"]


@pytest.mark.timeout(120)
def test_an_output_schema_violation_fails_the_call_naming_the_json_path(
    api: client.ApiClient, ns: Namespace, agent: Agent, servers: Servers
) -> None:
    server = servers("--mode", "current")
    register(api, ns.name, "tools", server.url, interval=30)
    wait_phase(api, ns.name, "tools", "Active")
    bind(api, ns.name, "bad-output", "tools", "bad-output")
    agent.grant(["bad-output"], ["read"])

    status = status_of(agent.wait(agent.invoke("bad-output", {})))
    # The tool ran and answered: Observed, its answer an error (never "safe to retry").
    assert status["state"] == "Observed", pretty(status)
    assert status["failureClass"] == "output-invalid"
    assert status["result"]["isError"] is True
    assert "$.count" in status["message"], status["message"]
    assert "integer" in status["message"]


@pytest.mark.timeout(120)
def test_a_secret_returned_by_the_server_is_redacted(
    api: client.ApiClient, ns: Namespace, agent: Agent, servers: Servers
) -> None:
    server = servers("--mode", "current")
    register(api, ns.name, "tools", server.url, interval=30)
    wait_phase(api, ns.name, "tools", "Active")
    bind(api, ns.name, "leak", "tools", "leak")
    agent.grant(["leak"], ["read"])

    status = status_of(agent.wait(agent.invoke("leak", {})))
    assert status["state"] == "Observed", pretty(status)
    shown = json.dumps(status)
    for secret in secret_values():
        assert secret not in shown
    assert "REDACTED" in status["result"]["content"]


@pytest.mark.timeout(120)
def test_server_credentials_from_a_secret_reach_only_the_server_that_references_them(
    api: client.ApiClient, ns: Namespace, agent: Agent, servers: Servers
) -> None:
    token = f"mcp-{uuid.uuid4().hex}"
    server = servers("--mode", "current", "--token", token)
    client.CoreV1Api(api).create_namespaced_secret(
        ns.name,
        {"metadata": {"name": "mcp-token"}, "stringData": {"token": token}},  # type: ignore[arg-type]  # the client sends a dict body as is
    )
    register(
        api,
        ns.name,
        "with-secret",
        by_name(server.url),
        interval=30,
        credentials=[server_credential("mcp-token", by_name(server.url))],
    )
    # The same server registered again without credentials: the Secret is not sent to it.
    register(api, ns.name, "without-secret", server.url, interval=30)

    wait_phase(api, ns.name, "with-secret", "Active")
    refused = wait_for(
        lambda: (s := server_status(api, ns.name, "without-secret")).get("lastProbe") and s,
        timeout=60,
        what="a probe of the server without credentials",
    )
    assert refused["phase"] == "Registered", pretty(refused)
    assert refused["lastProbe"]["ok"] is False
    assert "401" in refused["lastProbe"]["message"], refused["lastProbe"]

    bind(api, ns.name, "echo", "with-secret", "echo")
    agent.grant(["echo"], ["read"])
    # A server echoing its own credential: the value never reaches the result.
    status = status_of(agent.wait(agent.invoke("echo", {"text": f"you sent {token}"})))
    assert status["state"] == "Observed", pretty(status)
    assert status["result"]["content"] == "you sent [REDACTED:brokered-secret]"


@pytest.mark.timeout(120)
def test_a_redaction_that_breaks_structured_content_is_sent_once_and_settles(
    api: client.ApiClient, ns: Namespace, agent: Agent, servers: Servers
) -> None:
    # The credential itself spells JSON syntax: redacting it from the serialised structured
    # content left text that is no longer JSON. That once made the call raise after the
    # effect and be sent again and again, later dropped the structured part; now redaction
    # works on the parsed values (the credential is in none of them), so the structured
    # content stays and the server sees exactly one call.
    token = '{"echo": "'
    server = servers("--mode", "current", "--token", token)
    client.CoreV1Api(api).create_namespaced_secret(
        ns.name,
        {"metadata": {"name": "odd-token"}, "stringData": {"token": token}},  # type: ignore[arg-type]  # the client sends a dict body as is
    )
    register(
        api,
        ns.name,
        "odd",
        by_name(server.url),
        interval=30,
        credentials=[server_credential("odd-token", by_name(server.url))],
    )
    wait_phase(api, ns.name, "odd", "Active")
    bind(api, ns.name, "echo", "odd", "echo")
    agent.grant(["echo"], ["read"])
    mark = server.mark()
    status = status_of(agent.wait(agent.invoke("echo", {"text": "hello"}), timeout=60))
    assert status["state"] == "Observed", pretty(status)
    assert status["result"]["structuredContent"] == {"echo": "hello"}, pretty(status)
    server.mark()  # takes in what the server printed so far
    calls = [line for line in server.seen[mark:] if line.startswith("CALLED echo")]
    assert len(calls) == 1, calls


def test_a_response_beyond_the_result_bound_is_refused_once_and_settles(
    api: client.ApiClient, ns: Namespace, agent: Agent, servers: Servers
) -> None:
    """An MCP response is read only up to a bound derived from the tool's maxResultBytes
    (4x plus 64 KiB for the framing and the listing): a larger one is refused, not read
    into the operator's memory; the tool ran, so a read call ends Failed, once."""
    server = servers("--mode", "current")
    register(api, ns.name, "big", server.url, interval=30)
    wait_phase(api, ns.name, "big", "Active")
    bind(api, ns.name, "echo", "big", "echo", maxResultBytes=1024)
    agent.grant(["echo"], ["read"])
    mark = server.mark()
    status = status_of(agent.wait(agent.invoke("echo", {"text": "y" * 100_000}), timeout=60))
    assert status["state"] == "Failed", pretty(status)
    assert "larger than 69632 bytes" in status["message"], status["message"]
    server.mark()
    assert len([line for line in server.seen[mark:] if line.startswith("CALLED echo")]) == 1
    small = status_of(agent.wait(agent.invoke("echo", {"text": "y" * 500}), timeout=60))
    assert small["state"] == "Observed" and small["result"]["content"] == "y" * 500
