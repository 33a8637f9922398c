"""Attacks on the new front doors (gateway REST and MCP, dry runs, the CLI's receipts) and
on the egress proxy, with only an agent's rights: a ServiceAccount granted one or two tools
(`objects.Agent`), and for the proxy only what a sandboxed command can do from its pod.
Each test states the promise its attack tries to break. Pure attacks (request framing,
address spellings, connection bounds, the gateway's body handling) are pinned in
`tests/unit/egress/test_proxy_wire_attacks.py`.

Hits, fixed, and pinned (here or in the unit module):

- an upstream that reflects request headers handed the credential the proxy injected to
  the sandbox in clear. An agent's shell command is one argv (pipes, `sh -c` pipelines
  refused), so the raw value met the operator's redaction; but any command that can
  transform its input (a container tool's script, an allowed filter) would pass it on
  in a form no exact-value redaction knows. Defence in depth: the proxy now masks the
  value in the answer (same length, so the framing holds) and asks for it uncompressed;
- a forwarded request's bytes after its head went upstream raw: a pipelined second request
  (another `Host`, no head checks, no credential swap), `Transfer-Encoding` with
  `Content-Length`, or a bare LF inside a header (a second `Host` for a lenient server):
  now one framed request, then nothing of the client's; ambiguous framing and control
  bytes in a head are 400;
- connections without bounds on both doors: the gateway (in the operator's own process,
  reachable before authentication) kept an idle or half-sent connection for an hour and
  any number of them; the proxy let one sandbox hold heads by the thousand and one lease
  any number of tunnels, and turned each made-up lease uid into a GET on the API server;
- the gateway answered a body nested thousands deep with a 500 and a traceback in the
  operator's log per request, and waited forever for a trickled body;
- `::a.b.c.d` (IPv4-compatible IPv6) was a public address to the proxy's and the
  operator's address checks (not routed by a default Linux, refused now all the same).

Tried and held (not hits):

- two or more concurrent `tools/call`s with one `_meta` idempotency key: one execution,
  every answer names the same invocation (also retried sequentially, test_gateway_mcp);
- `_meta` naming another caller, groups such as `system:masters`, or a status: unknown
  `_meta` keys are ignored; `spec.caller` is the TokenReview's user, and admission checks
  it against the creator anyway;
- calling a tool not granted through MCP (`unknown tool`, invalid params), REST (404),
  or pinning a version through `_meta` (a Denied invocation, as with kubectl);
- a REST dry run in another tenant's namespace (403: the caller may not create
  invocations there); in its own, a preview of a tool whose Secret or egress credential
  it cannot read shows names, never values;
- a receipt of another namespace by its hash (403 there; 404 through one's own);
- confirming an effect as an agent: the gateway's confirmation is the caller's own status
  patch, refused by RBAC (and the admission policy) for agents; on a call that is not
  Uncertain it is 409 before anything is patched;
- reading another call's `ta-proxy-<uid>` Secret: agents have no verb on Secrets (403);
  the sandbox has no ServiceAccount token;
- another lease's token, an ended lease's token, a token under another uid
  (test_egress); a CONNECT to an allowed host with another SNI (refused before the
  upstream is dialled), an encrypted ClientHello, a CONNECT that never sends one (cut at
  15 s), a head a byte at a time (cut at 30 s), a Host header beyond 32 KiB (400);
- an absolute-form URL naming one host and a `Host` header another (400); IP literals
  (decimal, octal, hex, `0x7f.1`, short forms) are names on no list, and any name that
  resolves to loopback, private, link-local or metadata addresses is refused, IPv4-mapped,
  NAT64 and 6to4 spellings included; metadata stays refused under `0.0.0.0/0`;
- leaks: the bearer token is in no problem document, MCP error or gateway log line; the
  injected credential is in no proxy log line or connection record.
"""

from __future__ import annotations

import asyncio
import json
import socket
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any, cast

import pytest
from kubernetes import client
from mcp.shared.exceptions import MCPError

from tests.integration.flow.test_agent_attacks import Hits, hits
from tests.integration.gateway_client import (
    http_json,
    mcp_client,
    mcp_url,
    request_meta,
    token_of,
)
from tests.integration.objects import SHELL_SCHEMA, Agent, descriptor, get, pretty, status_of
from tests.integration.servers import tls_server
from tooladapter.devtools import (
    SESSION,
    EgressProxyProcess,
    Namespace,
    OperatorProcess,
    node_ip,
    wait_for,
)
from tooladapter.devtools.tls import make_certificates

__all__ = ["hits"]

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(600)]

NATIVE: dict[str, Any] = {"kind": "native", "native": {"name": "list-tools"}}


def meta_of(result: Any) -> dict[str, Any]:
    return dict(result.meta or {})


# --------------------------------------------------------------------------- run twice


def test_concurrent_mcp_calls_with_one_idempotency_key_run_the_effect_once(
    api: client.ApiClient,
    ns: Namespace,
    agent: Agent,
    operator: OperatorProcess,
    hits: tuple[str, int],
) -> None:
    address = f"{hits[0]}:{hits[1]}"
    descriptor(
        api,
        ns.name,
        "lookup",
        kind="http",
        inputSchema={"type": "object", "properties": {"id": {"type": "string"}}},
        http={"method": "GET", "url": f"http://{address}/once/{{id}}", "allowedHosts": [address]},
    )
    agent.grant(["lookup"], ["read"])
    token = token_of(agent)

    async def one() -> dict[str, Any]:
        async with mcp_client(mcp_url(operator.gateway_url, ns.name), token) as mcp:
            result = await mcp.call_tool(
                "lookup",
                {"id": "x"},
                meta=request_meta({"dev.tooladapter/idempotencyKey": "the-key"}),
            )
            return meta_of(result)

    async def together() -> list[dict[str, Any]]:
        return list(await asyncio.gather(*(one() for _ in range(5))))

    answers = asyncio.run(together())
    assert Hits.counts["/once/x"] == 1, Hits.counts
    # One call ran; the others are its duplicates, answering with its outcome and receipt.
    first = {
        a.get("dev.tooladapter/duplicateOf") or a["dev.tooladapter/invocation"] for a in answers
    }
    assert len(first) == 1, pretty(answers)
    assert len({a["dev.tooladapter/receiptRef"] for a in answers}) == 1, pretty(answers)
    assert {a["dev.tooladapter/state"] for a in answers} == {"Observed"}, pretty(answers)


# --------------------------------------------------------------------------- bypass


def test_an_ungranted_tool_is_unknown_and_meta_cannot_name_another_caller(
    api: client.ApiClient, ns: Namespace, agent: Agent, operator: OperatorProcess
) -> None:
    descriptor(api, ns.name, "list-tools", **NATIVE)
    descriptor(api, ns.name, "hidden", **NATIVE)
    agent.grant(["list-tools"], ["read"])
    token = token_of(agent)
    base = operator.gateway_url

    async def attempts() -> tuple[str, dict[str, Any]]:
        async with mcp_client(mcp_url(base, ns.name), token) as mcp:
            with pytest.raises(MCPError) as refused:
                await mcp.call_tool("hidden", {})
            spoofed = await mcp.call_tool(
                "list-tools",
                {},
                meta=request_meta(
                    {
                        "dev.tooladapter/caller": "system:admin",
                        "dev.tooladapter/groups": ["system:masters", "reviewers"],
                        "dev.tooladapter/state": "Observed",
                        "caller": {"name": "system:admin"},
                    }
                ),
            )
            return str(refused.value), meta_of(spoofed)

    refusal, meta = asyncio.run(attempts())
    assert "unknown tool" in refusal and token not in refusal
    obj = get(api, ns.name, "toolinvocations", meta["dev.tooladapter/invocation"])
    assert obj["spec"]["caller"]["name"] == agent.user, pretty(obj["spec"])
    assert "system:masters" not in json.dumps(obj["spec"])
    assert "reviewers" not in json.dumps(obj["spec"])
    status, _, body = http_json("GET", f"{base}/namespaces/{ns.name}/tools/hidden", token)
    assert status == 404 and token not in json.dumps(body)
    status, _, body = http_json(
        "POST", f"{base}/namespaces/{ns.name}/tools/hidden/dry-run", token, {"arguments": {}}
    )
    # A dry run answers for any tool of the namespace (as spec.dryRun does): the verdict
    # is that permission would deny it.
    assert status == 200 and body["verdict"] == "would-be-denied", pretty(body)
    assert body["deniedStage"] == "permission", pretty(body)


def test_another_tenants_dry_runs_receipts_and_confirmations_are_closed(
    api: client.ApiClient, ns: Namespace, agent: Agent, operator: OperatorProcess
) -> None:
    base = operator.gateway_url
    descriptor(api, ns.name, "list-tools", **NATIVE)
    agent.grant(["list-tools"], ["read"])
    other = Namespace(api)
    try:
        descriptor(api, other.name, "list-tools", **NATIVE)
        victim = Agent.create(api, other.name, "victim")
        victim.grant(["list-tools"], ["read"])
        theirs = status_of(victim.wait(victim.invoke("list-tools", {})))
        mine = status_of(agent.wait(agent.invoke("list-tools", {})))
        assert theirs["state"] == mine["state"] == "Observed", pretty([theirs, mine])
        token = token_of(agent)
        digest = theirs["receiptRef"].split(":", 1)[1]
        there = f"{base}/namespaces/{other.name}"
        status, _, _ = http_json("POST", f"{there}/tools/list-tools/dry-run", token, {})
        assert status == 403
        status, _, _ = http_json("GET", f"{there}/receipts/{digest}", token)
        assert status == 403
        status, _, _ = http_json("GET", f"{base}/namespaces/{ns.name}/receipts/{digest}", token)
        assert status == 404
        # The agent's own call, Observed: the gateway refuses before patching anything.
        (name,) = [
            i["metadata"]["name"]
            for i in cast(
                dict[str, Any],
                client.CustomObjectsApi(agent.api).list_namespaced_custom_object(
                    "tooladapter.dev", "v1alpha1", ns.name, "toolinvocations"
                ),
            )["items"]
        ]
        confirm = {"effectHappened": False, "evidence": "trust me"}
        status, _, _ = http_json(
            "POST",
            f"{base}/namespaces/{ns.name}/tool-invocations/{name}/confirm-effect",
            token,
            confirm,
        )
        assert status == 409
        # The patch the gateway would make, made by the agent itself: RBAC refuses it.
        with pytest.raises(client.ApiException) as refused:
            client.CustomObjectsApi(agent.api).patch_namespaced_custom_object_status(
                "tooladapter.dev",
                "v1alpha1",
                ns.name,
                "toolinvocations",
                name,
                {"status": {"effectConfirmation": {**confirm, "confirmedBy": agent.user}}},
            )
        assert refused.value.status == 403
    finally:
        other.delete()


def test_an_agent_reads_no_proxy_secret_and_a_preview_names_no_secret_value(
    api: client.ApiClient, ns: Namespace, agent: Agent, operator: OperatorProcess
) -> None:
    value = "preview-must-not-show-" + "Zq8" * 6
    core = client.CoreV1Api(api)
    core.create_namespaced_secret(
        ns.name,
        {"metadata": {"name": "ta-proxy-someone-else"}, "stringData": {"url": value}},  # type: ignore[arg-type]  # the client sends a dict body as is
    )
    core.create_namespaced_secret(
        ns.name,
        {"metadata": {"name": "api-key"}, "stringData": {"token": value}},  # type: ignore[arg-type]  # the client sends a dict body as is
    )
    descriptor(
        api,
        ns.name,
        "private",
        kind="shell",
        side_effect_class="sandbox",
        inputSchema=SHELL_SCHEMA,
        timeoutSeconds=60,
        shell={"allow": ["wget"]},
        sandbox={
            "resources": {"limits": {"cpu": "100m", "memory": "32Mi"}},
            "egress": {"allow": ["api.example.test"]},
        },
        credentials=[
            {
                "name": "api-key",
                "source": {"secretKeyRef": {"name": "api-key", "key": "token"}},
                "inject": {"hosts": ["api.example.test"]},
            }
        ],
    )
    agent.grant(["private"], ["sandbox"])
    mine = client.CoreV1Api(agent.api)
    for attempt in (
        lambda: mine.read_namespaced_secret("ta-proxy-someone-else", ns.name),
        lambda: mine.list_namespaced_secret(ns.name),
    ):
        with pytest.raises(client.ApiException) as refused:
            attempt()
        assert refused.value.status == 403
    token = token_of(agent)
    status, _, body = http_json(
        "POST",
        f"{operator.gateway_url}/namespaces/{ns.name}/tools/private/dry-run",
        token,
        {"arguments": {"command": "wget -q -O - http://api.example.test/"}},
    )
    assert status == 200, pretty(body)
    assert value not in json.dumps(body) and token not in json.dumps(body)
    preview = status_of(
        agent.wait(agent.invoke("private", {"command": "wget -q http://x"}, dryRun=True))
    )
    assert value not in json.dumps(preview), pretty(preview)
    assert token not in operator.log_text()


# --------------------------------------------------------------------------- hang


def test_idle_connections_from_one_peer_do_not_close_the_gateway_to_others(
    operator: OperatorProcess,
) -> None:
    port = int(operator.env["TOOLADAPTER_GATEWAY_PORT"])
    held: list[socket.socket] = []
    try:
        # More idle connections than one peer may hold, each sending half a head.
        for _ in range(300):
            sock = socket.create_connection(("127.0.0.1", port), timeout=10)
            sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n")
            held.append(sock)

        # Some of the later ones were closed by the gateway unread.
        def closed(sock: socket.socket) -> bool:
            sock.settimeout(0.2)
            try:
                return sock.recv(1) == b""
            except TimeoutError:
                return False
            except OSError:
                return True

        assert wait_for(lambda: sum(closed(s) for s in held[256:]) >= 40, timeout=30, what="closed")
        # Another peer (127.0.0.2, still this machine) is served meanwhile.
        other = socket.create_connection(
            ("127.0.0.1", port), timeout=10, source_address=("127.0.0.2", 0)
        )
        with other:
            other.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            answer = b""
            while chunk := other.recv(4096):
                answer += chunk
        assert answer.startswith(b"HTTP/1.1 200"), answer[:200]
    finally:
        for sock in held:
            sock.close()


# --------------------------------------------------------------------------- proxy


PREFIX = f"{SESSION}ad"
ECHO = "echo.example.test"
CREDENTIAL = "reflected-credential-" + "Vx4" * 8


def echo(head: bytes) -> bytes:
    """An upstream that answers every request with the head it got (an echo endpoint)."""
    return b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % len(head) + head


@pytest.fixture(scope="module")
def echo_egress(
    tmp_path_factory: pytest.TempPathFactory,
    egress_operator: Callable[
        ..., AbstractContextManager[tuple[OperatorProcess, EgressProxyProcess]]
    ],
) -> Iterator[tuple[OperatorProcess, EgressProxyProcess, int]]:
    certs = make_certificates(tmp_path_factory.mktemp("tls"), [ECHO])
    with (
        tls_server(node_ip(), certs, echo) as (port, _),
        egress_operator(PREFIX, [ECHO], Path(certs.ca)) as (operator, proxy),
    ):
        yield operator, proxy, port


def test_a_credential_reflected_by_the_upstream_never_reaches_the_sandbox(
    api: client.ApiClient, echo_egress: tuple[OperatorProcess, EgressProxyProcess, int]
) -> None:
    operator, proxy, port = echo_egress
    ens = Namespace(api, prefix=PREFIX)
    try:
        client.CoreV1Api(api).create_namespaced_secret(
            ens.name,
            {"metadata": {"name": "api-key"}, "stringData": {"token": CREDENTIAL}},  # type: ignore[arg-type]  # the client sends a dict body as is
        )
        echo = f"{ECHO}:{port}"
        descriptor(
            api,
            ens.name,
            "fetch",
            kind="shell",
            side_effect_class="sandbox",
            inputSchema=SHELL_SCHEMA,
            timeoutSeconds=60,
            shell={"allow": ["wget"]},
            sandbox={
                "resources": {"limits": {"cpu": "500m", "memory": "64Mi"}},
                "egress": {"allow": [echo]},
            },
            credentials=[
                {
                    "name": "api-key",
                    "source": {"secretKeyRef": {"name": "api-key", "key": "token"}},
                    "inject": {"hosts": [echo]},
                }
            ],
        )
        agent = Agent.create(api, ens.name, "agent-1")
        agent.grant(["fetch"], ["sandbox"])
        # A shell tool's command is one argv (pipes and `sh -c` pipelines are refused), so
        # the raw value would meet the operator's redaction; the proxy now masks it before
        # the sandbox sees it, so no command, however it transforms its input, can.
        command = f"wget -q -O - http://{echo}/whoami"
        status = status_of(agent.wait(agent.invoke("fetch", {"command": command}), timeout=180))
        assert status["state"] == "Observed", (
            f"{pretty(status)}\n{proxy.tail(30)}\n{operator.tail(30)}"
        )
        shown = status["result"]["content"]
        # The whole header value is masked (`Bearer ` too): a reflection of it in any form is.
        assert "Authorization: " + "*" * len("Bearer " + CREDENTIAL) in shown, shown
        assert "Accept-Encoding: identity" in shown, shown
        for log in (operator.log_text(), proxy.log_text()):
            assert CREDENTIAL not in log
        assert CREDENTIAL not in json.dumps(status)
    finally:
        ens.delete()
