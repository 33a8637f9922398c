"""Part 4: the operator's CPU and RSS with many finished invocations stored, also after a
restart."""

from __future__ import annotations

import asyncio
import contextlib
import json
import time

from .base import BenchBase
from .calls import Call, Tracker, invocation_terminal
from .config import LABEL_PHASE, TERMINAL
from .procfs import proc_cpu_seconds, proc_mem_mb
from .stats import latency_summary


class Fill(BenchBase):
    async def fill(self) -> None:
        assert self.operator is not None
        n = self.cfg.fill
        print(
            f"fill: {n} finished invocations, at most {self.cfg.fill_rate:.0f}/s and "
            f"{self.cfg.fill_inflight} unfinished at a time",
            flush=True,
        )
        tracker = Tracker(invocation_terminal)
        assert self.kube is not None
        ready = asyncio.Event()
        watcher = asyncio.ensure_future(
            self.kube.watch(
                self.path_for("read-configmap"),
                tracker.handle,
                params={"labelSelector": f"{LABEL_PHASE}=fill"},
                ready=ready,
            )
        )
        await asyncio.wait_for(ready.wait(), 30)
        pid = self.operator_pid()
        cpu0 = proc_cpu_seconds(pid)
        # Not a latency measurement: a bounded number of unfinished calls, so the fill runs
        # at whatever rate this machine sustains and memory is not a backlog's.
        inflight = asyncio.Semaphore(self.cfg.fill_inflight)

        async def one(i: int, target: float) -> Call:
            done = asyncio.Event()
            try:
                rec = await self.create(tracker, "read-configmap", "fill", i, target, done)
                if rec.http_status == 201:
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(done.wait(), 600)
                return rec
            finally:
                inflight.release()

        t0 = time.time()
        tasks = []
        for i in range(n):
            target = t0 + i / self.cfg.fill_rate
            if (delay := target - time.time()) > 0:
                await asyncio.sleep(delay)
            await inflight.acquire()
            tasks.append(asyncio.ensure_future(one(i, time.time())))
        calls = list(await asyncio.gather(*tasks))
        fill_seconds = time.time() - t0
        watcher.cancel()
        cpu = proc_cpu_seconds(pid) - cpu0
        after = proc_mem_mb(pid)
        finished = sum(1 for c in calls if c.state in TERMINAL)
        # One reconcile period, so the periodic workers have walked the stored set.
        await asyncio.sleep(35)
        after_workers = proc_mem_mb(pid)
        _status, listing = await self.kube.call(
            "GET", self.path_for("read-configmap"), params={"limit": "1"}
        )
        stored = (listing.get("metadata") or {}).get("remainingItemCount", 0) + len(
            listing.get("items", [])
        )
        # A restarted operator lists everything stored: the honest "RSS with N stored".
        self.operator.stop()
        self.operator.start()
        pid = self.operator_pid()
        await asyncio.sleep(40)
        restarted = proc_mem_mb(pid)
        self.report["fill"] = {
            "created": sum(1 for c in calls if c.http_status == 201),
            "finished": finished,
            "observed": sum(1 for c in calls if c.state == "Observed"),
            "stored_invocations": stored,
            "operator_cpu_s_per_1000": round(1000 * cpu / max(1, finished), 2),
            "achieved_per_s": round(finished / max(1e-6, fill_seconds), 1),
            "rss_mb_after_processing": round(after["rss_mb"], 1),
            "rss_mb_after_one_reconcile_period": round(after_workers["rss_mb"], 1),
            "hwm_mb_processing_operator": round(after_workers["hwm_mb"], 1),
            "rss_mb_restarted_with_stored": round(restarted["rss_mb"], 1),
            "hwm_mb_restarted_with_stored": round(restarted["hwm_mb"], 1),
            "latency": latency_summary([c.done - c.target for c in calls if c.state == "Observed"]),
        }
        print(f"fill: {json.dumps(self.report['fill'])}", flush=True)
