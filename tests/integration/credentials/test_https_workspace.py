"""Issue 39 (TLS half) in an attempt's workspace pod: a call clones a repository over https
with a brokered token (the trust bundle reaches the pod per call, on the exec's stdin)
and a later call of the attempt reads the clone. Every request the git server got carried
the credential; no value shows in the pod, its output or the logs.
"""

from __future__ import annotations

import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path

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
from tests.integration.objects import SHELL_SCHEMA, Agent, descriptor, jobs_of, status_of
from tooladapter.devtools import SESSION, Namespace

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(900)]

PREFIX = f"{SESSION}cw"
API = "repo.example.test"
VALUE = "clone-token-" + "Hx4" * 8
CONTENT = "cloned over https"


def bare_repository(directory: Path) -> Path:
    """A bare repository with one commit (hello.txt), ready for dumb HTTP."""
    work, bare = directory / "work", directory / "repo.git"
    env = {
        "GIT_CONFIG_GLOBAL": "/dev/null",
        "GIT_CONFIG_NOSYSTEM": "1",
        "GIT_AUTHOR_NAME": "t",
        "GIT_AUTHOR_EMAIL": "t@example.test",
        "GIT_COMMITTER_NAME": "t",
        "GIT_COMMITTER_EMAIL": "t@example.test",
        "PATH": "/usr/bin:/bin",
    }

    def git(*args: str, cwd: Path = directory) -> None:
        subprocess.run(["git", *args], cwd=cwd, env=env, check=True, capture_output=True)

    git("init", "-q", "-b", "main", str(work))
    (work / "hello.txt").write_text(CONTENT + "\n")
    git("add", "hello.txt", cwd=work)
    git("commit", "-q", "-m", "hello", cwd=work)
    git("clone", "-q", "--bare", str(work), str(bare))
    git("update-server-info", cwd=bare)
    return bare


def static(root: Path) -> Callable[[bytes], bytes]:
    """Answers with the file under `root.parent` the request's path names (dumb HTTP)."""

    def answer(head: bytes) -> bytes:
        path = head.split(b" ", 2)[1].decode().split("?", 1)[0]
        target = (root.parent / path.lstrip("/")).resolve()
        if not target.is_file() or root not in target.parents:
            return b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n"
        body = target.read_bytes()
        return b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % len(body) + body

    return answer


@pytest.fixture(scope="module")
def upstream(
    tmp_path_factory: pytest.TempPathFactory, egress_operator: EgressOperator
) -> Iterator[Upstream]:
    bare = bare_repository(tmp_path_factory.mktemp("git"))
    settings = {
        "TOOLADAPTER_WORKSPACE_IDLE_SECONDS": "60",
        "TOOLADAPTER_WORKSPACE_SIZE": "256Mi",
        "TOOLADAPTER_WARM_POOL_SIZE": "1",
        "TOOLADAPTER_WORKSPACES_PER_NAMESPACE": "2",
    }
    with proxied_upstream(
        tmp_path_factory, egress_operator, PREFIX, [API], static(bare), settings
    ) as up:
        yield up


@pytest.fixture
def wns(api: client.ApiClient, upstream: Upstream) -> Iterator[Namespace]:
    yield from deleted_after(Namespace(api, prefix=PREFIX))


def test_an_attempt_clones_over_https_with_a_brokered_token_and_a_later_call_reads_it(
    api: client.ApiClient,
    wns: Namespace,
    upstream: Upstream,
) -> None:
    port, heads, operator, proxy = upstream
    client.CoreV1Api(api).create_namespaced_secret(
        wns.name,
        {"metadata": {"name": "repo-token"}, "stringData": {"token": VALUE}},  # type: ignore[arg-type]  # the client sends a dict body as is
    )
    host = f"{API}:{port}"
    descriptor(
        api,
        wns.name,
        "git",
        kind="shell",
        side_effect_class="sandbox",
        inputSchema=SHELL_SCHEMA,
        timeoutSeconds=90,
        shell={"allow": ["git", "cat"]},
        sandbox={
            "workspace": "attempt",
            "resources": {
                "requests": {"cpu": "50m", "memory": "64Mi"},
                "limits": {"cpu": "500m", "memory": "128Mi"},
            },
            "egress": {"allow": [host]},
        },
        credentials=[
            {
                "name": "repo-token",
                "source": {"secretKeyRef": {"name": "repo-token", "key": "token"}},
                "inject": {"hosts": [host]},
            }
        ],
    )
    agent = Agent.create(api, wns.name, "agent-1")
    agent.grant(["git"], ["sandbox"])

    before = len(heads)
    cloning = agent.invoke(
        "git", {"command": f"git clone -q https://{host}/repo.git clone"}, attemptId="a1"
    )
    cloned = status_of(agent.wait(cloning, timeout=240))
    assert cloned["state"] == "Observed", explain(cloned, operator, proxy)
    # It ran in the attempt's workspace pod (by exec, the bundle on its stdin), no Job.
    assert jobs_of(api, wns.name) == [], [j.metadata.name for j in jobs_of(api, wns.name)]
    sent = heads[before:]
    assert sent and all(f"Authorization: Bearer {VALUE}".encode() in h for h in sent), sent

    reading = agent.invoke("git", {"command": "cat clone/hello.txt"}, attemptId="a1")
    read = status_of(agent.wait(reading, timeout=180))
    assert read["state"] == "Observed", explain(read, operator, proxy)
    assert read["result"]["content"].strip() == CONTENT, read["result"]

    for name, status in ((cloning, cloned), (reading, read)):
        texts = {
            **cluster_texts(api, wns.name, name),
            "result": stored(operator, status["resultRef"], "results"),
            "operator log": operator.log_text(),
            "proxy log": proxy.log_text(),
        }
        assert_nowhere(VALUE, texts)
        for where, text in texts.items():
            assert "PRIVATE KEY" not in text, f"a private key in {where}"
