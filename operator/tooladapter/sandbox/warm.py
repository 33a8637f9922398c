"""Warm sandboxes: pods that are ready before a call, and how one call runs in them.

Two uses of one pod shape (`build_warm_pod`):

- a *pool* pod, made ahead of demand for a namespace and a sandbox profile (image,
  RuntimeClass, resources, workspace size), handed to one call at a time: a call that ended
  cleanly hands it back for its caller's next call alone, which starts only once the pod
  is as empty as a new one (`POOL_RUN_SCRIPT`); any other end deletes it;
- an *attempt's workspace* pod: a pool pod claimed for an attempt (or one made for it),
  whose `/workspace` volume the calls of the attempt share, one call at a time, until it
  is released (idle, or explicitly). Its id is its pod name.

What keeps a warm pod as safe as a cold Job:

- It is selected by the namespace's warm NetworkPolicy (`build_warm_policy`: no ingress,
  egress to the egress proxy only) from creation, and its init container is the same
  network gate as a Job's: the pod is Ready only once that policy is enforced for it, and
  only a Ready pod is handed out, so no call waits for the gate. Per-call egress is the
  proxy's grant, made for the call and deleted at its end; calls with CIDR entries (a
  NetworkPolicy of their own) or brokered credentials (mounted files) never run warm.
- Restricted pod security, the descriptor's limits and RuntimeClass, as a Job. Its
  requests of CPU and memory are sized for idle (`IDLE_REQUESTS`), so idle pools and
  workspaces hold little of a node; a call runs up to the declared limits.
- The call runs through `pods/exec` as `RUN_SCRIPT`: its argv is passed as exec
  arguments (never joined into a string); the proxy URL (a secret: never in the exec
  request, which the API server may log) and the arguments arrive on stdin. When the tool
  ends, the script kills every process of the sandbox user (`kill -9 -1` spares only the
  pod's holder, PID 1, and the script itself), checks none is left and says so on
  stderr (`STOPPED_MARK`), so a background process of one call never lives into the next.
- PID 1 is a shell that reaps orphans (`HOLDER_SCRIPT`), so killed processes do not
  linger as zombies in a long-lived workspace pod; it is not dumpable (`HOLDER_COMMAND`),
  so no tool can live on inside it.

All pure: plain data in, plain dicts and bytes out; `kube.warm` sends them.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from typing import Any

from tooladapter.egress.core.lease_ca import CA_BUNDLE_VARIABLES
from tooladapter.enums import ToolKind, WorkspaceMode
from tooladapter.model import SandboxSpec, ToolDescriptorSpec
from tooladapter.naming import LABEL_MANAGED_BY, MANAGED_BY
from tooladapter.sandbox.gitconfig import EMIT_SCRIPT, SCAN_SCRIPT
from tooladapter.sandbox.job import ProxyPeer, split_egress
from tooladapter.sandbox.podspec import (
    CONFIG_ENV,
    GATE_PASSED,
    HOME_DIR,
    SHARED_MEMORY,
    TOOLADAPTER_DIR,
    TOOLADAPTER_VOLUME,
    WORKSPACE,
    gate_passed_probe,
    gated_holder,
    home_volume,
    restricted_pod_spec,
    sandbox_env,
    tool_container,
    volume_mounts,
    workspace_volume,
)

#: Every warm pod; the namespace's warm NetworkPolicy selects it.
LABEL_WARM = "tooladapter.dev/warm"
#: The profile (`Profile.key`) a pool pod serves.
LABEL_PROFILE = "tooladapter.dev/warm-profile"
#: `pool` (ready to hand out), `call` (handed to one call) or `attempt` (a workspace).
LABEL_STATE = "tooladapter.dev/warm-state"
#: The uid of the call a pod was handed to (the last one, for a workspace).
LABEL_CALL = "tooladapter.dev/warm-call"
#: The workspace key (`workspace_key`) of an attempt's pod.
LABEL_WORKSPACE = "tooladapter.dev/workspace"
#: The caller and tool (`caller_key`) whose call a pool pod served: handed back, it serves
#: only that caller's calls of that tool version (nothing crosses callers, or tools).
LABEL_CALLER = "tooladapter.dev/warm-caller"
ANNOTATION_CALLER = "tooladapter.dev/caller"
#: How many calls a pool pod has served.
ANNOTATION_CALLS = "tooladapter.dev/warm-calls"
ANNOTATION_ATTEMPT = "tooladapter.dev/attempt-id"
ANNOTATION_CLAIMED_AT = "tooladapter.dev/claimed-at"
ANNOTATION_LAST_USED = "tooladapter.dev/last-used-at"
ANNOTATION_SIZE = "tooladapter.dev/workspace-size"
#: The profile a pool pod was made for, as JSON (`Profile.annotation`): a restarted operator
#: adopts the pool from its pods (`profile_from_annotation`) instead of leaking or
#: draining them.
ANNOTATION_PROFILE = "tooladapter.dev/warm-profile-spec"

STATE_POOL = "pool"
STATE_CALL = "call"
STATE_ATTEMPT = "attempt"

WARM_POLICY_NAME = "ta-warm-sandboxes"
#: Where a call's arguments land in a warm pod (a volume of its own, rewritten per call).
CALL_DIR = f"{TOOLADAPTER_DIR}/call"
ARGUMENTS_FILE = f"{CALL_DIR}/arguments.json"
#: A call's trust bundle (system CAs and its lease CA) and the wgetrc naming it, written
#: per call (`_CA_SETUP`) when its lease has a CA; gone with the call directory.
CALL_CA_BUNDLE = f"{CALL_DIR}/ca-bundle.pem"
CALL_WGETRC = f"{CALL_DIR}/wgetrc"
#: The last line the run script writes on stderr: how many processes were left.
STOPPED_MARK = "tooladapter-processes-left:"
#: What the run script writes on stderr when the tool did not start.
NOT_STARTED_MARK = "tooladapter-not-started:"
#: What the run script writes on stderr just before it starts the tool. The tool runs as
#: the same user and can write to the script's stderr (/proc/<pid>/fd/2), so nothing on it
#: after this mark is the script's word: a not-started mark after it is the tool's.
STARTED_MARK = "tooladapter-tool-started"

#: PID 1 of a warm pod: holds the pod open and reaps orphans (`wait` collects any child,
#: including the killed processes of a call that were re-parented to it).
HOLDER_SCRIPT = "trap 'exit 0' TERM; while :; do sleep 3600 & wait; done"
#: PID 1 runs the holder from a copy of the shell that its own user may execute but not
#: read: the kernel then makes the process non-dumpable, so the tool's processes (the same
#: user) can neither read nor write PID 1's memory (/proc/1/mem, ptrace) to live on in it
#: into the attempt's later calls (`kill -9 -1` spares PID 1). The copy is named `sh` so a
#: multi-call binary (busybox) still knows what it is. gVisor cannot execute a file it may
#: not read: there (tried first, `: `), PID 1 is the plain shell (docs: known limits).
HOLDER_SHELL = f"{TOOLADAPTER_DIR}/sh"
HOLDER_COMMAND = [
    "/bin/sh",
    "-c",
    f"if cp /bin/sh {HOLDER_SHELL} && chmod 0111 {HOLDER_SHELL} && {HOLDER_SHELL} -c :; "
    f'then exec {HOLDER_SHELL} -c "$0"; fi; exec /bin/sh -c "$0"',
    HOLDER_SCRIPT,
]

#: Counts live processes other than PID 1, this script and the holder's children. Run
#: right after `kill -9 -1`: that signal reached every process of the sandbox user at once
#: (the kernel holds off forks while it delivers it), so whatever lives afterwards was
#: forked since by PID 1 (its `sleep`, or the shell about to become it) or by this script;
#: a killed process still dying is a zombie (skipped) or is counted and killed again.
#: Builtins only: a command substitution would fork a counted process.
_COUNT = (
    "count() { n=0; for d in /proc/[0-9]*; do p=${d#/proc/}; "
    '[ "$p" = 1 ] && continue; [ "$p" = "$$" ] && continue; '
    'l=""; read -r l < "$d/stat" 2>/dev/null || continue; '
    "r=${l##*\\) }; s=${r%% *}; r=${r#* }; pp=${r%% *}; "
    '[ "$s" = Z ] && continue; [ "$s" = X ] && continue; '
    '[ "$pp" = 1 ] && continue; n=$((n+1)); done; }; '
)
#: Kill every process of the sandbox user but PID 1 and this script, until none is left
#: (at most `STOP_ROUNDS` rounds); `$n` is then how many were left.
STOP_ROUNDS = 50
_STOP = (
    "i=0; while :; do kill -9 -1 2>/dev/null; count; "
    f'[ "$n" = 0 ] && break; i=$((i+1)); [ "$i" -ge {STOP_ROUNDS} ] && break; '
    "sleep 0.05; done; "
)
_REPORT = f'echo "{STOPPED_MARK}$n" >&2; '
#: Every place but the workspace that the sandbox user can write in a warm pod: emptied
#: after the kill of each call's start and end, so only `/workspace` carries from one
#: call to the next (HOME, TMPDIR, the call's arguments, shared memory: a `.git` symlink or
#: `gitdir:` file in the workspace that points there finds nothing). The holder's shell
#: (PID 1 runs from it) stays, and so does the network gate's mark (`podspec.GATE_PASSED`),
#: which every call of a pod gated in its own container checks before it starts.
CLEARED = (HOME_DIR, TOOLADAPTER_DIR, *SHARED_MEMORY)


def clear_script(dirs: Sequence[str]) -> str:
    """Empties `dirs` (the holder's shell kept); `$left` is then what could not be removed.
    Modes first: a directory the tool made unreadable is still its own to open up (never
    through a symlink, which could point into the workspace)."""
    return (
        f'left=; for d in {" ".join(dirs)}; do [ -d "$d" ] || continue; '
        'for e in "$d"/* "$d"/.[!.]* "$d"/..?*; do '
        # The gate's mark stays only as what the gate made, an empty regular file and no
        # link, and made anew (no mode or time a call set carries to the next).
        f'[ "$e" = {GATE_PASSED} ] && [ -f "$e" ] && ! [ -L "$e" ] && ! [ -s "$e" ] && '
        f'rm -f "$e" && : > "$e" && continue; '
        '[ -e "$e" ] || [ -L "$e" ] || continue; '
        '[ -L "$e" ] || chmod -R u+rwx "$e" 2>/dev/null; rm -rf "$e" 2>/dev/null; '
        '{ [ -e "$e" ] || [ -L "$e" ]; } && left="$left $e"; done; done; '
    )


CLEAR_SCRIPT = clear_script(CLEARED)
#: The per-call environment: HOME and TMPDIR outside the workspace, no user config read
#: from anywhere the tool writes (`podspec.CONFIG_ENV`; the pod's env says the same, set
#: again here so the run does not depend on how an older operator made the pod).
_CALL_ENV = " ".join(
    [f"HOME={HOME_DIR}", f"TMPDIR={HOME_DIR}", *(f"{k}={v}" for k, v in CONFIG_ENV)]
)
#: stdin's third line: the byte length of the call's trust bundle (0: none), then the
#: bundle itself (`head -c`: the exec's stdin never ends, so nothing may read to its end).
_CA_SETUP = (
    "IFS= read -r calen; "
    'if [ "${calen:-0}" -gt 0 ] 2>/dev/null; then '
    f'head -c "$calen" > {CALL_CA_BUNDLE} && '
    f"printf 'ca_certificate = %s\\n' {CALL_CA_BUNDLE} > {CALL_WGETRC} || "
    f'{{ echo "{NOT_STARTED_MARK}setup" >&2; exit 125; }}; '
    + "".join(f"export {name}={CALL_CA_BUNDLE}; " for name in CA_BUNDLE_VARIABLES)
    + f"export WGETRC={CALL_WGETRC}; fi; unset calen; "
)
#: What the run script writes on stderr (after `NOT_STARTED_MARK`) when a pool pod held
#: what an earlier call left and could not be emptied: the call runs elsewhere.
UNCLEAN = "unclean"
#: The kubelet's termination-message file: every user may write it (mode 0666) and it
#: outlives the processes that did.
TERMINATION_LOG = "/dev/termination-log"
#: System V IPC objects (the pod's IPC namespace) outlive their processes: a handed-back
#: pool pod's call starts only when there is none. Each file is a header line, then a line
#: per object; a file that cannot be read (gVisor has none) fails the check (closed), so
#: such a pod is never handed back.
_NO_SYSV_IPC = (
    "ipc=0; for f in /proc/sysvipc/shm /proc/sysvipc/sem /proc/sysvipc/msg; do "
    '[ -r "$f" ] || { ipc=1; break; }; c=0; '
    'while IFS= read -r l; do c=$((c+1)); done < "$f"; [ "$c" -gt 1 ] && ipc=1; done; '
)


#: What a pool pod's run script reports on stderr at its end: 0 when no System V IPC object
#: is left and the tables could be read (the pod may be handed back).
IPC_MARK = "tooladapter-ipc-left:"
#: A pool pod's run script reports the tool's exit code on stderr, last, and itself exits
#: 0: only a script that reached its end exits 0, so a tool that kills it (the same user)
#: and writes a clean report in its place cannot make its pod be handed back.
EXIT_MARK = "tooladapter-tool-exit:"


def _run_script(*, fresh: bool, reused: bool = False) -> str:
    """One call in a warm pod; `fresh`: a pool pod's, whose call gets a pod as a new one
    (its workspace emptied too); `reused`: in a pod an earlier call handed back, so nothing
    of that call's may be left anywhere (no IPC object, no termination message).

    First whatever an earlier call may have left is stopped (after an operator restart, a
    call's exec may have outlived its operator) and emptied: when that cannot be shown, the
    tool does not start (`NOT_STARTED_MARK`). This is an exec no earlier call's tool saw, so
    its word stands: a pool pod is handed back after a call on the call's own report, and
    checked here, before its caller's next call starts. stdin: line 1 the proxy URL (empty:
    none), line 2 the arguments (one line of JSON), then the trust bundle (`_CA_SETUP`).
    argv: the tool's, as "$@". The tool's stderr joins its stdout, as a Job's pod log does;
    the script's own report goes to stderr."""
    dirs = (*CLEARED, WORKSPACE) if fresh else CLEARED
    checks = (
        f": > {TERMINATION_LOG} 2>/dev/null; "
        + _NO_SYSV_IPC
        + f'if [ "$ipc" != 0 ] || [ -s {TERMINATION_LOG} ]; then '
        + f'echo "{NOT_STARTED_MARK}{UNCLEAN}" >&2; exit 125; fi; '
        if reused
        else ""
    )
    # Whether the pod may be handed back: the tool could forge this, so the next call's
    # start checks again (`reused`).
    ending = (
        f': > {TERMINATION_LOG} 2>/dev/null; {_NO_SYSV_IPC}echo "{IPC_MARK}$ipc" >&2; '
        if fresh
        else ""
    )
    leave = f'echo "{EXIT_MARK}$rc" >&2; exit 0' if fresh else "exit $rc"
    return (
        _COUNT
        + _STOP
        + f'if [ "$n" != 0 ]; then echo "{NOT_STARTED_MARK}$n" >&2; exit 125; fi; '
        + clear_script(dirs)
        + f'if [ -n "$left" ]; then echo "{NOT_STARTED_MARK}cleanup" >&2; exit 125; fi; '
        + checks
        + "IFS= read -r proxy; IFS= read -r args; "
        + f"mkdir -p {CALL_DIR} && "
        + f"printf '%s\\n' \"$args\" > {ARGUMENTS_FILE} || "
        + f'{{ echo "{NOT_STARTED_MARK}setup" >&2; exit 125; }}; unset args; '
        + _CA_SETUP
        + f'cd {WORKSPACE} || {{ echo "{NOT_STARTED_MARK}setup" >&2; exit 125; }}; '
        + f"export {_CALL_ENV} TOOLADAPTER_ARGUMENTS={ARGUMENTS_FILE}; "
        + f'echo "{STARTED_MARK}" >&2; '
        + '( if [ -n "$proxy" ]; then export HTTP_PROXY="$proxy" HTTPS_PROXY="$proxy" '
        + 'http_proxy="$proxy" https_proxy="$proxy" NO_PROXY="" no_proxy=""; fi; '
        + 'unset proxy; exec "$@" ) </dev/null 2>&1 & '
        + "tool=$!; unset proxy; wait $tool; rc=$?; "
        + _STOP
        + clear_script(dirs)
        + ending
        + _REPORT
        + leave
    )


#: One call of an attempt, in its workspace pod (the workspace carries on).
RUN_SCRIPT = _run_script(fresh=False)
#: One call in a new pool pod (`_run_script`).
POOL_RUN_SCRIPT = _run_script(fresh=True)
#: One call in a pool pod an earlier call of its caller handed back (`_run_script`).
REUSED_RUN_SCRIPT = _run_script(fresh=True, reused=True)
#: Stops what a call left running when its exec ended early (a timeout, an interrupt, a
#: lost connection, an operator restart): the same kill and count as `RUN_SCRIPT`'s end.
STOP_SCRIPT = _COUNT + _STOP + CLEAR_SCRIPT + _REPORT + "exit 0"
#: The check before each call of an attempt (`sandbox.gitconfig`): what an earlier call
#: left running is stopped first (so nothing writes after the listing), then the workspace's
#: git configuration is listed. Exit 4: processes were left.
CHECK_SCRIPT = _COUNT + _STOP + '[ "$n" = 0 ] || exit 4; ' + SCAN_SCRIPT


def check_command() -> list[str]:
    """The exec command of a workspace's check (`EMIT_SCRIPT` as `$0`)."""
    return ["/bin/sh", "-c", CHECK_SCRIPT, EMIT_SCRIPT]


#: The exit code `RUN_SCRIPT` uses when it could not set the call up (the tool never ran).
SETUP_FAILED = 125


@dataclass(frozen=True)
class Profile:
    """What makes two sandboxes interchangeable: a pool serves one profile."""

    image: str
    runtime_class: str | None
    resources: tuple[tuple[str, tuple[tuple[str, str], ...]], ...]
    workspace_size: str
    image_pull_policy: str
    image_pull_secrets: tuple[str, ...] = ()

    @property
    def key(self) -> str:
        """A label value naming the profile (sha256 of its fields, 20 hex digits)."""
        doc = json.dumps(
            [
                self.image,
                self.runtime_class,
                self.resources,
                self.workspace_size,
                self.image_pull_policy,
                self.image_pull_secrets,
            ],
            separators=(",", ":"),
        )
        return hashlib.sha256(doc.encode()).hexdigest()[:20]

    def annotation(self) -> str:
        """The profile as JSON, for `ANNOTATION_PROFILE`."""
        return json.dumps(
            {
                "image": self.image,
                "runtimeClass": self.runtime_class,
                "resources": self.resource_dict(),
                "workspaceSize": self.workspace_size,
                "imagePullPolicy": self.image_pull_policy,
                "imagePullSecrets": list(self.image_pull_secrets),
            },
            separators=(",", ":"),
            sort_keys=True,
        )

    def resource_dict(self) -> dict[str, dict[str, str]]:
        return {part: dict(values) for part, values in self.resources}

    def idle_resource_dict(self) -> dict[str, dict[str, str]]:
        """What a warm pod asks of its node (`idle_requests`): limits as declared, requests
        of CPU and memory sized for an idle pod."""
        declared = self.resource_dict()
        return {**declared, "requests": idle_requests(declared)}


#: What an idle warm pod requests of its node: its PID 1 is a shell that waits. A call it
#: serves runs up to the declared limits, on what the node has spare (no in-place resize:
#: requests stay these while it serves). Smaller declared amounts stand.
IDLE_REQUESTS: Mapping[str, str] = {"cpu": "10m", "memory": "32Mi"}

_SUFFIXES: Mapping[str, Decimal] = {
    "n": Decimal("1e-9"),
    "u": Decimal("1e-6"),
    "m": Decimal("1e-3"),
    "": Decimal(1),
    "k": Decimal("1e3"),
    "M": Decimal("1e6"),
    "G": Decimal("1e9"),
    "T": Decimal("1e12"),
    "P": Decimal("1e15"),
    "E": Decimal("1e18"),
    **{f"{p}i": Decimal(1024) ** (i + 1) for i, p in enumerate("KMGTPE")},
}
_QUANTITY_PARTS = re.compile(r"^\+?([0-9.]+(?:[eE][-+]?[0-9]+)?)([a-zA-Z]*)$")


def quantity_value(text: str) -> Decimal | None:
    """A Kubernetes quantity as a number (None when it does not parse)."""
    match = _QUANTITY_PARTS.match(text.strip())
    if match is None or match.group(2) not in _SUFFIXES:
        return None
    try:
        return Decimal(match.group(1)) * _SUFFIXES[match.group(2)]
    except InvalidOperation:
        return None


def idle_requests(declared: Mapping[str, Mapping[str, str]]) -> dict[str, str]:
    """A warm pod's requests: CPU and memory at most `IDLE_REQUESTS` (the declared request,
    else the declared limit, which Kubernetes would copy into the request, when smaller);
    every other resource (ephemeral-storage, so a ResourceQuota still counts workspaces;
    extended resources, whose request must equal their limit) as declared."""
    requests = dict(declared.get("requests") or {})
    limits = declared.get("limits") or {}
    for name, idle in IDLE_REQUESTS.items():
        wanted = requests.get(name) or limits.get(name)
        amount = quantity_value(wanted) if wanted else None
        floor = quantity_value(idle)
        smaller = amount is not None and floor is not None and amount < floor
        requests[name] = wanted if smaller and wanted else idle
    return requests


def profile_for(
    sandbox: SandboxSpec,
    *,
    image: str,
    runtime_class: str | None,
    workspace_size: str,
    image_pull_policy: str,
    image_pull_secrets: Sequence[str] = (),
) -> Profile:
    """The profile of a descriptor's sandbox, with the workspace bounded by `workspace_size`
    (an ephemeral-storage request and limit too, so a ResourceQuota counts it)."""
    parts: list[tuple[str, tuple[tuple[str, str], ...]]] = []
    for part in ("requests", "limits"):
        quantities = getattr(sandbox.resources, part)
        values = {k: v for k, v in (("cpu", quantities.cpu), ("memory", quantities.memory)) if v}
        values.update(quantities.extended)
        values["ephemeral-storage"] = workspace_size
        parts.append((part, tuple(sorted(values.items()))))
    return Profile(
        image=image,
        runtime_class=runtime_class,
        resources=tuple(parts),
        workspace_size=workspace_size,
        image_pull_policy=image_pull_policy,
        image_pull_secrets=tuple(image_pull_secrets),
    )


def profile_from_annotation(text: str | None, key: str) -> Profile | None:
    """The profile a pod's `ANNOTATION_PROFILE` names, when it parses and its key is `key`
    (the pod's profile label); None otherwise (a pod of another release: not adopted)."""
    if not text:
        return None
    try:
        doc = json.loads(text)
        resources = doc["resources"]
        profile = Profile(
            image=str(doc["image"]),
            runtime_class=None if doc["runtimeClass"] is None else str(doc["runtimeClass"]),
            resources=tuple(
                (part, tuple(sorted((str(k), str(v)) for k, v in resources[part].items())))
                for part in ("requests", "limits")
            ),
            workspace_size=str(doc["workspaceSize"]),
            image_pull_policy=str(doc["imagePullPolicy"]),
            image_pull_secrets=tuple(str(s) for s in doc["imagePullSecrets"]),
        )
    except (ValueError, KeyError, TypeError, AttributeError):
        return None
    return profile if profile.key == key else None


def workspace_key(namespace: str, caller: str, attempt_id: str) -> str:
    """The label value naming one attempt's workspace: the attempt id is the agent's own
    text, so it is hashed with its caller and namespace (never used raw in a name)."""
    doc = json.dumps([namespace, caller, attempt_id], separators=(",", ":"))
    return hashlib.sha256(doc.encode()).hexdigest()[:40]


def caller_key(namespace: str, caller: str, tool: str) -> str:
    """The label value naming whom a handed-back pool pod serves: one caller's calls of one
    tool version (`tool`: "id@version"), so what a tool could leave there (it runs as the
    pod's one user) reaches only later calls that hold what it held. Hashed: a caller's name
    may hold characters no label value may."""
    doc = json.dumps([namespace, caller, tool], separators=(",", ":"))
    return hashlib.sha256(doc.encode()).hexdigest()[:40]


def uses_attempt_workspace(descriptor: ToolDescriptorSpec | None, attempt_id: str | None) -> bool:
    """Whether a call runs in its attempt's workspace: an `attempt` tool, and an attemptId
    (without one, a call of such a tool gets a workspace of its own, as `call`)."""
    if descriptor is None or not attempt_id:
        return False
    sandbox = descriptor.sandbox_spec
    return sandbox is not None and sandbox.workspace == WorkspaceMode.ATTEMPT


def warm_refusal(descriptor: ToolDescriptorSpec | None, egress_allow: Sequence[str]) -> str | None:
    """Why a call may not run in a warm pod (None: it may)."""
    if descriptor is None or descriptor.kind not in (ToolKind.SHELL, ToolKind.CONTAINER):
        return "not a sandboxed kind"
    if descriptor.sandbox_spec is None:
        return "no sandbox"
    if any(c.inject.file is not None for c in descriptor.credentials):
        return "credential files are mounted only into a Job of the call's own"
    cidrs, _hosts = split_egress(list(egress_allow))
    if cidrs:
        return "CIDR egress entries need a NetworkPolicy of the call's own"
    return None


def _labels(profile: Profile, state: str) -> dict[str, str]:
    return {
        LABEL_MANAGED_BY: MANAGED_BY,
        LABEL_WARM: "true",
        LABEL_PROFILE: profile.key,
        LABEL_STATE: state,
    }


def build_warm_pod(
    *,
    namespace: str,
    profile: Profile,
    network_gate: tuple[str, int] | None,
    gate_image: str,
    state: str = STATE_POOL,
    name: str | None = None,
    labels: Mapping[str, str] | None = None,
    annotations: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """A warm pod: the holder as PID 1 in the tool's image, the network gate first.

    The gate runs in the pod's own container before the holder when the tool's image is the
    gate's (it has the shell and the probe), with a startup probe that holds the pod's
    Ready until the gate marked that it passed; else in an init container. Either way the
    pod is Ready, so handed to a call, only once its egress rules are enforced; in its own
    container it saves an init container's start and the kubelet's notice of its exit
    (about a second of every pool pod's start)."""
    inline_gate = network_gate is not None and gate_image == profile.image
    container = tool_container(
        image=profile.image,
        image_pull_policy=profile.image_pull_policy,
        command=(
            gated_holder(network_gate, HOLDER_COMMAND)
            if inline_gate and network_gate is not None
            else HOLDER_COMMAND
        ),
        env=sandbox_env(),
        # Sized for idle: an idle pod holds little of its node (`Profile.idle_resource_dict`).
        resources=profile.idle_resource_dict(),
        # Writable: each call's arguments are written there (`RUN_SCRIPT`), and the holder.
        mounts=volume_mounts(tooladapter_read_only=False),
    )
    pod_spec = restricted_pod_spec(
        container=container,
        volumes=[
            workspace_volume(profile.workspace_size),
            home_volume(profile.workspace_size),
            {"name": TOOLADAPTER_VOLUME, "emptyDir": {"sizeLimit": "16Mi"}},
        ],
        grace_seconds=1,
        network_gate=None if inline_gate else network_gate,
        gate_image=gate_image,
        image_pull_policy=profile.image_pull_policy,
        runtime_class=profile.runtime_class,
        image_pull_secrets=profile.image_pull_secrets,
    )
    if inline_gate:
        pod_spec["containers"][0]["startupProbe"] = gate_passed_probe()
    metadata: dict[str, Any] = {
        "namespace": namespace,
        "labels": {**_labels(profile, state), **(labels or {})},
        "annotations": {ANNOTATION_PROFILE: profile.annotation(), **(annotations or {})},
    }
    if name:
        metadata["name"] = name
    else:
        metadata["generateName"] = "ta-warm-"
    return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": pod_spec}


def build_warm_policy(*, namespace: str, proxy: ProxyPeer | None) -> dict[str, Any]:
    """The namespace's warm pods: no ingress (not even from each other), egress only to the
    egress proxy (no DNS: the proxy resolves). A call's hosts are its grant's, at the proxy."""
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": {
            "name": WARM_POLICY_NAME,
            "namespace": namespace,
            "labels": {LABEL_MANAGED_BY: MANAGED_BY},
        },
        "spec": {
            "podSelector": {"matchLabels": {LABEL_WARM: "true"}},
            "policyTypes": ["Ingress", "Egress"],
            "ingress": [],
            "egress": [proxy.rule()] if proxy is not None else [],
        },
    }


def run_input(
    proxy_url: str | None, arguments: Mapping[str, Any], ca_bundle: str | None = None
) -> bytes:
    """`RUN_SCRIPT`'s stdin: the proxy URL line, the arguments as one line of JSON, then
    the trust bundle (`ca_bundle_input`)."""
    url = proxy_url or ""
    if "\n" in url or "\r" in url:
        raise ValueError("a proxy URL has no line breaks")
    doc = json.dumps(dict(arguments), separators=(",", ":"), ensure_ascii=False)
    return f"{url}\n{doc}\n".encode() + ca_bundle_input(ca_bundle)


def ca_bundle_input(ca_bundle: str | None) -> bytes:
    """The trust bundle's part of the stdin: its length line, then its bytes (public: the
    system CAs and the lease CA's certificate)."""
    data = (ca_bundle or "").encode()
    return f"{len(data)}\n".encode() + data


#: Before a call in a pod gated in its own container: its gate must have marked that it
#: passed. The pod is handed out only once Ready, and Ready waits for that mark (the startup
#: probe); this holds the tool back even if the kubelet took the container for started
#: without its probe (a kubelet restart during the gate), and fails the call as never
#: started.
GATE_CHECK = f'[ -e "{GATE_PASSED}" ] || {{ echo "{NOT_STARTED_MARK}gate" >&2; exit 125; }}; '


_EARLIER = re.compile(
    re.escape(NOT_STARTED_MARK).encode() + rb"(?:[0-9]+|cleanup|" + UNCLEAN.encode() + rb")"
)


_IPC_LEFT = re.compile(re.escape(IPC_MARK).encode() + rb"([0-9]+)")
_TOOL_EXIT = re.compile(re.escape(EXIT_MARK).encode() + rb"([0-9]+)")


def tool_exit(stderr: bytes) -> int | None:
    """The tool's exit code a pool pod's run script reported last (None: no report)."""
    found = _TOOL_EXIT.findall(stderr)
    return int(found[-1]) if found else None


def ipc_left(stderr: bytes) -> bool:
    """Whether a pool pod's run script reported IPC objects left, or could not tell (no
    report: it did not reach its end)."""
    found = _IPC_LEFT.findall(stderr)
    return not found or found[-1] != b"0"


def earlier_call_left(stderr: bytes) -> bool:
    """The run stopped before the tool because its pod held what an earlier call left (a
    process, a file it could not remove, an IPC object, a termination message)."""
    return _EARLIER.search(stderr) is not None


def gate_not_passed(stderr: bytes) -> bool:
    """The run stopped at `GATE_CHECK`: the pod's gate had not marked that it passed."""
    return f"{NOT_STARTED_MARK}gate".encode() in stderr


def gated_in_container(pod: Mapping[str, Any]) -> bool:
    """Whether a warm pod runs its network gate in its own container: its startup probe
    reads the gate's mark (`podspec.gate_passed_probe`). Read off the probe, not the gate's
    script, so a pod an operator of another version made is still checked."""
    containers = (pod.get("spec") or {}).get("containers") or []
    for container in containers:
        probe = (container or {}).get("startupProbe") or {}
        command = (probe.get("exec") or {}).get("command") or []
        if any(GATE_PASSED in str(part) for part in command):
            return True
    return False


def run_command(
    argv: Sequence[str], *, gate_mark: bool = False, fresh: bool = False, reused: bool = False
) -> list[str]:
    """The exec command of one call: `RUN_SCRIPT` (`fresh`, a pool pod's call:
    `POOL_RUN_SCRIPT`; `reused`, in a pod handed back: `REUSED_RUN_SCRIPT`) with the tool's
    argv as its arguments (`gate_mark`: first the gate's mark is checked, `GATE_CHECK`)."""
    if not argv:
        raise ValueError("a sandboxed call needs a command")
    run = (REUSED_RUN_SCRIPT if reused else POOL_RUN_SCRIPT) if fresh else RUN_SCRIPT
    script = GATE_CHECK + run if gate_mark else run
    return ["/bin/sh", "-c", script, "tooladapter-call", *argv]


def exit_code_of(status: Mapping[str, Any]) -> int | None:
    """The exit code in the exec's final Status (the error channel's JSON); None: the
    exec itself failed (no process exit was reported)."""
    if status.get("status") == "Success":
        return 0
    details = status.get("details") or {}
    for cause in details.get("causes") or []:
        if cause.get("reason") == "ExitCode":
            try:
                return int(cause.get("message"))
            except (TypeError, ValueError):
                return None
    return None


_LEFT = re.compile(re.escape(STOPPED_MARK) + r"(\d+)")


def processes_left(stderr: bytes) -> int | None:
    """What the run (or stop) script reported as left after its kill; None: no report
    (the script did not reach its end)."""
    found = _LEFT.findall(stderr.decode("utf-8", errors="replace"))
    return int(found[-1]) if found else None


def not_started(stderr: bytes) -> bool:
    """The run script stopped before the tool started (`NOT_STARTED_MARK`, and no
    `STARTED_MARK`: a tool that ran may have written any mark after that one)."""
    return NOT_STARTED_MARK.encode() in stderr and STARTED_MARK.encode() not in stderr


def pod_ready(pod: Mapping[str, Any] | None) -> bool:
    """Running with every container ready (so past its network gate)."""
    if not pod:
        return False
    status = pod.get("status") or {}
    if status.get("phase") != "Running":
        return False
    for condition in status.get("conditions") or []:
        if condition.get("type") == "Ready":
            return bool(condition.get("status") == "True")
    return False


def pod_ended(pod: Mapping[str, Any] | None) -> bool:
    """Gone, terminating, or past Running: a pod that will never serve a call again."""
    if not pod:
        return True
    if (pod.get("metadata") or {}).get("deletionTimestamp"):
        return True
    return (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed")


__all__ = [
    "ANNOTATION_ATTEMPT",
    "ANNOTATION_CALLER",
    "ANNOTATION_CALLS",
    "ANNOTATION_CLAIMED_AT",
    "ANNOTATION_LAST_USED",
    "ANNOTATION_PROFILE",
    "ANNOTATION_SIZE",
    "CHECK_SCRIPT",
    "CLEARED",
    "CLEAR_SCRIPT",
    "EXIT_MARK",
    "HOLDER_SCRIPT",
    "IPC_MARK",
    "LABEL_CALL",
    "LABEL_CALLER",
    "LABEL_PROFILE",
    "LABEL_STATE",
    "LABEL_WARM",
    "LABEL_WORKSPACE",
    "POOL_RUN_SCRIPT",
    "REUSED_RUN_SCRIPT",
    "RUN_SCRIPT",
    "SETUP_FAILED",
    "STARTED_MARK",
    "STATE_ATTEMPT",
    "STATE_CALL",
    "STATE_POOL",
    "STOP_SCRIPT",
    "WARM_POLICY_NAME",
    "Profile",
    "build_warm_pod",
    "build_warm_policy",
    "caller_key",
    "check_command",
    "clear_script",
    "earlier_call_left",
    "exit_code_of",
    "ipc_left",
    "not_started",
    "pod_ended",
    "pod_ready",
    "processes_left",
    "profile_for",
    "profile_from_annotation",
    "run_command",
    "run_input",
    "tool_exit",
    "uses_attempt_workspace",
    "warm_refusal",
    "workspace_key",
]
