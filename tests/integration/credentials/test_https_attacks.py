"""Issue 39, attack pass on https credentials, on the real cluster, as an agent: the agent
chooses a container tool's script (a permissive stand-in for a shell tool's allow-list)
and nothing else. The tool's credential is a `Basic` one for API:port only; OTHER is
allowed, without a credential.

What the sandbox sees is sent back rot13'd (letters and digits), so the operator's own
redaction of results cannot hide a leak from this test: a value the sandbox saw comes
back in a form no masker knows, and is found here after undoing it.
"""

from __future__ import annotations

import base64
import gzip
import json
import re
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client

from tests.integration.credentials.conftest import (
    EgressOperator,
    Upstream,
    deleted_after,
    proxied_upstream,
)
from tests.integration.credentials.test_sandboxed_credentials import (
    assert_nowhere,
    cluster_texts,
    explain,
    stored,
)
from tests.integration.objects import Agent, descriptor, pretty, status_of
from tooladapter.devtools import SESSION, Namespace, node_ip

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(900)]

PREFIX = f"{SESSION}ha"
API = "vault.example.test"
OTHER = "mirror.example.test"
VALUE = "https-attack-" + "Zk9" * 8
USER = "robot"
HEADER = "Basic " + base64.b64encode(f"{USER}:{VALUE}".encode()).decode()
SCRIPT_RUNNER = (
    'sed -n \'s|.*"script":"\\([A-Za-z0-9+/=]*\\)".*|\\1|p\' "$TOOLADAPTER_ARGUMENTS" '
    "| base64 -d | sh"
)
#: rot13 on letters, rot5 on digits: its own inverse.
ROT = "tr A-Za-z0-9 N-ZA-Mn-za-m5-90-4"
_ROT_TABLE = str.maketrans(
    "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789",
    "NOPQRSTUVWXYZABCDEFGHIJKLMnopqrstuvwxyzabcdefghijklm5678901234",
)
ENCODED_PATHS = ("echo", "b64", "hex", "json", "gzip", "chunked")


def unrot(text: str) -> str:
    return text.translate(_ROT_TABLE)


def answer(head: bytes) -> bytes:
    """The head reflected in many encodings (by path), or a redirect to OTHER."""
    path = head.split(b" ", 2)[1].decode()
    host = re.search(rb"\r\nHost: ([^\r]+)", head)
    port = host.group(1).decode().rsplit(":", 1)[1] if host else "443"
    extra = b""
    if path == "/redirect":
        location = f"https://{OTHER}:{port}/after-redirect"
        return f"HTTP/1.1 302 Found\r\nLocation: {location}\r\nContent-Length: 0\r\n\r\n".encode()
    if path == "/b64":
        body = base64.b64encode(head)
    elif path == "/hex":
        body = head.hex().encode()
    elif path == "/json":
        body = json.dumps({"head": head.decode("latin-1")}).encode()
    elif path == "/gzip":
        # Compressed although the proxy asked for identity.
        body, extra = gzip.compress(head), b"Content-Encoding: gzip\r\n"
    elif path == "/chunked":
        pieces = b"".join(
            b"%x\r\n%s\r\n" % (len(head[i : i + 5]), head[i : i + 5])
            for i in range(0, len(head), 5)
        )
        return (
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n"
            + pieces
            + b"0\r\n\r\n"
        )
    else:
        body = head
    return (
        b"HTTP/1.1 200 OK\r\nX-Seen: "
        + base64.b64encode(head)
        + b"\r\n"
        + extra
        + b"Content-Length: %d\r\nConnection: close\r\n\r\n" % len(body)
        + body
    )


def leak_forms() -> list[str]:
    """The value and the header as sent, as the sandbox could decode them."""
    out: list[str] = []
    for text in (VALUE, HEADER, HEADER.split(" ", 1)[1]):
        raw = text.encode()
        out += [text, base64.b64encode(raw).decode(), raw.hex(), json.dumps(text)[1:-1]]
    return out


@pytest.fixture(scope="module")
def upstream(
    tmp_path_factory: pytest.TempPathFactory, egress_operator: EgressOperator
) -> Iterator[Upstream]:
    settings = {
        "TOOLADAPTER_WORKSPACE_IDLE_SECONDS": "60",
        "TOOLADAPTER_WORKSPACE_SIZE": "64Mi",
        "TOOLADAPTER_WARM_POOL_SIZE": "0",
        "TOOLADAPTER_WORKSPACES_PER_NAMESPACE": "2",
    }
    with proxied_upstream(
        tmp_path_factory, egress_operator, PREFIX, [API, OTHER], answer, settings
    ) as up:
        yield up


@pytest.fixture
def hns(api: client.ApiClient, upstream: Upstream) -> Iterator[Namespace]:
    yield from deleted_after(Namespace(api, prefix=PREFIX))


def script_agent(api: client.ApiClient, namespace: str, port: int, workspace: str) -> Agent:
    client.CoreV1Api(api).create_namespaced_secret(
        namespace,
        {"metadata": {"name": "vault-token"}, "stringData": {"token": VALUE}},  # type: ignore[arg-type]  # the client sends a dict body as is
    )
    host = f"{API}:{port}"
    descriptor(
        api,
        namespace,
        "script",
        kind="container",
        side_effect_class="sandbox",
        inputSchema={"type": "object", "properties": {"script": {"type": "string"}}},
        timeoutSeconds=90,
        sandbox={
            "workspace": workspace,
            "command": ["/bin/sh", "-c", SCRIPT_RUNNER],
            "resources": {
                "requests": {"cpu": "50m", "memory": "64Mi"},
                "limits": {"cpu": "500m", "memory": "128Mi"},
            },
            "egress": {"allow": [host, f"{OTHER}:{port}"]},
        },
        credentials=[
            {
                "name": "vault-token",
                "source": {"secretKeyRef": {"name": "vault-token", "key": "token"}},
                "inject": {"hosts": [host], "basicUsername": USER},
            }
        ],
    )
    agent = Agent.create(api, namespace, "mallory")
    agent.grant(["script"], ["sandbox"])
    return agent


def run(agent: Agent, script: str, attempt: str | None = None) -> tuple[str, dict[str, Any]]:
    encoded = base64.b64encode(script.encode()).decode()
    if attempt:
        name = agent.invoke("script", {"script": encoded}, attemptId=attempt)
    else:
        name = agent.invoke("script", {"script": encoded})
    return name, status_of(agent.wait(name, timeout=300))


def sections(content: str) -> dict[str, str]:
    """The script's output by its `== name` lines."""
    out: dict[str, str] = {}
    current = "-"
    for line in content.splitlines():
        if line.startswith("== "):
            current = line[3:].strip()
            out[current] = ""
        else:
            out[current] = out.get(current, "") + line + "\n"
    return out


def test_an_agent_neither_sees_the_credential_nor_sends_it_elsewhere_nor_reaches_the_ca_key(
    api: client.ApiClient,
    hns: Namespace,
    upstream: Upstream,
) -> None:
    port, heads, operator, proxy = upstream
    agent = script_agent(api, hns.name, port, "call")
    base = f"https://{API}:{port}"
    code = "-o /dev/null -w '%{http_code}\\n'"
    script = "\n".join(
        [
            *(
                f'echo "== {p}"; curl -sS --compressed {base}/{p} -D - | {ROT}; echo'
                for p in ENCODED_PATHS
            ),
            # Redirected to OTHER (allowed, no credential); -k: OTHER stays end to end and
            # the pod does not trust its CA.
            f'echo "== redirect"; curl -sSk -L {base}/redirect | {ROT}; echo',
            f'echo "== host"; curl -sS {code} -H "Host: {OTHER}:{port}" {base}/host 2>&1',
            f'echo "== ip"; curl -sSk {code} https://{node_ip()}:{port}/ip 2>&1',
            f'echo "== h2"; curl -sS {code} --http2-prior-knowledge {base}/h2 2>&1',
            f'echo "== api"; curl -sS {code} https://kubernetes.default.svc/api 2>&1',
            # Around the proxy, to the API server's service address: the network policy.
            f'echo "== direct"; curl -sSk --noproxy "*" --max-time 5 {code} '
            "https://10.0.0.1/api 2>&1",
            'echo "== sa"; ls /var/run/secrets/kubernetes.io/serviceaccount 2>&1',
            'echo "== keys"; grep -rls "PRIVATE KEY" /tooladapter /home /workspace /dev/shm '
            "/etc 2>/dev/null; env | grep -c 'PRIVATE KEY'; "
            "cat /proc/[0-9]*/environ 2>/dev/null | tr '\\0' '\\n' | grep -c 'PRIVATE KEY'",
            'echo "== bundle"; grep -c "BEGIN CERTIFICATE" "$SSL_CERT_FILE"; '
            'grep -c "PRIVATE" "$SSL_CERT_FILE"',
            'echo "== end"',
        ]
    )
    before = len(heads)
    name, status = run(agent, script)
    assert status["state"] == "Observed", explain(status, operator, proxy)
    content = str(status["result"]["content"])
    parts = sections(content)
    assert "end" in parts, pretty(status)
    sent = heads[before:]

    # Reflections: the upstream got the header, and echoed it in every encoding; the
    # sandbox saw none of the value's or the header's forms.
    for p in ENCODED_PATHS:
        assert any(f"GET /{p} ".encode() in h and HEADER.encode() in h for h in sent), p
    seen = unrot(content)
    assert "GET /echo HTTP/1.1" in seen, seen[:2000]
    assert re.search(r"Authorization: (Basic )?\S*\*{8}", seen), seen[:2000]
    assert base64.b64encode(b"GET /b64 HTTP/1.1\r\n").decode()[:20] in seen, seen[:2000]
    assert b"GET /hex HTTP/1.1".hex() in seen, seen[:2000]
    assert "GET /gzip HTTP/1.1" in seen and "GET /chunked" in seen, seen[:2000]
    for form in leak_forms():
        assert form not in seen, f"the sandbox saw {form[:12]}..."

    # The redirect was followed to OTHER without the credential.
    (followed,) = [h for h in sent if b"GET /after-redirect " in h]
    assert f"Host: {OTHER}:{port}".encode() in followed and VALUE.encode() not in followed
    assert HEADER.encode() not in followed and b"Authorization" not in followed
    # Every request that carried the credential named API, on the tool's port.
    for h in sent:
        if HEADER.encode() in h:
            assert f"Host: {API}:{port}\r\n".encode() in h, h
    # A Host naming OTHER inside API's tunnel: refused, nothing sent.
    assert parts["host"].strip().endswith("421"), parts["host"]
    assert not any(b"GET /host " in h for h in sent)
    # CONNECT to the address that serves API: not on the allow-list, nothing sent.
    assert "403" in parts["ip"] and not any(b"GET /ip " in h for h in sent), parts["ip"]
    # h2 prior knowledge over https: HTTP/1.1 is all the proxy offers (ALPN).
    assert parts["h2"].strip() == "200", parts["h2"]
    (h2,) = [h for h in sent if b"GET /h2 " in h]
    assert h2.startswith(b"GET /h2 HTTP/1.1")
    # The CA key: no API server through the proxy, no token, no key anywhere it can read.
    assert "403" in parts["api"], parts["api"]
    assert "No such file or directory" in parts["sa"], parts["sa"]
    assert parts["direct"].strip().endswith("000"), parts["direct"]
    assert parts["keys"].split() == ["0", "0"], parts["keys"]
    counts = parts["bundle"].split()
    assert int(counts[0]) >= 2 and counts[1] == "0", parts["bundle"]

    texts = {
        **cluster_texts(api, hns.name, name),
        "result": stored(operator, status["resultRef"], "results"),
        "operator log": operator.log_text(),
        "proxy log": proxy.log_text(),
    }
    assert_nowhere(VALUE, texts)
    for where, text in texts.items():
        assert HEADER not in text, where
        assert "PRIVATE KEY" not in text, f"a private key in {where}"


def test_an_earlier_calls_proxy_token_bundle_and_processes_serve_no_later_call(
    api: client.ApiClient,
    hns: Namespace,
    upstream: Upstream,
) -> None:
    port, heads, operator, proxy = upstream
    agent = script_agent(api, hns.name, port, "attempt")
    base = f"https://{API}:{port}"
    plant = (
        'printf "%s" "$HTTPS_PROXY" > /workspace/proxy; cp "$SSL_CERT_FILE" /workspace/ca.pem; '
        f"curl -sS -o /dev/null -w 'first=%{{http_code}}\\n' {base}/first; "
        # Keeps the proxy and bundle open for whoever comes next, if anything lived on.
        "setsid sh -c 'while :; do sleep 1; done # ta-bg-keeper' </dev/null >/dev/null 2>&1 & "
        "echo planted"
    )
    before = len(heads)
    _, first = run(agent, plant, "k")
    assert first["state"] == "Observed", explain(first, operator, proxy)
    assert "first=200" in first["result"]["content"], pretty(first)
    assert any(b"GET /first " in h and HEADER.encode() in h for h in heads[before:])

    later = (
        'P=$(cat /workspace/proxy); echo "== stale"; '
        f"curl -sS -o /dev/null -w '%{{http_code}}\\n' --proxy \"$P\" --cacert /workspace/ca.pem "
        f"{base}/stale 2>&1; "
        f"curl -sSk -o /dev/null -w '%{{http_code}}\\n' --proxy \"$P\" {base}/stale-k 2>&1; "
        'echo "== bg"; grep -l "ta-bg-kee[p]er" /proc/[0-9]*/cmdline 2>/dev/null | wc -l; '
        'echo "== bundle"; cmp -s /workspace/ca.pem "$SSL_CERT_FILE" && echo same || echo new; '
        'echo "== fresh"; '
        f"curl -sS -o /dev/null -w '%{{http_code}}\\n' {base}/fresh 2>&1; echo '== end'"
    )
    before = len(heads)
    _, second = run(agent, later, "k")
    assert second["state"] == "Observed", explain(second, operator, proxy)
    assert second["sandboxLease"]["workspace"]["fresh"] is False, pretty(second)
    parts = sections(str(second["result"]["content"]))
    assert "end" in parts, pretty(second)
    # The earlier call's lease ended with it: its token opens no tunnel.
    assert parts["stale"].count("407") >= 2, parts["stale"]
    assert not any(b"/stale" in h for h in heads[before:])
    assert parts["bg"].strip() == "0", parts["bg"]
    # The later call has a lease CA of its own.
    assert parts["bundle"].strip() == "new", parts["bundle"]
    assert parts["fresh"].strip() == "200", parts["fresh"]
    assert any(b"GET /fresh " in h and HEADER.encode() in h for h in heads[before:])
