"""Issue 29: how a warm call settles, against an in-memory stand-in for `kube.warm.WarmKube`
(pods as plain dicts, exec answers scripted): the exactly-once rules of a cold Job hold."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from tooladapter.enums import FailureClass, InvocationState, SandboxStart, SideEffectClass
from tooladapter.executors import Call
from tooladapter.executors.limits import CallLimits
from tooladapter.executors.warm import MOST_CALLS_PER_POD, WarmSandboxes
from tooladapter.kube.client import Conflict
from tooladapter.kube.warm import ExecResult
from tooladapter.model import ToolDescriptorSpec
from tooladapter.sandbox.warm import (
    ANNOTATION_CALLS,
    GATE_CHECK,
    LABEL_CALL,
    LABEL_CALLER,
    LABEL_PROFILE,
    LABEL_STATE,
    LABEL_WORKSPACE,
    NOT_STARTED_MARK,
    POOL_RUN_SCRIPT,
    REUSED_RUN_SCRIPT,
    STATE_POOL,
    STOP_SCRIPT,
    build_warm_pod,
    caller_key,
    gated_in_container,
    workspace_key,
)
from tooladapter.settings import Settings, WarmSettings
from tooladapter.timeutil import now_iso

CLEAN = b"tooladapter-processes-left:0\n"
READY = {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}


class FakeWarmKube:
    """Pods by name; `answers` are what successive run execs return (or raise); a stop
    exec (STOP_SCRIPT) answers `stop_answer`."""

    def __init__(self) -> None:
        self.pods: dict[str, dict[str, Any]] = {}
        self.answers: list[ExecResult | BaseException | None] = []
        self.stop_answer: ExecResult = ExecResult(b"", CLEAN, 0, {"status": "Success"})

        self.execs: list[tuple[str, list[str], bytes]] = []
        self.stops = 0
        self.deleted: list[str] = []
        self.policies: list[dict[str, Any]] = []
        self.version = 0
        self.made = 0
        #: ResourceQuota statuses of the namespace (`list_quotas`).
        self.quotas: list[dict[str, Any]] = []

    def add(
        self,
        name: str,
        labels: dict[str, str],
        *,
        annotations: dict[str, str] | None = None,
        spec: dict[str, Any] | None = None,
        created: str | None = None,
    ) -> dict[str, Any]:
        self.version += 1
        pod = {
            "metadata": {
                "name": name,
                "namespace": "ns",
                "labels": dict(labels),
                "annotations": dict(annotations or {}),
                "resourceVersion": str(self.version),
                "creationTimestamp": created or f"2026-01-01T00:00:{self.version:02d}Z",
            },
            "spec": dict(spec or {}),
            "status": dict(READY),
        }
        self.pods[name] = pod
        return pod

    async def ensure_policy(self, policy: dict[str, Any]) -> None:
        self.policies.append(policy)

    async def create_pod(self, pod: dict[str, Any]) -> dict[str, Any]:
        self.made += 1
        return self.add(
            f"made-{self.made}",
            pod["metadata"]["labels"],
            annotations=pod["metadata"].get("annotations"),
            spec=pod.get("spec"),
            created=now_iso(),
        )

    async def list_quotas(self, namespace: str) -> list[dict[str, Any]]:
        return [dict(q) for q in self.quotas]

    async def get_pod(self, namespace: str, name: str) -> dict[str, Any] | None:
        return self.pods.get(name)

    async def list_pods(self, namespace: str | None, selector: str) -> list[dict[str, Any]]:
        wanted = dict(part.split("=", 1) for part in selector.split(","))
        return [
            json.loads(json.dumps(p))
            for p in self.pods.values()
            if all(p["metadata"]["labels"].get(k) == v for k, v in wanted.items())
        ]

    async def patch_pod(
        self, pod: dict[str, Any], patch: dict[str, Any], *, exclusive: bool = False
    ) -> dict[str, Any]:
        stored = self.pods[pod["metadata"]["name"]]
        if (
            exclusive
            and stored["metadata"]["resourceVersion"] != pod["metadata"]["resourceVersion"]
        ):
            raise Conflict("changed")
        meta = patch["metadata"]
        for part in ("labels", "annotations"):
            for key, value in (meta.get(part) or {}).items():
                if value is None:  # a merge patch's null removes the key
                    stored["metadata"][part].pop(key, None)
                else:
                    stored["metadata"][part][key] = value
        self.version += 1
        stored["metadata"]["resourceVersion"] = str(self.version)
        return dict(json.loads(json.dumps(stored)))

    async def delete_pod(
        self, namespace: str, name: str, *, resource_version: str | None = None
    ) -> bool:
        stored = self.pods.get(name)
        if stored is None:
            return False
        if resource_version and stored["metadata"]["resourceVersion"] != resource_version:
            return False
        self.deleted.append(name)
        return self.pods.pop(name, None) is not None

    async def wait_ready(self, namespace: str, name: str, *, timeout: float) -> dict[str, Any]:
        return self.pods[name]

    async def exec(
        self, namespace: str, name: str, command: list[str], *, stdin: bytes, max_bytes: int
    ) -> ExecResult:
        self.execs.append((name, command, stdin))
        if command[2] == STOP_SCRIPT:
            self.stops += 1
            return self.stop_answer
        answer = self.answers.pop(0)
        if isinstance(answer, BaseException):
            raise answer
        if answer is None:
            await asyncio.sleep(3600)  # a tool that runs on
        assert isinstance(answer, ExecResult)
        return answer


def tool(workspace: str = "attempt", effect: str = "sandbox") -> ToolDescriptorSpec:
    return ToolDescriptorSpec.model_validate(
        {
            "toolId": "sh",
            "version": "1.0.0",
            "kind": "shell",
            "sideEffectClass": effect,
            "sandbox": {"workspace": workspace},
        }
    )


def call(
    descriptor: ToolDescriptorSpec,
    *,
    attempt: str | None = "a1",
    effective: SideEffectClass = SideEffectClass.SANDBOX,
    timeout: int = 60,
    uid: str = "uid-1",
    caller: str = "alice",
) -> Call:
    return Call(
        namespace="ns",
        name=f"call-{uid}",
        uid=uid,
        caller=caller,
        descriptor=descriptor,
        arguments={"command": "echo hi"},
        effective_class=effective,
        limits=CallLimits(timeout_seconds=timeout, max_result_bytes=4096),
        argv=("echo", "hi"),
        attempt_id=attempt,
    )


def warm(kube: FakeWarmKube, **settings: Any) -> WarmSandboxes:
    async def no_secret(namespace: str, name: str) -> dict[str, str]:
        return {}

    # Pools off unless a test turns them on: the attempt tests count every pod made.
    settings.setdefault("pool_size", 0)
    return WarmSandboxes(
        kube,  # type: ignore[arg-type]
        Settings(warm=WarmSettings(**settings)),
        read_secret=no_secret,
        canary=("192.0.2.2", 4000),
    )


def ran(stdout: bytes, code: int, left: int = 0, ipc: str = "0") -> ExecResult:
    status: dict[str, Any] = (
        {"status": "Success"}
        if code == 0
        else {
            "status": "Failure",
            "details": {"causes": [{"reason": "ExitCode", "message": str(code)}]},
        }
    )
    stderr = (
        f"tooladapter-ipc-left:{ipc}\ntooladapter-processes-left:{left}\n"
        f"tooladapter-tool-exit:{code}\n"
    )
    return ExecResult(stdout, stderr.encode(), code, status)


def existing_workspace(kube: FakeWarmKube, caller: str = "alice", attempt: str = "a1") -> str:
    key = workspace_key("ns", caller, attempt)
    profile = warm(kube).profile(call(tool()), attempt=True).key
    kube.add("ws-1", {LABEL_STATE: "attempt", LABEL_WORKSPACE: key, LABEL_PROFILE: profile})
    return "ws-1"


def test_a_later_call_of_an_attempt_runs_warm_in_its_workspace_and_is_observed() -> None:
    kube = FakeWarmKube()
    existing_workspace(kube)
    kube.answers = [ran(b"hi\n", 0)]
    outcome = asyncio.run(warm(kube).run(call(tool())))
    assert outcome is not None and outcome.state == InvocationState.OBSERVED
    assert outcome.output == b"hi\n"
    run = outcome.sandbox_run
    assert run is not None and run.start == SandboxStart.WARM and run.name == "ws-1"
    assert run.workspace is not None and run.workspace.fresh is False
    # The pod names the call that runs in it (a restart finds it), and is kept.
    assert kube.pods["ws-1"]["metadata"]["labels"][LABEL_CALL] == "uid-1"
    assert "ws-1" not in kube.deleted
    (name, command, stdin) = kube.execs[0]
    assert name == "ws-1"
    assert command[-2:] == ["echo", "hi"] and stdin.startswith(b"\n")  # no proxy


def test_another_caller_with_the_same_attempt_id_gets_a_workspace_of_its_own() -> None:
    kube = FakeWarmKube()
    existing_workspace(kube, caller="bob")
    kube.answers = [ran(b"", 0)]
    outcome = asyncio.run(warm(kube).run(call(tool())))
    assert outcome is not None and outcome.sandbox_run is not None
    assert outcome.sandbox_run.name != "ws-1"
    assert outcome.sandbox_run.start == SandboxStart.COLD  # started for it: no pool
    assert outcome.sandbox_run.workspace is not None and outcome.sandbox_run.workspace.fresh


def test_a_tool_error_is_observed_with_its_exit_code() -> None:
    kube = FakeWarmKube()
    existing_workspace(kube)
    kube.answers = [ran(b"no such file\n", 1)]
    outcome = asyncio.run(warm(kube).run(call(tool())))
    assert outcome is not None and outcome.state == InvocationState.OBSERVED
    assert outcome.is_error and outcome.exit_code == 1


def test_a_lost_answer_is_unconfirmed_stops_the_call_and_says_the_workspace_may_have_changed() -> (
    None
):
    kube = FakeWarmKube()
    existing_workspace(kube)
    kube.answers = [ConnectionError("stream reset")]
    contained = asyncio.run(warm(kube).run(call(tool())))
    assert contained is not None and contained.state == InvocationState.FAILED
    assert "workspace may have changed" in contained.message
    assert kube.stops == 1
    kube.answers = [ConnectionError("stream reset")]
    effect = call(tool(effect="external"), effective=SideEffectClass.EXTERNAL)
    uncertain = asyncio.run(warm(kube).run(effect))
    assert uncertain is not None and uncertain.state == InvocationState.UNCERTAIN
    assert "workspace may have changed" in uncertain.message


def test_a_call_past_its_timeout_is_stopped_and_settled_by_class() -> None:
    kube = FakeWarmKube()
    existing_workspace(kube)
    kube.answers = [None]
    outcome = asyncio.run(asyncio.wait_for(warm(kube).run(call(tool(), timeout=0)), 10))
    assert outcome is not None and outcome.state == InvocationState.FAILED
    assert outcome.failure_class == FailureClass.TIMEOUT
    assert kube.stops == 1 and "ws-1" in kube.pods


def test_a_workspace_whose_processes_cannot_be_shown_stopped_is_deleted() -> None:
    kube = FakeWarmKube()
    existing_workspace(kube)
    kube.answers = [ran(b"ok", 0, left=2)]
    kube.stop_answer = ExecResult(b"", b"tooladapter-processes-left:1\n", 0, {"status": "Success"})
    outcome = asyncio.run(warm(kube).run(call(tool())))
    assert outcome is not None and outcome.state == InvocationState.OBSERVED
    assert "ws-1" in kube.deleted


def test_a_tool_that_never_started_is_failed() -> None:
    kube = FakeWarmKube()
    existing_workspace(kube)
    kube.answers = [ExecResult(b"", b"tooladapter-not-started:3\n", 125, {"status": "Failure"})]
    outcome = asyncio.run(warm(kube).run(call(tool())))
    assert outcome is not None and outcome.state == InvocationState.FAILED
    assert "never started" in outcome.message


def pool_call(
    descriptor: ToolDescriptorSpec, uid: str, caller: str = "alice", timeout: int = 60
) -> Call:
    return call(descriptor, attempt=None, uid=uid, caller=caller, timeout=timeout)


def one_pool_pod(
    kube: FakeWarmKube, sandboxes: WarmSandboxes, descriptor: ToolDescriptorSpec
) -> None:
    profile = sandboxes.profile(pool_call(descriptor, "uid-0"), attempt=False)
    kube.add("pool-1", {LABEL_STATE: STATE_POOL, LABEL_PROFILE: profile.key})


async def only_pool_1(kube: FakeWarmKube, sandboxes: WarmSandboxes) -> None:
    """Background work done, and every pod the pool made meanwhile gone (no refill)."""
    while sandboxes.background:
        await asyncio.gather(*list(sandboxes.background))
    kube.pods = {k: v for k, v in kube.pods.items() if k == "pool-1"}


def test_a_pool_pod_ended_cleanly_serves_its_callers_next_call_and_no_other_callers() -> None:
    kube = FakeWarmKube()
    sandboxes = warm(kube, pool_size=1)
    descriptor = tool(workspace="call")
    one_pool_pod(kube, sandboxes, descriptor)
    kube.answers = [ran(b"hi", 0), ran(b"again", 0)]

    async def scenario() -> tuple[Any, Any, Any]:
        first = await sandboxes.run(pool_call(descriptor, "uid-1"))
        await only_pool_1(kube, sandboxes)
        pod = kube.pods["pool-1"]["metadata"]
        # Handed back for alice alone, on the call's own clean end (no exec of its own).
        assert [e[0] for e in kube.execs] == ["pool-1"]
        assert pod["labels"][LABEL_STATE] == STATE_POOL
        assert pod["labels"][LABEL_CALLER] == caller_key("ns", "alice", "sh@1.0.0")
        assert LABEL_CALL not in pod["labels"]
        assert pod["annotations"][ANNOTATION_CALLS] == "1"
        bob = await sandboxes.run(pool_call(descriptor, "uid-2", caller="bob"))
        await only_pool_1(kube, sandboxes)
        theirs = kube.deleted[:]
        kube.add("pool-1", {**pod["labels"]}, annotations=pod["annotations"])
        again = await sandboxes.run(pool_call(descriptor, "uid-3"))
        await only_pool_1(kube, sandboxes)
        assert theirs == ["pool-1"]  # alice's pod made way for a new one (anyone's)
        return first, bob, again

    first, bob, again = asyncio.run(scenario())
    assert first is not None and first.sandbox_run.name == "pool-1"
    assert first.sandbox_run.start == SandboxStart.WARM
    assert bob is None  # no pod of his or anyone's ready: he runs in a Job
    assert again is not None and again.sandbox_run.name == "pool-1"
    assert again.state == InvocationState.OBSERVED
    assert kube.pods["pool-1"]["metadata"]["annotations"][ANNOTATION_CALLS] == "2"
    # Every pool call's script empties the pod, the workspace too, before its tool starts;
    # in a pod handed back, it also checks that nothing else is left.
    assert [command[2] for _, command, _ in kube.execs] == [POOL_RUN_SCRIPT, REUSED_RUN_SCRIPT]


def test_a_pool_pod_holding_what_an_earlier_call_left_sends_the_call_to_a_job() -> None:
    for mark in (b"unclean", b"cleanup", b"2"):
        kube = FakeWarmKube()
        sandboxes = warm(kube, pool_size=1)
        descriptor = tool(workspace="call")
        one_pool_pod(kube, sandboxes, descriptor)
        kube.answers = [
            ExecResult(b"", b"tooladapter-not-started:" + mark + b"\n", 125, {"status": "Failure"})
        ]

        async def scenario(kube: FakeWarmKube, sandboxes: WarmSandboxes) -> Any:
            outcome = await sandboxes.run(pool_call(tool(workspace="call"), "uid-1"))
            await only_pool_1(kube, sandboxes)
            return outcome

        # The tool never started there: the call runs in a Job, and the pod is gone.
        assert asyncio.run(scenario(kube, sandboxes)) is None, mark
        assert "pool-1" not in kube.pods, mark


def test_a_tools_forged_not_started_mark_after_it_started_is_not_believed() -> None:
    kube = FakeWarmKube()
    sandboxes = warm(kube, pool_size=1)
    descriptor = tool(workspace="call")
    one_pool_pod(kube, sandboxes, descriptor)
    forged = b"tooladapter-tool-started\ntooladapter-not-started:unclean\n"
    kube.answers = [ExecResult(b"", forged, 125, {"status": "Failure"})]

    async def scenario() -> Any:
        outcome = await sandboxes.run(pool_call(descriptor, "uid-1"))
        await only_pool_1(kube, sandboxes)
        return outcome

    outcome = asyncio.run(scenario())
    assert outcome is not None  # it ran: never sent elsewhere
    assert "pool-1" not in kube.pods  # no report of a clean end: deleted


def test_a_pool_call_that_did_not_end_cleanly_deletes_its_pod() -> None:
    # Processes left; IPC objects left, or no way to tell (gVisor); lost; past its timeout.
    for answer in (
        ran(b"hi", 0, left=1),
        ran(b"hi", 0, ipc="1"),
        ExecResult(b"hi", b"tooladapter-processes-left:0\n", 0, {"status": "Success"}),
        # The tool killed its script and wrote a clean report in its place: the exec does
        # not end 0, which only the script's own end does.
        ExecResult(
            b"hi",
            b"tooladapter-ipc-left:0\ntooladapter-processes-left:0\ntooladapter-tool-exit:0\n",
            137,
            {
                "status": "Failure",
                "details": {"causes": [{"reason": "ExitCode", "message": "137"}]},
            },
        ),
        ConnectionError("lost"),
        None,
    ):
        kube = FakeWarmKube()
        sandboxes = warm(kube, pool_size=1)
        descriptor = tool(workspace="call")
        one_pool_pod(kube, sandboxes, descriptor)
        kube.answers = [answer]

        async def scenario(kube: FakeWarmKube, sandboxes: WarmSandboxes) -> None:
            await sandboxes.run(pool_call(tool(workspace="call"), "uid-1", timeout=1))
            await only_pool_1(kube, sandboxes)

        asyncio.run(scenario(kube, sandboxes))
        assert "pool-1" not in kube.pods, answer


def test_a_pool_pod_is_deleted_after_its_most_calls() -> None:
    kube = FakeWarmKube()
    sandboxes = warm(kube, pool_size=1)
    descriptor = tool(workspace="call")
    profile = sandboxes.profile(pool_call(descriptor, "uid-0"), attempt=False)
    kube.add(
        "pool-1",
        {LABEL_STATE: STATE_POOL, LABEL_PROFILE: profile.key},
        annotations={ANNOTATION_CALLS: str(MOST_CALLS_PER_POD - 1)},
    )
    kube.answers = [ran(b"hi", 0)]

    async def scenario() -> None:
        await sandboxes.run(pool_call(descriptor, "uid-1"))
        await only_pool_1(kube, sandboxes)

    asyncio.run(scenario())
    assert "pool-1" not in kube.pods


def test_a_call_waiting_for_a_pool_pod_takes_the_one_its_callers_call_hands_back() -> None:
    class Slow(FakeWarmKube):
        """The first call's tool runs until the second call waits; states patched kept."""

        def __init__(self) -> None:
            super().__init__()
            self.release = asyncio.Event()
            self.running = asyncio.Event()
            self.states: list[str] = []

        async def exec(self, namespace: str, name: str, command: list[str], **kw: Any) -> Any:
            if len(self.execs) == 0:
                self.execs.append((name, command, b""))
                self.running.set()
                await self.release.wait()
                return ran(b"first", 0)
            return await super().exec(namespace, name, command, **kw)

        async def patch_pod(self, pod: dict[str, Any], patch: dict[str, Any], **kw: Any) -> Any:
            state = (patch["metadata"].get("labels") or {}).get(LABEL_STATE)
            if state:
                self.states.append(state)
            return await super().patch_pod(pod, patch, **kw)

    kube = Slow()
    sandboxes = warm(kube, pool_size=1)  # the pool makes no pod beyond the one
    descriptor = tool(workspace="call")
    one_pool_pod(kube, sandboxes, descriptor)
    kube.answers = [ran(b"second", 0)]

    async def scenario() -> tuple[Any, Any]:
        first = asyncio.ensure_future(sandboxes.run(pool_call(descriptor, "uid-1")))
        await kube.running.wait()
        second = asyncio.ensure_future(sandboxes.run(pool_call(descriptor, "uid-2")))
        pool = next(iter(sandboxes.pools.values()))
        while not pool.waiters.get(caller_key("ns", "alice", "sh@1.0.0")):  # noqa: ASYNC110 (no event to wait on)
            await asyncio.sleep(0)
        kube.release.set()
        ended = await first, await second
        await only_pool_1(kube, sandboxes)
        return ended

    first, second = asyncio.run(scenario())
    assert first is not None and second is not None
    assert first.sandbox_run.name == second.sandbox_run.name == "pool-1"
    assert kube.made == 0
    # Straight from one call to the next (never back in the pool in between), then back.
    assert kube.states == ["call", "call", "pool"]
    assert kube.pods["pool-1"]["metadata"]["annotations"][ANNOTATION_CALLS] == "2"


def test_credentials_or_cidrs_never_run_warm() -> None:
    kube = FakeWarmKube()
    sandboxes = warm(kube, pool_size=1)
    plain = call(tool(workspace="call"), attempt=None)
    cidr = Call(**{**plain.__dict__, "egress_allow": ("10.0.0.0/24",)})
    assert asyncio.run(sandboxes.run(cidr)) is None
    assert kube.execs == []


def test_a_namespace_holds_at_most_its_share_of_workspaces() -> None:
    kube = FakeWarmKube()
    kube.add("ws-a", {LABEL_STATE: "attempt", LABEL_WORKSPACE: "other"})
    outcome = asyncio.run(warm(kube, workspaces_per_namespace=1).run(call(tool())))
    assert outcome is not None and outcome.state == InvocationState.FAILED
    assert "TOOLADAPTER_WORKSPACES_PER_NAMESPACE" in outcome.message
    assert kube.execs == [] and kube.made == 0


def test_a_resumed_warm_call_is_stopped_never_run_again() -> None:
    kube = FakeWarmKube()
    existing_workspace(kube)
    kube.pods["ws-1"]["metadata"]["labels"][LABEL_CALL] = "uid-1"
    outcome = asyncio.run(warm(kube).resume(call(tool())))
    assert outcome is not None and outcome.state == InvocationState.FAILED
    assert "workspace may have changed" in outcome.message
    assert kube.stops == 1 and all(c[2] == STOP_SCRIPT for _, c, _ in kube.execs)
    assert asyncio.run(warm(FakeWarmKube()).resume(call(tool()))) is None


def test_a_pod_gated_in_its_own_container_runs_a_call_only_past_the_gates_mark() -> None:
    """Attack pass on the inline gate: Ready rests on the kubelet's startup probe, and a
    kubelet restart during the gate may take the container for started without it. Every
    call in such a pod checks the gate's mark first; without it the call fails as never
    started, whatever the pod's Ready says."""
    kube = FakeWarmKube()
    profile = warm(kube).profile(call(tool()), attempt=True)
    pod = build_warm_pod(
        namespace="ns",
        profile=profile,
        network_gate=("192.0.2.2", 4000),
        gate_image=Settings().sandbox.image,
    )
    labels = {
        LABEL_STATE: "attempt",
        LABEL_WORKSPACE: workspace_key("ns", "alice", "a1"),
        LABEL_PROFILE: profile.key,
    }
    kube.add("ws-1", labels, spec=pod["spec"])
    refused = ExecResult(b"", f"{NOT_STARTED_MARK}gate\n".encode(), 125, {"status": "Failure"})
    kube.answers = [refused]
    outcome = asyncio.run(warm(kube).run(call(tool())))
    assert outcome is not None and outcome.state == InvocationState.FAILED
    assert outcome.failure_class == FailureClass.TRANSIENT
    assert "no mark of its network gate" in (outcome.message or "")
    (_, command, _) = kube.execs[0]
    assert command[2].startswith(GATE_CHECK)
    # A pod gated by an init container (another image) has no mark to check.
    assert not gated_in_container(
        build_warm_pod(
            namespace="ns",
            profile=profile,
            network_gate=("192.0.2.2", 4000),
            gate_image="another-image",
        )
    )


def test_a_tool_that_pushes_its_start_mark_out_of_the_kept_stderr_is_never_run_again() -> None:
    # Attack of 2026-12-07: the tool acted, then wrote more than the kept tail of stderr and
    # a forged not-started mark. Whether it started is read off the head (what the script
    # wrote before it), so the call is neither run again in a Job nor failed as never
    # started.
    flood = b"x" * 8192
    for forged in (b"unclean", b"gate"):
        kube = FakeWarmKube()
        sandboxes = warm(kube, pool_size=1)
        descriptor = tool(workspace="call")
        one_pool_pod(kube, sandboxes, descriptor)
        tail = (flood + b"\ntooladapter-not-started:" + forged + b"\n")[-4096:]
        kube.answers = [
            ExecResult(
                b"acted",
                tail,
                125,
                {
                    "status": "Failure",
                    "details": {"causes": [{"reason": "ExitCode", "message": "125"}]},
                },
                stderr_head=(b"tooladapter-tool-started\n" + flood)[:4096],
            )
        ]

        async def scenario(kube: FakeWarmKube, sandboxes: WarmSandboxes) -> Any:
            outcome = await sandboxes.run(pool_call(tool(workspace="call"), "uid-1"))
            await only_pool_1(kube, sandboxes)
            return outcome

        outcome = asyncio.run(scenario(kube, sandboxes))
        assert outcome is not None, forged  # never sent to a Job to run again
        assert outcome.state == InvocationState.OBSERVED, (forged, outcome)
        assert "never started" not in (outcome.message or ""), forged
        assert "pool-1" not in kube.pods  # no clean end: deleted


def test_an_attempts_workspace_is_made_of_a_new_pool_pod_only() -> None:
    # Attack of 2026-12-07: a pod handed back after one tool's call became the workspace of
    # an attempt whose calls run other tools.
    kube = FakeWarmKube()
    sandboxes = warm(kube, pool_size=1)
    attempt_tool = tool(workspace="attempt")
    profile = sandboxes.profile(call(attempt_tool), attempt=True)
    kube.add(
        "used-1",
        {
            LABEL_STATE: STATE_POOL,
            LABEL_PROFILE: profile.key,
            LABEL_CALLER: caller_key("ns", "alice", "sh@1.0.0"),
        },
    )

    async def scenario() -> Any:
        return await sandboxes.claim(call(attempt_tool), profile, workspace="ws-key")

    assert asyncio.run(scenario()) is None
    # Never the workspace: left in the pool, or deleted to make way for a new pod.
    used = kube.pods.get("used-1")
    assert used is None or used["metadata"]["labels"][LABEL_STATE] == STATE_POOL
    assert used is not None or "used-1" in kube.deleted
