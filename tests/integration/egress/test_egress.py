"""Issue 14: egress by host name through the lease-scoped egress proxy, on the real cluster.

Sandbox pods make real connections: through the proxy (`python -m tooladapter egress-proxy`
on this host, as `make run` runs it) to servers on the node's address, which the proxy
reaches under test host names (`TOOLADAPTER_EGRESS_HOSTS`). This module runs its own
operator and proxy, serving only its own namespaces, so it can point both at each other.

The sandbox tools are busybox-compatible: `wget` through HTTP_PROXY, `nc`, `sh`.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import hashlib
import json
import socket
import ssl
import subprocess
import threading
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any, cast

import pytest
from kubernetes import client

from tests.integration.gateway_client import http_json, mcp_client, mcp_url, token_of
from tests.integration.objects import (
    SHELL_SCHEMA,
    Agent,
    descriptor,
    get,
    pretty,
    shell_tool,
    status_of,
)
from tests.integration.servers import Recorder, recording_server, tls_server
from tooladapter.devtools import (
    SESSION,
    EgressProxyProcess,
    Namespace,
    OperatorProcess,
    node_ip,
    wait_for,
)
from tooladapter.devtools.tls import make_certificates
from tooladapter.egress.core.tally import MAX_LISTED_HOSTS
from tooladapter.receipts.core.check import parse_receipt

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(600)]

#: This module's namespaces: outside the session operator's scope (`SESSION-*`).
PREFIX = f"{SESSION}eg"
SECRET_VALUE = "egress-credential-" + "Qm9" * 8
API = "api.example.test"
TLS = "tls.example.test"


class Servers:
    """The node's servers: a recording HTTP server, a TLS one that records heads."""

    def __init__(self, plain: Recorder, tls_port: int, tls_heads: list[bytes], ca: Path) -> None:
        self.plain = plain
        self.tls_port = tls_port
        self.tls_heads = tls_heads
        self.ca = ca


@pytest.fixture(scope="module")
def servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Servers]:
    node = node_ip()
    certs = make_certificates(tmp_path_factory.mktemp("tls"), [TLS])
    with recording_server(node) as plain, tls_server(node, certs) as (port, heads):
        yield Servers(plain, port, heads, certs.ca)


@pytest.fixture(scope="module")
def egress(
    servers: Servers,
    egress_operator: Callable[
        ..., AbstractContextManager[tuple[OperatorProcess, EgressProxyProcess]]
    ],
) -> Iterator[tuple[OperatorProcess, EgressProxyProcess]]:
    with egress_operator(PREFIX, [API, TLS], servers.ca) as pair:
        yield pair


@pytest.fixture
def ens(
    api: client.ApiClient, egress: tuple[OperatorProcess, EgressProxyProcess]
) -> Iterator[Namespace]:
    namespace = Namespace(api, prefix=PREFIX)
    yield namespace
    namespace.delete()


@pytest.fixture
def eagent(api: client.ApiClient, ens: Namespace) -> Agent:
    return Agent.create(api, ens.name, "agent-1")


def receipt(operator: OperatorProcess, status: dict[str, Any]) -> dict[str, Any]:
    digest = status["receiptRef"].split(":")[1]
    data = (operator.artifacts / "sha256" / digest[:2] / digest).read_bytes()
    assert hashlib.sha256(data).hexdigest() == digest
    receipt = parse_receipt(data)  # a signed receipt's predicate
    assert receipt is not None, data[:200]
    return receipt


def explain(status: dict[str, Any], egress: tuple[OperatorProcess, EgressProxyProcess]) -> str:
    """The status, with the proxy's and the operator's log tails (a failure's evidence)."""
    return (
        f"{pretty(status)}\n--- egress proxy log ---\n{egress[1].tail(40)}"
        f"\n--- operator log ---\n{egress[0].tail(40)}"
    )


def verdicts(record_list: list[dict[str, Any]]) -> list[tuple[str, int, str]]:
    return [(r["host"], r["port"], r["verdict"]) for r in record_list]


def run(agent: Agent, tool: str, command: str, timeout: float = 180) -> dict[str, Any]:
    return status_of(agent.wait(agent.invoke(tool, {"command": command}), timeout=timeout))


# --------------------------------------------------------------------------- allowed


def test_a_shell_tool_fetches_an_allowed_host_through_the_proxy(
    api: client.ApiClient,
    ens: Namespace,
    eagent: Agent,
    servers: Servers,
    egress: tuple[OperatorProcess, EgressProxyProcess],
) -> None:
    port = servers.plain.port
    shell_tool(api, ens.name, "fetch", egress=[f"{API}:{port}"])
    eagent.grant(["fetch"], ["sandbox"])
    status = run(eagent, "fetch", f"wget -q -O - http://{API}:{port}/by-name")
    assert status["state"] == "Observed", explain(status, egress)
    assert "hello from the node" in status["result"]["content"]
    assert servers.plain.hits["/by-name"] == 1
    lease = status["sandboxLease"]
    assert lease["egressProxy"] == f"{node_ip()}:{egress[1].port}"
    (record,) = status["egress"]
    assert (record["host"], record["port"], record["verdict"]) == (API, port, "allowed")
    assert record["bytesUp"] > 0 and record["bytesDown"] > 0
    assert receipt(egress[0], status)["egress"] == status["egress"]


# --------------------------------------------------------------------------- refusals


def test_refused_hosts_literals_loopback_names_and_wrong_snis_are_recorded(
    api: client.ApiClient,
    ens: Namespace,
    eagent: Agent,
    servers: Servers,
    egress: tuple[OperatorProcess, EgressProxyProcess],
) -> None:
    node = node_ip()
    port = servers.plain.port
    hello = base64.b64encode(client_hello("evil.example.test")).decode()
    # A platform's fixed script (a container tool): four attempts, each through the proxy.
    script = (
        'auth=$(printf %s "${HTTP_PROXY#http://}" | sed "s/@.*//" | base64 | tr -d "\\n"); '
        f'wget -q -O - http://other.example.test:{port}/not-listed; echo "exit=$?"; '
        f'wget -q -O - http://{node}:{port}/literal; echo "exit=$?"; '
        f'wget -q -O - http://localhost:{port}/loopback; echo "exit=$?"; '
        f"{{ printf 'CONNECT {API}:{port} HTTP/1.1\\r\\nHost: {API}:{port}\\r\\n"
        'Proxy-Authorization: Basic %s\\r\\n\\r\\n\' "$auth"; sleep 1; '
        f"echo {hello} | base64 -d; sleep 2; }} | "
        f'nc {node} "${{HTTP_PROXY##*:}}" | head -c 200; echo; echo done'
    )
    script_tool(api, ens.name, "attempts", script, [f"{API}:{port}", f"localhost:{port}"])
    eagent.grant(["attempts"], ["sandbox"])
    name = eagent.invoke("attempts", {})
    status = status_of(eagent.wait(name, timeout=180))
    assert status["state"] == "Observed", explain(status, egress)
    assert "done" in status["result"]["content"]
    assert "200 Connection established" in status["result"]["content"]
    assert not any(servers.plain.hits[p] for p in ("/not-listed", "/literal", "/loopback"))
    seen = verdicts(status["egress"])
    assert ("other.example.test", port, "not-allowed") in seen, seen
    assert (node, port, "ip-literal") in seen, seen
    assert ("localhost", port, "private-address") in seen, seen
    assert (API, port, "sni-mismatch") in seen, seen
    assert "evil.example.test" in json.dumps(status["egress"])
    assert receipt(egress[0], status)["egress"] == status["egress"]


def test_a_connection_ignoring_the_proxy_and_dns_get_no_answer(
    api: client.ApiClient,
    ens: Namespace,
    eagent: Agent,
    servers: Servers,
    egress: tuple[OperatorProcess, EgressProxyProcess],
) -> None:
    node = node_ip()
    port = servers.plain.port
    # The cluster's own DNS (CoreDNS behind kube-dns in the local cluster) must not answer
    # a sandbox either: a name it resolves would leak where the allow-list says nothing.
    cluster_dns = cluster_dns_address(api)
    with dns_listener(node) as dns:
        script = (
            f'wget -Y off -q -O - http://{node}:{port}/direct; echo "direct=$?"; '
            f'echo query | nc -u -w 2 {dns.host} 53; echo "udp=$?"; '
            f'echo query | nc -w 2 {dns.host} 53; echo "tcp=$?"; '
            f"busybox nslookup kubernetes.default.svc.cluster.local {cluster_dns} "
            f'>/dev/null 2>&1; echo "clusterdns=$?"; echo done'
        )
        script_tool(api, ens.name, "bypass", script, [f"{API}:{port}"])
        eagent.grant(["bypass"], ["sandbox"])
        status = status_of(eagent.wait(eagent.invoke("bypass", {}), timeout=180))
        assert status["state"] == "Observed", explain(status, egress)
        content = status["result"]["content"]
        assert "done" in content and "direct=0" not in content, content
        assert servers.plain.hits["/direct"] == 0
        assert dns.received == [], f"the sandbox reached port 53: {dns.received}"
        # 1: no answer (0 would be an answer, 127 a missing nslookup: both fail here).
        assert "clusterdns=1" in content, content
        policy = client.NetworkingV1Api(api).read_namespaced_network_policy(
            status["sandboxLease"]["networkPolicyName"], ens.name
        )
        ports = [p.port for rule in policy.spec.egress for p in rule.ports or []]
        assert 53 not in ports and ports == [
            int(status["sandboxLease"]["egressProxy"].split(":")[1])
        ]


def test_210_refused_requests_before_one_allowed_connection_leave_it_in_status_and_receipt(
    api: client.ApiClient,
    ens: Namespace,
    eagent: Agent,
    servers: Servers,
    egress: tuple[OperatorProcess, EgressProxyProcess],
) -> None:
    """Issue 37: a record kept "first N" let a sandbox push its one allowed connection out
    with refusals. Here 210 requests to hosts not on the list (each its own host: 32 rows by
    host, the rest in one `others` row) come first, then one allowed request; status and the
    receipt still show the allowed connection, every refusal is counted, and the whole list
    is in the store under `egressRecordsRef`."""
    port = servers.plain.port
    refused = 210
    shell_tool(
        api, ens.name, "flood", egress=[f"{API}:{port}"], timeout=120, shell={"allow": ["curl"]}
    )
    eagent.grant(["flood"], ["sandbox"])
    # One curl, its URL glob ([1-210]) sequential requests through the proxy (each refused
    # with a 403 curl ignores without -f), then the allowed URL, its body on stdout.
    command = (
        f"curl -s -S --max-time 60 -o /dev/null "
        f"http://r[1-{refused}].refused.example.test:{port}/refused "
        f"http://{API}:{port}/after-refusals"
    )
    status = run(eagent, "flood", command, timeout=300)
    assert status["state"] == "Observed", explain(status, egress)
    assert "hello from the node" in status["result"]["content"], explain(status, egress)
    assert servers.plain.hits["/after-refusals"] == 1
    assert servers.plain.hits["/refused"] == 0

    rows = status["egress"]
    allowed = [r for r in rows if r["verdict"] == "allowed"]
    assert [(r["host"], r["port"]) for r in allowed] == [(API, port)], explain(status, egress)
    assert allowed[0]["connections"] >= 1
    assert allowed[0]["bytesUp"] > 0 and allowed[0]["bytesDown"] > 0
    denied = [r for r in rows if r["verdict"] != "allowed"]
    assert {r["verdict"] for r in denied} == {"not-allowed"}, pretty(denied)
    assert sum(r["connections"] for r in denied) == refused, pretty(denied)
    named = [r for r in denied if not r.get("others")]
    assert len(named) == MAX_LISTED_HOSTS
    assert all(r["host"].endswith(".refused.example.test") for r in named)
    (others,) = [r for r in denied if r.get("others")]
    assert others["connections"] == refused - MAX_LISTED_HOSTS

    signed = receipt(egress[0], status)
    # The receipt carries the rows sparse (an empty reason left out), the status whole.
    assert signed["egress"] == [{k: v for k, v in r.items() if v != ""} for r in rows]
    assert signed["usage"]["egressBytesUp"] >= allowed[0]["bytesUp"]
    assert signed["usage"]["egressBytesDown"] >= allowed[0]["bytesDown"]
    ref = status["egressRecordsRef"]
    assert signed["egressRecordsRef"] == ref
    # The whole list, as the proxy wrote it, in the results space of the store.
    digest = ref.split(":")[1]
    data = (egress[0].artifacts / "results" / "sha256" / digest[:2] / digest).read_bytes()
    assert hashlib.sha256(data).hexdigest() == digest
    whole = json.loads(data)
    counted = {
        verdict: sum(r.get("count", 1) for r in whole if r["verdict"] == verdict)
        for verdict in ("allowed", "not-allowed")
    }
    assert counted == {"allowed": allowed[0]["connections"], "not-allowed": refused}
    assert any(r["host"] == API and r["verdict"] == "allowed" for r in whole)


async def test_a_host_that_did_not_resolve_is_named_in_what_the_agent_receives(
    api: client.ApiClient,
    ens: Namespace,
    eagent: Agent,
    egress: tuple[OperatorProcess, EgressProxyProcess],
) -> None:
    """Issue 44: a sandboxed clone whose host did not resolve showed the agent only
    "CONNECT tunnel failed, response 502". The proxy's reason now reaches the status line
    (curl -v shows it), the call's result (kubectl), the REST view and the MCP answer,
    beside the tool's own output and never inside it."""
    host = "github.nowhere.invalid"  # on the allow-list; `.invalid` never resolves
    shell_tool(api, ens.name, "clone", egress=[host], timeout=60, shell={"allow": ["curl"]})
    eagent.grant(["clone"], ["sandbox"])
    command = {"command": f"curl -v -sS --max-time 30 -o /dev/null https://{host}/org/repo.git"}
    operator = egress[0]
    async with mcp_client(mcp_url(operator.gateway_url, ens.name), token_of(eagent)) as mcp:
        answer = await mcp.call_tool("clone", command)
    meta = dict(answer.meta or {})
    name = meta.get("dev.tooladapter/invocation")
    assert name, (meta, answer.content)
    obj = await asyncio.to_thread(get, api, ens.name, "toolinvocations", name)
    status = obj["status"]
    assert status["state"] == "Observed", explain(status, egress)
    reason = f"{host} did not resolve"
    # The proxy's answer, as the tool itself printed it (stderr joins the pod log).
    content = status["result"]["content"]
    assert f"< HTTP/1.1 502 Bad Gateway: {reason}" in content, explain(status, egress)
    # kubectl: status.result, beside the content.
    refused = status["result"]["egressRefused"]
    assert refused == [
        {
            "host": host,
            "port": 443,
            "verdict": "upstream-failed",
            "reason": reason,
            "connections": 1,
        }
    ], explain(status, egress)
    shown = await asyncio.to_thread(
        subprocess.run,
        ["kubectl", "get", "toolinvocation", name, "-n", ens.name, "-o", "json"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert json.loads(shown.stdout)["status"]["result"]["egressRefused"] == refused
    # REST, as the agent.
    code, _, view = await asyncio.to_thread(
        http_json,
        "GET",
        f"{operator.gateway_url}/namespaces/{ens.name}/tool-invocations/{name}",
        token_of(eagent),
    )
    assert code == 200, view
    assert view["status"]["result"]["egressRefused"] == refused
    # MCP: a block of its own after the tool's text, and in _meta.
    texts = [getattr(block, "text", "") for block in answer.content]
    assert answer.is_error is True  # curl exited non-zero: the tool's own error
    assert meta["dev.tooladapter/egressRefused"] == refused
    block = texts[-1]
    assert block.startswith("The egress proxy refused or could not make"), texts
    assert f"{host}:443 upstream-failed: {reason} (1 connection)" in block, block
    assert "<egress-refused" not in "".join(texts[:-1]), texts


# --------------------------------------------------------------------------- tokens


def test_a_token_of_another_lease_or_of_an_ended_lease_is_refused(
    api: client.ApiClient,
    ens: Namespace,
    eagent: Agent,
    servers: Servers,
    egress: tuple[OperatorProcess, EgressProxyProcess],
) -> None:
    port = servers.plain.port
    shell_tool(api, ens.name, "slow-a", egress=[f"{API}:{port}"])
    shell_tool(api, ens.name, "slow-b", egress=[f"b.example.test:{port}"])
    eagent.grant(["slow-a", "slow-b"], ["sandbox"])
    a = eagent.invoke("slow-a", {"command": "sleep 30"})
    b = eagent.invoke("slow-b", {"command": "sleep 30"})
    url_a = proxy_url_of(api, ens.name, a)
    url_b = proxy_url_of(api, ens.name, b)
    proxy = f"{node_ip()}:{egress[1].port}"
    target = f"http://{API}:{port}/with-token"
    uid_a, token_a = credentials_of(url_a)
    uid_b, token_b = credentials_of(url_b)
    # Lease A's own token opens lease A's host, from this host as from its pod.
    assert fetch_via(proxy, uid_a, token_a, target) == 200
    # Lease B's token under A's name, A's token under B's name: not a lease's token.
    assert fetch_via(proxy, uid_a, token_b, target) == 407
    assert fetch_via(proxy, uid_b, token_a, target) == 407
    # Lease B's own token is valid, but only for lease B's hosts.
    assert fetch_via(proxy, uid_b, token_b, target) == 403
    assert servers.plain.hits["/with-token"] == 1
    ended = status_of(eagent.wait(a, timeout=180))
    assert ended["state"] == "Observed", explain(ended, egress)
    # The call is over: its lease, and with it its token, is gone.
    assert fetch_via(proxy, uid_a, token_a, target) == 407
    assert servers.plain.hits["/with-token"] == 1
    status_of(eagent.wait(b, timeout=180))
    # The receipt of A shows its one allowed connection (the refused ones of B's token
    # under A's name never authenticated as A).
    assert [r["verdict"] for r in ended["egress"]] == ["allowed"]


# --------------------------------------------------------------------------- credentials


def test_an_injected_credential_reaches_the_server_but_never_the_sandbox(
    api: client.ApiClient,
    ens: Namespace,
    eagent: Agent,
    servers: Servers,
    egress: tuple[OperatorProcess, EgressProxyProcess],
) -> None:
    core = client.CoreV1Api(api)
    core.create_namespaced_secret(
        ens.name,
        {"metadata": {"name": "api-key"}, "stringData": {"token": SECRET_VALUE}},  # type: ignore[arg-type]  # the client sends a dict body as is
    )
    tls = f"{TLS}:{servers.tls_port}"
    descriptor(
        api,
        ens.name,
        "private",
        kind="shell",
        side_effect_class="sandbox",
        inputSchema=SHELL_SCHEMA,
        timeoutSeconds=60,
        shell={"allow": ["wget", "cat", "grep", "ls"]},
        sandbox={
            "resources": {"limits": {"cpu": "500m", "memory": "64Mi"}},
            "egress": {"allow": [tls]},
        },
        credentials=[
            {
                "name": "api-key",
                "source": {"secretKeyRef": {"name": "api-key", "key": "token"}},
                "inject": {"hosts": [tls]},
            }
        ],
    )
    eagent.grant(["private"], ["sandbox"])
    fetched = run(eagent, "private", f"wget -q -O - http://{tls}/private")
    assert fetched["state"] == "Observed", explain(fetched, egress)
    assert fetched["result"]["content"] == "private hello"
    head = servers.tls_heads[-1].decode()
    assert f"Authorization: Bearer {SECRET_VALUE}" in head
    assert verdicts(fetched["egress"]) == [(TLS, servers.tls_port, "allowed")]
    # Environment and files of the sandbox: the value is nowhere (and no mount carries it).
    env = run(eagent, "private", "cat /proc/self/environ")
    # Every file but the agent's own arguments (which hold this command): no value; and
    # nothing but the arguments is mounted under /tooladapter.
    files = run(
        eagent, "private", f"grep -rl -s -F {SECRET_VALUE[:24]} /workspace /etc /tmp /var /run"
    )
    mounts = run(eagent, "private", "ls -R /tooladapter")
    for status in (env, files, mounts):
        assert status["state"] == "Observed", pretty(status)
        assert SECRET_VALUE not in json.dumps(status)
    assert "secrets" not in mounts["result"]["content"], pretty(mounts)
    # grep exits 1 when no file holds the value: a tool error with empty output.
    assert files.get("failureClass") == "tool-error", pretty(files)
    assert files["result"]["isError"] is True, pretty(files)
    assert files["result"]["content"] == "", pretty(files)
    assert "HTTP_PROXY=" in env["result"]["content"]
    assert files.get("failureClass") == "tool-error", pretty(files)  # grep found nothing
    for log in (egress[0].log_text(), egress[1].log_text()):
        assert SECRET_VALUE not in log


# --------------------------------------------------------------------------- helpers


def client_hello(server_name: str) -> bytes:
    context = ssl.create_default_context()
    incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
    tls = context.wrap_bio(incoming, outgoing, server_hostname=server_name)
    with contextlib.suppress(ssl.SSLWantReadError):
        tls.do_handshake()
    return outgoing.read()


class DnsListener:
    def __init__(self, host: str) -> None:
        self.host = host
        self.received: list[str] = []


def cluster_dns_address(api: client.ApiClient) -> str:
    """The cluster DNS Service's address (kube-system/kube-dns, as kubeadm and the local
    cluster name it)."""
    service = client.CoreV1Api(api).read_namespaced_service("kube-dns", "kube-system")
    return str(service.spec.cluster_ip)


@contextlib.contextmanager
def dns_listener(node: str) -> Iterator[DnsListener]:
    """UDP and TCP port 53 on an address of this machine, answering whatever arrives."""
    udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    tcp = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    tcp.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    udp.bind((node, 53))
    tcp.bind((node, 53))
    tcp.listen()
    listener = DnsListener(node)
    stop = threading.Event()

    def serve_udp() -> None:
        udp.settimeout(0.5)
        while not stop.is_set():
            with contextlib.suppress(OSError):
                data, peer = udp.recvfrom(512)
                listener.received.append(f"udp from {peer[0]}")
                udp.sendto(data, peer)

    def serve_tcp() -> None:
        tcp.settimeout(0.5)
        while not stop.is_set():
            with contextlib.suppress(OSError):
                conn, peer = tcp.accept()
                listener.received.append(f"tcp from {peer[0]}")
                conn.close()

    threads = [threading.Thread(target=f, daemon=True) for f in (serve_udp, serve_tcp)]
    for thread in threads:
        thread.start()
    try:
        yield listener
    finally:
        stop.set()
        udp.close()
        tcp.close()


def proxy_url_of(api: client.ApiClient, namespace: str, name: str) -> str:
    uid = get(api, namespace, "toolinvocations", name)["metadata"]["uid"]
    core = client.CoreV1Api(api)

    def read() -> str | None:
        with contextlib.suppress(client.ApiException):
            secret = core.read_namespaced_secret(f"ta-proxy-{uid}", namespace)
            return base64.b64decode(cast(dict[str, str], secret.data)["url"]).decode()
        return None

    return wait_for(read, timeout=60, what=f"the proxy URL of {name}")


def credentials_of(url: str) -> tuple[str, str]:
    userinfo = url.split("://", 1)[1].split("@", 1)[0]
    uid, _, token = userinfo.partition(":")
    return uid, token


def fetch_via(proxy: str, user: str, token: str, url: str) -> int:
    handler = urllib.request.ProxyHandler({"http": f"http://{user}:{token}@{proxy}"})
    opener = urllib.request.build_opener(handler)
    try:
        with opener.open(url, timeout=20) as answer:
            return int(answer.status)
    except urllib.error.HTTPError as exc:
        return int(exc.code)


def script_tool(
    api: client.ApiClient, namespace: str, tool_id: str, script: str, allow: list[str]
) -> None:
    """A container tool: the platform's fixed script, the arguments unused."""
    descriptor(
        api,
        namespace,
        tool_id,
        kind="container",
        side_effect_class="sandbox",
        inputSchema={"type": "object"},
        timeoutSeconds=90,
        sandbox={
            "command": ["/bin/sh", "-c", script],
            "egress": {"allow": allow},
            "resources": {"limits": {"cpu": "500m", "memory": "64Mi"}},
        },
    )
