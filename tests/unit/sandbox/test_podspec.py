"""One restricted pod spec (`sandbox.podspec`): a call's Job, a pool pod and an attempt's
workspace pod each carry exactly it, so no kind of sandbox pod is less locked down."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tooladapter.model import Credential, ResourceQuantities, Resources, SandboxSpec
from tooladapter.sandbox.job import build_job
from tooladapter.sandbox.podspec import (
    GATE_ATTEMPTS,
    GATE_CONTAINER_NAME,
    GATE_EXEC,
    GATE_PASSED,
    GATE_SCRIPT,
    GATE_THEN_HOLD,
    HOME_DIR,
    SANDBOX_UID,
    TOOLADAPTER_DIR,
    WORKSPACE,
    gate_passed_probe,
    gated_command,
    gated_holder,
)
from tooladapter.sandbox.warm import (
    GATE_CHECK,
    HOLDER_COMMAND,
    STATE_ATTEMPT,
    STATE_POOL,
    build_warm_pod,
    gate_not_passed,
    profile_for,
)

SANDBOX = SandboxSpec(
    resources=Resources(
        requests=ResourceQuantities(cpu="50m", memory="32Mi"),
        limits=ResourceQuantities(cpu="500m", memory="64Mi"),
    )
)
GATE = ("192.0.2.2", 4000)

#: The restricted spec, written out: what every sandbox pod must carry, word for word.
CONTAINER_SECURITY = {
    "allowPrivilegeEscalation": False,
    "readOnlyRootFilesystem": True,
    "runAsNonRoot": True,
    "runAsUser": SANDBOX_UID,
    "runAsGroup": SANDBOX_UID,
    "capabilities": {"drop": ["ALL"]},
    "seccompProfile": {"type": "RuntimeDefault"},
}
POD_SECURITY = {
    "runAsNonRoot": True,
    "runAsUser": SANDBOX_UID,
    "runAsGroup": SANDBOX_UID,
    "fsGroup": SANDBOX_UID,
    "seccompProfile": {"type": "RuntimeDefault"},
}


def job_pod(**overrides: Any) -> dict[str, Any]:
    args: dict[str, Any] = {
        "namespace": "ns",
        "uid": "u-1",
        "invocation_name": "c",
        "owner": {},
        "sandbox": SANDBOX,
        "image": "img",
        "argv": ["echo", "x"],
        "arguments": {},
        "timeout_seconds": 42,
        "lease_id": "u-1",
        "network_gate": GATE,
    }
    args.update(overrides)
    spec: dict[str, Any] = build_job(**args)["spec"]["template"]["spec"]
    return spec


CREDENTIAL_FILE = Credential.model_validate(
    {
        "name": "k",
        "source": {"serviceAccountToken": {"serviceAccountName": "deployer"}},
        "inject": {"file": "/tooladapter/credentials/kubernetes/token"},
    }
)


def warm_pod(*, state: str, gate_image: str = "img") -> dict[str, Any]:
    profile = profile_for(
        SANDBOX,
        image="img",
        runtime_class=None,
        workspace_size="1Gi",
        image_pull_policy="IfNotPresent",
    )
    spec: dict[str, Any] = build_warm_pod(
        namespace="ns", profile=profile, network_gate=GATE, gate_image=gate_image, state=state
    )["spec"]
    return spec


PODS = {
    "job": lambda: job_pod(),
    "job of its own image": lambda: job_pod(gate_image="gate-img"),
    "job with credentials": lambda: job_pod(credential_files=[CREDENTIAL_FILE]),
    "pool": lambda: warm_pod(state=STATE_POOL),
    "workspace": lambda: warm_pod(state=STATE_ATTEMPT),
}


@pytest.fixture(params=sorted(PODS))
def pod(request: pytest.FixtureRequest) -> dict[str, Any]:
    built: dict[str, Any] = PODS[request.param]()
    return built


def test_every_sandbox_pod_is_restricted_at_pod_level(pod: dict[str, Any]) -> None:
    assert pod["securityContext"] == POD_SECURITY
    assert pod["automountServiceAccountToken"] is False
    assert pod["enableServiceLinks"] is False
    assert pod["restartPolicy"] == "Never"
    assert "serviceAccountName" not in pod and "hostNetwork" not in pod


def test_every_container_of_a_sandbox_pod_is_restricted(pod: dict[str, Any]) -> None:
    containers = [*pod.get("initContainers", []), *pod["containers"]]
    names = [c["name"] for c in containers]
    # Gated either way: by an init container, or in the tool's own before its argv runs
    # (a warm pod's before its holder, its Ready held by the gate's mark).
    command = containers[-1]["command"][:3]
    assert (
        names == [GATE_CONTAINER_NAME, "tool"]
        or (names == ["tool"] and command == ["/bin/sh", "-c", GATE_EXEC])
        or (
            names == ["tool"]
            and command == ["/bin/sh", "-c", GATE_THEN_HOLD]
            and containers[0]["startupProbe"] == gate_passed_probe()
        )
    )
    for container in containers:
        assert container["securityContext"] == CONTAINER_SECURITY
        assert container["securityContext"]["readOnlyRootFilesystem"] is True


def test_every_sandbox_pod_writes_only_its_workspace_home_and_tooladapter_dir(
    pod: dict[str, Any],
) -> None:
    (tool,) = pod["containers"]
    assert tool["workingDir"] == WORKSPACE
    mounts = {m["name"]: m for m in tool["volumeMounts"]}
    assert mounts["workspace"] == {"name": "workspace", "mountPath": WORKSPACE}
    assert mounts["home"] == {"name": "home", "mountPath": HOME_DIR}
    assert mounts["tooladapter"]["mountPath"] == TOOLADAPTER_DIR
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert set(volumes) <= {"workspace", "home", "tooladapter", "credentials"}
    assert "emptyDir" in volumes["workspace"]
    assert "emptyDir" in volumes["home"]
    # Nothing of the node: no hostPath, no projected ServiceAccount token.
    for volume in pod["volumes"]:
        assert "hostPath" not in volume and "projected" not in volume


#: What every sandboxed tool runs with: HOME and TMPDIR outside the workspace, and no user
#: config of git, curl, wget, pip or npm read from anywhere the tool can write.
CONFIG_ENV = {
    "HOME": HOME_DIR,
    "TMPDIR": HOME_DIR,
    "GIT_CONFIG_GLOBAL": "/dev/null",
    "GIT_CONFIG_NOSYSTEM": "1",
    "CURL_HOME": HOME_DIR,
    "PIP_CONFIG_FILE": "/dev/null",
    "NPM_CONFIG_USERCONFIG": "/dev/null",
    "NPM_CONFIG_GLOBALCONFIG": "/dev/null",
}


def test_every_sandbox_pod_has_its_home_outside_the_workspace_and_no_user_config(
    pod: dict[str, Any],
) -> None:
    (tool,) = pod["containers"]
    env = {e["name"]: e.get("value") for e in tool["env"]}
    assert {name: env.get(name) for name in CONFIG_ENV} == CONFIG_ENV
    # GNU wget refuses a WGETRC that is not a regular file: ~/.wgetrc, per call, instead.
    assert "WGETRC" not in env
    assert not HOME_DIR.startswith(WORKSPACE + "/") and HOME_DIR != WORKSPACE
    # HOME is a volume of its own, not the workspace's.
    mounts = {m["mountPath"]: m["name"] for m in tool["volumeMounts"]}
    assert mounts[HOME_DIR] != mounts[WORKSPACE]


def test_only_a_job_mounts_brokered_credentials_read_only() -> None:
    pod = job_pod(credential_files=[CREDENTIAL_FILE])
    (tool,) = pod["containers"]
    credentials = next(m for m in tool["volumeMounts"] if m["name"] == "credentials")
    assert credentials["readOnly"] is True
    for state in (STATE_POOL, STATE_ATTEMPT):
        assert not any("secret" in v for v in warm_pod(state=state)["volumes"])


def test_the_kinds_differ_only_where_their_use_differs() -> None:
    """What a Job and a warm pod do not share, said once: how the arguments arrive (a
    read-only downward API file, or written per call into a writable emptyDir), the Job's
    termination message, how long a pod may take to stop, and how the gate runs in the
    tool's container when the tool has the gate's image: a Job's execs the tool's argv
    after it; a warm pod's marks that it passed and execs the holder, and the pod's startup
    probe holds its Ready (so its handing out) until that mark."""
    job, warm = job_pod(image="tool-img", gate_image="img"), warm_pod(state=STATE_POOL)
    shared = ("restartPolicy", "automountServiceAccountToken", "enableServiceLinks")
    assert {k: job[k] for k in shared} == {k: warm[k] for k in shared}
    assert job["securityContext"] == warm["securityContext"]
    (gate,) = job["initContainers"]
    assert "initContainers" not in warm
    inline = job_pod(image="img", gate_image="img")["containers"][0]["command"]
    assert inline[:2] == gate["command"][:2] and inline[2] == gate["command"][2] + (
        '; shift 3; exec "$@"'
    )
    assert inline[3:7] == gate["command"][3:7] and inline[7:] == ["echo", "x"]
    held = warm["containers"][0]["command"]
    assert held[2] == gate["command"][2] + f'; : > {GATE_PASSED} && shift 3 && exec "$@"'
    assert held[3:7] == gate["command"][3:7] and held[7:] == HOLDER_COMMAND
    # Of another image than the gate's, a warm pod keeps the gate's init container.
    other = warm_pod(state=STATE_POOL, gate_image="gate-img")
    assert other["initContainers"][0]["command"] == gate["command"]
    assert other["containers"][0]["command"] == HOLDER_COMMAND
    assert "startupProbe" not in other["containers"][0]
    assert (job["terminationGracePeriodSeconds"], warm["terminationGracePeriodSeconds"]) == (5, 1)
    job_tool, warm_tool = job["containers"][0], warm["containers"][0]
    assert job_tool["terminationMessagePolicy"] == "File"
    assert "terminationMessagePolicy" not in warm_tool
    job_dir = next(v for v in job["volumes"] if v["name"] == "tooladapter")
    warm_dir = next(v for v in warm["volumes"] if v["name"] == "tooladapter")
    assert "downwardAPI" in job_dir and warm_dir == {
        "name": "tooladapter",
        "emptyDir": {"sizeLimit": "16Mi"},
    }


# --------------------------------------------------------------------------- the gate's probe


@pytest.fixture
def canary() -> Iterator[int]:
    """A listener that accepts and closes, as the operator's canary does; its port."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(16)
    stop = threading.Event()

    def serve() -> None:
        server.settimeout(0.1)
        while not stop.is_set():
            try:
                conn, _ = server.accept()
            except OSError:
                continue
            conn.close()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    yield int(server.getsockname()[1])
    stop.set()
    thread.join()
    server.close()


def closed_port() -> int:
    probe = socket.socket()
    probe.bind(("127.0.0.1", 0))
    port = int(probe.getsockname()[1])
    probe.close()  # nothing listens there: a connect is refused
    return port


def run_gate(
    port: int, *, attempts: int = 3, path: str | None = None
) -> subprocess.CompletedProcess[str]:
    env = {"PATH": path or os.environ["PATH"]}
    return subprocess.run(
        ["/bin/sh", "-c", GATE_SCRIPT, "gate", "127.0.0.1", str(port), str(attempts)],
        capture_output=True,
        text=True,
        env=env,
        timeout=30,
        check=False,
    )


def busybox_only(tmp_path: Path) -> str:
    """A PATH with busybox's nc and sleep and no curl (an image without curl)."""
    busybox = shutil.which("busybox")
    if busybox is None:
        pytest.fail("busybox is needed to run the gate's nc fallback")
    for applet in ("nc", "sleep"):
        (tmp_path / applet).symlink_to(busybox)
    return str(tmp_path)


def test_the_gate_holds_while_the_canary_answers_and_opens_once_it_cannot_be_reached(
    canary: int,
) -> None:
    assert shutil.which("curl"), "curl (as in the sandbox image) is needed to run the gate"
    held = run_gate(canary)
    assert held.returncode == 1
    assert "egress policy not enforced" in held.stderr
    opened = run_gate(closed_port())
    assert opened.returncode == 0, opened.stderr


def test_without_curl_the_gate_probes_with_nc_the_same_way(canary: int, tmp_path: Path) -> None:
    path = busybox_only(tmp_path)
    held = run_gate(canary, path=path)
    assert held.returncode == 1 and "egress policy not enforced" in held.stderr
    assert run_gate(closed_port(), path=path).returncode == 0


def test_the_gate_takes_only_a_completed_handshake_for_reachable() -> None:
    # curl's connect time is the proof: zero (never connected) is the only way out.
    assert '-w "%{time_connect}"' in GATE_SCRIPT and '!= "0.000000"' in GATE_SCRIPT
    assert "--connect-timeout 1 " in GATE_SCRIPT  # no sooner than nc -w 1 gave up
    assert '--noproxy "*"' in GATE_SCRIPT


def run_gated(port: int, argv: list[str], *, attempts: int = 3) -> subprocess.CompletedProcess[str]:
    """The tool's container as a Job of the gate's image runs it (`podspec.gated_command`)."""
    command = gated_command(("127.0.0.1", port), argv)
    command[command.index(str(GATE_ATTEMPTS))] = str(attempts)
    return subprocess.run(
        command,
        capture_output=True,
        text=True,
        env={"PATH": os.environ["PATH"]},
        timeout=30,
        check=False,
    )


def test_the_gate_in_the_tools_container_execs_its_argv_only_once_the_canary_is_cut_off(
    canary: int, tmp_path: Path
) -> None:
    assert shutil.which("curl"), "curl (as in the sandbox image) is needed to run the gate"
    marker = tmp_path / "ran"
    # The argv arrives whole, as positional parameters: quotes, `;` and `$` stay data.
    argv = ["/bin/sh", "-c", 'printf "%s|" "$@" > "$0"; echo "$$"', str(marker), "a b", "$HOME;x"]
    held = run_gated(canary, argv)
    assert held.returncode == 1 and "egress policy not enforced" in held.stderr
    assert not marker.exists(), "the tool ran while the canary still answered"
    opened = run_gated(closed_port(), argv)
    assert opened.returncode == 0, opened.stderr
    assert marker.read_text() == "a b|$HOME;x|"


def test_the_gate_in_the_tools_container_hands_the_tool_its_exit_code_and_pid() -> None:
    # exec: the tool replaces the gate's shell (the same process, PID 1 in the container),
    # and its exit code is the container's.
    command = gated_command(("127.0.0.1", closed_port()), ["/bin/sh", "-c", "echo $$; exit 7"])
    with subprocess.Popen(
        command, stdout=subprocess.PIPE, text=True, env={"PATH": os.environ["PATH"]}
    ) as gate:
        out, _ = gate.communicate(timeout=30)
    assert gate.returncode == 7
    assert out.split() == [str(gate.pid)]
    unchanged = gated_command(("192.0.2.2", 4000), ["echo", "a; rm -rf /"])
    assert unchanged[-2:] == ["echo", "a; rm -rf /"] and "rm" not in unchanged[2]


def run_gated_holder(
    port: int, mark: Path, *, attempts: int = 3
) -> subprocess.CompletedProcess[str]:
    """A warm pod's container as it starts (`podspec.gated_holder`), its mark at `mark`
    and its holder a shell that says it runs."""
    command = gated_holder(("127.0.0.1", port), ["/bin/sh", "-c", 'echo "holding $$"'])
    command[2] = command[2].replace(GATE_PASSED, str(mark))
    command[command.index(str(GATE_ATTEMPTS))] = str(attempts)
    return subprocess.run(
        command, capture_output=True, text=True, env={"PATH": os.environ["PATH"]}, timeout=30
    )


def test_a_warm_pods_gate_marks_and_holds_only_once_the_canary_is_cut_off(
    canary: int, tmp_path: Path
) -> None:
    assert shutil.which("curl"), "curl (as in the sandbox image) is needed to run the gate"
    mark = tmp_path / "gate-passed"
    held = run_gated_holder(canary, mark)
    assert held.returncode == 1 and "egress policy not enforced" in held.stderr
    assert not mark.exists() and "holding" not in held.stdout  # never Ready, never held
    opened = run_gated_holder(closed_port(), mark)
    assert opened.returncode == 0, opened.stderr
    assert mark.exists() and opened.stdout.startswith("holding ")
    # The startup probe reads that mark, and only it.
    probe = gate_passed_probe()
    assert probe["exec"]["command"] == ["/bin/sh", "-c", f'[ -e "{GATE_PASSED}" ]']
    assert probe["periodSeconds"] == 1


def test_a_warm_pods_gate_that_cannot_mark_never_starts_its_holder(tmp_path: Path) -> None:
    # The mark's folder missing (the volume not writable): no mark, so no holder either.
    failed = run_gated_holder(closed_port(), tmp_path / "missing" / "gate-passed")
    assert failed.returncode != 0 and "holding" not in failed.stdout


def test_a_call_in_an_inline_gated_pod_starts_only_past_the_gates_mark(tmp_path: Path) -> None:
    """`GATE_CHECK`, run as a call's first step (only the check: the rest of the run
    script kills every process of its user)."""
    mark = tmp_path / "gate-passed"
    check = GATE_CHECK.replace(GATE_PASSED, str(mark)) + "echo started"
    refused = subprocess.run(["/bin/sh", "-c", check], capture_output=True, text=True)
    assert refused.returncode == 125 and "started" not in refused.stdout
    assert gate_not_passed(refused.stderr.encode())
    mark.write_text("")
    passed = subprocess.run(["/bin/sh", "-c", check], capture_output=True, text=True)
    assert passed.returncode == 0 and passed.stdout == "started\n"
