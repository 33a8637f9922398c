"""Part 3: a trivial shell tool, sequential and concurrent, against bare Jobs with the
operator's pod spec and with the tool container alone."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import time
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

from .api import Api, ns_path
from .base import BenchBase
from .calls import Call, Tracker, invocation_terminal
from .config import BENCH_JOB_MANAGER, LABEL_PHASE
from .stats import latency_summary, ratio, stage_breakdown


class Sandbox(BenchBase):
    async def sandbox(self) -> None:
        ok, why = await self.pods_work()
        if not ok:
            self.report["not_measured"]["sandbox"] = why
            print(f"sandbox: not measured: {why}", flush=True)
            return
        assert self.kube is not None
        tracker = Tracker(invocation_terminal)
        ready = asyncio.Event()
        watcher = asyncio.ensure_future(
            self.kube.watch(
                self.path_for("sh"),
                tracker.handle,
                params={"labelSelector": f"{LABEL_PHASE}=sandbox"},
                ready=ready,
            )
        )
        jobs = JobWatcher(self.kube, self.ns)
        await asyncio.wait_for(ready.wait(), 30)
        await jobs.start()
        idx = 0

        async def ours() -> Call:
            nonlocal idx
            idx += 1
            rec_event = asyncio.Event()
            target = time.time()
            agent = self.agents[idx % len(self.agents)]
            rec = Call(name=f"sandbox-{idx}", target=target, event=rec_event)
            tracker.add(rec)
            rec.sent = target
            status, body = await agent.api.call(
                "POST", self.path_for("sh"), self.body_for("sh", rec.name, "sandbox", agent)
            )
            rec.created, rec.http_status = time.time(), status
            if status != 201:
                tracker.fail(rec, f"HTTP {status}: {body}")
                return rec
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(rec_event.wait(), 300)
            return rec

        # The pod-level floor needs a canary like the operator's: a listener on the node's
        # address that the NetworkPolicy makes unreachable (see pipeline.sandbox.GATE_SCRIPT).
        canary = await asyncio.start_server(_close_connection, host=self.host, port=0)
        gate = (self.host, int(canary.sockets[0].getsockname()[1]))

        async def same_pod_spec() -> Call:
            return await jobs.run_one(gate=gate)

        async def tool_only() -> Call:
            return await jobs.run_one()

        variants: list[tuple[str, Callable[[], Awaitable[Call]]]] = [
            ("ours", ours),
            ("job_same_pod_spec", same_pod_spec),
            ("job_tool_only", tool_only),
        ]
        seq: dict[str, list[Call]] = {label: [] for label, _ in variants}
        conc: dict[str, list[Call]] = {label: [] for label, _ in variants}
        makespans: dict[str, list[float]] = {label: [] for label, _ in variants}
        try:
            # One unmeasured call of each warms the image and the kubelet's caches; then the
            # variants take turns, so drift on a shared machine hits them alike.
            for _, fn in variants:
                await fn()
            for _ in range(self.cfg.sandbox_sequential):
                for label, fn in variants:
                    seq[label].append(await fn())
            for _ in range(self.cfg.sandbox_rounds):
                for label, fn in variants:
                    t0 = time.time()
                    batch = await asyncio.gather(
                        *[fn() for _ in range(self.cfg.sandbox_concurrent)]
                    )
                    makespans[label].append(max((c.done or time.time()) for c in batch) - t0)
                    conc[label] += batch
        finally:
            canary.close()
            watcher.cancel()
            await jobs.stop()
        out: dict[str, Any] = {
            "floors": {
                "job_same_pod_spec": "a bare Job with the operator's pod spec (network-gate init "
                "container) and its default-deny NetworkPolicy, created by the bench",
                "job_tool_only": "a bare Job of the tool container alone (no gate, no policy)",
            },
            "concurrency": self.cfg.sandbox_concurrent,
        }
        for label, _ in variants:
            calls = seq[label] + conc[label]
            out[label] = {
                "sequential": latency_summary(
                    [c.done - c.target for c in seq[label] if c.state == "Observed"]
                ),
                "concurrent": latency_summary(
                    [c.done - c.target for c in conc[label] if c.state == "Observed"]
                ),
                "concurrent_makespan_s": [round(m, 2) for m in makespans[label]],
                "errors": [c.error or c.state for c in calls if c.state != "Observed"][:5],
                "error_count": sum(1 for c in calls if c.state != "Observed"),
            }
        out["stages"] = stage_breakdown(seq["ours"] + conc["ours"])
        ratios = {}
        for floor in ("job_same_pod_spec", "job_tool_only"):
            for mode in ("sequential", "concurrent"):
                for p in ("p50_ms", "p95_ms"):
                    ratios[f"vs {floor}: {mode} {p}"] = ratio(
                        out["ours"][mode][p], out[floor][mode][p]
                    )
        out["ratios_vs_bare_job"] = ratios
        self.report["sandbox"] = out
        print(f"sandbox: {json.dumps(ratios)}", flush=True)

    async def pods_work(self) -> tuple[bool, str]:
        """A tiny Job with the sandbox pod spec: does the node run pods at all right now?"""
        assert self.kube is not None
        jobs = JobWatcher(self.kube, self.ns)
        await jobs.start()
        try:
            rec = await jobs.run_one(timeout=120)
        finally:
            await jobs.stop()
        if rec.state == "Observed":
            return True, ""
        _status, events = await self.kube.call(
            "GET", ns_path("", "v1", self.ns, "events"), params={"fieldSelector": "type=Warning"}
        )
        messages = sorted(
            {
                f"{e.get('reason')}: {e.get('message')}"[:300]
                for e in (events or {}).get("items", [])
                if e.get("involvedObject", {}).get("kind") == "Pod"
            }
        )
        return False, f"a bare Job did not complete in 120 s ({rec.error or rec.state}); " + (
            "; ".join(messages[:3]) or "no pod warning events"
        )


async def _close_connection(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    writer.close()


class JobWatcher:
    """The sandbox floor: a bare Job with the operator's pod spec, create -> Complete + log."""

    def __init__(self, kube: Api, namespace: str) -> None:
        self.kube = kube
        self.ns = namespace
        self.waiting: dict[str, tuple[asyncio.Event, list[Any]]] = {}
        self.task: asyncio.Future[None] | None = None

    async def start(self) -> None:
        ready = asyncio.Event()
        self.task = asyncio.ensure_future(
            self.kube.watch(
                ns_path("batch", "v1", self.ns, "jobs"),
                self.handle,
                params={"labelSelector": f"app.kubernetes.io/managed-by={BENCH_JOB_MANAGER}"},
                ready=ready,
            )
        )
        await asyncio.wait_for(ready.wait(), 30)

    async def stop(self) -> None:
        if self.task is not None:
            self.task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self.task

    def handle(self, kind: str, obj: dict[str, Any], now: float) -> None:
        name = obj["metadata"]["name"]
        if name not in self.waiting:
            return
        for cond in (obj.get("status") or {}).get("conditions") or []:
            if cond.get("status") == "True" and cond.get("type") in ("Complete", "Failed"):
                event, box = self.waiting[name]
                if not box:
                    box.append((cond["type"], now))
                    event.set()

    def job(self, uid: str, gate: tuple[str, int] | None = None) -> dict[str, Any]:
        from tooladapter.model import SandboxSpec
        from tooladapter.naming import LABEL_MANAGED_BY
        from tooladapter.sandbox.job import build_job

        sandbox = SandboxSpec.model_validate(
            {
                "resources": {
                    "requests": {"cpu": "50m", "memory": "64Mi"},
                    "limits": {"cpu": "500m", "memory": "64Mi"},
                },
                "egress": {"allow": []},
            }
        )
        image = os.environ.get("TOOLADAPTER_SANDBOX_IMAGE", "localhost/tooladapter-sandbox:dev")
        job = build_job(
            namespace=self.ns,
            uid=uid,
            invocation_name=f"bare-{uid[:8]}",
            owner={},
            sandbox=sandbox,
            image=image,
            argv=["echo", "hello"],
            arguments={"command": "echo hello"},
            timeout_seconds=120,
            lease_id=uid,
            network_gate=gate,
            gate_image=image,
        )
        job["metadata"].pop("ownerReferences", None)
        job["metadata"]["name"] = f"bare-{uid}"
        for labels in (job["metadata"]["labels"], job["spec"]["template"]["metadata"]["labels"]):
            labels[LABEL_MANAGED_BY] = BENCH_JOB_MANAGER  # never the operator's reaper's
        return job

    def network_policy(self, uid: str) -> dict[str, Any]:
        from tooladapter.naming import LABEL_MANAGED_BY
        from tooladapter.sandbox.job import build_network_policy

        policy = build_network_policy(namespace=self.ns, uid=uid, owner={}, egress_allow=[])
        policy["metadata"].pop("ownerReferences", None)
        policy["metadata"]["name"] = f"bare-{uid}"
        policy["metadata"]["labels"][LABEL_MANAGED_BY] = BENCH_JOB_MANAGER
        return policy

    async def run_one(self, timeout: float = 300, gate: tuple[str, int] | None = None) -> Call:
        """One Job to its end plus its log; with `gate`, the operator's pod spec and policy."""
        uid = str(uuid.uuid4())
        job = self.job(uid, gate)
        name = job["metadata"]["name"]
        event: asyncio.Event = asyncio.Event()
        box: list[Any] = []
        self.waiting[name] = (event, box)
        rec = Call(name=name, target=time.time())
        rec.sent = rec.target
        netpols = ns_path("networking.k8s.io", "v1", self.ns, "networkpolicies")
        if gate is not None:
            status, body = await self.kube.call("POST", netpols, self.network_policy(uid))
            if status != 201:
                rec.error, rec.state = f"HTTP {status}: {body}", "CreateError"
                return rec
        status, body = await self.kube.call("POST", ns_path("batch", "v1", self.ns, "jobs"), job)
        rec.created, rec.http_status = time.time(), status
        if status != 201:
            rec.error, rec.state = f"HTTP {status}: {body}", "CreateError"
            return rec
        try:
            await asyncio.wait_for(event.wait(), timeout)
        except TimeoutError:
            rec.state, rec.error = "Timeout", f"job {name} did not finish in {timeout:.0f}s"
            await self.delete(name)
            return rec
        finally:
            self.waiting.pop(name, None)
        outcome, _ = box[0]
        status, pods = await self.kube.call(
            "GET",
            ns_path("", "v1", self.ns, "pods"),
            params={"labelSelector": f"tooladapter.dev/invocation-uid={uid}"},
        )
        items = pods.get("items", []) if isinstance(pods, dict) else []
        log = ""
        if items:
            _, log = await self.kube.text(
                ns_path("", "v1", self.ns, "pods") + f"/{items[0]['metadata']['name']}/log",
                params={"container": "tool", "limitBytes": "1048577"},
            )
        rec.done = time.time()
        rec.state = "Observed" if outcome == "Complete" and "hello" in log else "Failed"
        if rec.state != "Observed":
            rec.error = f"job {outcome}, log {log[:100]!r}"
        await self.delete(name)
        if gate is not None:
            await self.kube.call("DELETE", f"{netpols}/bare-{uid}")
        return rec

    async def delete(self, name: str) -> None:
        await self.kube.call(
            "DELETE",
            ns_path("batch", "v1", self.ns, "jobs") + f"/{name}",
            {"propagationPolicy": "Background", "gracePeriodSeconds": 0},
        )
