"""Attacks on warm pool pods handed back to their caller (be2cfab..): as agents, with an
agent's rights only, on the real cluster.

This module runs its own operator (warm pools of two) and egress proxy, serving only its
own namespaces. Its tool is a container tool that runs the shell script its arguments
carry (`SCRIPT_RUNNER`), with no attempt: every call takes a pool pod.
"""

from __future__ import annotations

import base64
import time
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client
from kubernetes.stream import stream

from tests.integration.objects import Agent, descriptor, pretty, status_of
from tests.integration.servers import Recorder, recording_server
from tooladapter.devtools import (
    SESSION,
    EgressProxyProcess,
    Namespace,
    OperatorProcess,
    node_ip,
    wait_for,
)
from tooladapter.sandbox.warm import LABEL_CALLER, caller_key

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(900)]

PREFIX = f"{SESSION}hb"
API = "api.example.test"
POOL = 2

#: A container tool that runs the script its arguments carry (base64, so JSON needs no
#: escapes).
SCRIPT_RUNNER = (
    'sed -n \'s|.*"script":"\\([A-Za-z0-9+/=]*\\)".*|\\1|p\' "$TOOLADAPTER_ARGUMENTS" '
    "| base64 -d | sh"
)


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
        tmp_path_factory.mktemp("hb-proxy"),
        {**scope, "TOOLADAPTER_EGRESS_HOSTS": f"{API}={node}"},
    )
    proxy.start()
    operator = OperatorProcess(
        tmp_path_factory.mktemp("hb-operator"),
        {
            **scope,
            "TOOLADAPTER_EGRESS_PROXY_PORT": str(proxy.port),
            "TOOLADAPTER_EGRESS_PROXY_ADDRESS": node,
            "TOOLADAPTER_WORKSPACE_SIZE": "256Mi",
            "TOOLADAPTER_WARM_POOL_SIZE": str(POOL),
        },
    )
    try:
        operator.start()
        yield operator, proxy
    finally:
        operator.stop()
        proxy.stop()


@pytest.fixture
def hns(
    api: client.ApiClient, warm: tuple[OperatorProcess, EgressProxyProcess]
) -> Iterator[Namespace]:
    namespace = Namespace(api, prefix=PREFIX)
    yield namespace
    namespace.delete()


def pooled_tool(
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
            "command": ["/bin/sh", "-c", SCRIPT_RUNNER],
            "resources": {"limits": {"cpu": "250m", "memory": "64Mi"}},
            "egress": {"allow": egress},
        },
    )


def agents(api: client.ApiClient, namespace: str, tool: str, *names: str) -> list[Agent]:
    made = [Agent.create(api, namespace, name) for name in names]
    for agent in made:
        agent.grant([tool], ["sandbox"])
    return made


def start(agent: Agent, tool: str, script: str) -> str:
    encoded = base64.b64encode(script.encode()).decode()
    return agent.invoke(tool, {"script": encoded})


def run(agent: Agent, tool: str, script: str) -> dict[str, Any]:
    """A script tool's call, to its end."""
    return status_of(agent.wait(start(agent, tool, script), timeout=180))


def explain(status: dict[str, Any], warm: tuple[OperatorProcess, EgressProxyProcess]) -> str:
    return f"{pretty(status)}\n--- operator log ---\n{warm[0].tail(80)}"


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


def handed_back(
    api: client.ApiClient, namespace: str, agent: Agent, pod: str, tool: str = "p"
) -> bool:
    """Whether `pod` is back in the pool for `agent`'s calls of `tool` (version 1.0.0)."""
    mine = caller_key(namespace, agent.user, f"{tool}@1.0.0")
    return pod in {p.metadata.name for p in pool_pods(api, namespace, caller=mine)}


def warm_up(api: client.ApiClient, namespace: str, agent: Agent, tool: str) -> None:
    """A first call of the profile starts its pool; wait for a ready pod."""
    first = run(agent, tool, "true")
    assert first["state"] == "Observed", pretty(first)
    wait_for(lambda: pool_pods(api, namespace), timeout=120, what="a ready pool pod")


def look_in_pod(api: client.ApiClient, namespace: str, pod: str, script: str) -> str:
    """What the test (an administrator, not an agent) sees in a pod: a read-only look."""
    return str(
        stream(
            client.CoreV1Api(api).connect_get_namespaced_pod_exec,
            pod,
            namespace,
            command=["/bin/sh", "-c", script],
            stderr=True,
            stdin=False,
            stdout=True,
            tty=False,
        )
    )


def first_pod(
    api: client.ApiClient, namespace: str, agent: Agent, tool: str, script: str
) -> tuple[dict[str, Any], str]:
    """A warm call of `agent` (a pool pod), and the pod it ran in."""
    for _ in range(3):
        status = run(agent, tool, script)
        assert status["state"] == "Observed", pretty(status)
        if status["sandboxLease"]["start"] == "warm":
            return status, status["sandboxLease"]["sandboxName"]
        wait_for(lambda: pool_pods(api, namespace), timeout=120, what="a ready pool pod")
    raise AssertionError(f"no warm call: {pretty(status)}")


def next_in(
    api: client.ApiClient, namespace: str, agent: Agent, tool: str, pod: str, script: str
) -> dict[str, Any]:
    """The caller's next call, once `pod` is back in the pool for it."""
    wait_for(
        lambda: handed_back(api, namespace, agent, pod, tool),
        timeout=60,
        what=f"{pod} handed back to {agent.user}",
    )
    status = run(agent, tool, script)
    assert status["state"] == "Observed", pretty(status)
    return status


# --------------------------------------------------------------------------------------
# 1. The holder's shell /tooladapter/sh is skipped by every clean-up, whatever it is.

#: The tool replaces the holder's shell (PID 1 keeps running from the deleted inode) with a
#: directory of its own: the clean-up skips the name, whatever it now is.
PLANT_SH = (
    "rm -f /tooladapter/sh && mkdir /tooladapter/sh && echo mallory-secret > /tooladapter/sh/left "
    "&& mkdir -p /tooladapter/sh/.d && echo deep > /tooladapter/sh/.d/x && echo planted"
)
LOOK_SH = "ls -la /tooladapter /tooladapter/sh; cat /tooladapter/sh/left; echo looked"


def test_what_a_call_puts_in_place_of_the_holder_shell_is_gone_before_its_callers_next_call(
    api: client.ApiClient,
    hns: Namespace,
    server: Recorder,
    warm: tuple[OperatorProcess, EgressProxyProcess],
) -> None:
    pooled_tool(api, hns.name, "p", egress=[])
    (mallory,) = agents(api, hns.name, "p", "mallory")
    warm_up(api, hns.name, mallory, "p")
    planted, used = first_pod(api, hns.name, mallory, "p", PLANT_SH)
    assert "planted" in planted["result"]["content"], explain(planted, warm)
    later = next_in(api, hns.name, mallory, "p", used, LOOK_SH)
    seen = later["result"]["content"]
    assert "looked" in seen, explain(later, warm)
    # The same pod (handed back to her), as empty as a new one.
    assert later["sandboxLease"]["sandboxName"] == used, explain(later, warm)
    assert "mallory-secret" not in seen, seen
    assert not any(line.endswith(" sh") for line in seen.splitlines()), seen


#: The same with a plain file of the tool's (not the shell any more).
PLANT_SH_FILE = "rm -f /tooladapter/sh && echo mallory-file > /tooladapter/sh && echo planted"
LOOK_SH_FILE = "ls -la /tooladapter; cat /tooladapter/sh; echo looked"


def test_a_file_put_in_place_of_the_holder_shell_does_not_reach_the_next_call(
    api: client.ApiClient,
    hns: Namespace,
    server: Recorder,
    warm: tuple[OperatorProcess, EgressProxyProcess],
) -> None:
    pooled_tool(api, hns.name, "p", egress=[])
    (mallory,) = agents(api, hns.name, "p", "mallory")
    warm_up(api, hns.name, mallory, "p")
    planted, used = first_pod(api, hns.name, mallory, "p", PLANT_SH_FILE)
    assert "planted" in planted["result"]["content"], explain(planted, warm)
    later = next_in(api, hns.name, mallory, "p", used, LOOK_SH_FILE)
    seen = later["result"]["content"]
    assert "looked" in seen, explain(later, warm)
    assert later["sandboxLease"]["sandboxName"] == used, explain(later, warm)
    assert "mallory-file" not in seen, seen


# --------------------------------------------------------------------------------------
# 2. The gate's mark is kept "only as an empty regular file": its metadata still carries.

PLANT_MARK = (
    "touch -d '2001-02-03 04:05:06' /tooladapter/gate-passed "
    "&& chmod 0741 /tooladapter/gate-passed "
    "&& touch -d '2002-03-04 05:06:07' /tooladapter/sh && echo planted"
)
LOOK_MARK = (
    "stat -c 'mark %a %Y' /tooladapter/gate-passed; stat -c 'shell %Y' /tooladapter/sh; echo looked"
)


def test_the_kept_gate_mark_and_shell_carry_nothing_a_call_set_into_the_next(
    api: client.ApiClient,
    hns: Namespace,
    server: Recorder,
    warm: tuple[OperatorProcess, EgressProxyProcess],
) -> None:
    pooled_tool(api, hns.name, "p", egress=[])
    (mallory,) = agents(api, hns.name, "p", "mallory")
    warm_up(api, hns.name, mallory, "p")
    planted, used = first_pod(api, hns.name, mallory, "p", PLANT_MARK)
    assert "planted" in planted["result"]["content"], explain(planted, warm)
    later = next_in(api, hns.name, mallory, "p", used, LOOK_MARK)
    seen = later["result"]["content"]
    assert "looked" in seen, explain(later, warm)
    assert later["sandboxLease"]["sandboxName"] == used, explain(later, warm)
    assert "mark 741" not in seen, seen
    assert str(981173106) not in seen and str(1015218367) not in seen, seen  # the dates, UTC


# --------------------------------------------------------------------------------------
# 3. The end report is the tool's to forge: a process outlives its call into the pool.


def survivor(port: int) -> str:
    """A loop that leaves the call's session, then the tool forges its run script's clean
    report on the script's stderr and kills the script before its own stop and report."""
    loop = (
        "i=0; while [ $i -lt 120 ]; do i=$((i+1)); "
        f"wget -q -O /dev/null http://{API}:{port}/hb-late; sleep 0.5; done"
    )
    return (
        f"setsid sh -c '{loop}' >/dev/null 2>&1 </dev/null &\n"
        "sleep 1\n"
        "script=$(awk '{print $4}' /proc/$PPID/stat)\n"
        "printf 'tooladapter-processes-left:0\\ntooladapter-ipc-left:0\\n' > /proc/$script/fd/2\n"
        "echo forged; kill -9 $script\n"
    )


def test_a_call_that_forges_its_clean_end_leaves_no_process_alive_in_a_pod_handed_back(
    api: client.ApiClient,
    hns: Namespace,
    server: Recorder,
    warm: tuple[OperatorProcess, EgressProxyProcess],
) -> None:
    port = server.port
    pooled_tool(api, hns.name, "p", egress=[f"{API}:{port}"])
    (mallory,) = agents(api, hns.name, "p", "mallory")
    warm_up(api, hns.name, mallory, "p")
    forged, used = first_pod(api, hns.name, mallory, "p", survivor(port))
    assert "forged" in forged["result"]["content"], explain(forged, warm)
    at_end = server.hits["/hb-late"]
    time.sleep(10)
    after = server.hits["/hb-late"]
    back = handed_back(api, hns.name, mallory, used)
    alive = ""
    try:
        alive = look_in_pod(api, hns.name, used, "ps -o pid,ppid,args")
    except Exception as exc:
        alive = f"(pod gone: {exc})"
    print(f"handed back: {back}; hits at end {at_end}, 10 s later {after}\n{alive}")
    # Nothing of the call lives on after its end: not in a pod that went back to the pool
    # (nor does it reach anything through the proxy).
    assert "hb-late" not in alive, f"handed back: {back}\n{alive}\n{explain(forged, warm)}"
    assert after == at_end, f"the proxy served the ended call: {at_end} -> {after}"


# --------------------------------------------------------------------------------------
# 4. Regression: odd names, modes and kinds of files in every cleared place (attack failed).

PLANT_ODD = (
    "for d in /home/sandbox /dev/shm /tooladapter /workspace; do "
    'mkdir -p "$d/.h/deep/er" && echo odd-a > "$d/.h/deep/er/x" && '
    'chmod 000 "$d/.h/deep/er" "$d/.h"; '
    'echo odd-b > "$d/..dots"; echo odd-c > "$d/-n"; echo odd-d > "$d/*"; '
    "printf 'odd-e' > \"$d/$(printf 'new\\nline')\"; mkfifo \"$d/fifo\"; "
    'ln -s /workspace "$d/link"; done; '
    "echo odd-q > /dev/mqueue/q 2>/dev/null || touch /dev/mqueue/q; echo planted"
)
LOOK_ODD = (
    "ls -laR /home/sandbox /dev/shm /dev/mqueue /workspace /tooladapter 2>&1; "
    "cat /proc/sysvipc/shm /proc/sysvipc/sem /proc/sysvipc/msg; echo looked"
)


def test_odd_files_in_every_cleared_place_are_gone_before_the_next_call(
    api: client.ApiClient,
    hns: Namespace,
    server: Recorder,
    warm: tuple[OperatorProcess, EgressProxyProcess],
) -> None:
    pooled_tool(api, hns.name, "p", egress=[])
    (mallory,) = agents(api, hns.name, "p", "mallory")
    warm_up(api, hns.name, mallory, "p")
    planted, used = first_pod(api, hns.name, mallory, "p", PLANT_ODD)
    assert "planted" in planted["result"]["content"], explain(planted, warm)
    later = next_in(api, hns.name, mallory, "p", used, LOOK_ODD)
    seen = later["result"]["content"]
    assert "looked" in seen, explain(later, warm)
    assert later["sandboxLease"]["sandboxName"] == used, explain(later, warm)
    listing = seen.split(" key ")[0]
    for left in (".h\n", "..dots\n", " -n\n", "fifo\n", "link -> ", "line\n", " q\n", " *\n"):
        assert left not in listing, seen
    assert "odd-" not in seen, seen


# --------------------------------------------------------------------------------------
# 5. The operator keeps only the last 4096 bytes of a run's stderr (`MAX_STDERR_BYTES`):
#    the tool floods its run script's stderr so the script's start mark falls off, and
#    leaves a "not started" mark of its own. The call's tool ran (a side effect through
#    the proxy), yet the operator takes it for never started.


def drown_start(port: int, path: str, mark: str) -> str:
    """A side effect, then 8 KiB on the run script's stderr and a forged not-started mark."""
    return (
        f"wget -q -O /dev/null http://{API}:{port}/{path} && echo effect-done\n"
        "script=$(awk '{print $4}' /proc/$PPID/stat)\n"
        "{ head -c 8192 /dev/zero | tr '\\0' x; printf '\\ntooladapter-not-started:%s\\n' "
        f"'{mark}'; }} > /proc/$script/fd/2 2>/dev/null\n"
        "echo drowned\n"
    )


def test_a_tool_that_drowns_its_start_mark_is_not_run_a_second_time(
    api: client.ApiClient,
    hns: Namespace,
    server: Recorder,
    warm: tuple[OperatorProcess, EgressProxyProcess],
) -> None:
    port = server.port
    pooled_tool(api, hns.name, "p", egress=[f"{API}:{port}"])
    (mallory,) = agents(api, hns.name, "p", "mallory")
    warm_up(api, hns.name, mallory, "p")
    wait_for(lambda: pool_pods(api, hns.name), timeout=120, what="a ready pool pod")
    status = run(mallory, "p", drown_start(port, "hb-twice", "unclean"))
    print(pretty(status), "hits:", server.hits["/hb-twice"])
    # The tool ran once (its effect went out): it must not be run again (a cold Job).
    assert server.hits["/hb-twice"] == 1, (
        f"the tool ran {server.hits['/hb-twice']} times\n{explain(status, warm)}"
    )
    assert status["sandboxLease"]["start"] == "warm", explain(status, warm)


def test_a_tool_that_drowns_its_start_mark_is_not_reported_as_never_started(
    api: client.ApiClient,
    hns: Namespace,
    server: Recorder,
    warm: tuple[OperatorProcess, EgressProxyProcess],
) -> None:
    port = server.port
    pooled_tool(api, hns.name, "p", egress=[f"{API}:{port}"])
    (mallory,) = agents(api, hns.name, "p", "mallory")
    warm_up(api, hns.name, mallory, "p")
    wait_for(lambda: pool_pods(api, hns.name), timeout=120, what="a ready pool pod")
    status = run(mallory, "p", drown_start(port, "hb-gate", "gate"))
    print(pretty(status), "hits:", server.hits["/hb-gate"])
    assert server.hits["/hb-gate"] == 1, explain(status, warm)
    # Its effect went out: the call may not say the tool never started.
    assert "never started" not in str(status.get("message", "")) + str(status.get("error", "")), (
        explain(status, warm)
    )
    assert status["state"] == "Observed", explain(status, warm)


# --------------------------------------------------------------------------------------
# 6. A cleared place that the tool leaves empty is not touched by the clean-up: its own
#    time and mode (set by the tool) would carry into the next call.

PLANT_DIR_META = (
    "for d in /home/sandbox /workspace /dev/shm /dev/mqueue /tooladapter; do "
    'chmod 0751 "$d" 2>/dev/null; touch -d "2001-02-03 04:05:06" "$d" 2>/dev/null; '
    "done; stat -c '%n %a %Y %U' /home/sandbox /workspace /dev/shm /dev/mqueue /tooladapter; "
    "echo planted"
)
LOOK_DIR_META = (
    "stat -c '%n %a %Y %U' /home/sandbox /workspace /dev/shm /dev/mqueue /tooladapter; echo looked"
)


def test_the_time_and_mode_of_an_emptied_place_do_not_carry_into_the_next_call(
    api: client.ApiClient,
    hns: Namespace,
    server: Recorder,
    warm: tuple[OperatorProcess, EgressProxyProcess],
) -> None:
    pooled_tool(api, hns.name, "p", egress=[])
    (mallory,) = agents(api, hns.name, "p", "mallory")
    warm_up(api, hns.name, mallory, "p")
    planted, used = first_pod(api, hns.name, mallory, "p", PLANT_DIR_META)
    print(planted["result"]["content"])
    assert "planted" in planted["result"]["content"], explain(planted, warm)
    later = next_in(api, hns.name, mallory, "p", used, LOOK_DIR_META)
    seen = later["result"]["content"]
    print(seen)
    assert "looked" in seen, explain(later, warm)
    assert later["sandboxLease"]["sandboxName"] == used, explain(later, warm)
    assert " 751 " not in seen, seen
    assert "981173106" not in seen, seen


# --------------------------------------------------------------------------------------
# 7. A pool pod handed back after a call of tool `w` becomes the caller's attempt workspace
#    (a call of `w` with an attemptId claims it), and so serves another tool (`v`) of the
#    attempt: the pod crosses tools.


def attempt_tool(api: client.ApiClient, namespace: str, tool_id: str) -> None:
    descriptor(
        api,
        namespace,
        tool_id,
        kind="container",
        side_effect_class="sandbox",
        inputSchema={"type": "object", "properties": {"script": {"type": "string"}}},
        timeoutSeconds=60,
        sandbox={
            "command": ["/bin/sh", "-c", SCRIPT_RUNNER],
            "resources": {"limits": {"cpu": "250m", "memory": "64Mi"}},
            "egress": {"allow": []},
            "workspace": "attempt",
            "workspaceSizeLimit": "256Mi",
        },
    )


def test_a_pod_handed_back_after_one_tool_never_runs_another_tools_call(
    api: client.ApiClient,
    hns: Namespace,
    server: Recorder,
    warm: tuple[OperatorProcess, EgressProxyProcess],
) -> None:
    attempt_tool(api, hns.name, "w")
    attempt_tool(api, hns.name, "v")
    (mallory,) = agents(api, hns.name, "w", "mallory")
    mallory.grant(["w", "v"], ["sandbox"])
    warm_up(api, hns.name, mallory, "w")
    _, used = first_pod(api, hns.name, mallory, "w", "echo pooled-w")
    wait_for(
        lambda: handed_back(api, hns.name, mallory, used, "w"),
        timeout=60,
        what=f"{used} handed back",
    )
    encoded = base64.b64encode(b"echo attempt-w").decode()
    in_attempt = status_of(
        mallory.wait(mallory.invoke("w", {"script": encoded}, attemptId="x"), timeout=180)
    )
    assert in_attempt["state"] == "Observed", explain(in_attempt, warm)
    encoded = base64.b64encode(b"echo attempt-v").decode()
    other = status_of(
        mallory.wait(mallory.invoke("v", {"script": encoded}, attemptId="x"), timeout=180)
    )
    print(used, in_attempt["sandboxLease"], other["sandboxLease"])
    assert other["state"] == "Observed", explain(other, warm)
    assert other["sandboxLease"]["sandboxName"] != used, (
        f"tool v ran in {used}, the pod tool w's pool call ran in\n{explain(other, warm)}"
    )


# --------------------------------------------------------------------------------------
# 8. Every place the sandbox user can write is one the clean-up empties (or the
#    termination log, truncated): nothing else could carry a call's data into the next.

FIND_WRITABLE = (
    "for m in $(awk '{print $2}' /proc/mounts | sort -u) /etc /tmp /var/tmp /run /var/run; do "
    '[ -d "$m" ] || continue; f="$m/.ta-probe-$$"; '
    'if ( : > "$f" ) 2>/dev/null; then rm -f "$f"; echo "writable-dir $m"; fi; done; '
    "for f in /etc/hosts /etc/hostname /etc/resolv.conf /dev/termination-log; do "
    '[ -w "$f" ] && echo "writable-file $f"; done; echo looked'
)


def test_the_sandbox_user_can_write_only_where_the_clean_up_empties(
    api: client.ApiClient,
    hns: Namespace,
    server: Recorder,
    warm: tuple[OperatorProcess, EgressProxyProcess],
) -> None:
    pooled_tool(api, hns.name, "p", egress=[])
    (mallory,) = agents(api, hns.name, "p", "mallory")
    warm_up(api, hns.name, mallory, "p")
    status, _ = first_pod(api, hns.name, mallory, "p", FIND_WRITABLE)
    seen = status["result"]["content"]
    print(seen)
    assert "looked" in seen, explain(status, warm)
    cleared = {"/home/sandbox", "/tooladapter", "/workspace", "/dev/shm", "/dev/mqueue"}
    for line in seen.splitlines():
        if line.startswith("writable-dir "):
            assert line.split(" ", 1)[1] in cleared, seen
        if line.startswith("writable-file "):
            assert line.split(" ", 1)[1] == "/dev/termination-log", seen
