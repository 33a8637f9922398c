"""Part 7: storage. BENCH_STORED (100,000) finished invocations stored at once: etcd's
database size, the operator's start-up (process start -> a new call Observed) and RSS with
them stored, then retention deleting them (its pace, the size and RSS after).

The calls are written straight to the API server, not run: each is created by an agent (the
admission policy checks its caller as for any call) and given the status a real call of the
same tool ended with (read first from one that ran), ended eight days ago. Running 100,000
calls through the operator would take half an hour at this machine's capacity and measure
the same stored objects; the operator is stopped meanwhile so it never sees them unfinished.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import json
import time
from datetime import UTC, datetime, timedelta
from typing import Any

from .base import BenchBase
from .calls import Tracker, invocation_terminal
from .procfs import proc_mem_mb

#: Labels of the stored calls (a phase of their own: the other parts' watches skip them).
PHASE = "stored"
#: Writes in flight while storing.
CONCURRENCY = 48
#: The etcd of the local cluster (plain http on loopback), read when it answers.
LOCAL_ETCD_METRICS = "http://127.0.0.1:2379/metrics"
INVOCATIONS_RESOURCE = "toolinvocations.tooladapter.dev"


def metric_sum(text: str, name: str, match: str = "") -> float | None:
    """The sum of a Prometheus text metric's samples (those whose labels contain `match`)."""
    total = None
    for line in text.splitlines():
        if line.startswith(name) and line[len(name)] in " {" and match in line:
            with contextlib.suppress(ValueError):
                total = (total or 0.0) + float(line.rsplit(" ", 1)[1])
    return total


class Stored(BenchBase):
    async def storage_figures(self) -> dict[str, Any]:
        """etcd's database size as the API server reports it (any cluster), and in use as
        the local etcd reports it (when it answers); invocations stored (a listing)."""
        assert self.kube is not None
        figures: dict[str, Any] = {}
        status, text = await self.kube.text("/metrics")
        if status == 200:
            size = metric_sum(text, "apiserver_storage_size_bytes")
            figures["etcd_db_mb_apiserver"] = round(size / 2**20, 1) if size else None
        with contextlib.suppress(Exception):
            async with self.kube.session.get(LOCAL_ETCD_METRICS, timeout=5) as resp:
                etcd = await resp.text()
            total = metric_sum(etcd, "etcd_mvcc_db_total_size_in_bytes")
            in_use = metric_sum(etcd, "etcd_mvcc_db_total_size_in_use_in_bytes")
            figures["etcd_db_mb"] = round(total / 2**20, 1) if total else None
            figures["etcd_db_in_use_mb"] = round(in_use / 2**20, 1) if in_use else None
        _status, listing = await self.kube.call(
            "GET", self.path_for("read-configmap"), params={"limit": "1"}
        )
        figures["stored_invocations"] = (listing.get("metadata") or {}).get(
            "remainingItemCount", 0
        ) + len(listing.get("items", []))
        return figures

    async def probe(self, tag: str, timeout: float = 600) -> tuple[float, dict[str, Any]]:
        """One new call, created now and followed to its end: (seconds, its status)."""
        assert self.kube is not None
        tracker = Tracker(invocation_terminal)
        ready = asyncio.Event()
        watcher = asyncio.ensure_future(
            self.kube.watch(
                self.path_for("read-configmap"),
                tracker.handle,
                params={"labelSelector": f"bench.tooladapter.dev/phase=probe-{tag}"},
                ready=ready,
            )
        )
        try:
            await asyncio.wait_for(ready.wait(), 30)
            done = asyncio.Event()
            t0 = time.time()
            rec = await self.create(tracker, "read-configmap", f"probe-{tag}", 0, t0, done)
            if rec.http_status == 201:
                await asyncio.wait_for(done.wait(), timeout)
            path = f"{self.path_for('read-configmap')}/{rec.name}"
            _status, body = await self.kube.call("GET", path)
            return time.time() - t0, (body or {}).get("status") or {}
        finally:
            watcher.cancel()

    async def store(self, n: int, status: dict[str, Any]) -> float:
        """Create `n` invocations with the finished `status`; returns the calls/s stored."""
        assert self.kube is not None
        path = self.path_for("read-configmap")
        slots = asyncio.Semaphore(CONCURRENCY)
        failures: list[str] = []

        async def one(i: int) -> None:
            async with slots:
                agent = self.agents[i % len(self.agents)]
                body = self.body_for("read-configmap", f"{PHASE}-{i}", PHASE, agent)
                code, created = await agent.api.call("POST", path, body)
                if code != 201:
                    failures.append(f"create {code}: {str(created)[:120]}")
                    return
                code, patched = await self.kube_call_status(path, body["metadata"]["name"], status)
                if code != 200:
                    failures.append(f"status {code}: {str(patched)[:120]}")

        t0 = time.time()
        for start in range(0, n, 1000):
            await asyncio.gather(*(one(i) for i in range(start, min(n, start + 1000))))
            if start and start % 10_000 == 0:
                print(f"stored: {start}/{n} ({start / (time.time() - t0):.0f}/s)", flush=True)
        if failures:
            self.report["warnings"].append(
                f"stored: {len(failures)} writes failed, e.g. {failures[0]}"
            )
        return n / max(1e-6, time.time() - t0)

    async def kube_call_status(
        self, path: str, name: str, status: dict[str, Any]
    ) -> tuple[int, Any]:
        assert self.kube is not None
        return await self.kube.call(
            "PATCH",
            f"{path}/{name}/status",
            {"status": status},
            content_type="application/merge-patch+json",
        )

    async def wait_retention(self, timeout: float) -> float:
        """Seconds until no stored call is left (or `timeout`)."""
        assert self.kube is not None
        t0 = time.time()
        while time.time() - t0 < timeout:
            _status, listing = await self.kube.call(
                "GET",
                self.path_for("read-configmap"),
                params={"labelSelector": f"bench.tooladapter.dev/phase={PHASE}", "limit": "1"},
            )
            if not listing.get("items"):
                return time.time() - t0
            await asyncio.sleep(5)
        return float("nan")

    async def stored(self) -> None:
        assert self.operator is not None and self.kube is not None
        n = self.cfg.stored
        print(f"stored: {n} finished invocations, then start-up, RSS and retention", flush=True)
        report: dict[str, Any] = {"stored": n}
        report["before"] = await self.storage_figures()
        _seconds, template = await self.probe("template")
        status = copy.deepcopy(template)
        ended = datetime.now(UTC) - timedelta(days=8)
        status["endedAt"] = ended.strftime("%Y-%m-%dT%H:%M:%SZ")
        status.pop("conditions", None)  # their times would be now's; the rest is a real end
        report["status_bytes"] = len(json.dumps(status, separators=(",", ":")))

        # Stopped while storing: the operator never sees these calls unfinished.
        self.operator.stop()
        report["store_per_s"] = round(await self.store(n, status), 1)
        await asyncio.sleep(65)  # the API server refreshes its storage figures each minute
        report["with_stored"] = await self.storage_figures()
        sample = await self.kube.call("GET", f"{self.path_for('read-configmap')}/{PHASE}-0")
        report["object_bytes_as_served"] = len(json.dumps(sample[1], separators=(",", ":")))

        # Start-up with them stored, retention off: what a restart costs before it acts.
        self.operator.env["TOOLADAPTER_RETENTION_SECONDS"] = "0"
        t0 = time.time()
        self.operator.start(timeout=600)
        report["startup_log_ready_s"] = round(time.time() - t0, 2)
        first, _ = await self.probe("startup")
        report["startup_first_call_observed_s"] = round(time.time() - t0, 2)
        report["first_call_s"] = round(first, 3)
        await asyncio.sleep(30)
        mem = proc_mem_mb(self.operator_pid())
        report["rss_mb_with_stored"] = round(mem["rss_mb"], 1)
        report["hwm_mb_with_stored"] = round(mem["hwm_mb"], 1)

        # Retention at its defaults (7 days): every stored call is due.
        self.operator.stop()
        self.operator.env.pop("TOOLADAPTER_RETENTION_SECONDS", None)
        t0 = time.time()
        self.operator.start(timeout=600)
        drained = await self.wait_retention(timeout=max(600.0, 3 * n / 200))
        report["retention_seconds_to_drain"] = round(drained, 1)
        report["retention_deletes_per_s"] = round(n / drained, 1) if drained == drained else None
        probe, _ = await self.probe("after-retention")
        report["first_call_after_retention_s"] = round(probe, 3)
        await asyncio.sleep(65)
        report["after_retention"] = await self.storage_figures()
        mem = proc_mem_mb(self.operator_pid())
        report["rss_mb_after_retention"] = round(mem["rss_mb"], 1)
        report["hwm_mb_after_retention"] = round(mem["hwm_mb"], 1)
        # A start after retention: what every later restart costs.
        self.operator.stop()
        t0 = time.time()
        self.operator.start(timeout=600)
        await self.probe("restart-after-retention")
        report["startup_after_retention_first_call_observed_s"] = round(time.time() - t0, 2)
        self.report["stored"] = report
        print(f"stored: {json.dumps(report)}", flush=True)
