"""Issue 38: `spec.credentials` of sandboxed tools, on the real cluster, as an agent.

A container tool's fixed command reads its credential files (a Secret's key, a minted
ServiceAccount token) and proves it by a digest, never the value; a shell tool's HTTP
credential goes through the egress proxy to the one `host:port` it names, not to another
port of the same host; a missing Secret denies at `credentials` before anything is sent;
and no value shows in status, events, logs, results, receipts, Jobs or pods, in any of the
forms it could take. (Who may name a Secret or a ServiceAccount at all: the
`secret-references` admission policy, tested in flow/test_deputy.py.)
"""

from __future__ import annotations

import base64
import hashlib
import json
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client

from tests.integration.credentials.conftest import EgressOperator, deleted_after, proxied_upstream
from tests.integration.objects import (
    Agent,
    container_tool,
    get,
    jobs_of,
    pretty,
    secret_file,
    shell_tool,
    status_of,
)
from tests.integration.servers import Recorder, recording_server
from tooladapter.devtools import (
    SESSION,
    EgressProxyProcess,
    Namespace,
    OperatorProcess,
    node_ip,
    wait_for,
)
from tooladapter.receipts.core.check import parse_receipt

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(600)]

#: This module's proxied namespaces: outside the session operator's scope (`SESSION-*`).
PREFIX = f"{SESSION}cr"
API = "api.example.test"
DB_VALUE = "db-Pa55word-" + "Lq8" * 8
HTTP_VALUE = "http-credential-" + "Wz3" * 8


def forms(value: str) -> list[str]:
    """The value as it could leak: itself, base64, as a Bearer header (and its base64)."""
    bearer = f"Bearer {value}"
    return [
        value,
        base64.b64encode(value.encode()).decode(),
        bearer,
        base64.b64encode(bearer.encode()).decode(),
    ]


def assert_nowhere(value: str, texts: dict[str, str]) -> None:
    for where, text in texts.items():
        for form in forms(value):
            assert form not in text, f"a form of the value in {where}"


def stored(operator: OperatorProcess, ref: str, *under: str) -> str:
    """An artifact by its `sha256:<hex>` reference (a result, or a receipt's bytes)."""
    digest = ref.split(":", 1)[1]
    return (operator.artifacts.joinpath(*under) / "sha256" / digest[:2] / digest).read_text(
        errors="replace"
    )


def receipt_text(operator: OperatorProcess, status: dict[str, Any]) -> str:
    digest = status["receiptRef"].split(":")[1]
    data = (operator.artifacts / "sha256" / digest[:2] / digest).read_bytes()
    receipt = parse_receipt(data)  # a signed receipt's predicate
    assert receipt is not None, data[:200]
    return data.decode(errors="replace") + json.dumps(receipt)


def cluster_texts(api: client.ApiClient, namespace: str, name: str) -> dict[str, str]:
    """What the cluster shows of a call: its object, its events, its Jobs and pods."""
    serialize = api.sanitize_for_serialization
    events = client.CoreV1Api(api).list_namespaced_event(namespace).items
    pods = client.CoreV1Api(api).list_namespaced_pod(namespace).items
    return {
        "invocation": json.dumps(get(api, namespace, "toolinvocations", name)),
        "events": json.dumps([serialize(e) for e in events]),
        "jobs": json.dumps([serialize(j) for j in jobs_of(api, namespace)]),
        "pods": json.dumps([serialize(p) for p in pods]),
    }


def lease_secret_value(api: client.ApiClient, namespace: str, name: str, key: str) -> str:
    """A value the lease's Secret holds while the call runs (the test's own view, as an
    admin: the agent can read no Secret)."""
    uid = get(api, namespace, "toolinvocations", name)["metadata"]["uid"]
    core = client.CoreV1Api(api)

    def read() -> str | None:
        try:
            data = core.read_namespaced_secret(f"ta-cred-{uid}", namespace).data or {}
        except client.ApiException:
            return None
        raw = data.get(key)
        return base64.b64decode(raw).decode() if raw else None

    return wait_for(read, timeout=60, what=f"{key} in the lease's Secret")


# --------------------------------------------------------------------------- files


def test_a_container_tool_reads_its_credential_files_and_no_value_shows_anywhere(
    api: client.ApiClient, ns: Namespace, agent: Agent, operator: OperatorProcess
) -> None:
    core = client.CoreV1Api(api)
    core.create_namespaced_secret(
        ns.name,
        {"metadata": {"name": "db"}, "stringData": {"password": DB_VALUE}},  # type: ignore[arg-type]  # the client sends a dict body as is
    )
    core.create_namespaced_service_account(ns.name, {"metadata": {"name": "reader"}})  # type: ignore[arg-type]  # the client sends a dict body as is
    # The platform's fixed command: digests of both files, and the token's subject (read
    # from its JWT payload); the sleep leaves the test time to read the minted token from
    # the lease's Secret while the call runs, to search for it afterwards.
    script = r"""sleep 5
cd /tooladapter/credentials
echo "db $(sha256sum db/password | cut -d' ' -f1)"
echo "sa $(sha256sum sa/token | cut -d' ' -f1)"
P=$(cut -d. -f2 sa/token | tr '_-' '/+')
case $((${#P} % 4)) in 2) P="$P==";; 3) P="$P=";; esac
printf '%s' "$P" | base64 -d | grep -o '"sub":"[^"]*"'
echo done
"""
    container_tool(
        api,
        ns.name,
        "check-files",
        ["/bin/sh", "-c", script],
        egress=[],
        credentials=[
            secret_file("db", "db", "password"),
            {
                "name": "sa",
                "source": {"serviceAccountToken": {"serviceAccountName": "reader"}},
                "inject": {"file": "/tooladapter/credentials/sa/token"},
            },
        ],
    )
    agent.grant(["check-files"], ["sandbox"])
    name = agent.invoke("check-files", {})
    token = lease_secret_value(api, ns.name, name, "file-sa")
    status = status_of(agent.wait(name, timeout=180))
    assert status["state"] == "Observed", pretty(status)
    content = status["result"]["content"]
    # The command read both files: their digests, and the token is the ServiceAccount's.
    assert f"db {hashlib.sha256(DB_VALUE.encode()).hexdigest()}" in content, content
    assert f"sa {hashlib.sha256(token.encode()).hexdigest()}" in content, content
    assert f'"sub":"system:serviceaccount:{ns.name}:reader"' in content, content
    assert content.rstrip().endswith("done"), content
    # Status says what went where, never a value.
    uses = {use["name"]: use for use in status["credentials"]}
    assert uses["db"]["source"] == "secretKeyRef", pretty(status)
    assert uses["db"]["file"] == "/tooladapter/credentials/db/password"
    assert uses["sa"]["source"] == "serviceAccountToken", pretty(status)
    texts = {
        **cluster_texts(api, ns.name, name),
        "result": stored(operator, status["resultRef"], "results"),
        "receipt": receipt_text(operator, status),
        "operator log": operator.log_text(),
    }
    for value in (DB_VALUE, token):
        assert_nowhere(value, texts)


def test_a_missing_secret_denies_a_container_tool_at_credentials_and_makes_no_job(
    api: client.ApiClient, ns: Namespace, agent: Agent
) -> None:
    container_tool(
        api,
        ns.name,
        "with-missing",
        ["cat", "/tooladapter/credentials/nope/password"],
        credentials=[secret_file("db", "nope", "password")],
    )
    agent.grant(["with-missing"], ["sandbox"])
    status = status_of(agent.wait(agent.invoke("with-missing", {})))
    assert status["state"] == "Denied", pretty(status)
    assert status["deniedStage"] == "credentials", pretty(status)
    assert status["failureClass"] == "credentials", pretty(status)
    assert "nope" in status["message"], status["message"]
    assert jobs_of(api, ns.name) == [], [j.metadata.name for j in jobs_of(api, ns.name)]


# --------------------------------------------------------------------------- proxied HTTP


class Upstreams:
    """On the node: a TLS upstream echoing the head it got (where the credential goes), a
    plain HTTP one recording headers (the same host's other port)."""

    def __init__(self, tls_port: int, tls_heads: list[bytes], plain: Recorder) -> None:
        self.tls_port = tls_port
        self.tls_heads = tls_heads
        self.plain = plain


def echo_head(head: bytes) -> bytes:
    return b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % len(head) + head


@pytest.fixture(scope="module")
def upstreams(
    tmp_path_factory: pytest.TempPathFactory,
    egress_operator: EgressOperator,
) -> Iterator[tuple[Upstreams, OperatorProcess, EgressProxyProcess]]:
    with (
        proxied_upstream(tmp_path_factory, egress_operator, PREFIX, [API], echo_head) as up,
        recording_server(node_ip()) as plain,
    ):
        port, heads, operator, proxy = up
        yield Upstreams(port, heads, plain), operator, proxy


@pytest.fixture
def pns(
    api: client.ApiClient, upstreams: tuple[Upstreams, OperatorProcess, EgressProxyProcess]
) -> Iterator[Namespace]:
    yield from deleted_after(Namespace(api, prefix=PREFIX))


@pytest.fixture
def pagent(api: client.ApiClient, pns: Namespace) -> Agent:
    return Agent.create(api, pns.name, "agent-1")


def http_shell_tool(
    api: client.ApiClient, namespace: str, tool_id: str, secret: str, ups: Upstreams
) -> None:
    """A shell tool allowed both ports of API; the Secret's value goes to the TLS one only."""
    credential = f"{API}:{ups.tls_port}"
    shell_tool(
        api,
        namespace,
        tool_id,
        egress=[credential, f"{API}:{ups.plain.port}"],
        shell={"allow": ["wget"]},
        credentials=[
            {
                "name": "api-key",
                "source": {"secretKeyRef": {"name": secret, "key": "token"}},
                "inject": {"hosts": [credential]},
            }
        ],
    )


def run(agent: Agent, tool: str, command: str) -> tuple[str, dict[str, Any]]:
    name = agent.invoke(tool, {"command": command})
    return name, status_of(agent.wait(name, timeout=180))


def explain(status: dict[str, Any], operator: OperatorProcess, proxy: EgressProxyProcess) -> str:
    return (
        f"{pretty(status)}\n--- proxy ---\n{proxy.tail(30)}\n--- operator ---\n{operator.tail(30)}"
    )


def test_a_shell_tools_http_credential_goes_to_its_declared_port_only(
    api: client.ApiClient,
    pns: Namespace,
    pagent: Agent,
    upstreams: tuple[Upstreams, OperatorProcess, EgressProxyProcess],
) -> None:
    ups, operator, proxy = upstreams
    client.CoreV1Api(api).create_namespaced_secret(
        pns.name,
        {"metadata": {"name": "api-key"}, "stringData": {"token": HTTP_VALUE}},  # type: ignore[arg-type]  # the client sends a dict body as is
    )
    http_shell_tool(api, pns.name, "fetch", "api-key", ups)
    pagent.grant(["fetch"], ["sandbox"])

    # The declared port: the proxy adds the header (and goes to the upstream over TLS).
    heads = len(ups.tls_heads)
    first, declared = run(pagent, "fetch", f"wget -q -O - http://{API}:{ups.tls_port}/with")
    assert declared["state"] == "Observed", explain(declared, operator, proxy)
    assert len(ups.tls_heads) == heads + 1
    assert f"Authorization: Bearer {HTTP_VALUE}".encode() in ups.tls_heads[-1]
    # The upstream echoed it: the sandbox saw it masked.
    shown = declared["result"]["content"]
    # The whole header value is masked (`Bearer ` too).
    assert "Authorization: " + "*" * len("Bearer " + HTTP_VALUE) in shown, shown
    uses = {use["name"]: use for use in declared["credentials"]}
    assert uses["api-key"]["hosts"] == [f"{API}:{ups.tls_port}"], pretty(declared)

    # The same host on its other allowed port: allowed, sent, and without the header.
    before = ups.plain.total
    second, other = run(pagent, "fetch", f"wget -q -O - http://{API}:{ups.plain.port}/without")
    assert other["state"] == "Observed", explain(other, operator, proxy)
    assert ups.plain.hits["/without"] == 1 and ups.plain.total == before + 1
    sent = ups.plain.headers[-1]
    assert "authorization" not in sent, sent
    assert not any(HTTP_VALUE in v for v in sent.values()), "the value went to another port"
    assert len(ups.tls_heads) == heads + 1
    assert [(r["host"], r["port"], r["verdict"]) for r in other["egress"]] == [
        (API, ups.plain.port, "allowed")
    ]

    for name, status in ((first, declared), (second, other)):
        texts = {
            **cluster_texts(api, pns.name, name),
            "result": stored(operator, status["resultRef"], "results"),
            "receipt": receipt_text(operator, status),
            "operator log": operator.log_text(),
            "proxy log": proxy.log_text(),
        }
        assert_nowhere(HTTP_VALUE, texts)


def test_a_missing_secret_denies_a_shell_tool_at_credentials_with_nothing_sent(
    api: client.ApiClient,
    pns: Namespace,
    pagent: Agent,
    upstreams: tuple[Upstreams, OperatorProcess, EgressProxyProcess],
) -> None:
    ups, operator, proxy = upstreams
    http_shell_tool(api, pns.name, "fetch-missing", "nope", ups)
    pagent.grant(["fetch-missing"], ["sandbox"])
    heads, plain = len(ups.tls_heads), ups.plain.total
    _, status = run(pagent, "fetch-missing", f"wget -q -O - http://{API}:{ups.tls_port}/x")
    assert status["state"] == "Denied", explain(status, operator, proxy)
    assert status["deniedStage"] == "credentials", pretty(status)
    assert status["failureClass"] == "credentials", pretty(status)
    # Nothing ran, so nothing was sent: no Job, no request at either upstream.
    assert jobs_of(api, pns.name) == [], [j.metadata.name for j in jobs_of(api, pns.name)]
    assert (len(ups.tls_heads), ups.plain.total) == (heads, plain)
