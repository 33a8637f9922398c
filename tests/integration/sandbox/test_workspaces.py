"""Issue 29: attempt workspaces and warm sandboxes, on the real cluster, as agents.

This module runs its own operator (warm pools of one, a short workspace idle time) and
egress proxy, serving only its own namespaces. Its tools are shell tools whose
`sandbox.workspace` is `attempt`: calls with the same attemptId from the same caller share
/workspace; the commands run through `sh -c` (on the tool's allow list) so a call can
start background processes, as an agent's build would.
"""

from __future__ import annotations

import base64
import json
import threading
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client

from tests.integration.objects import (
    SHELL_SCHEMA,
    Agent,
    descriptor,
    get,
    pretty,
    status_of,
    stored_receipt,
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
from tooladapter.sandbox.warm import (
    LABEL_CALL,
    LABEL_CALLER,
    LABEL_WORKSPACE,
    caller_key,
    workspace_key,
)

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(900)]

PREFIX = f"{SESSION}ws"
API = "api.example.test"
IDLE_SECONDS = 20
WORKSPACES = 3
ALLOW = ["sh", "cat", "echo", "ls", "wget", "sleep", "true"]


@pytest.fixture(scope="module")
def server() -> Iterator[Recorder]:
    with recording_server(node_ip()) as plain:
        yield plain


@pytest.fixture(scope="module")
def warm(
    api: client.ApiClient, server: Recorder, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[OperatorProcess, EgressProxyProcess]]:
    node = node_ip()
    scope = {"TOOLADAPTER_NAMESPACES": f"{PREFIX}-*"}
    proxy = EgressProxyProcess(
        tmp_path_factory.mktemp("ws-proxy"),
        {**scope, "TOOLADAPTER_EGRESS_HOSTS": f"{API}={node}"},
    )
    proxy.start()
    operator = OperatorProcess(
        tmp_path_factory.mktemp("ws-operator"),
        {
            **scope,
            "TOOLADAPTER_EGRESS_PROXY_PORT": str(proxy.port),
            "TOOLADAPTER_EGRESS_PROXY_ADDRESS": node,
            "TOOLADAPTER_WORKSPACE_IDLE_SECONDS": str(IDLE_SECONDS),
            "TOOLADAPTER_WORKSPACE_SIZE": "256Mi",
            "TOOLADAPTER_WARM_POOL_SIZE": "1",
            "TOOLADAPTER_WORKSPACES_PER_NAMESPACE": str(WORKSPACES),
        },
    )
    try:
        operator.start()
        yield operator, proxy
    finally:
        operator.stop()
        proxy.stop()


@pytest.fixture
def wns(
    api: client.ApiClient, warm: tuple[OperatorProcess, EgressProxyProcess]
) -> Iterator[Namespace]:
    namespace = Namespace(api, prefix=PREFIX)
    yield namespace
    namespace.delete()


def attempt_tool(
    api: client.ApiClient, namespace: str, tool_id: str, *, egress: list[str], timeout: int = 60
) -> None:
    descriptor(
        api,
        namespace,
        tool_id,
        kind="shell",
        side_effect_class="sandbox",
        inputSchema=SHELL_SCHEMA,
        timeoutSeconds=timeout,
        shell={"allow": ALLOW},
        sandbox={
            "workspace": "attempt",
            "resources": {
                "requests": {"cpu": "50m", "memory": "64Mi"},
                "limits": {"cpu": "500m", "memory": "64Mi"},
            },
            "egress": {"allow": egress},
        },
    )


#: A container tool that runs the script its arguments carry (base64, so JSON needs no
#: escapes): the platform's fixed argv, an agent's build steps as data.
SCRIPT_RUNNER = (
    'sed -n \'s|.*"script":"\\([A-Za-z0-9+/=]*\\)".*|\\1|p\' "$TOOLADAPTER_ARGUMENTS" '
    "| base64 -d | sh"
)


def script_tool(
    api: client.ApiClient, namespace: str, tool_id: str, *, egress: list[str], timeout: int = 60
) -> None:
    descriptor(
        api,
        namespace,
        tool_id,
        kind="container",
        side_effect_class="sandbox",
        inputSchema={"type": "object", "properties": {"script": {"type": "string"}}},
        timeoutSeconds=timeout,
        sandbox={
            "workspace": "attempt",
            "command": ["/bin/sh", "-c", SCRIPT_RUNNER],
            "resources": {
                "requests": {"cpu": "50m", "memory": "64Mi"},
                "limits": {"cpu": "500m", "memory": "64Mi"},
            },
            "egress": {"allow": egress},
        },
    )


def run(agent: Agent, tool: str, script: str, attempt: str) -> dict[str, Any]:
    """A script tool's call, to its end."""
    return status_of(agent.wait(start(agent, tool, script, attempt), timeout=180))


def start(agent: Agent, tool: str, script: str, attempt: str) -> str:
    encoded = base64.b64encode(script.encode()).decode()
    return agent.invoke(tool, {"script": encoded}, attemptId=attempt)


def agents(api: client.ApiClient, namespace: str, tool: str, *names: str) -> list[Agent]:
    made = [Agent.create(api, namespace, name) for name in names]
    for agent in made:
        agent.grant([tool], ["sandbox"])
    return made


def call(agent: Agent, tool: str, command: str, attempt: str, **spec: Any) -> dict[str, Any]:
    name = agent.invoke(tool, {"command": command}, attemptId=attempt, **spec)
    return status_of(agent.wait(name, timeout=180))


def workspace_pods(api: client.ApiClient, namespace: str, agent: Agent, attempt: str) -> list[Any]:
    key = workspace_key(namespace, agent.user, attempt)
    pods = client.CoreV1Api(api).list_namespaced_pod(
        namespace, label_selector=f"{LABEL_WORKSPACE}={key}"
    )
    return [p for p in pods.items if not p.metadata.deletion_timestamp]


def explain(status: dict[str, Any], warm: tuple[OperatorProcess, EgressProxyProcess]) -> str:
    return f"{pretty(status)}\n--- operator log ---\n{warm[0].tail(60)}"


def test_a_fetched_file_is_read_by_the_next_call_of_its_attempt_and_by_no_other(
    api: client.ApiClient,
    wns: Namespace,
    server: Recorder,
    warm: tuple[OperatorProcess, EgressProxyProcess],
) -> None:
    port = server.port
    attempt_tool(api, wns.name, "ws", egress=[f"{API}:{port}"])
    alice, bob = agents(api, wns.name, "ws", "alice", "bob")
    fetched = call(
        alice, "ws", f"wget -q -O /workspace/fetched http://{API}:{port}/into-workspace", "a1"
    )
    assert fetched["state"] == "Observed", explain(fetched, warm)
    assert not fetched["result"].get("isError"), explain(fetched, warm)
    (record,) = fetched["egress"]
    assert (record["host"], record["verdict"]) == (API, "allowed")
    lease = fetched["sandboxLease"]
    # The attempt's first call: a pool's ready pod (warm), or one started for it (cold).
    assert lease["start"] in ("warm", "cold")
    workspace = lease["workspace"]
    assert workspace["fresh"] is True and workspace["sizeLimit"] == "256Mi"

    again = call(alice, "ws", "cat /workspace/fetched", "a1")
    assert again["state"] == "Observed", explain(again, warm)
    assert "hello from the node" in again["result"]["content"]
    assert again["sandboxLease"]["workspace"]["id"] == workspace["id"]
    assert again["sandboxLease"]["workspace"]["fresh"] is False
    assert again["sandboxLease"]["start"] == "warm"
    assert again["sandboxLease"]["sandboxName"] == workspace["id"]
    assert again["sandboxLease"]["workspace"]["lastUsedAt"]
    # The second call never held the first one's egress grant: it connected nowhere.
    assert not again.get("egress")

    other_attempt = call(alice, "ws", "cat /workspace/fetched", "a2")
    other_caller = call(bob, "ws", "cat /workspace/fetched", "a1")
    for status in (other_attempt, other_caller):
        assert status["state"] == "Observed", explain(status, warm)
        assert status["result"]["isError"] is True, explain(status, warm)
        assert "hello from the node" not in status["result"]["content"]
        assert status["sandboxLease"]["workspace"]["id"] != workspace["id"]
    assert server.hits["/into-workspace"] == 1


def test_a_background_process_of_a_call_dies_with_it_and_gets_nothing_from_the_proxy(
    api: client.ApiClient,
    wns: Namespace,
    server: Recorder,
    warm: tuple[OperatorProcess, EgressProxyProcess],
) -> None:
    port = server.port
    script_tool(api, wns.name, "bg", egress=[f"{API}:{port}"])
    (alice,) = agents(api, wns.name, "bg", "alice")
    loop = (
        "i=0; while :; do i=$((i+1)); echo $i >> /workspace/beats; "
        f"wget -q -O /dev/null http://{API}:{port}/late; sleep 0.1; done"
    )
    # The loop leaves the tool's process group and session, as a daemon would, and the
    # tool waits until the loop has reached the server once through the proxy.
    started = run(
        alice,
        "bg",
        f"setsid sh -c '{loop}' >/dev/null 2>&1 &\n"
        "while [ ! -s /workspace/beats ]; do sleep 0.1; done; sleep 0.5; echo started",
        "b1",
    )
    assert started["state"] == "Observed", explain(started, warm)
    assert "started" in started["result"]["content"]
    hits_after_end = server.hits["/late"]
    assert hits_after_end >= 1, "the loop reached the server while its call ran"
    first = run(alice, "bg", "tail -n 1 /workspace/beats; ls /proc", "b1")
    second = run(alice, "bg", "tail -n 1 /workspace/beats", "b1")
    for status in (first, second):
        assert status["state"] == "Observed", explain(status, warm)
    beat = first["result"]["content"].splitlines()[0]
    assert second["result"]["content"].splitlines()[0] == beat, "the loop still ran"
    assert server.hits["/late"] == hits_after_end, "the proxy served the ended call"
    # The holder (1), its sleep, the runner, its sh, sed/base64 ended, ls: no loop is left.
    pids = [line for line in first["result"]["content"].splitlines()[1:] if line.isdigit()]
    assert len(pids) <= 6, first["result"]["content"]


def test_a_workspace_released_explicitly_or_by_idle_time_is_gone_with_its_storage(
    api: client.ApiClient,
    wns: Namespace,
    server: Recorder,
    warm: tuple[OperatorProcess, EgressProxyProcess],
) -> None:
    script_tool(api, wns.name, "rel", egress=[])
    (alice,) = agents(api, wns.name, "rel", "alice")
    wrote = run(alice, "rel", "echo kept > /workspace/kept", "r1")
    assert wrote["state"] == "Observed", explain(wrote, warm)
    (pod,) = workspace_pods(api, wns.name, alice, "r1")
    assert pod.spec.volumes[0].empty_dir.size_limit == "256Mi"

    # Idle: no call for IDLE_SECONDS, and the reaper deletes the pod and its volume.
    wait_for(
        lambda: (
            not workspace_pods(api, wns.name, alice, "r1")
            and not _pod_exists(api, wns.name, pod.metadata.name)
        ),
        timeout=IDLE_SECONDS + 120,
        what="the idle workspace released",
    )
    fresh = run(alice, "rel", "cat /workspace/kept", "r1")
    assert fresh["result"]["isError"] is True, explain(fresh, warm)
    assert fresh["sandboxLease"]["workspace"]["fresh"] is True


def _pod_exists(api: client.ApiClient, namespace: str, name: str) -> bool:
    try:
        client.CoreV1Api(api).read_namespaced_pod(name, namespace)
    except client.ApiException as exc:
        if exc.status == 404:
            return False
        raise
    return True


def test_a_hanging_call_holds_only_its_own_attempt(
    api: client.ApiClient,
    wns: Namespace,
    server: Recorder,
    warm: tuple[OperatorProcess, EgressProxyProcess],
) -> None:
    attempt_tool(api, wns.name, "hang", egress=[], timeout=300)
    alice, bob = agents(api, wns.name, "hang", "alice", "bob")
    hanging = alice.invoke("hang", {"command": "sleep 600"}, attemptId="h1")
    alice.wait(hanging, states={"Executing"})
    queued = alice.invoke("hang", {"command": "echo queued"}, attemptId="h1")
    # Other attempts and other callers go on while h1 is held.
    for agent, attempt in ((alice, "h2"), (bob, "h1")):
        status = call(agent, "hang", "echo free", attempt)
        assert status["state"] == "Observed", explain(status, warm)
    waiting = status_of(get(api, wns.name, "toolinvocations", queued))
    assert waiting["state"] == "Brokered", explain(waiting, warm)
    interrupt(api, wns.name, hanging)
    ended = status_of(alice.wait(hanging))
    assert ended["state"] == "Cancelled", explain(ended, warm)
    after = status_of(alice.wait(queued))
    assert after["state"] == "Observed", explain(after, warm)
    assert after["result"]["content"].strip() == "queued"


def interrupt(api: client.ApiClient, namespace: str, name: str) -> None:
    client.CustomObjectsApi(api).patch_namespaced_custom_object(
        "tooladapter.dev",
        "v1alpha1",
        namespace,
        "toolinvocations",
        name,
        {"spec": {"interrupt": True}},
    )


def test_calls_of_one_attempt_run_one_at_a_time_in_arrival_order(
    api: client.ApiClient,
    wns: Namespace,
    server: Recorder,
    warm: tuple[OperatorProcess, EgressProxyProcess],
) -> None:
    script_tool(api, wns.name, "seq", egress=[])
    (alice,) = agents(api, wns.name, "seq", "alice")
    first = run(alice, "seq", "true", "s1")  # the workspace exists before the burst
    assert first["state"] == "Observed", explain(first, warm)
    names: list[str] = []
    lock = threading.Lock()

    def one(i: int) -> None:
        script = f"echo start-{i} >> /workspace/log; sleep 0.3; echo end-{i} >> /workspace/log"
        made = start(alice, "seq", script, "s1")
        with lock:
            names.append(made)

    threads = [threading.Thread(target=one, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(names) == 4
    ended = [status_of(alice.wait(name, timeout=180)) for name in names]
    for status in ended:
        assert status["state"] == "Observed", explain(status, warm)
        assert not status["result"].get("isError"), explain(status, warm)
    log = run(alice, "seq", "cat /workspace/log", "s1")["result"]["content"].split()
    # Never interleaved: each start is followed by its own end.
    assert len(log) == 8, log
    for began, finished in zip(log[::2], log[1::2], strict=True):
        assert began.replace("start", "end") == finished, log


def release(gateway: str, agent: Agent, namespace: str, attempt: str, caller: str = "") -> Any:
    """DELETE the attempt's workspace through the gateway, with the agent's own token."""
    token = agent.api.configuration.api_key["authorization"]
    url = f"{gateway}/namespaces/{namespace}/attempts/{attempt}/workspace"
    if caller:
        url += f"?caller={urllib.parse.quote(caller)}"
    request = urllib.request.Request(
        url, method="DELETE", headers={"Authorization": f"Bearer {token}"}
    )
    try:
        with urllib.request.urlopen(request, timeout=30) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read() or b"{}")


def test_a_workspace_released_through_the_gateway_is_gone_and_only_its_owner_may_release_it(
    api: client.ApiClient,
    wns: Namespace,
    server: Recorder,
    warm: tuple[OperatorProcess, EgressProxyProcess],
) -> None:
    script_tool(api, wns.name, "rel2", egress=[])
    alice, bob = agents(api, wns.name, "rel2", "alice", "bob")
    wrote = run(alice, "rel2", "echo kept > /workspace/kept", "x1")
    assert wrote["state"] == "Observed", explain(wrote, warm)
    receipt = stored_receipt(warm[0].artifacts, wrote)
    assert receipt["sandbox"]["start"] in ("warm", "cold")
    assert receipt["sandbox"]["workspace"]["id"] == wrote["sandboxLease"]["workspace"]["id"]
    (pod,) = workspace_pods(api, wns.name, alice, "x1")
    gateway = warm[0].gateway_url
    # Another caller may not release it (naming its owner takes an admin's grant) ...
    status, _ = release(gateway, bob, wns.name, "x1", caller=alice.user)
    assert status == 403
    # ... and bob's own attempt x1 is another workspace, which does not exist.
    status, _ = release(gateway, bob, wns.name, "x1")
    assert status == 404
    assert workspace_pods(api, wns.name, alice, "x1")
    status, body = release(gateway, alice, wns.name, "x1")
    assert status == 200, body
    assert body["released"] == [pod.metadata.name] and body["caller"] == alice.user
    wait_for(
        lambda: not _pod_exists(api, wns.name, pod.metadata.name),
        timeout=120,
        what="the released workspace's pod gone",
    )
    fresh = run(alice, "rel2", "cat /workspace/kept", "x1")
    assert fresh["result"]["isError"] is True, explain(fresh, warm)
    assert fresh["sandboxLease"]["workspace"]["fresh"] is True
    assert release(gateway, alice, wns.name, "x1")[0] == 200


def test_an_agent_inventing_attempts_holds_at_most_its_namespaces_share_of_workspaces(
    api: client.ApiClient,
    wns: Namespace,
    server: Recorder,
    warm: tuple[OperatorProcess, EgressProxyProcess],
) -> None:
    script_tool(api, wns.name, "many", egress=[])
    (alice,) = agents(api, wns.name, "many", "alice")
    for i in range(WORKSPACES):
        status = run(alice, "many", "true", f"m{i}")
        assert status["state"] == "Observed", explain(status, warm)
    refused = run(alice, "many", "echo ran > /workspace/ran", f"m{WORKSPACES}")
    assert refused["state"] == "Failed", explain(refused, warm)
    assert "TOOLADAPTER_WORKSPACES_PER_NAMESPACE" in refused["message"]
    assert not workspace_pods(api, wns.name, alice, f"m{WORKSPACES}")
    # Calls of the attempts it holds go on.
    assert run(alice, "many", "true", "m0")["state"] == "Observed"


def test_a_call_whose_operator_was_killed_ends_once_and_its_processes_are_stopped(
    api: client.ApiClient,
    wns: Namespace,
    server: Recorder,
    warm: tuple[OperatorProcess, EgressProxyProcess],
) -> None:
    script_tool(api, wns.name, "rs", egress=[], timeout=300)
    (alice,) = agents(api, wns.name, "rs", "alice")
    assert run(alice, "rs", "true", "z1")["state"] == "Observed"
    name = start(
        alice, "rs", "echo begun > /workspace/begun; sleep 240; echo x > /workspace/x", "z1"
    )
    uid = alice.wait(name, states={"Executing"})["metadata"]["uid"]
    # Executing is written before the workspace is taken; the kill is meant for a tool that
    # runs, so wait until the workspace pod names this call (its exec follows at once).
    core = client.CoreV1Api(api)
    wait_for(
        lambda: (
            core.list_namespaced_pod(wns.name, label_selector=f"{LABEL_CALL}={uid}").items or None
        ),
        timeout=60,
        what="the workspace pod taken by the call",
    )
    operator = warm[0]
    operator.kill()  # no graceful end: the exec stream dies with the process
    operator.start()
    ended = status_of(alice.wait(name, timeout=180))
    # Contained (sandbox class): Failed, never run again; the message says what is unknown.
    assert ended["state"] == "Failed", explain(ended, warm)
    assert "workspace may have changed" in ended["message"], explain(ended, warm)
    after = run(alice, "rs", "ls /workspace; ls /proc", "z1")
    assert after["state"] == "Observed", explain(after, warm)
    lines = after["result"]["content"].splitlines()
    assert "x" not in lines
    pids = [line for line in lines if line.isdigit()]
    assert len(pids) <= 6, after["result"]["content"]


def test_a_call_superseded_while_it_waited_for_the_workspace_is_denied_at_fencing(
    api: client.ApiClient,
    wns: Namespace,
    server: Recorder,
    warm: tuple[OperatorProcess, EgressProxyProcess],
) -> None:
    script_tool(api, wns.name, "fence", egress=[], timeout=300)
    (alice,) = agents(api, wns.name, "fence", "alice")

    def fenced(script: str, token: int) -> str:
        encoded = base64.b64encode(script.encode()).decode()
        return alice.invoke("fence", {"script": encoded}, attemptId="f1", fencingToken=token)

    hanging = fenced("sleep 600", 1)
    alice.wait(hanging, states={"Executing"})
    stale = fenced("echo stale > /workspace/stale", 1)
    alice.wait(stale, states={"Brokered"})
    newer = fenced("ls /workspace", 2)
    alice.wait(newer, states={"Brokered"})
    interrupt(api, wns.name, hanging)
    assert status_of(alice.wait(hanging))["state"] == "Cancelled"
    denied = status_of(alice.wait(stale))
    assert denied["state"] == "Denied", explain(denied, warm)
    assert denied["deniedStage"] == "fencing", explain(denied, warm)
    after = status_of(alice.wait(newer))
    assert after["state"] == "Observed", explain(after, warm)
    assert "stale" not in after["result"].get("content", "")


def pool_pods(api: client.ApiClient, namespace: str, *, caller: str | None = None) -> list[Any]:
    selector = "tooladapter.dev/warm-state=pool"
    if caller is not None:
        selector += f",{LABEL_CALLER}={caller}"
    pods = client.CoreV1Api(api).list_namespaced_pod(namespace, label_selector=selector)
    return [
        p
        for p in pods.items
        if not p.metadata.deletion_timestamp
        and any(c.type == "Ready" and c.status == "True" for c in p.status.conditions or [])
    ]


#: What a call leaves behind in every place the sandbox user can write, and a process.
PLANT = (
    "echo w > /workspace/planted-w; mkdir -p /workspace/.d && echo x > /workspace/.d/planted-x; "
    "echo h > $HOME/planted-h; echo s > /dev/shm/planted-s; "
    "echo planted-t > /dev/termination-log; "
    "(setsid sleep 297 >/dev/null 2>&1 &); (sleep 298 >/dev/null 2>&1 &); echo planted"
)
#: What the next call in the pod finds of it.
LOOK = (
    "ls -A /workspace $HOME /dev/shm /dev/mqueue; cat /dev/termination-log; ps -o args; echo looked"
)


def test_a_pool_pod_is_handed_back_clean_to_its_caller_alone_past_the_gate(
    api: client.ApiClient,
    wns: Namespace,
    server: Recorder,
    warm: tuple[OperatorProcess, EgressProxyProcess],
) -> None:
    port = server.port
    descriptor(
        api,
        wns.name,
        "pooled",
        kind="container",
        side_effect_class="sandbox",
        inputSchema={"type": "object", "properties": {"script": {"type": "string"}}},
        timeoutSeconds=60,
        sandbox={
            "command": ["/bin/sh", "-c", SCRIPT_RUNNER],
            "resources": {"limits": {"cpu": "250m", "memory": "64Mi"}},
            "egress": {"allow": [f"{API}:{port}"]},
        },
    )
    alice, bob = agents(api, wns.name, "pooled", "alice", "bob")
    first = run(alice, "pooled", "true", "p1")  # a call of the profile: its pool starts
    assert first["state"] == "Observed", explain(first, warm)
    wait_for(lambda: pool_pods(api, wns.name), timeout=120, what="a ready pool pod")
    node = node_ip()
    # Through the proxy with the call's own grant: allowed. Around it: nothing answers.
    script = (
        f"wget -q -O - http://{API}:{port}/pooled; echo; "
        f"wget -Y off -q -T 3 -O - http://{node}:{port}/direct && echo direct-reached; "
        f"{PLANT}; echo done"
    )
    second = run(alice, "pooled", script, "p1")
    assert second["state"] == "Observed", explain(second, warm)
    assert second["sandboxLease"]["start"] == "warm"
    used = second["sandboxLease"]["sandboxName"]
    content = second["result"]["content"]
    assert "hello from the node" in content and "planted\n" in content and "done" in content
    assert "direct-reached" not in content and server.hits["/direct"] == 0
    # Handed back, shown clean, for alice alone.
    mine = caller_key(wns.name, alice.user, "pooled@1.0.0")
    wait_for(
        lambda: used in {p.metadata.name for p in pool_pods(api, wns.name, caller=mine)},
        timeout=60,
        what="the used pod handed back for alice",
    )
    third = run(alice, "pooled", LOOK, "p1")
    assert third["state"] == "Observed", explain(third, warm)
    assert third["sandboxLease"]["sandboxName"] == used
    seen = third["result"]["content"]
    assert "looked" in seen, seen
    for left in ("planted", "sleep 29", ".d"):
        assert left not in seen, seen
    # Bob never gets alice's pod: it makes way for a new one, or he runs cold meanwhile.
    wait_for(
        lambda: used in {p.metadata.name for p in pool_pods(api, wns.name, caller=mine)},
        timeout=60,
        what="the pod handed back for alice again",
    )
    theirs = run(bob, "pooled", LOOK, "p1")
    assert theirs["state"] == "Observed", explain(theirs, warm)
    assert theirs["sandboxLease"]["sandboxName"] != used


def test_a_call_with_cidr_egress_never_runs_warm(
    api: client.ApiClient,
    wns: Namespace,
    server: Recorder,
    warm: tuple[OperatorProcess, EgressProxyProcess],
) -> None:
    descriptor(
        api,
        wns.name,
        "cidr",
        kind="shell",
        side_effect_class="sandbox",
        inputSchema=SHELL_SCHEMA,
        timeoutSeconds=60,
        shell={"allow": ["true"]},
        sandbox={"egress": {"allow": ["192.0.2.99/32"]}},
    )
    (alice,) = agents(api, wns.name, "cidr", "alice")
    for _ in range(2):
        status = call(alice, "cidr", "true", "c1")
        assert status["state"] == "Observed", explain(status, warm)
        assert status["sandboxLease"]["start"] == "cold"
        assert status["sandboxLease"]["sandboxName"].startswith("ta-")
