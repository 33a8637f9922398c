"""Issue 29: the pure parts of warm sandboxes and attempt workspaces."""

from __future__ import annotations

import asyncio
import json
import subprocess
from pathlib import Path

import pytest
from pydantic import ValidationError

from tooladapter.attempts import AttemptQueues
from tooladapter.model import Credential, SandboxSpec, ToolDescriptorSpec
from tooladapter.sandbox.job import ProxyPeer
from tooladapter.sandbox.podspec import WORKSPACE
from tooladapter.sandbox.warm import (
    _CA_SETUP,
    CALL_CA_BUNDLE,
    CALL_DIR,
    CLEARED,
    HOLDER_SCRIPT,
    IPC_MARK,
    LABEL_WARM,
    POOL_RUN_SCRIPT,
    REUSED_RUN_SCRIPT,
    RUN_SCRIPT,
    STARTED_MARK,
    STATE_POOL,
    STOP_SCRIPT,
    build_warm_pod,
    build_warm_policy,
    ca_bundle_input,
    earlier_call_left,
    exit_code_of,
    idle_requests,
    ipc_left,
    not_started,
    pod_ready,
    processes_left,
    profile_for,
    quantity_value,
    run_command,
    run_input,
    tool_exit,
    uses_attempt_workspace,
    warm_refusal,
    workspace_key,
)


def shell(**sandbox: object) -> ToolDescriptorSpec:
    return ToolDescriptorSpec.model_validate(
        {
            "toolId": "sh",
            "version": "1.0.0",
            "kind": "shell",
            "sideEffectClass": "sandbox",
            "sandbox": sandbox,
        }
    )


def profile(**sandbox: object) -> object:
    spec = SandboxSpec.model_validate(sandbox)
    return profile_for(
        spec, image="img", runtime_class=None, workspace_size="1Gi", image_pull_policy="Never"
    )


def test_workspace_keys_differ_by_caller_attempt_and_namespace() -> None:
    keys = {
        workspace_key("ns", "alice", "a1"),
        workspace_key("ns", "bob", "a1"),
        workspace_key("ns", "alice", "a2"),
        workspace_key("other", "alice", "a1"),
        # No way to make two parts run together into one key.
        workspace_key("ns", "alice,a", "1"),
    }
    assert len(keys) == 5
    assert all(len(k) <= 63 and k.isalnum() for k in keys)


def test_only_attempt_tools_with_an_attempt_id_share_a_workspace() -> None:
    assert uses_attempt_workspace(shell(workspace="attempt"), "a1")
    assert not uses_attempt_workspace(shell(workspace="attempt"), None)
    assert not uses_attempt_workspace(shell(workspace="call"), "a1")
    assert not uses_attempt_workspace(shell(), "a1")


def test_an_attempt_tool_may_not_name_cidrs() -> None:
    with pytest.raises(ValidationError, match="CIDR"):
        shell(workspace="attempt", egress={"allow": ["10.0.0.0/24"]})
    assert shell(workspace="attempt", egress={"allow": ["github.com"]})


def test_credentials_and_cidrs_keep_a_call_cold() -> None:
    assert warm_refusal(shell(), ["github.com"]) is None
    assert "CIDR" in (warm_refusal(shell(), ["192.0.2.0/24"]) or "")
    container = ToolDescriptorSpec.model_validate(
        {
            "toolId": "c",
            "version": "1.0.0",
            "kind": "container",
            "sideEffectClass": "sandbox",
            "sandbox": {"command": ["true"], "egress": {"allow": ["api.example.com"]}},
            "credentials": [
                {
                    "name": "k",
                    "source": {"secretKeyRef": {"name": "s", "key": "k"}},
                    "inject": {"file": "/tooladapter/credentials/k"},
                }
            ],
        }
    )
    assert "credential files" in (warm_refusal(container, []) or "")
    # A credential the egress proxy injects never enters the pod: a warm pod may serve it.
    injected = container.model_copy(
        update={
            "credentials": [
                Credential.model_validate(
                    {
                        "name": "k",
                        "source": {"secretKeyRef": {"name": "s", "key": "k"}},
                        "inject": {"hosts": ["api.example.com"]},
                    }
                )
            ]
        }
    )
    assert warm_refusal(injected, ["api.example.com"]) is None


def test_profiles_name_image_runtime_resources_and_size() -> None:
    a = profile(resources={"limits": {"memory": "64Mi"}})
    b = profile(resources={"limits": {"memory": "128Mi"}})
    assert a.key != b.key  # type: ignore[attr-defined]
    assert a.key == profile(resources={"limits": {"memory": "64Mi"}}).key  # type: ignore[attr-defined]
    limits = a.resource_dict()["limits"]  # type: ignore[attr-defined]
    assert limits == {"memory": "64Mi", "ephemeral-storage": "1Gi"}


def test_a_warm_pod_is_restricted_gated_and_bounded() -> None:
    pod = build_warm_pod(
        namespace="ns",
        profile=profile(resources={"limits": {"memory": "64Mi"}}),  # type: ignore[arg-type]
        network_gate=("192.0.2.2", 4000),
        gate_image="gate",
    )
    spec = pod["spec"]
    assert pod["metadata"]["labels"][LABEL_WARM] == "true"
    assert pod["metadata"]["labels"]["tooladapter.dev/warm-state"] == STATE_POOL
    assert spec["automountServiceAccountToken"] is False
    assert spec["restartPolicy"] == "Never"
    (container,) = spec["containers"]
    ctx = container["securityContext"]
    assert ctx["allowPrivilegeEscalation"] is False and ctx["readOnlyRootFilesystem"] is True
    assert ctx["capabilities"] == {"drop": ["ALL"]}
    assert container["command"][-1] == HOLDER_SCRIPT and "chmod 0111" in container["command"][2]
    (gate,) = spec["initContainers"]  # the tool's image is not the gate's: an init container
    assert gate["command"][-3:] == ["192.0.2.2", "4000", "300"]
    assert {"name": "workspace", "emptyDir": {"sizeLimit": "1Gi"}} in spec["volumes"]
    assert not any("secret" in v for v in spec["volumes"])


def warm_resources(resources: dict[str, dict[str, str]]) -> dict[str, dict[str, str]]:
    pod = build_warm_pod(
        namespace="ns",
        profile=profile(resources=resources),  # type: ignore[arg-type]
        network_gate=None,
        gate_image="gate",
    )
    (container,) = pod["spec"]["containers"]
    return dict(container["resources"])


def test_an_idle_warm_pod_requests_little_and_keeps_its_declared_limits() -> None:
    """Only limits declared (Kubernetes would copy them into the requests): three idle
    workspaces of 500m each no longer take a 2-core node's CPU."""
    got = warm_resources({"limits": {"cpu": "500m", "memory": "512Mi"}})
    assert got["limits"] == {"cpu": "500m", "memory": "512Mi", "ephemeral-storage": "1Gi"}
    # The workspace stays counted by a ResourceQuota: its storage request is as declared.
    assert got["requests"] == {"cpu": "10m", "memory": "32Mi", "ephemeral-storage": "1Gi"}


def test_a_declared_request_smaller_than_idle_stands_and_extended_resources_are_kept() -> None:
    got = warm_resources(
        {
            "requests": {"cpu": "5m", "memory": "1Gi", "nvidia.com/gpu": "1"},
            "limits": {"cpu": "2", "memory": "2Gi", "nvidia.com/gpu": "1"},
        }
    )
    assert got["requests"] == {
        "cpu": "5m",
        "memory": "32Mi",
        "nvidia.com/gpu": "1",
        "ephemeral-storage": "1Gi",
    }
    assert got["limits"]["cpu"] == "2" and got["limits"]["nvidia.com/gpu"] == "1"
    # Nothing declared: the idle requests, so a quota demanding requests admits the pod.
    assert idle_requests({}) == {"cpu": "10m", "memory": "32Mi"}
    assert idle_requests({"limits": {"memory": "16Mi"}}) == {"cpu": "10m", "memory": "16Mi"}


def test_quantities_compare_by_value() -> None:
    assert quantity_value("500m") == quantity_value("0.5")
    assert quantity_value("1Gi") == 1024**3 and quantity_value("1G") == 10**9
    assert quantity_value("1e3") == 1000 and quantity_value("2E") == 2 * 10**18
    assert quantity_value("12Q") is None and quantity_value("") is None


def test_warm_pods_reach_only_the_proxy_and_nothing_reaches_them() -> None:
    peer = ProxyPeer("192.0.2.2", 3128)
    policy = build_warm_policy(namespace="ns", proxy=peer)
    assert policy["spec"]["podSelector"] == {"matchLabels": {LABEL_WARM: "true"}}
    assert policy["spec"]["ingress"] == []
    assert policy["spec"]["egress"] == [peer.rule()]
    assert build_warm_policy(namespace="ns", proxy=None)["spec"]["egress"] == []


def test_the_argv_is_passed_as_exec_arguments_never_spliced() -> None:
    argv = ["echo", "$(id)", "; rm -rf /", "'"]
    command = run_command(argv)
    assert command[:3] == ["/bin/sh", "-c", RUN_SCRIPT]
    assert command[4:] == argv
    assert "$(id)" not in RUN_SCRIPT
    with pytest.raises(ValueError):
        run_command([])


def test_the_proxy_url_and_arguments_travel_on_stdin() -> None:
    data = run_input("http://u:t@1.2.3.4:3128", {"a": "line\nbreak"})
    first, second, rest = data.split(b"\n", 2)
    assert first == b"http://u:t@1.2.3.4:3128"
    assert json.loads(second) == {"a": "line\nbreak"}
    assert rest == b"0\n"  # no trust bundle: the call has no lease CA
    assert run_input(None, {}).startswith(b"\n")
    with pytest.raises(ValueError):
        run_input("http://x\n", {})


def test_every_process_is_killed_and_counted_at_a_calls_end() -> None:
    for script in (RUN_SCRIPT, STOP_SCRIPT):
        assert "kill -9 -1" in script
        assert "tooladapter-processes-left:" in script
    # The tool's own processes never see the proxy variable of the script after it.
    assert RUN_SCRIPT.index("unset proxy; exec") < RUN_SCRIPT.index("wait $tool")
    assert processes_left(b"noise\ntooladapter-processes-left:0\n") == 0
    assert processes_left(b"tooladapter-processes-left:3") == 3
    assert processes_left(b"cut off") is None
    assert not_started(b"tooladapter-not-started:2")
    assert not not_started(b"tooladapter-processes-left:0")


def test_exec_statuses() -> None:
    assert exit_code_of({"status": "Success"}) == 0
    failure = {
        "status": "Failure",
        "reason": "NonZeroExitCode",
        "details": {"causes": [{"reason": "ExitCode", "message": "7"}]},
    }
    assert exit_code_of(failure) == 7
    assert exit_code_of({"status": "Failure", "message": "container not found"}) is None


def test_only_a_running_ready_pod_is_handed_out() -> None:
    ready = {"status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}}
    gated = {"status": {"phase": "Pending", "conditions": [{"type": "Ready", "status": "False"}]}}
    assert pod_ready(ready) and not pod_ready(gated) and not pod_ready(None)


def test_calls_of_an_attempt_take_turns_in_arrival_order() -> None:
    async def scenario() -> list[str]:
        queues = AttemptQueues()
        order: list[str] = []
        assert await queues.join("k", "first") is False
        assert queues.busy("k") and not queues.busy("other")

        async def call(uid: str) -> None:
            waited = await queues.join("k", uid)
            assert waited
            order.append(uid)
            await asyncio.sleep(0)
            queues.leave(uid)

        tasks = []
        for uid in ("second", "third", "fourth"):
            tasks.append(asyncio.ensure_future(call(uid)))
            await asyncio.sleep(0)
        # Another attempt is never held up by this one.
        assert await queues.join("other", "x") is False
        queues.leave("x")
        queues.leave("first")
        await asyncio.gather(*tasks)
        assert not queues.busy("k")
        return order

    assert asyncio.run(scenario()) == ["second", "third", "fourth"]


def test_a_cancelled_waiter_gives_up_its_place() -> None:
    async def scenario() -> None:
        queues = AttemptQueues()
        await queues.join("k", "first")
        waiter = asyncio.ensure_future(queues.join("k", "gone"))
        await asyncio.sleep(0)
        waiter.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiter
        queues.leave("first")
        assert not queues.busy("k")
        assert await queues.join("k", "next") is False

    asyncio.run(scenario())


def test_a_calls_trust_bundle_is_written_per_call_and_named_for_every_tool(
    tmp_path: Path,
) -> None:
    """`_CA_SETUP` in a real shell, its stdin left open as an exec's is: the bundle is read
    by its length (never to an end that does not come), written to the call's directory,
    and named by the CA variables and a wgetrc."""
    bundle = "-----BEGIN CERTIFICATE-----\nsystem\n-----END CERTIFICATE-----\nlease\n"
    script = (
        _CA_SETUP.replace(CALL_DIR, str(tmp_path))
        + 'echo "$SSL_CERT_FILE $CURL_CA_BUNDLE $REQUESTS_CA_BUNDLE $GIT_SSL_CAINFO '
        + '$NODE_EXTRA_CA_CERTS $WGETRC"'
    )
    with subprocess.Popen(
        ["/bin/sh", "-c", script], stdin=subprocess.PIPE, stdout=subprocess.PIPE
    ) as shell:
        assert shell.stdin is not None and shell.stdout is not None
        shell.stdin.write(ca_bundle_input(bundle))
        shell.stdin.flush()  # and left open
        try:
            line = shell.stdout.readline().decode().split()
            assert shell.wait(10) == 0
        finally:
            shell.kill()
    assert line == [f"{tmp_path}/ca-bundle.pem"] * 5 + [f"{tmp_path}/wgetrc"]
    assert (tmp_path / "ca-bundle.pem").read_text() == bundle
    assert (tmp_path / "wgetrc").read_text() == f"ca_certificate = {tmp_path}/ca-bundle.pem\n"
    assert CALL_CA_BUNDLE.startswith(CALL_DIR + "/")


def test_a_pool_pods_call_starts_only_once_the_pod_is_as_empty_as_a_new_one() -> None:
    def dirs(script: str) -> str:
        return script.split("left=; for d in ", 1)[1].split(";", 1)[0]

    for script in (POOL_RUN_SCRIPT, REUSED_RUN_SCRIPT):
        before = script[: script.index(STARTED_MARK)]
        # Every process stopped, every writable place emptied (the workspace too).
        assert "kill -9 -1" in before
        for place in (*CLEARED, WORKSPACE):
            assert place in dirs(before)
        # Its end says whether the pod may be handed back (no IPC object left) and the
        # tool's exit code, and only its end exits 0 (a tool that kills it cannot).
        assert script.rstrip().endswith('echo "tooladapter-tool-exit:$rc" >&2; exit 0')
        assert script.count("exit 0") == 1
        assert IPC_MARK in script[script.index("wait $tool") :]
    # In a pod handed back: no IPC object and no termination message, before the tool.
    before = REUSED_RUN_SCRIPT[: REUSED_RUN_SCRIPT.index(STARTED_MARK)]
    for table in ("/proc/sysvipc/shm", "/proc/sysvipc/sem", "/proc/sysvipc/msg"):
        assert table in before
    assert "[ -s /dev/termination-log ]" in before
    # An attempt's call keeps its workspace.
    assert WORKSPACE not in dirs(RUN_SCRIPT)
    assert run_command(["true"], fresh=True)[2] == POOL_RUN_SCRIPT
    assert run_command(["true"], fresh=True, reused=True)[2] == REUSED_RUN_SCRIPT
    assert run_command(["true"], fresh=True, gate_mark=True)[2].endswith(POOL_RUN_SCRIPT)
    # What an earlier call left sends the call elsewhere; the tool's own marks do not.
    assert earlier_call_left(b"tooladapter-not-started:unclean\n")
    assert earlier_call_left(b"tooladapter-not-started:3\n")
    assert not earlier_call_left(b"tooladapter-not-started:gate\n")
    assert not earlier_call_left(b"tooladapter-not-started:setup\n")
    assert not ipc_left(b"tooladapter-ipc-left:0\n")
    assert ipc_left(b"tooladapter-ipc-left:1\n") and ipc_left(b"cut off")
    assert tool_exit(b"tooladapter-tool-exit:3\ntooladapter-tool-exit:0\n") == 0
    assert tool_exit(b"cut off") is None
