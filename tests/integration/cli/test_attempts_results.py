"""Issue 44 at the command line, on the real cluster, as a person and as agents run it.

An attempt's calls through `invoke --attempt-id` (and $TOOLADAPTER_ATTEMPT_ID) share its
workspace, and `workspace release` frees it with the kubeconfig alone, asking the gateway's
rights question first; a result too large to inline (100 KB) is read whole with `result`
and the REST route, by who may read the call and by no one else; `invoke -o json` shows
what the call used (sandbox seconds, egress bytes) and its receipt.

This module runs its own operator and egress proxy (warm pools of one), serving only its
own namespaces; the tool is a shell tool whose `sandbox.workspace` is `attempt`.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from tests.integration.cli.test_cli import Cli, explain
from tests.integration.objects import SHELL_SCHEMA, Agent, descriptor, get, pretty
from tests.integration.servers import Recorder, recording_server
from tooladapter.devtools import (
    SESSION,
    EgressProxyProcess,
    Namespace,
    OperatorProcess,
    node_ip,
    wait_for,
)
from tooladapter.devtools.tls import make_certificates
from tooladapter.pipeline.hashing import sha256_ref
from tooladapter.sandbox.warm import LABEL_WORKSPACE, workspace_key

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(900)]

PREFIX = f"{SESSION}at"
API = "api.example.test"
#: `seq 1 20000`: 108,894 bytes, far above the inline bound (16 KiB by default).
LINES = 20_000
BIG = "".join(f"{i}\n" for i in range(1, LINES + 1))

Env = tuple[Recorder, OperatorProcess, EgressProxyProcess]


@pytest.fixture(scope="module")
def env(
    api: client.ApiClient,
    egress_operator: Any,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Env]:
    certs = make_certificates(tmp_path_factory.mktemp("tls"), [API])
    settings = {
        "TOOLADAPTER_WORKSPACE_IDLE_SECONDS": "600",
        "TOOLADAPTER_WORKSPACE_SIZE": "256Mi",
        "TOOLADAPTER_WARM_POOL_SIZE": "1",
    }
    with (
        recording_server(node_ip()) as server,
        egress_operator(PREFIX, [API], certs.ca, settings) as (operator, proxy),
    ):
        yield server, operator, proxy


@pytest.fixture
def ans(api: client.ApiClient, env: Env) -> Iterator[Namespace]:
    namespace = Namespace(api, prefix=PREFIX)
    yield namespace
    namespace.delete()


def attempt_tool(api: client.ApiClient, namespace: str, port: int) -> None:
    descriptor(
        api,
        namespace,
        "ws",
        kind="shell",
        side_effect_class="sandbox",
        inputSchema=SHELL_SCHEMA,
        timeoutSeconds=60,
        shell={"allow": ["wget", "cat", "seq"]},
        sandbox={
            "workspace": "attempt",
            "resources": {
                "requests": {"cpu": "50m", "memory": "64Mi"},
                "limits": {"cpu": "500m", "memory": "64Mi"},
            },
            "egress": {"allow": [f"{API}:{port}"]},
        },
    )


def person(api: client.ApiClient, namespace: str, name: str) -> Agent:
    """Someone who runs agents in the namespace: the tool granted, and `edit` there (pods
    included), as a developer holds in a namespace of their own."""
    who = Agent.create(api, namespace, name)
    who.grant(["ws"], ["sandbox"])
    who.bind("edit")
    return who


def workspace_pods(api: client.ApiClient, namespace: str, user: str, attempt: str) -> list[str]:
    key = workspace_key(namespace, user, attempt)
    pods = client.CoreV1Api(api).list_namespaced_pod(
        namespace, label_selector=f"{LABEL_WORKSPACE}={key}"
    )
    return [str(p.metadata.name) for p in pods.items if not p.metadata.deletion_timestamp]


def rest_result(gateway: str, agent: Agent, namespace: str, name: str) -> tuple[int, bytes, str]:
    """GET the call's result through the gateway with the agent's own token."""
    token = agent.api.configuration.api_key["authorization"]
    request = urllib.request.Request(
        f"{gateway}/namespaces/{namespace}/tool-invocations/{name}/result",
        headers={"Authorization": f"Bearer {token}"},
    )
    try:
        with urllib.request.urlopen(request, timeout=60) as resp:
            return resp.status, resp.read(), resp.headers.get("ETag", "")
    except urllib.error.HTTPError as err:
        return err.code, err.read(), ""


def test_an_attempts_calls_share_a_file_and_release_without_a_gateway_frees_it(
    api: client.ApiClient, ans: Namespace, env: Env, tmp_path: Path
) -> None:
    server, _, _ = env
    attempt_tool(api, ans.name, server.port)
    dev = person(api, ans.name, "dev-1")
    cli = Cli(tmp_path, api, dev)

    fetch = f"wget -q -O /workspace/fetched http://{API}:{server.port}/into-workspace"
    first = cli.json("invoke", "ws", "--attempt-id", "a1", "--arg", f"command={fetch}")
    assert first["state"] == "Observed" and not first["toolError"], pretty(first)
    assert first["attemptId"] == "a1", pretty(first)
    # What the call used, as its receipt meters it: the sandbox's seconds, the bytes it
    # moved through the egress proxy (the server's answer came down), and the receipt.
    usage = first["usage"]
    assert usage["sandboxSeconds"] > 0, pretty(first)
    assert usage["egressBytesDown"] > 0 and usage["egressBytesUp"] > 0, pretty(first)
    assert usage["egressConnections"] == 1, pretty(first)
    assert first["receiptRef"].startswith("sha256:"), pretty(first)
    obj = get(api, ans.name, "toolinvocations", first["name"])
    rows = obj["status"]["egress"]
    assert usage["egressBytesDown"] == sum(r["bytesDown"] for r in rows), pretty(obj["status"])

    # The second call names the attempt through the environment, as an agent's runner does;
    # the table shows its usage and receipt on stderr.
    second = cli(
        "invoke",
        "ws",
        "--arg",
        "command=cat /workspace/fetched",
        env={"TOOLADAPTER_ATTEMPT_ID": "a1"},
    )
    assert second.returncode == 0, explain(second)
    assert "hello from the node" in second.stdout, explain(second)
    assert "usage: sandbox " in second.stderr and "receipt sha256:" in second.stderr, explain(
        second
    )
    assert server.hits["/into-workspace"] == 1
    (pod,) = workspace_pods(api, ans.name, dev.user, "a1")

    # Without a gateway, the same rights as the gateway's: an agent that may call tools but
    # not delete pods may not name another caller's workspace, and has no attempt a1 of its
    # own; a colleague who may delete pods may not name another caller's workspace (release
    # on workspaces); nothing is deleted.
    agent = Agent.create(api, ans.name, "agent-1")
    refused = Cli(tmp_path, api, agent)("workspace", "release", "a1", "--caller", dev.user)
    assert refused.returncode == 9, explain(refused)
    assert "release on workspaces" in refused.stderr, explain(refused)
    none = Cli(tmp_path, api, agent)("workspace", "release", "a1")
    assert none.returncode == 8, explain(none)
    assert "no call of attempt 'a1'" in none.stderr, explain(none)
    colleague = person(api, ans.name, "dev-2")
    named = Cli(tmp_path, api, colleague)("workspace", "release", "a1", "--caller", dev.user)
    assert named.returncode == 9, explain(named)
    assert "release on workspaces" in named.stderr, explain(named)
    # The colleague's own attempt a1 is another workspace, which does not exist.
    own = Cli(tmp_path, api, colleague)("workspace", "release", "a1")
    assert own.returncode == 8, explain(own)
    assert workspace_pods(api, ans.name, dev.user, "a1") == [pod]

    released = cli.json("workspace", "release", "a1")
    assert released == {
        "namespace": ans.name,
        "attemptId": "a1",
        "caller": dev.user,
        "released": [pod],
    }, released
    wait_for(
        lambda: not workspace_pods(api, ans.name, dev.user, "a1"),
        timeout=120,
        what="the released workspace's pod gone",
    )
    fresh = cli.json(
        "invoke", "ws", "--attempt-id", "a1", "--arg", "command=cat /workspace/fetched", code=11
    )
    assert fresh["toolError"] is True, pretty(fresh)
    assert "hello from the node" not in json.dumps(fresh["result"]), pretty(fresh)
    again = cli("workspace", "release", "a1")
    assert again.returncode == 0, explain(again)


def test_an_agent_releases_its_attempts_workspace_with_its_kubeconfig_alone(
    api: client.ApiClient, ans: Namespace, env: Env, tmp_path: Path
) -> None:
    """An agent's ServiceAccount holds no pod rights and no gateway is given: `workspace
    release` sets spec.releaseWorkspace on the attempt's newest call and the operator deletes
    the pods; `invoke --release-workspace` does it at the attempt's last call. No other agent
    may set it on the agent's call (admission), nor name its workspace."""
    server, _, _ = env
    attempt_tool(api, ans.name, server.port)
    agent = Agent.create(api, ans.name, "agent-2")
    agent.grant(["ws"], ["sandbox"])
    cli = Cli(tmp_path, api, agent)
    made = cli.json("invoke", "ws", "--attempt-id", "b1", "--arg", "command=seq 1 3")
    assert made["state"] == "Observed", pretty(made)
    (pod,) = workspace_pods(api, ans.name, agent.user, "b1")

    other = Agent.create(api, ans.name, "agent-3")
    other.grant(["ws"], ["sandbox"])
    named = Cli(tmp_path, api, other)("workspace", "release", "b1", "--caller", agent.user)
    assert named.returncode == 9, explain(named)
    with pytest.raises(client.ApiException) as forged:
        client.CustomObjectsApi(other.api).patch_namespaced_custom_object(
            "tooladapter.dev",
            "v1alpha1",
            ans.name,
            "toolinvocations",
            made["name"],
            {"spec": {"releaseWorkspace": True}},
        )
    assert forged.value.status == 403, forged.value.body
    assert "may set spec.releaseWorkspace" in (forged.value.body or ""), forged.value.body
    assert workspace_pods(api, ans.name, agent.user, "b1") == [pod]

    released = cli.json("workspace", "release", "b1")
    assert released["throughCall"] == made["name"] and released["releasedAt"], released
    wait_for(
        lambda: not workspace_pods(api, ans.name, agent.user, "b1"),
        timeout=120,
        what="the released workspace's pod gone",
    )
    status = get(api, ans.name, "toolinvocations", made["name"])["status"]
    assert status["workspaceReleasedAt"] == released["releasedAt"], pretty(status)
    again = cli("workspace", "release", "b1")
    assert again.returncode == 8 and "was released at" in again.stderr, explain(again)

    last = cli.json(
        "invoke", "ws", "--attempt-id", "b2", "--release-workspace", "--arg", "command=seq 1 2"
    )
    assert last["state"] == "Observed", pretty(last)
    wait_for(
        lambda: (
            not workspace_pods(api, ans.name, agent.user, "b2")
            and (get(api, ans.name, "toolinvocations", last["name"])["status"] or {}).get(
                "workspaceReleasedAt"
            )
        ),
        timeout=120,
        what="the last call's workspace released",
    )


def test_a_100kb_result_is_read_whole_by_who_may_read_the_call_and_no_one_else(
    api: client.ApiClient, ans: Namespace, env: Env, tmp_path: Path
) -> None:
    server, operator, _ = env
    attempt_tool(api, ans.name, server.port)
    dev = person(api, ans.name, "dev-1")
    cli = Cli(tmp_path, api, dev)
    gateway = operator.gateway_url

    name = "big-1"
    done = cli(
        "invoke", "ws", "--name", name, "--attempt-id", "big", "--arg", f"command=seq 1 {LINES}"
    )
    assert done.returncode == 0, explain(done)
    # Too large to inline: nothing on stdout, and stderr says how to read it.
    assert done.stdout == "", explain(done)
    assert "too large to inline" in done.stderr and "tooladapter result" in done.stderr, explain(
        done
    )
    status = get(api, ans.name, "toolinvocations", name)["status"]
    assert status["result"]["inline"] is False and status["result"]["content"] == "", status
    ref = status["resultRef"]
    assert ref == sha256_ref(BIG.encode()), (ref, status["result"])

    # The command line: without a gateway it says how; with one, the whole text.
    missing = cli("result", name)
    assert missing.returncode == 2 and "--gateway" in missing.stderr, explain(missing)
    whole = cli("result", name, "--gateway", gateway)
    assert whole.returncode == 0, explain(whole)
    assert whole.stdout == BIG, (len(whole.stdout), whole.stdout[-200:])
    doc = cli.json("result", name, "--gateway", gateway)
    assert doc["content"] == BIG and doc["resultRef"] == ref and doc["inline"] is False, {
        k: v for k, v in doc.items() if k != "content"
    }

    # The REST route: the same bytes, named by their hash.
    code, body, etag = rest_result(gateway, dev, ans.name, name)
    assert code == 200 and body == BIG.encode() and etag == f'"{ref}"', (code, body[:300])

    # Another agent with no right to read the call: refused by both doors, nothing served.
    stranger = Agent.create(api, ans.name, "stranger", role="view")
    code, body, _ = rest_result(gateway, stranger, ans.name, name)
    assert code == 403 and b"\n20000\n" not in body, (code, body[:300])
    refused = Cli(tmp_path, api, stranger)("result", name, "--gateway", gateway)
    assert refused.returncode == 9 and refused.stdout == "", explain(refused)
