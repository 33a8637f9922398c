"""Sandboxed calls in warm pods: an attempt's workspace, or a pool's ready pod.

`SandboxExecutor.execute` asks `WarmSandboxes.run` first; None means the call fits no warm
pod (no pool, none ready, credentials, CIDR egress) and it runs in a Job of its own, as
before. See `pipeline.warm` for what keeps a warm pod as safe as a Job.

- An attempt's call runs in its workspace pod (found by its workspace label; made from a
  pool's ready pod, or created and awaited, on the attempt's first call). The flow's
  attempt queue (`attempts`) lets one call of the attempt run at a time, so the pod never
  runs two calls at once; every process of a call is killed at its end.
- Any other call takes a ready pool pod of its profile (a claim: one label patch against
  the pod's resourceVersion): a new one, or one its own caller's earlier call handed back.
  A call that ended cleanly (its script stopped every process it left and emptied every
  place the sandbox user can write, the workspace too) hands its pod back to its caller
  alone: to a call of theirs waiting, else to the pool. Each call's run script
  (`POOL_RUN_SCRIPT`) does that stopping and emptying again before its tool starts, in an
  exec no earlier tool saw, and checks that nothing is left (no IPC object, no
  termination message); when something is, the tool never starts there and the call runs
  in a Job. Any other end deletes the pod. The pool is resized in the background.

Settling follows the Job's rules: the tool's exit is its answer (Observed); a call whose
answer was lost (a lost exec stream, an operator restart) is unconfirmed, and an attempt's
says that its workspace may have changed; a timeout or an interrupt kills the call's
processes and settles as a Job's deadline or interrupt does.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field, replace
from decimal import Decimal
from typing import Any

from tooladapter.egress.core.lease import CA_BUNDLE_KEY, PROXY_URL_KEY
from tooladapter.enums import (
    FailureClass,
    InvocationState,
    SandboxStart,
    Transmission,
    WorkspaceMode,
)
from tooladapter.executors import (
    Call,
    Outcome,
    SandboxRun,
    lost,
    read_limit,
    unconfirmed,
    unconfirmed_for,
)
from tooladapter.executors.answers import exited
from tooladapter.executors.meter import Clock, metered
from tooladapter.kube.client import Conflict, NotFound, Refused
from tooladapter.kube.sandbox import decode_b64
from tooladapter.kube.warm import ExecResult, WarmKube
from tooladapter.metrics import WARM_GAVE_WAY, WARM_IDLE_CPU, WARM_IDLE_MEMORY, WARM_IDLE_PODS
from tooladapter.model import ToolDescriptorSpec, WorkspaceLease
from tooladapter.naming import LeaseNames
from tooladapter.sandbox.gitconfig import findings, parse_scan, refusal
from tooladapter.sandbox.job import ProxyPeer, runtime_class_for
from tooladapter.sandbox.pool_sizing import (
    PoolBounds,
    PoolDemand,
    Use,
    desired_size,
    pod_amounts,
    pod_requests,
    quota_room,
    trim_uses,
)
from tooladapter.sandbox.warm import (
    ANNOTATION_ATTEMPT,
    ANNOTATION_CALLER,
    ANNOTATION_CALLS,
    ANNOTATION_CLAIMED_AT,
    ANNOTATION_LAST_USED,
    ANNOTATION_PROFILE,
    ANNOTATION_SIZE,
    LABEL_CALL,
    LABEL_CALLER,
    LABEL_PROFILE,
    LABEL_STATE,
    LABEL_WARM,
    LABEL_WORKSPACE,
    STATE_ATTEMPT,
    STATE_CALL,
    STATE_POOL,
    STOP_SCRIPT,
    Profile,
    build_warm_pod,
    build_warm_policy,
    caller_key,
    check_command,
    earlier_call_left,
    gate_not_passed,
    gated_in_container,
    ipc_left,
    not_started,
    pod_ended,
    pod_ready,
    processes_left,
    profile_for,
    profile_from_annotation,
    run_command,
    run_input,
    tool_exit,
    uses_attempt_workspace,
    warm_refusal,
    workspace_key,
)
from tooladapter.settings import Settings
from tooladapter.timeutil import now_iso, parse_time

logger = logging.getLogger("tooladapter.warm")

#: Reads a Secret's base64 data (`Cluster.read_secret`).
SecretReader = Callable[[str, str], Awaitable[dict[str, str]]]
#: Whether a call (namespace, name, uid) has ended or is gone.
CallEnded = Callable[[str, str, str], Awaitable[bool]]
ANNOTATION_INVOCATION = "tooladapter.dev/invocation"
#: Time a stop of a call's processes may take.
STOP_TIMEOUT_SECONDS = 30
#: Time and bytes the check of a workspace's git configuration may take (`check_workspace`).
CHECK_TIMEOUT_SECONDS = 60
CHECK_MAX_BYTES = 4 << 20
#: A pool pod serves at most this many calls, then is deleted (a new one starts).
MOST_CALLS_PER_POD = 100


@dataclass(frozen=True)
class WorkspaceCheck:
    """What the check before an attempt's call found: `refused` (the call ends Denied),
    `unchecked` (it ends Failed: nothing ran, the check could not be made), or neither."""

    checked: bool = False
    refused: str | None = None
    unchecked: str | None = None


#: A pod handed from a call that ended to one that waits, and the annotations its use adds.
Handed = tuple[dict[str, Any], dict[str, str]]


@dataclass
class Pool:
    """One namespace's pool of one profile, and the demand it saw (`pool_sizing`)."""

    namespace: str
    profile: Profile
    #: When a descriptor of the profile became active (or the pool was adopted), monotonic.
    started_at: float | None = None
    #: Its recent calls, the newest last.
    uses: tuple[Use, ...] = ()
    #: Its calls running or waiting for a pod now, and by whom (`caller_key`).
    in_flight: int = 0
    by_owner: dict[str, int] = field(default_factory=dict)
    refilling: asyncio.Lock = field(default_factory=asyncio.Lock)
    #: A resize was asked for while one ran: it runs once more (demand grew meanwhile).
    again: bool = False
    #: Set (and replaced) each time a pod is handed back (`WarmSandboxes.hand_back`): wakes
    #: the calls waiting for one (`claim_starting`).
    returned: asyncio.Event = field(default_factory=asyncio.Event)

    #: Per caller (`caller_key`): the calls waiting for a pod, the longest first; a pod
    #: its caller's call ended with goes to the first of them (`WarmSandboxes.hand_back`).
    waiters: dict[str, deque[asyncio.Future[Handed]]] = field(default_factory=dict)

    def hand_back(self) -> None:
        event, self.returned = self.returned, asyncio.Event()
        event.set()

    def take_waiter(self, caller: str) -> asyncio.Future[Handed] | None:
        queue = self.waiters.get(caller)
        while queue:
            waiter = queue.popleft()
            if not waiter.done():
                return waiter
        return None

    def demand(self) -> PoolDemand:
        return PoolDemand(self.started_at, self.uses)


#: A namespace where a call waited for capacity keeps no pool pods for this long after
#: (its pools give way: `WarmSandboxes.give_way`).
PRESSURE_SECONDS = 60.0
#: How long a call with no ready pool pod waits for one that is starting (scheduled, past
#: its image pull most likely) before it runs in a Job of its own.
STARTING_WAIT_SECONDS = 10.0
#: While a call waits for a pool pod, the pool's pods are listed again this often.
RELIST_SECONDS = 1.0
#: Uses older than this are forgotten (the demand window is shorter).
USES_KEPT_SECONDS = 120.0


class WarmSandboxes:
    def __init__(
        self,
        kube: WarmKube,
        settings: Settings,
        *,
        read_secret: SecretReader,
        canary: tuple[str, int] | None = None,
        proxy: ProxyPeer | None = None,
    ) -> None:
        self.kube = kube
        self.settings = settings
        self.read_secret = read_secret
        self.canary = canary
        self.proxy = proxy
        self.pools: dict[tuple[str, str], Pool] = {}
        self.policies: set[str] = set()
        #: Per namespace: held while a new workspace is counted and made (`check_room`).
        self.making: dict[str, asyncio.Lock] = {}
        self.background: set[asyncio.Task[None]] = set()
        #: Workspace keys with a call running or waiting (`AttemptQueues.busy`).
        self.busy: Callable[[str], bool] = lambda key: False
        #: The run meter's clock (monotonic seconds; tests step it).
        self.clock: Clock = time.monotonic
        #: Per namespace: when a call of it last waited for capacity (monotonic).
        self.pressure: dict[str, float] = {}
        #: Pool pods per (namespace, profile key) cluster-wide, as last listed (`maintain`),
        #: for the cluster-wide cap.
        self.census: dict[tuple[str, str], int] = {}
        #: Pods on their way back to their caller (`hand_back`), and whose (`owner_key`):
        #: upkeep leaves them.
        self.recycling: dict[tuple[str, str], str] = {}

    # ------------------------------------------------------------------ choosing

    def profile(self, call: Call, *, attempt: bool) -> Profile:
        assert call.descriptor is not None
        return self.profile_of(call.descriptor, attempt=attempt)

    def profile_of(self, descriptor: ToolDescriptorSpec, *, attempt: bool) -> Profile:
        sandbox = descriptor.sandbox_spec
        assert sandbox is not None
        return profile_for(
            sandbox,
            image=sandbox.image or self.settings.sandbox.image,
            runtime_class=runtime_class_for(sandbox, dict(self.settings.sandbox.runtime_classes)),
            workspace_size=(
                self.settings.warm.workspace_size if attempt else sandbox.workspace_size_limit
            ),
            image_pull_policy=self.settings.sandbox.image_pull_policy,
            image_pull_secrets=self.settings.sandbox.image_pull_secrets,
        )

    async def run(self, call: Call) -> Outcome | None:
        """Run the call warm; None: it fits no warm pod (the caller runs it cold)."""
        attempt = uses_attempt_workspace(call.descriptor, call.attempt_id)
        refusal = warm_refusal(call.descriptor, call.egress_allow)
        if refusal is not None:
            if attempt:
                return Outcome.failed(
                    FailureClass.VALIDATION,
                    f"this call cannot run in its attempt's workspace: {refusal}",
                )
            return None
        profile = self.profile(call, attempt=attempt)
        if attempt:
            try:
                pod, workspace, made = await self.workspace_pod(call, profile)
            except Refused as exc:
                # No process of this call was started in any pod: not sent (`sending`), as
                # a Job the API server refused.
                return lost(
                    call.effective_class,
                    Transmission.NOT_WRITTEN,
                    f"the attempt's workspace could not be made ready: {exc}",
                )
            except (RuntimeError, TimeoutError) as exc:
                # Nothing of this call started either, but the workspace is not ready and a
                # retry at once would most likely meet the same: Failed, not resent.
                return Outcome.failed(
                    FailureClass.TRANSIENT,
                    f"the attempt's workspace could not be made ready: {exc}",
                )
            return await self.run_in(call, pod, workspace, made=made)
        if self.settings.warm.pool_size <= 0:
            return None
        # A call that is not an attempt's takes a pool pod: demand, counted while it runs.
        # (An attempt's call is demand only when it makes its workspace: `workspace_pod`.)
        pool = self.pool_of(call.namespace, profile)
        mine = owner_key(call)
        pool.in_flight += 1
        pool.by_owner[mine] = pool.by_owner.get(mine, 0) + 1
        try:
            self.want(call.namespace, profile)
            claimed = await self.claim(call, profile)
            if claimed is None:
                claimed = await self.claim_starting(call, profile)
            if claimed is None:
                return None
            return await self.run_pooled(call, claimed)
        finally:
            pool.in_flight -= 1
            pool.by_owner[mine] -= 1
            if not pool.by_owner[mine]:
                del pool.by_owner[mine]

    def pool_of(self, namespace: str, profile: Profile) -> Pool:
        pool = self.pools.get((namespace, profile.key))
        if pool is None:
            pool = self.pools[(namespace, profile.key)] = Pool(namespace, profile)
        return pool

    def want(self, namespace: str, profile: Profile, *, started: bool = False) -> None:
        """A call of this profile was seen (or, `started`, a descriptor of it became
        active): keep (or start) its pool, resized now."""
        if self.settings.warm.pool_size <= 0:
            return
        pool = self.pool_of(namespace, profile)
        now = time.monotonic()
        if started:
            pool.started_at = now
        else:
            use = Use(now, max(1, pool.in_flight))
            pool.uses = (*trim_uses(pool.uses, now, USES_KEPT_SECONDS), use)
        self.spawn(self.refill(pool))

    def activated(self, namespace: str, descriptor: ToolDescriptorSpec) -> None:
        """A descriptor became active in `namespace`: its profile's pool starts (one pod),
        unless its calls never run warm (credential files, CIDR egress)."""
        sandbox = descriptor.sandbox_spec
        if self.settings.warm.pool_size <= 0 or sandbox is None:
            return
        allow = sandbox.egress.allow
        if allow is None:
            allow = list(self.settings.egress.default_allow)
        if warm_refusal(descriptor, allow) is not None:
            return
        attempt = sandbox.workspace == WorkspaceMode.ATTEMPT
        self.want(namespace, self.profile_of(descriptor, attempt=attempt), started=True)

    def spawn(self, coro: Awaitable[None]) -> None:
        task: asyncio.Task[None] = asyncio.ensure_future(coro)
        self.background.add(task)
        task.add_done_callback(self.background.discard)

    # ------------------------------------------------------------------ pods

    async def ensure_policy(self, namespace: str) -> None:
        if namespace in self.policies:
            return
        await self.kube.ensure_policy(build_warm_policy(namespace=namespace, proxy=self.proxy))
        self.policies.add(namespace)

    async def create_pod(
        self,
        namespace: str,
        profile: Profile,
        *,
        state: str,
        labels: dict[str, str] | None = None,
        annotations: dict[str, str] | None = None,
    ) -> dict[str, Any]:
        # The policy first: a warm pod is never without its egress rules.
        await self.ensure_policy(namespace)
        return await self.kube.create_pod(
            build_warm_pod(
                namespace=namespace,
                profile=profile,
                network_gate=self.canary,
                gate_image=self.settings.sandbox.image,
                state=state,
                labels=labels,
                annotations=annotations,
            )
        )

    def bounds(self) -> PoolBounds:
        return PoolBounds(
            most=self.settings.warm.pool_size,
            idle_seconds=self.settings.warm.pool_idle_seconds,
        )

    def pressured(self, namespace: str, now: float) -> bool:
        since = self.pressure.get(namespace)
        return since is not None and now - since < PRESSURE_SECONDS

    async def quota_room(self, pool: Pool, held: int) -> int | None:
        """The pods the namespace's quotas leave the pool (its `held` pods included) while
        one call of its profile still fits; None: no quota counts pods of it."""
        try:
            quotas = await self.kube.list_quotas(pool.namespace)
        except Exception:
            # Unknown: the pool holds what it has and grows no further (a call that needs
            # the quota goes first).
            logger.warning("reading the quotas of %s failed", pool.namespace, exc_info=True)
            return held
        if not quotas:
            return None
        room = quota_room(
            quotas,
            pod_amounts(pool.profile.idle_resource_dict()),
            pod_amounts(pool.profile.resource_dict()),
        )
        return None if room is None else held + room

    async def desired(self, pool: Pool, held: int) -> int:
        """The pods the pool should hold now (`pool_sizing.desired_size`)."""
        now = time.monotonic()
        key = (pool.namespace, pool.profile.key)
        elsewhere = sum(n for k, n in self.census.items() if k != key)
        room = self.settings.warm.pool_pods - elsewhere
        demand = pool.demand()
        bounds = self.bounds()
        pressured = self.pressured(pool.namespace, now)
        unbounded = desired_size(demand, now, bounds, room=room, pressured=pressured)
        if unbounded <= held:
            # Shrinking (or staying) needs no quota reading.
            return unbounded
        return desired_size(
            demand,
            now,
            bounds,
            room=room,
            quota_room=await self.quota_room(pool, held),
            pressured=pressured,
        )

    async def refill(self, pool: Pool) -> None:
        """Resize the pool to its desired size (`desired`): new pods created, surplus
        ready-to-claim pods deleted (only as listed: a pod claimed meanwhile is kept)."""
        if pool.refilling.locked():
            pool.again = True
            return
        async with pool.refilling:
            pool.again = True
            while pool.again:
                pool.again = False
                await self._resize(pool)

    async def _resize(self, pool: Pool) -> None:
        try:
            pods, serving = await self.profile_pods(pool.namespace, pool.profile.key)
            held = len(pods) + serving
            wanted = await self.desired(pool, held)
            for _ in range(wanted - held):
                await self.create_pod(pool.namespace, pool.profile, state=STATE_POOL)
            # Starting pods go first (they serve no call yet), then those handed back, the
            # least recently used first (they serve one caller; a new pod serves any).
            surplus = sorted(
                pods,
                key=lambda p: (pod_ready(p), not pod_caller(p), last_used(p), pod_name(p)),
            )
            for pod in surplus[: max(0, held - wanted)]:
                meta = pod["metadata"]
                await self.kube.delete_pod(
                    pool.namespace, meta["name"], resource_version=meta["resourceVersion"]
                )
            self.census[(pool.namespace, pool.profile.key)] = max(wanted, 0)
        except NotFound:
            # The namespace is gone: so is its pool (a descriptor made active anew starts it).
            pool.started_at, pool.uses = None, ()
            self.pools.pop((pool.namespace, pool.profile.key), None)
        except Refused as exc:
            # The namespace refused a pool pod (a quota, its admission, it is being
            # deleted): its pools hold off as under pressure, rather than asking each round.
            self.pressure[pool.namespace] = time.monotonic()
            logger.info(
                "the warm pool %s/%s holds off: a pod of it was refused (%s)",
                pool.namespace,
                pool.profile.key,
                exc,
            )
        except Exception:
            logger.warning(
                "resizing the warm pool %s/%s failed",
                pool.namespace,
                pool.profile.key,
                exc_info=True,
            )

    async def pool_pods(self, namespace: str, key: str) -> list[dict[str, Any]]:
        pods = await self.kube.list_pods(
            namespace, f"{LABEL_PROFILE}={key},{LABEL_STATE}={STATE_POOL}"
        )
        return [p for p in pods if not pod_ended(p)]

    async def profile_pods(self, namespace: str, key: str) -> tuple[list[dict[str, Any]], int]:
        """The pool's pods (ready to claim, or starting), and how many of its pods serve a
        call now (they come back to it when shown clean)."""
        pods = [
            p
            for p in await self.kube.list_pods(namespace, f"{LABEL_PROFILE}={key}")
            if not pod_ended(p)
        ]
        states = [(p["metadata"].get("labels") or {}).get(LABEL_STATE) for p in pods]
        pool = [p for p, state in zip(pods, states, strict=True) if state == STATE_POOL]
        return pool, states.count(STATE_CALL)

    async def claim(
        self, call: Call, profile: Profile, *, workspace: str | None = None
    ) -> dict[str, Any] | None:
        """Take a ready pod of the profile's pool for `call` (or for its attempt's
        `workspace`): a label patch the API server accepts only on the version listed."""
        now = now_iso()
        labels = {LABEL_STATE: STATE_ATTEMPT if workspace else STATE_CALL, LABEL_CALL: call.uid}
        annotations = {ANNOTATION_INVOCATION: call.name, ANNOTATION_CLAIMED_AT: now}
        if workspace:
            labels[LABEL_WORKSPACE] = workspace
            annotations.update(self.workspace_annotations(call, profile))
        mine = owner_key(call)
        ready = [p for p in await self.pool_pods(call.namespace, profile.key) if pod_ready(p)]
        # The caller's own pods first (handed back after its earlier calls), then new ones;
        # a pod another caller's call ran in is never this caller's.
        # An attempt's workspace is made only of a new pod: its calls run other tools.
        allowed = (None,) if workspace else (None, mine)
        ours = sorted(
            (p for p in ready if pod_caller(p) in allowed),
            key=lambda p: (pod_caller(p) != mine, pod_name(p)),
        )
        if not ours:
            theirs = [p for p in ready if pod_caller(p) not in allowed]
            if theirs:
                # Other callers hold every ready pod: the least recently used goes, so the
                # pool makes a new one (anyone's) in its place.
                self.spawn(self.make_way(call.namespace, min(theirs, key=last_used), profile))
        for pod in ours:
            try:
                claimed = await self.kube.patch_pod(
                    pod,
                    {"metadata": {"labels": labels, "annotations": annotations}},
                    exclusive=True,
                )
            except (Conflict, NotFound):
                continue
            pool = self.pools.get((call.namespace, profile.key))
            if pool is not None:
                self.spawn(self.refill(pool))
            return claimed
        return None

    async def claim_starting(self, call: Call, profile: Profile) -> dict[str, Any] | None:
        """No pool pod was ready: wait up to `STARTING_WAIT_SECONDS` for a pod another call
        of the caller's hands back (the longest waiting call first, `hand_back`), or for one
        of the pool's starting pods (nearer their start than a new Job), the oldest first,
        claiming any that is ready; None when none came in time (the call runs cold)."""
        deadline = time.monotonic() + STARTING_WAIT_SECONDS
        failed: set[str] = set()
        pool = self.pool_of(call.namespace, profile)
        mine = owner_key(call)
        handed: asyncio.Future[Handed] = asyncio.get_running_loop().create_future()
        pool.waiters.setdefault(mine, deque()).append(handed)
        taken = False
        try:
            while True:
                returned = pool.returned
                starting = [
                    p
                    for p in await self.pool_pods(call.namespace, profile.key)
                    if not pod_ready(p) and not pod_unschedulable(p) and pod_name(p) not in failed
                ]
                remaining = deadline - time.monotonic()
                # Other calls of this caller and tool may hand their pods back (no other
                # caller's would come to it).
                others = pool.by_owner.get(mine, 0) > 1 or mine in self.recycling.values()
                if (not starting and not others and not handed.done()) or remaining <= 0:
                    return None
                helpers: list[asyncio.Future[Any]] = [asyncio.ensure_future(returned.wait())]
                if starting:
                    oldest = min(
                        starting, key=lambda p: p["metadata"].get("creationTimestamp") or ""
                    )
                    helpers.append(
                        asyncio.ensure_future(
                            self.kube.wait_ready(
                                call.namespace, pod_name(oldest), timeout=remaining
                            )
                        )
                    )
                try:
                    # Looked at again each `RELIST_SECONDS`: a pod the pool started meanwhile.
                    await asyncio.wait(
                        [handed, *helpers],
                        timeout=min(remaining, RELIST_SECONDS),
                        return_when=asyncio.FIRST_COMPLETED,
                    )
                finally:
                    for helper in helpers:
                        helper.cancel()
                if starting and helpers[1].done() and not helpers[1].cancelled():
                    if helpers[1].exception() is not None:
                        failed.add(pod_name(oldest))  # gone or failing: wait for another
                if handed.done():
                    taken = True
                    claimed = await self.take_handed(call, *handed.result())
                    if claimed is not None:
                        return claimed
                    handed = asyncio.get_running_loop().create_future()
                    pool.waiters.setdefault(mine, deque()).append(handed)
                    taken = False
                claimed = await self.claim(call, profile)
                if claimed is not None:
                    return claimed
        finally:
            queue = pool.waiters.get(mine)
            if queue is not None and handed in queue:
                queue.remove(handed)
            if handed.done() and not handed.cancelled() and not taken:
                # A pod was handed to this call as it stopped waiting: back to the pool.
                pod, used = handed.result()
                self.spawn(self.hand_back(call, pod, used=used))
            elif not handed.done():
                handed.cancel()

    async def take_handed(
        self, call: Call, pod: dict[str, Any], used: dict[str, str]
    ) -> dict[str, Any] | None:
        """Claim a pod an ended call of the caller's handed to this one (no one else could
        take it: its state is still `call`). None: it is gone."""
        labels = {LABEL_STATE: STATE_CALL, LABEL_CALL: call.uid}
        annotations = {ANNOTATION_INVOCATION: call.name, ANNOTATION_CLAIMED_AT: now_iso(), **used}
        try:
            return await self.kube.patch_pod(
                pod, {"metadata": {"labels": labels, "annotations": annotations}}
            )
        except Exception:
            logger.warning("taking handed warm pod %s failed", pod_name(pod), exc_info=True)
            await self.forget_pod(call.namespace, pod_name(pod))
            return None

    async def give_way(self, namespace: str, reason: str) -> list[str]:
        """A call of `namespace` waits for capacity (`reason`: `quota` or `unschedulable`):
        its pool pods are deleted (pools go first) and stay away for `PRESSURE_SECONDS`;
        when there were none, its oldest idle attempt workspace is released (made again on
        the attempt's next call). The names of the pods deleted."""
        self.pressure[namespace] = time.monotonic()
        gone: list[str] = []
        for pod in await self.kube.list_pods(namespace, f"{LABEL_STATE}={STATE_POOL}"):
            meta = pod["metadata"]
            if pod_ended(pod):
                continue
            if await self.kube.delete_pod(
                namespace, meta["name"], resource_version=meta["resourceVersion"]
            ):
                gone.append(meta["name"])
                WARM_GAVE_WAY.labels("pool", reason).inc()
        if gone:
            logger.info("warm pool pods of %s gave way to a waiting call: %s", namespace, gone)
            return gone
        idle = sorted(
            (
                p
                for p in await self.kube.list_pods(namespace, f"{LABEL_STATE}={STATE_ATTEMPT}")
                if not pod_ended(p)
                and not self.busy((p["metadata"].get("labels") or {}).get(LABEL_WORKSPACE, ""))
            ),
            key=last_used,
        )
        for pod in idle[:1]:
            meta = pod["metadata"]
            if await self.kube.delete_pod(
                namespace, meta["name"], resource_version=meta["resourceVersion"]
            ):
                gone.append(meta["name"])
                WARM_GAVE_WAY.labels("workspace", reason).inc()
                logger.info(
                    "idle workspace %s/%s gave way to a waiting call", namespace, meta["name"]
                )
        return gone

    def workspace_annotations(self, call: Call, profile: Profile) -> dict[str, str]:
        return {
            ANNOTATION_CALLER: call.caller,
            ANNOTATION_ATTEMPT: call.attempt_id or "",
            ANNOTATION_SIZE: profile.workspace_size,
        }

    async def workspace_pod(
        self, call: Call, profile: Profile
    ) -> tuple[dict[str, Any], WorkspaceLease, bool]:
        """The attempt's workspace pod, ready: its own, else a pool's, else a new one (then
        True: the call waited for a pod to start, a cold start)."""
        assert call.attempt_id
        key = workspace_key(call.namespace, call.caller, call.attempt_id)
        found = await self.kube.list_pods(call.namespace, f"{LABEL_WORKSPACE}={key}")
        live = sorted(
            (p for p in found if not pod_ended(p)),
            key=lambda p: p["metadata"].get("creationTimestamp") or "",
        )
        for extra in live[:-1]:
            await self.kube.delete_pod(call.namespace, extra["metadata"]["name"])
        fresh = not live
        made = False
        if live:
            pod = live[-1]
            held = (pod["metadata"].get("labels") or {}).get(LABEL_PROFILE)
            if held != profile.key:
                # The workspace is shared by the attempt's tools, but its pod is one
                # profile's (image, RuntimeClass, resources): a call of another profile
                # never runs in it (a GVisor tool under runc, a tool beyond its limits).
                raise RuntimeError(
                    "the attempt's workspace runs another sandbox profile (image, "
                    "RuntimeClass or resources) than this tool's; release it or use "
                    "another attemptId"
                )
            if not pod_ready(pod):
                pod = await self.kube.wait_ready(
                    call.namespace,
                    pod["metadata"]["name"],
                    timeout=self.settings.warm.start_seconds,
                )
        else:
            # The count and the new workspace under one lock per namespace: first calls of
            # many attempts at once would otherwise all count the same pods, and all pass.
            async with self.making.setdefault(call.namespace, asyncio.Lock()):
                await self.check_room(call.namespace)
                self.want(call.namespace, profile)
                claimed = await self.claim(call, profile, workspace=key)
                if claimed is None:
                    created = await self.create_pod(
                        call.namespace,
                        profile,
                        state=STATE_ATTEMPT,
                        labels={LABEL_WORKSPACE: key, LABEL_CALL: call.uid},
                        annotations={
                            ANNOTATION_INVOCATION: call.name,
                            ANNOTATION_CLAIMED_AT: now_iso(),
                            **self.workspace_annotations(call, profile),
                        },
                    )
            if claimed is not None:
                pod = claimed
            else:
                made = True
                try:
                    pod = await self.kube.wait_ready(
                        call.namespace,
                        created["metadata"]["name"],
                        timeout=self.settings.warm.start_seconds,
                    )
                except BaseException:
                    await self.kube.delete_pod(call.namespace, created["metadata"]["name"])
                    raise
        annotations = pod["metadata"].get("annotations") or {}
        workspace = WorkspaceLease(
            id=pod["metadata"]["name"],
            size_limit=annotations.get(ANNOTATION_SIZE) or profile.workspace_size,
            created_at=annotations.get(ANNOTATION_CLAIMED_AT)
            or pod["metadata"].get("creationTimestamp")
            or now_iso(),
            last_used_at=annotations.get(ANNOTATION_LAST_USED),
            fresh=fresh,
        )
        if not fresh:
            # The call that runs now is on the pod, for a resume after a restart.
            pod = await self.kube.patch_pod(
                pod,
                {
                    "metadata": {
                        "labels": {LABEL_CALL: call.uid},
                        "annotations": {ANNOTATION_INVOCATION: call.name},
                    }
                },
            )
        return pod, workspace, made

    async def check_workspace(self, namespace: str, caller: str, attempt_id: str) -> WorkspaceCheck:
        """Before a call of an attempt: its workspace may hold no git configuration that
        would run a command or send requests elsewhere (`sandbox.gitconfig`). An attempt
        without a workspace pod yet has nothing to carry. Runs while the call holds its
        attempt's turn, so no call of the attempt runs meanwhile, and the check stops what
        an earlier one left running before it lists: nothing changes the workspace between
        this check and the call's run."""
        key = workspace_key(namespace, caller, attempt_id)
        live = sorted(
            (
                p
                for p in await self.kube.list_pods(namespace, f"{LABEL_WORKSPACE}={key}")
                if not pod_ended(p)
            ),
            key=lambda p: p["metadata"].get("creationTimestamp") or "",
        )
        if not live:
            return WorkspaceCheck()
        name = live[-1]["metadata"]["name"]
        what = f"the attempt's workspace {name} could not be checked for git configuration"
        try:
            if not pod_ready(live[-1]):
                await self.kube.wait_ready(
                    namespace, name, timeout=self.settings.warm.start_seconds
                )
            async with asyncio.timeout(CHECK_TIMEOUT_SECONDS):
                result = await self.kube.exec(
                    namespace, name, check_command(), stdin=b"", max_bytes=CHECK_MAX_BYTES
                )
        except Exception as exc:
            return WorkspaceCheck(unchecked=f"{what} ({type(exc).__name__}: {exc})")
        if result.exit_code != 0:
            said = result.stderr.decode("utf-8", errors="replace").strip()[-300:]
            return WorkspaceCheck(
                unchecked=f"{what} (the check ended with {result.exit_code}: {said})"
            )
        files, whole = parse_scan(result.stdout)
        if not whole:
            return WorkspaceCheck(
                unchecked=f"{what} (its listing exceeded {CHECK_MAX_BYTES} bytes or was cut)"
            )
        found = findings(files)
        if found:
            return WorkspaceCheck(checked=True, refused=refusal(found))
        return WorkspaceCheck(checked=True)

    async def check_room(self, namespace: str) -> None:
        """Refuse one more workspace in a namespace that holds its share already."""
        held = [
            p
            for p in await self.kube.list_pods(namespace, f"{LABEL_STATE}={STATE_ATTEMPT}")
            if not pod_ended(p)
        ]
        cap = self.settings.warm.workspaces_per_namespace
        if len(held) >= cap:
            raise Refused(
                f"namespace {namespace} holds {len(held)} attempt workspaces, its limit "
                f"(TOOLADAPTER_WORKSPACES_PER_NAMESPACE={cap}): release one (tooladapter "
                "workspace release) or let one go idle"
            )

    # ------------------------------------------------------------------ running

    async def proxy_inputs(self, call: Call) -> tuple[str | None, str | None]:
        """(the proxy URL, the trust bundle with the lease CA) of the call's proxy Secret."""
        if call.proxy_bypass is None:
            return None, None
        data = await self.read_secret(call.namespace, LeaseNames.for_uid(call.uid).proxy_secret)
        value = data.get(PROXY_URL_KEY)
        bundle = data.get(CA_BUNDLE_KEY)
        return (decode_b64(value) if value else None), (decode_b64(bundle) if bundle else None)

    async def run_in(
        self,
        call: Call,
        pod: dict[str, Any],
        workspace: WorkspaceLease,
        *,
        made: bool = False,
    ) -> Outcome:
        """Run an attempt's call in its workspace `pod`; `made`: the pod was started for
        this call (a cold start, so said on the receipt), not taken ready."""
        name = pod["metadata"]["name"]
        run = SandboxRun(SandboxStart.COLD if made else SandboxStart.WARM, name, workspace)
        outcome, _ = await self._run_in(call, name, workspace, gate_mark=gated_in_container(pod))
        assert outcome is not None  # only a pool pod's call is sent elsewhere
        return replace(outcome, sandbox_run=run)

    async def run_pooled(self, call: Call, pod: dict[str, Any]) -> Outcome | None:
        """Run a call in the pool pod it claimed. None: the tool never started there (the
        pod held what an earlier call left, and could not be emptied): the call runs cold.
        A clean end hands the pod back (`hand_back`); any other deletes it."""
        name = pod["metadata"]["name"]
        clean = False
        try:
            outcome, clean = await self._run_in(
                call,
                name,
                None,
                gate_mark=gated_in_container(pod),
                fresh=True,
                reused=served_calls(pod) > 0,
            )
        finally:
            # Its label (state `call`) keeps the pod from every claim, so neither its
            # return nor its deletion holds up the call's end; upkeep deletes it if both
            # fail.
            if clean:
                # Counted from now: a call that finds no pod waits for this one.
                self.recycling[(call.namespace, name)] = owner_key(call)
                self.spawn(self.hand_back(call, pod))
            else:
                self.spawn(self.forget_pod(call.namespace, name))
        if outcome is None:
            return None
        return replace(outcome, sandbox_run=SandboxRun(SandboxStart.WARM, name, None))

    async def hand_back(
        self, call: Call, pod: dict[str, Any], *, used: dict[str, str] | None = None
    ) -> None:
        """A pool pod whose call ended cleanly goes back to its caller: to a call of theirs
        waiting for a pod (`claim_starting`), else to the pool, labelled theirs alone. Its
        next call's run script stops and empties whatever is left before the tool starts
        (`POOL_RUN_SCRIPT`), in an exec no earlier tool saw. After `MOST_CALLS_PER_POD`
        calls, or when the hand-over fails, the pod is deleted."""
        meta = pod["metadata"]
        namespace, name = call.namespace, meta["name"]
        # A pod handed on by a waiting call that stopped waiting was counted already.
        served = served_calls(pod) + (0 if used else 1)
        mine = owner_key(call)
        pool = self.pools.get((namespace, (meta.get("labels") or {}).get(LABEL_PROFILE, "")))
        used = used or {ANNOTATION_LAST_USED: now_iso(), ANNOTATION_CALLS: str(served)}
        try:
            if served < MOST_CALLS_PER_POD:
                waiter = pool.take_waiter(mine) if pool is not None else None
                if waiter is not None:
                    waiter.set_result((pod, used))
                    return
                back = {LABEL_STATE: STATE_POOL, LABEL_CALL: None, LABEL_CALLER: mine}
                await self.kube.patch_pod(
                    pod,
                    {
                        "metadata": {
                            "labels": back,
                            "annotations": {
                                ANNOTATION_INVOCATION: None,
                                ANNOTATION_CLAIMED_AT: None,
                                **used,
                            },
                        }
                    },
                )
                if pool is not None:
                    pool.hand_back()
                return
        except Exception:
            logger.warning("handing back warm pod %s/%s failed", namespace, name, exc_info=True)
        finally:
            self.recycling.pop((namespace, name), None)
        await self.forget_pod(namespace, name)

    async def make_way(self, namespace: str, pod: dict[str, Any], profile: Profile) -> None:
        """Delete a ready pod another caller's calls hold (as listed: one claimed meanwhile
        stays), and resize the pool, which makes a new pod in its place."""
        meta = pod["metadata"]
        try:
            await self.kube.delete_pod(
                namespace, meta["name"], resource_version=meta.get("resourceVersion")
            )
        except Exception:
            logger.warning("deleting warm pod %s/%s failed", namespace, meta["name"])
        await self.refill(self.pool_of(namespace, profile))

    async def forget_pod(self, namespace: str, name: str) -> None:
        try:
            await self.kube.delete_pod(namespace, name)
        except Exception:
            logger.warning("deleting warm pod %s/%s failed", namespace, name, exc_info=True)

    async def _run_in(
        self,
        call: Call,
        name: str,
        workspace: WorkspaceLease | None,
        *,
        gate_mark: bool,
        fresh: bool = False,
        reused: bool = False,
    ) -> tuple[Outcome | None, bool]:
        """The call's outcome (None: a pool pod's call, `fresh`, that never started because
        the pod held what an earlier call left), and whether the tool's exec came to a
        clean end (it exited and its script stopped what it left): only then does a pool
        pod go back to its caller."""
        lost = "; the attempt's workspace may have changed" if workspace is not None else ""
        try:
            url, bundle = await self.proxy_inputs(call)
            stdin = run_input(url, call.arguments, bundle)
            command = run_command(call.argv, gate_mark=gate_mark, fresh=fresh, reused=reused)
        except (NotFound, ValueError) as exc:
            return Outcome.failed(
                FailureClass.INTERNAL, f"the warm sandbox call could not be set up: {exc}"
            ), False
        # The tool may start once the exec begins: the run meter counts from here, on the
        # operator's own clock (`executors.meter`).
        started = self.clock()
        execution = asyncio.ensure_future(
            self.kube.exec(
                call.namespace,
                name,
                command,
                stdin=stdin,
                max_bytes=read_limit(call.limits.max_result_bytes) + 1,
            )
        )
        interrupt = asyncio.ensure_future(call.interrupted.wait())
        try:
            async with call.outside():
                done, _ = await asyncio.wait(
                    {execution, interrupt},
                    timeout=call.limits.timeout_seconds,
                    return_when=asyncio.FIRST_COMPLETED,
                )
        except BaseException:
            execution.cancel()
            raise
        finally:
            interrupt.cancel()
        seconds = metered(self.clock() - started)
        if execution not in done:
            execution.cancel()
            left = await self.stop(call.namespace, name, workspace)
            if interrupt in done:
                contained = call.effective_class.effects_contained
                return Outcome(
                    InvocationState.CANCELLED if contained else InvocationState.UNCERTAIN,
                    failure_class=(
                        FailureClass.CANCELLED if contained else FailureClass.EFFECT_UNCONFIRMED
                    ),
                    message=f"interrupted while the tool ran in warm sandbox {name} ({left}){lost}",
                    sandbox_seconds=seconds,
                ), False
            return replace(
                unconfirmed_for(
                    call.effective_class,
                    f"the tool ran past its timeout of {call.limits.timeout_seconds}s in warm "
                    f"sandbox {name} ({left}){lost}",
                    failure=FailureClass.TIMEOUT,
                ),
                sandbox_seconds=seconds,
            ), False
        try:
            result: ExecResult = execution.result()
        except Exception as exc:
            left = await self.stop(call.namespace, name, workspace)
            return replace(
                unconfirmed(
                    call,
                    f"the answer of the tool in warm sandbox {name} was lost "
                    f"({type(exc).__name__}: {exc}; {left}){lost}",
                ),
                sandbox_seconds=seconds,
            ), False
        # Whether the tool started is read off what the script wrote before it (the head of
        # stderr): a tool that writes more than the tail holds cannot push its start mark
        # out and be taken for never started (then failed, or run again elsewhere).
        if not_started(result.head):
            if fresh and earlier_call_left(result.head):
                logger.info("pool pod %s/%s held what an earlier call left", call.namespace, name)
                return None, False
            why = (
                "holds no mark of its network gate having passed (handed out before it did, "
                "or the mark was removed by an earlier call of the attempt)"
                if gate_not_passed(result.head)
                else "could not be readied for the call (an earlier call's processes could "
                "not be stopped, or its files not written)"
            )
            return Outcome.failed(
                FailureClass.TRANSIENT, f"warm sandbox {name} {why}; the tool never started"
            ), False
        remaining = processes_left(result.stderr)
        # A pool pod's script exits 0 only at its end, the tool's code reported before it.
        ended = fresh and result.exit_code == 0
        code = tool_exit(result.stderr) if ended else result.exit_code
        if remaining != 0 or workspace is not None:
            # The run script did not report a clean end, or the pod lives on as the
            # attempt's workspace: its report cannot be believed there (the tool runs as
            # the same user, so it can write the script's stderr and kill the script before
            # the real report). A stop of its own, in an exec the tool never saw, shows the
            # end; a workspace that still holds a process of the call is not handed on.
            await self.stop(call.namespace, name, workspace)
        if code is None:
            return replace(
                unconfirmed(
                    call,
                    f"the exec in warm sandbox {name} ended without an exit code "
                    f"({result.status.get('message') or 'no message'}){lost}",
                ),
                sandbox_seconds=seconds,
            ), False
        if workspace is not None:
            # Off the call's path: only the idle release reads it, and a call of the
            # attempt that runs or waits keeps the workspace anyway (`busy`).
            self.spawn(self.touch(call.namespace, name))
        answer = replace(exited(result.stdout, code), sandbox_seconds=seconds)
        return answer, ended and remaining == 0 and not ipc_left(result.stderr)

    async def stop(self, namespace: str, name: str, workspace: WorkspaceLease | None) -> str:
        """Kill every process a call left in the pod; a pod where that cannot be shown is
        deleted (a workspace with it). Says what happened, for the call's message."""
        try:
            async with asyncio.timeout(STOP_TIMEOUT_SECONDS):
                result = await self.kube.exec(
                    namespace, name, ["/bin/sh", "-c", STOP_SCRIPT], stdin=b"", max_bytes=0
                )
            # Exit 0 too: the script reports only after its kill and count, and exits 0
            # only after that report; a script killed before (by a process it was to
            # stop) may end with a report that process wrote.
            if result.exit_code == 0 and processes_left(result.stderr) == 0:
                return "every process of the call was stopped"
        except Exception:
            logger.warning("stopping the call in warm pod %s/%s failed", namespace, name)
        await self.kube.delete_pod(namespace, name)
        what = "its workspace was deleted" if workspace is not None else "the pod was deleted"
        return f"the call's processes could not be shown stopped: {what}"

    async def touch(self, namespace: str, name: str) -> None:
        """The workspace's last use, which its idle release counts from."""
        try:
            await self.kube.patch_pod(
                {"metadata": {"name": name, "namespace": namespace}},
                {"metadata": {"annotations": {ANNOTATION_LAST_USED: now_iso()}}},
            )
        except NotFound:
            pass  # released meanwhile
        except Exception:
            logger.warning("recording the last use of %s/%s failed", namespace, name)

    async def resume(self, call: Call) -> Outcome | None:
        """A warm call whose operator stopped: its processes are killed (never run again)
        and it settles as unconfirmed. None: the call ran in no warm pod (a Job, maybe)."""
        pods = await self.kube.list_pods(call.namespace, f"{LABEL_CALL}={call.uid}")
        if not pods:
            return None
        pod = pods[0]
        name = pod["metadata"]["name"]
        state = (pod["metadata"].get("labels") or {}).get(LABEL_STATE)
        workspace = state == STATE_ATTEMPT
        if workspace and not pod_ended(pod):
            left = await self.stop(call.namespace, name, None)
        else:
            await self.kube.delete_pod(call.namespace, name)
            left = "the pod was deleted"
        lost = "; the attempt's workspace may have changed" if workspace else ""
        return replace(
            unconfirmed(
                call,
                f"the operator stopped while the tool ran in warm sandbox {name} ({left}){lost}",
            ),
            sandbox_run=SandboxRun(SandboxStart.WARM, name),
        )

    # ------------------------------------------------------------------ upkeep

    async def release(
        self, namespace: str, caller: str, attempt_id: str, *, made_before: str | None = None
    ) -> list[str]:
        """Release an attempt's workspace now: its pod (and volume) deleted. The names of
        the pods deleted (none: there was none). `made_before` (RFC 3339): only pods made
        before then (a later call's new workspace stays; a pod's creationTimestamp has whole
        seconds, so one made in the same second stays too)."""
        key = workspace_key(namespace, caller, attempt_id)
        before = parse_time(made_before).replace(microsecond=0) if made_before is not None else None
        gone: list[str] = []
        for pod in await self.kube.list_pods(namespace, f"{LABEL_WORKSPACE}={key}"):
            created = pod["metadata"].get("creationTimestamp")
            if before is not None and (not created or parse_time(created) >= before):
                continue
            if await self.kube.delete_pod(namespace, pod["metadata"]["name"]):
                gone.append(pod["metadata"]["name"])
        return gone

    async def maintain(self, serves: Callable[[str], bool], call_ended: CallEnded) -> None:
        """One round of upkeep: pools adopted (after a restart) and resized (idle ones to
        zero), idle workspaces released, pods of calls that ended (an operator restart)
        deleted, what idle warm pods hold exported (`metrics`)."""
        # The policies are made again when next needed (a namespace deleted and made anew
        # has none; a pod without it would never pass its gate, failing closed).
        self.policies.clear()
        pods = await self.kube.list_pods(None, f"{LABEL_WARM}=true")
        self.count_pools(pods)
        self.adopt(pods, serves)
        now = time.monotonic()
        idle = self.settings.warm.pool_idle_seconds
        for key, pool in list(self.pools.items()):
            await self.refill(pool)
            last = pool.demand().last_seen()
            if last is None or now - last > idle:
                del self.pools[key]
        wall = time.time()
        for pod in pods:
            meta = pod["metadata"]
            namespace, name = meta["namespace"], meta["name"]
            if not serves(namespace):
                continue
            labels = meta.get("labels") or {}
            annotations = meta.get("annotations") or {}
            state = labels.get(LABEL_STATE)
            try:
                if state == STATE_POOL:
                    if (namespace, labels.get(LABEL_PROFILE, "")) not in self.pools:
                        await self.kube.delete_pod(
                            namespace, name, resource_version=meta.get("resourceVersion")
                        )
                        logger.info("drained warm pod %s/%s", namespace, name)
                elif state == STATE_ATTEMPT:
                    key = labels.get(LABEL_WORKSPACE, "")
                    since = annotations.get(ANNOTATION_LAST_USED) or annotations.get(
                        ANNOTATION_CLAIMED_AT
                    )
                    idle_for = wall - parse_time(since).timestamp() if since else float("inf")
                    if not self.busy(key) and (
                        idle_for > self.settings.warm.workspace_idle_seconds or pod_ended(pod)
                    ):
                        await self.kube.delete_pod(namespace, name)
                        logger.info("released idle workspace %s/%s", namespace, name)
                elif state == STATE_CALL and (namespace, name) not in self.recycling:
                    invocation = annotations.get(ANNOTATION_INVOCATION, "")
                    if await call_ended(namespace, invocation, labels.get(LABEL_CALL, "")):
                        # As listed: a pod handed to the caller's next call meanwhile stays.
                        await self.kube.delete_pod(
                            namespace, name, resource_version=meta.get("resourceVersion")
                        )
            except Exception:
                logger.warning("warm pod upkeep of %s/%s failed", namespace, name, exc_info=True)
        self.export_idle(pods, serves)

    def count_pools(self, pods: list[dict[str, Any]]) -> None:
        """The pool pods of every namespace, for the cluster-wide cap."""
        census: dict[tuple[str, str], int] = {}
        for pod in pods:
            labels = pod["metadata"].get("labels") or {}
            if labels.get(LABEL_STATE) == STATE_POOL and not pod_ended(pod):
                key = (pod["metadata"]["namespace"], labels.get(LABEL_PROFILE, ""))
                census[key] = census.get(key, 0) + 1
        self.census = census

    def adopt(self, pods: list[dict[str, Any]], serves: Callable[[str], bool]) -> None:
        """Pools this process does not know yet (it restarted, or took the namespace over)
        are taken up from their pods: the idle time counts from the latest a pod was made
        or handed back after a call (`last_used`). Pods whose profile cannot be read are
        drained (`maintain`)."""
        if self.settings.warm.pool_size <= 0:
            return
        now, wall = time.monotonic(), time.time()
        newest: dict[tuple[str, str], tuple[str, Profile]] = {}
        for pod in pods:
            meta = pod["metadata"]
            labels = meta.get("labels") or {}
            key = (meta["namespace"], labels.get(LABEL_PROFILE, ""))
            created = meta.get("creationTimestamp") and last_used(pod)
            if (
                labels.get(LABEL_STATE) != STATE_POOL
                or pod_ended(pod)
                or not created
                or key in self.pools
                or not serves(key[0])
            ):
                continue
            profile = profile_from_annotation(
                (meta.get("annotations") or {}).get(ANNOTATION_PROFILE), key[1]
            )
            if profile is not None and (key not in newest or newest[key][0] < created):
                newest[key] = (created, profile)
        for (namespace, profile_key), (newest_at, found) in newest.items():
            started = now - max(0.0, wall - parse_time(newest_at).timestamp())
            self.pools[(namespace, profile_key)] = Pool(namespace, found, started)
            logger.info("adopted the warm pool %s/%s", namespace, profile_key)

    def export_idle(self, pods: list[dict[str, Any]], serves: Callable[[str], bool]) -> None:
        """What idle warm pods (pool pods, workspaces with no call) request (`metrics`)."""
        counts = {"pool": 0, "workspace": 0}
        cpus = {"pool": Decimal(0), "workspace": Decimal(0)}
        memories = {"pool": Decimal(0), "workspace": Decimal(0)}
        for pod in pods:
            meta = pod["metadata"]
            labels = meta.get("labels") or {}
            if pod_ended(pod) or not serves(meta["namespace"]):
                continue
            state = labels.get(LABEL_STATE)
            if state == STATE_POOL:
                kind = "pool"
            elif state == STATE_ATTEMPT and not self.busy(labels.get(LABEL_WORKSPACE, "")):
                kind = "workspace"
            else:
                continue
            cpu, memory = pod_requests(pod)
            counts[kind] += 1
            cpus[kind] += cpu
            memories[kind] += memory
        for kind, count in counts.items():
            WARM_IDLE_PODS.labels(kind).set(count)
            WARM_IDLE_CPU.labels(kind).set(float(cpus[kind]))
            WARM_IDLE_MEMORY.labels(kind).set(float(memories[kind]))


def last_used(pod: dict[str, Any]) -> str:
    """When a workspace or a handed-back pool pod was last used (RFC 3339, so it sorts; a new
    pod's creation), for the oldest first."""
    meta = pod["metadata"]
    annotations = meta.get("annotations") or {}
    return str(
        annotations.get(ANNOTATION_LAST_USED)
        or annotations.get(ANNOTATION_CLAIMED_AT)
        or meta.get("creationTimestamp")
        or ""
    )


def owner_key(call: Call) -> str:
    """Whom a pool pod the call used is handed back to (`caller_key`): its caller's calls
    of its tool version."""
    assert call.descriptor is not None
    tool = f"{call.descriptor.tool_id}@{call.descriptor.version}"
    return caller_key(call.namespace, call.caller, tool)


def pod_name(pod: dict[str, Any]) -> str:
    return str(pod["metadata"]["name"])


def pod_caller(pod: dict[str, Any]) -> str | None:
    """The caller (`caller_key`) a handed-back pool pod serves; None: a new pod (anyone's)."""
    return (pod["metadata"].get("labels") or {}).get(LABEL_CALLER)


def served_calls(pod: dict[str, Any]) -> int:
    """How many calls a pool pod has served (`ANNOTATION_CALLS`)."""
    try:
        return int((pod["metadata"].get("annotations") or {}).get(ANNOTATION_CALLS) or 0)
    except ValueError:
        return MOST_CALLS_PER_POD


def pod_unschedulable(pod: dict[str, Any]) -> bool:
    """The scheduler found no node for it (so far): not worth a call's wait."""
    for condition in (pod.get("status") or {}).get("conditions") or []:
        if condition.get("type") == "PodScheduled":
            return bool(condition.get("status") == "False")
    return False


__all__ = ["WarmSandboxes", "WorkspaceCheck"]
