"""The restricted pod every sandbox runs in, built once for all three kinds of sandbox pod.

A call's Job (`sandbox.job`), a pool pod and an attempt's workspace pod (`sandbox.warm`)
must be equally locked down: non-root with a fixed uid, a read-only root filesystem, no
privilege escalation, every capability dropped, seccomp RuntimeDefault, no
ServiceAccount token mounted (a brokered one arrives only as a file of the lease's Secret),
no service links, and the network gate before the tool. Building that here, once, keeps
the kinds from drifting apart; they differ only in what they are for (the tool's command,
how its arguments arrive, how long it may take to stop).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

WORKSPACE = "/workspace"
TOOLADAPTER_DIR = "/tooladapter"
SANDBOX_UID = 65532
CONTAINER_NAME = "tool"
GATE_CONTAINER_NAME = "network-gate"
#: Waits until the canary (a listener of the operator, outside the egress allow-list) is
#: unreachable, i.e. the lease's NetworkPolicy is enforced for this pod, then lets the tool
#: start. NetworkPolicy is applied asynchronously; without this a fast tool could act in the
#: window before its pod's rules exist. Host and port arrive as $1 and $2, never spliced in.
#:
#: The probe is curl's TCP connect (`GATE_PROBE`): it reports a refused or filtered SYN the
#: moment the kernel does (a few ms where the policy rejects), where busybox's `nc -w 1`
#: blocked the full second on every last probe. "Reachable" is a completed handshake
#: (curl's `time_connect` above zero), so only a connect that never completed within the
#: same 1 s bound as before counts as blocked: a slow canary is not taken for an enforced
#: policy any sooner than it was. Without curl in the gate's image, busybox nc as before.
GATE_PROBE = (
    "if command -v curl >/dev/null 2>&1; then "
    'reachable() { case "$1" in *:*) h="[$1]" ;; *) h="$1" ;; esac; '
    '[ "$(curl -q -s -o /dev/null --noproxy "*" --connect-timeout 1 --max-time 2 '
    '-w "%{time_connect}" "http://$h:$2/" </dev/null 2>/dev/null)" != "0.000000" ]; }; '
    "else "
    'reachable() { nc -w 1 "$1" "$2" </dev/null >/dev/null 2>&1; }; '
    "fi; "
)
GATE_SCRIPT = GATE_PROBE + (
    'i=0; while reachable "$1" "$2"; do '
    'i=$((i+1)); if [ "$i" -ge "$3" ]; then '
    'echo "egress policy not enforced for this pod; the tool did not run" >&2; exit 1; fi; '
    "sleep 0.1; done"
)
GATE_ATTEMPTS = 300
#: The gate in the tool's own container: the same probe, then the tool's argv (after the
#: gate's three arguments) exec'd in place of the shell, so the tool is PID 1 as it would
#: be alone. It saves an init container's start and the kubelet's notice of its exit
#: (its pod lifecycle relist, up to a second) on every cold call. Only for the image the
#: gate's own init container runs in (it has the shell and the probe), and only a tool
#: whose argv is known (an empty command is the image's entrypoint, which a shell cannot
#: exec by name). `curl -q`: no `.curlrc` read, whatever HOME holds.
GATE_EXEC = GATE_SCRIPT + '; shift 3; exec "$@"'
#: Where a warm pod's gate, run in the pod's own container before its holder, marks that
#: it passed: the container's startup probe (`gate_passed_probe`) reads it, so the pod is
#: Ready, and handed to a call, only after. Nothing of a call runs in a pod before Ready.
GATE_PASSED = f"{TOOLADAPTER_DIR}/gate-passed"
#: A warm pod's gate in its own container: the probe, the mark, then its holder command
#: (the arguments after the gate's three) exec'd in place of the shell.
GATE_THEN_HOLD = GATE_SCRIPT + f'; : > {GATE_PASSED} && shift 3 && exec "$@"'

#: The volume every sandbox's tool works in (an emptyDir bounded by the profile's size).
WORKSPACE_VOLUME = "workspace"
#: The volume under `TOOLADAPTER_DIR`: the call's arguments (and, warm, the holder shell).
TOOLADAPTER_VOLUME = "tooladapter"


def _as_sandbox_user() -> dict[str, Any]:
    """Who a sandbox runs as, pod and containers alike: the sandbox user, never root."""
    return {"runAsNonRoot": True, "runAsUser": SANDBOX_UID, "runAsGroup": SANDBOX_UID}


def container_security() -> dict[str, Any]:
    """The securityContext of every container of a sandbox pod (the tool's, the gate's)."""
    return {
        "allowPrivilegeEscalation": False,
        "readOnlyRootFilesystem": True,
        **_as_sandbox_user(),
        "capabilities": {"drop": ["ALL"]},
        "seccompProfile": {"type": "RuntimeDefault"},
    }


def pod_security() -> dict[str, Any]:
    """The pod-level securityContext of a sandbox pod."""
    return {
        **_as_sandbox_user(),
        "fsGroup": SANDBOX_UID,
        "seccompProfile": {"type": "RuntimeDefault"},
    }


#: The tool's HOME and TMPDIR: a volume of its own, outside the workspace. A Job's is new
#: with its pod; a warm pod's is emptied before every call (`warm.RUN_SCRIPT`). HOME is where
#: git, curl, wget, pip, npm and ssh look for user config (`.gitconfig`, `.curlrc`,
#: `.netrc`, `.ssh/config`): in the workspace, a file one call of an attempt wrote would be
#: the next call's configuration. Temporary files are one call's too: a call's temp files
#: (a tool's credential helper cache, say) never reach a later call.
HOME_DIR = "/home/sandbox"
#: The pod's shared memory, which its user can write too (tmpfs of the pod's lifetime).
SHARED_MEMORY = ("/dev/shm", "/dev/mqueue")  # noqa: S108 (not a temp file: cleared, scanned)
HOME_VOLUME = "home"
#: Config files the tools read in place of the user's: none from any writable place.
#: git: no global (`~/.gitconfig`, `$XDG_CONFIG_HOME/git/config`) and no system config;
#: pip, npm: no user config file; curl: `.curlrc` from the per-call HOME only. wget reads
#: `~/.wgetrc` from the per-call HOME too (`WGETRC` stays unset: GNU wget refuses one that
#: is not a regular file, so `/dev/null` would break it). A repository's own config is
#: judged before every call of an attempt (`sandbox.gitconfig`).
CONFIG_ENV: tuple[tuple[str, str], ...] = (
    ("GIT_CONFIG_GLOBAL", "/dev/null"),
    ("GIT_CONFIG_NOSYSTEM", "1"),
    ("CURL_HOME", HOME_DIR),
    ("PIP_CONFIG_FILE", "/dev/null"),
    ("NPM_CONFIG_USERCONFIG", "/dev/null"),
    ("NPM_CONFIG_GLOBALCONFIG", "/dev/null"),
)


def sandbox_env() -> list[dict[str, Any]]:
    """The tool's HOME and TMPDIR (`HOME_DIR`, never the workspace) and `CONFIG_ENV`."""
    return [
        {"name": "HOME", "value": HOME_DIR},
        {"name": "TMPDIR", "value": HOME_DIR},
        *({"name": name, "value": value} for name, value in CONFIG_ENV),
    ]


def workspace_volume(size_limit: str) -> dict[str, Any]:
    return {"name": WORKSPACE_VOLUME, "emptyDir": {"sizeLimit": size_limit}}


def home_volume(size_limit: str) -> dict[str, Any]:
    """`HOME_DIR`'s volume, bounded as the workspace is (the pod's ephemeral-storage limit,
    where there is one, bounds both together)."""
    return {"name": HOME_VOLUME, "emptyDir": {"sizeLimit": size_limit}}


def volume_mounts(*, tooladapter_read_only: bool) -> list[dict[str, Any]]:
    """The workspace, `HOME_DIR` and `TOOLADAPTER_DIR` (read-only where the operator
    writes it)."""
    return [
        {"name": WORKSPACE_VOLUME, "mountPath": WORKSPACE},
        {"name": HOME_VOLUME, "mountPath": HOME_DIR},
        {
            "name": TOOLADAPTER_VOLUME,
            "mountPath": TOOLADAPTER_DIR,
            **({"readOnly": True} if tooladapter_read_only else {}),
        },
    ]


def tool_container(
    *,
    image: str,
    image_pull_policy: str,
    command: Sequence[str],
    env: Sequence[dict[str, Any]],
    resources: dict[str, Any],
    mounts: Sequence[dict[str, Any]],
) -> dict[str, Any]:
    """The tool's container: `command` exec'd as is (never joined into a string)."""
    return {
        "name": CONTAINER_NAME,
        "image": image,
        "imagePullPolicy": image_pull_policy,
        "command": list(command),
        "workingDir": WORKSPACE,
        "env": list(env),
        "resources": resources,
        "securityContext": container_security(),
        "volumeMounts": list(mounts),
    }


def gate_container(
    network_gate: tuple[str, int], image: str, image_pull_policy: str
) -> dict[str, Any]:
    """The init container that holds a sandbox pod until its egress rules are enforced (it
    reaches the canary at `network_gate` only once the pod's NetworkPolicy applies)."""
    host, port = network_gate
    return {
        "name": GATE_CONTAINER_NAME,
        "image": image,
        "imagePullPolicy": image_pull_policy,
        "command": ["/bin/sh", "-c", GATE_SCRIPT, "gate", host, str(port), str(GATE_ATTEMPTS)],
        "resources": {
            "requests": {"cpu": "10m", "memory": "8Mi"},
            "limits": {"cpu": "100m", "memory": "16Mi"},
        },
        "securityContext": container_security(),
    }


def gated_holder(network_gate: tuple[str, int], holder: Sequence[str]) -> list[str]:
    """A warm pod's command behind the gate in its own container (`GATE_THEN_HOLD`)."""
    host, port = network_gate
    return ["/bin/sh", "-c", GATE_THEN_HOLD, "gate", host, str(port), str(GATE_ATTEMPTS), *holder]


def gate_passed_probe() -> dict[str, Any]:
    """The startup probe of a warm pod gated in its own container: started (so Ready) once
    the gate marked that it passed. It stops probing once it succeeds; a gate that never
    passes ends the container (`GATE_SCRIPT` exits) or, hung, the probe's bound does."""
    return {
        "exec": {"command": ["/bin/sh", "-c", f'[ -e "{GATE_PASSED}" ]']},
        "periodSeconds": 1,
        "timeoutSeconds": 1,
        "failureThreshold": GATE_ATTEMPTS,
    }


def gated_command(network_gate: tuple[str, int], argv: Sequence[str]) -> list[str]:
    """The tool's command behind the gate in its own container (`GATE_EXEC`): argv is
    passed as the shell's positional parameters and exec'd as "$@", never spliced in."""
    host, port = network_gate
    return ["/bin/sh", "-c", GATE_EXEC, "gate", host, str(port), str(GATE_ATTEMPTS), *argv]


def restricted_pod_spec(
    *,
    container: dict[str, Any],
    volumes: Sequence[dict[str, Any]],
    grace_seconds: int,
    network_gate: tuple[str, int] | None,
    gate_image: str,
    image_pull_policy: str,
    runtime_class: str | None,
    image_pull_secrets: Sequence[str],
) -> dict[str, Any]:
    """A sandbox pod's spec: never restarted, no ServiceAccount token, no service links,
    the restricted pod security; the network gate first when there is a canary."""
    spec: dict[str, Any] = {
        "restartPolicy": "Never",
        "automountServiceAccountToken": False,
        "enableServiceLinks": False,
        "securityContext": pod_security(),
        "terminationGracePeriodSeconds": grace_seconds,
        "containers": [container],
        "volumes": list(volumes),
    }
    if network_gate is not None:
        spec["initContainers"] = [gate_container(network_gate, gate_image, image_pull_policy)]
    if runtime_class:
        spec["runtimeClassName"] = runtime_class
    if image_pull_secrets:
        spec["imagePullSecrets"] = [{"name": name} for name in image_pull_secrets]
    return spec
