"""Issue 39 (TLS half): https as it is. On the real cluster, as an agent, a shell tool runs
`curl https://...` and `git ls-remote https://...` with no flag or URL change, and the
upstream gets the credential: the egress proxy ends the sandbox's TLS with a leaf of the
lease's CA (which the pod trusts through its bundle variables) and sends each request on
over verified TLS. No value shows in the pod, its environment, files or output; the
lease CA's key never reaches the tenant's namespace.
"""

from __future__ import annotations

import base64
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
    receipt_text,
    run,
    stored,
)
from tests.integration.objects import Agent, pretty, shell_tool
from tooladapter.devtools import SESSION, Namespace

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(600)]

PREFIX = f"{SESSION}ch"
API = "git.example.test"
VALUE = "https-credential-" + "Qv7" * 8
COMMIT = "3f1c0a9be2d4c6e8f0a1b3c5d7e9f1a3b5c7d9e1"


def answer(head: bytes) -> bytes:
    """A dumb-HTTP git repository at /repo.git (`info/refs`, `HEAD`), and an echo of the
    request head anywhere else."""
    path = head.split(b" ", 2)[1].decode()
    if path.startswith("/repo.git/info/refs"):
        body = f"{COMMIT}\trefs/heads/main\n".encode()
    elif path == "/repo.git/HEAD":
        body = b"ref: refs/heads/main\n"
    elif path.startswith("/repo.git/"):
        return b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n"
    else:
        body = head
    return (
        b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: %d\r\n\r\n" % len(body)
        + body
    )


@pytest.fixture(scope="module")
def upstream(
    tmp_path_factory: pytest.TempPathFactory, egress_operator: EgressOperator
) -> Iterator[Upstream]:
    with proxied_upstream(tmp_path_factory, egress_operator, PREFIX, [API], answer) as up:
        yield up


@pytest.fixture
def hns(api: client.ApiClient, upstream: Upstream) -> Iterator[Namespace]:
    yield from deleted_after(Namespace(api, prefix=PREFIX))


def tool(api: client.ApiClient, namespace: str, port: int) -> None:
    """A shell tool allowed curl and git to API:port, whose credential goes there only."""
    host = f"{API}:{port}"
    shell_tool(
        api,
        namespace,
        "fetch",
        memory="128Mi",
        egress=[host],
        shell={"allow": ["curl", "git", "cat"]},
        credentials=[
            {
                "name": "git-token",
                "source": {"secretKeyRef": {"name": "git-token", "key": "token"}},
                "inject": {"hosts": [host]},
            }
        ],
    )


def test_curl_and_git_over_https_get_the_credential_with_no_flag_or_url_change(
    api: client.ApiClient,
    hns: Namespace,
    upstream: Upstream,
) -> None:
    port, heads, operator, proxy = upstream
    client.CoreV1Api(api).create_namespaced_secret(
        hns.name,
        {"metadata": {"name": "git-token"}, "stringData": {"token": VALUE}},  # type: ignore[arg-type]  # the client sends a dict body as is
    )
    tool(api, hns.name, port)
    agent = Agent.create(api, hns.name, "agent-1")
    agent.grant(["fetch"], ["sandbox"])
    header = f"Authorization: Bearer {VALUE}".encode()

    before = len(heads)
    first, curl = run(agent, "fetch", f"curl -sS https://{API}:{port}/private/data")
    assert curl["state"] == "Observed", explain(curl, operator, proxy)
    assert len(heads) == before + 1 and header in heads[-1], heads[before:]
    shown = curl["result"]["content"]
    # The upstream echoed the head: the sandbox saw the value masked.
    # The whole header value is masked (`Bearer ` too).
    assert "GET /private/data" in shown
    assert "Authorization: " + "*" * len("Bearer " + VALUE) in shown, shown
    assert [(r["host"], r["port"], r["verdict"]) for r in curl["egress"]] == [
        (API, port, "allowed")
    ], pretty(curl)

    before = len(heads)
    second, git = run(agent, "fetch", f"git ls-remote https://{API}:{port}/repo.git")
    assert git["state"] == "Observed", explain(git, operator, proxy)
    assert re.search(rf"{COMMIT}\s+refs/heads/main", git["result"]["content"]), pretty(git)
    sent = heads[before:]
    assert sent and all(header in h for h in sent), sent
    assert any(b"/repo.git/info/refs" in h for h in sent), sent

    # What the pod was given: the bundle (by variable and wgetrc), never the CA's key.
    third, env = run(agent, "fetch", "cat /tooladapter/egress-ca/wgetrc")
    assert env["state"] == "Observed", explain(env, operator, proxy)
    bundle = "/tooladapter/egress-ca/ca-bundle.pem"
    assert f"ca_certificate = {bundle}" in env["result"]["content"], pretty(env)
    jobs = json.loads(cluster_texts(api, hns.name, third)["jobs"])
    variables = {
        e["name"]: e.get("value")
        for job in jobs
        for e in job["spec"]["template"]["spec"]["containers"][0]["env"]
    }
    for name in ("SSL_CERT_FILE", "CURL_CA_BUNDLE", "REQUESTS_CA_BUNDLE", "GIT_SSL_CAINFO"):
        assert variables.get(name) == bundle, variables
    assert variables.get("WGETRC") == "/tooladapter/egress-ca/wgetrc", variables

    for name, status in ((first, curl), (second, git), (third, env)):
        texts = {
            **cluster_texts(api, hns.name, name),
            "result": stored(operator, status["resultRef"], "results"),
            "receipt": receipt_text(operator, status),
            "operator log": operator.log_text(),
            "proxy log": proxy.log_text(),
        }
        assert_nowhere(VALUE, texts)
        for where, text in texts.items():
            assert "PRIVATE KEY" not in text, f"a private key in {where}"
    assert not tenant_secrets_with_a_key(api, hns.name)


def tenant_secrets_with_a_key(api: client.ApiClient, namespace: str) -> list[str]:
    """Secrets of the tenant's namespace holding a private key (the lease CA's must not)."""
    found: list[str] = []
    items: list[Any] = client.CoreV1Api(api).list_namespaced_secret(namespace).items
    for secret in items:
        for value in (secret.data or {}).values():
            if b"PRIVATE KEY" in base64.b64decode(value):
                found.append(secret.metadata.name)
    return found
