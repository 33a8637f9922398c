"""Parts 1 and 2: open-loop offered loads of calls and of the floor, one phase at a time,
each measured with the resources it took."""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import shutil
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import aiohttp

from .base import BenchBase
from .calls import Call, Tracker, invocation_terminal
from .config import LABEL_PHASE, TERMINAL
from .floor import floor_terminal
from .procfs import Meter
from .stats import latency_summary, ms, pct, stage_breakdown

#: The verbs that write (the rest read: GET, LIST, WATCH).
WRITE_VERBS = frozenset(
    {"POST", "PUT", "PATCH", "DELETE", "DELETECOLLECTION", "APPLY", "CREATE", "UPDATE"}
)


def delta(before: dict[str, int], after: dict[str, int]) -> dict[str, int]:
    """What each counter moved by (only those that moved)."""
    moved = {k: after.get(k, 0) - before.get(k, 0) for k in after}
    return {k: v for k, v in sorted(moved.items()) if v > 0}


class Loads(BenchBase):
    async def offered_load(
        self, kind: str, phase: str, rate: float, seconds: float, tracker: Tracker
    ) -> list[Call]:
        """Open loop: call i is due at t0 + i/rate, whatever happened to earlier calls."""
        n = max(1, round(rate * seconds))
        t0 = time.time() + 0.2
        tasks = []
        for i in range(n):
            target = t0 + i / rate
            delay = target - time.time()
            if delay > 0:
                await asyncio.sleep(delay)
            tasks.append(asyncio.ensure_future(self.create(tracker, kind, phase, i, target)))
        return list(await asyncio.gather(*tasks))

    async def run_phase(self, kind: str, rate: float, seconds: float) -> dict[str, Any]:
        assert self.kube is not None and self.operator is not None
        phase = f"{'floor' if kind == 'floor' else kind}-{int(rate)}-{uuid.uuid4().hex[:4]}"
        tracker = Tracker(floor_terminal if kind == "floor" else invocation_terminal)
        ready = asyncio.Event()
        watcher = asyncio.ensure_future(
            self.kube.watch(
                self.path_for(kind),
                tracker.handle,
                params={"labelSelector": f"{LABEL_PHASE}={phase}"},
                ready=ready,
            )
        )
        await asyncio.wait_for(ready.wait(), 30)
        pids = {"operator": self.operator_pid(), **self.cluster_pids()}
        if self.floor_proc is not None:
            pids["floor-controller"] = self.floor_proc.pid
        meter = Meter(pids)
        gc0 = await self.apiserver_gc_cycles()
        requests0 = await self.apiserver_requests()
        own0 = await self.operator_requests()
        bench_cpu0 = time.process_time()
        pyspy = None
        if self.cfg.pyspy and kind != "floor" and rate == max(self.cfg.loads):
            pyspy = self.start_pyspy(kind, seconds)
        pprof = None
        if self.cfg.apiserver_pprof and rate == max(self.cfg.loads):
            pprof = asyncio.ensure_future(self.apiserver_profile(kind, seconds))
        calls = await self.offered_load(kind, phase, rate, seconds, tracker)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(tracker.all_done.wait(), self.cfg.drain)
        resources = meter.stop()
        resources["cpu_s"]["bench-client"] = round(time.process_time() - bench_cpu0, 2)
        gc1 = await self.apiserver_gc_cycles()
        requests1 = await self.apiserver_requests()
        own1 = await self.operator_requests()
        watcher.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await watcher
        if pyspy is not None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                pyspy.wait(timeout=60)
        result = self.summarise(kind, rate, seconds, calls, resources)
        if gc0 is not None and gc1 is not None:
            # The API server's Go GC cycles: its latency spikes line up with them, and their
            # rate follows what each call makes it allocate.
            result["apiserver_gc_cycles"] = gc1 - gc0
            print(f"  {kind:>15} @ {rate:>5.0f}/s: API server GC cycles {gc1 - gc0}", flush=True)
        finished = max(1, len(calls))
        if requests0 is not None and requests1 is not None:
            # Every request the API server answered during the phase (the clients' creates
            # too; cluster-wide, so other clients' count as well), per call and by resource:
            # what an operator change adds per call shows here (issue 30: signed, chained
            # receipts add no write in steady state; issue 41: reads too, against the floor).
            moved = delta(requests0, requests1)
            writes = {k: v for k, v in moved.items() if k.rsplit(" ", 1)[-1] in WRITE_VERBS}
            result["apiserver_writes_per_call"] = round(sum(writes.values()) / finished, 3)
            result["apiserver_writes_by_resource"] = writes
            result["apiserver_requests_per_call"] = round(sum(moved.values()) / finished, 3)
            result["apiserver_requests_by_resource"] = moved
            top = dict(sorted(moved.items(), key=lambda kv: -kv[1])[:8])
            print(
                f"  {kind:>15} @ {rate:>5.0f}/s: API server requests/call "
                f"{result['apiserver_requests_per_call']} "
                f"(writes {result['apiserver_writes_per_call']}; most: {top})",
                flush=True,
            )
        if own0 is not None and own1 is not None:
            # The operator's own requests (its tooladapter_api_requests_total): attributed,
            # whatever else runs on the cluster.
            own = delta(own0, own1)
            result["operator_requests_per_call"] = round(sum(own.values()) / finished, 3)
            result["operator_requests_by_resource_per_call"] = {
                k: round(v / finished, 3) for k, v in own.items()
            }
            print(
                f"  {kind:>15} @ {rate:>5.0f}/s: operator requests/call "
                f"{result['operator_requests_per_call']}: "
                f"{result['operator_requests_by_resource_per_call']}",
                flush=True,
            )
        if self.cfg.timeline:
            self.write_timeline(kind, rate, calls)
        if pprof is not None:
            result["apiserver_pprof"] = await pprof
        await self.delete_phase(kind, phase)
        return result

    async def apiserver_gc_cycles(self) -> int | None:
        """The API server's completed GC cycles so far (its /metrics), None if unreadable."""
        assert self.kube is not None
        try:
            status, data = await self.kube.raw("/metrics", timeout=30)
        except (aiohttp.ClientError, TimeoutError):
            return None
        if status != 200:
            return None
        for line in data.decode(errors="replace").splitlines():
            if line.startswith("go_gc_duration_seconds_count"):
                return int(float(line.split()[-1]))
        return None

    async def apiserver_requests(self) -> dict[str, int] | None:
        """Requests the API server answered so far, by `resource[/subresource] VERB` (its
        /metrics: `apiserver_request_total`, every verb), None if unreadable."""
        assert self.kube is not None
        try:
            status, data = await self.kube.raw("/metrics", timeout=30)
        except (aiohttp.ClientError, TimeoutError):
            return None
        if status != 200:
            return None
        counts: dict[str, int] = {}
        for line in data.decode(errors="replace").splitlines():
            if not line.startswith("apiserver_request_total{"):
                continue
            labels = dict(re.findall(r'(\w+)="([^"]*)"', line.split("}", 1)[0]))
            resource = labels.get("resource", "") or labels.get("group", "") or "other"
            if labels.get("subresource"):
                resource += "/" + labels["subresource"]
            key = f"{resource} {labels.get('verb', '')}"
            counts[key] = counts.get(key, 0) + int(float(line.rsplit(" ", 1)[-1]))
        return counts

    async def operator_requests(self) -> dict[str, int] | None:
        """The operator's own requests so far, by `resource VERB` (its
        `tooladapter_api_requests_total`), None if unreadable or not counted."""
        assert self.operator is not None
        url = f"http://127.0.0.1:{self.operator.metrics_port}/metrics"
        try:
            async with aiohttp.ClientSession() as session:
                async with session.get(url, timeout=aiohttp.ClientTimeout(total=10)) as resp:
                    text = await resp.text()
        except (aiohttp.ClientError, TimeoutError):
            return None
        counts: dict[str, int] = {}
        for line in text.splitlines():
            if not line.startswith("tooladapter_api_requests_total{"):
                continue
            labels = dict(re.findall(r'(\w+)="([^"]*)"', line.split("}", 1)[0]))
            key = f"{labels.get('resource', '')} {labels.get('verb', '')}"
            counts[key] = counts.get(key, 0) + int(float(line.rsplit(" ", 1)[-1]))
        return counts if counts else None

    def write_timeline(self, kind: str, rate: float, calls: list[Call]) -> None:
        """Each call's times (unix seconds; startedAt/endedAt as the operator wrote them)."""
        rows = [
            {
                "target": c.target,
                "sent": c.sent,
                "created": c.created,
                "startedAt": (c.status or {}).get("startedAt"),
                "endedAt": (c.status or {}).get("endedAt"),
                "seen": c.done,
                "state": c.state,
            }
            for c in calls
        ]
        out = self.cfg.report.with_name(f"{self.cfg.report.stem}-timeline-{kind}-{int(rate)}.json")
        out.write_text(json.dumps(rows) + "\n")

    async def apiserver_profile(self, kind: str, seconds: float) -> dict[str, Any]:
        """The API server's CPU profile (its /debug/pprof, as admin) over the phase: saved
        beside the report, and its heaviest functions by cumulative time when `go` is here."""
        assert self.kube is not None
        span = max(5, int(seconds) - 2)
        try:
            status, data = await self.kube.raw(
                "/debug/pprof/profile", params={"seconds": str(span)}, timeout=span + 60
            )
        except (aiohttp.ClientError, TimeoutError) as exc:
            return {"error": f"{type(exc).__name__}: {exc}"}
        if status != 200:
            return {"error": f"HTTP {status} (profiling off, or not an admin?)"}
        out = Path(f"{self.cfg.apiserver_pprof}-{kind}.pprof")
        await asyncio.to_thread(out.write_bytes, data)
        summary: dict[str, Any] = {"profile": str(out), "seconds": span}
        go = shutil.which("go")
        if go is not None:
            top = await asyncio.to_thread(
                subprocess.run,
                [go, "tool", "pprof", "-top", "-cum", "-nodecount=60", str(out)],
                capture_output=True,
                text=True,
                check=False,
            )
            text_path = out.with_suffix(".top.txt")
            await asyncio.to_thread(text_path.write_text, top.stdout + top.stderr)
            summary["top"] = str(text_path)
        return summary

    def summarise(
        self,
        kind: str,
        rate: float,
        seconds: float,
        calls: list[Call],
        resources: dict[str, Any],
    ) -> dict[str, Any]:
        observed = [c for c in calls if c.state == "Observed"]
        states: dict[str, int] = {}
        for c in calls:
            key = c.state or "Timeout"
            states[key] = states.get(key, 0) + 1
        errors = [c.error for c in calls if c.error][:5]
        first = min((c.target for c in calls), default=0.0)
        last = max((c.done for c in observed), default=first)
        created = sum(1 for c in calls if c.http_status == 201)
        op_cpu = resources["cpu_s"].get("operator" if kind != "floor" else "floor-controller", 0)
        finished = sum(1 for c in calls if c.state in TERMINAL or (kind == "floor" and c.done))
        out = {
            "kind": kind,
            "offered_per_s": rate,
            "seconds": seconds,
            "sent": len(calls),
            "created": created,
            "observed": len(observed),
            "states": states,
            "errors": len(calls) - len(observed),
            "error_samples": errors,
            "achieved_per_s": round(len(observed) / max(1e-6, last - first), 1),
            "latency": latency_summary([c.done - c.target for c in observed]),
            "create_latency": latency_summary([c.created - c.sent for c in calls if c.created]),
            "schedule_lag_p99_ms": ms(pct([c.sent - c.target for c in calls], 99)),
            "resources": resources,
            # CPU of the phase (until the drain ended) per call the controller finished.
            "controller_cpu_s_per_1000": round(1000 * op_cpu / max(1, finished), 2),
            # What each call cost the control plane (the floor's is the least a CR call costs).
            "apiserver_cpu_ms_per_call": round(
                1000 * resources["cpu_s"].get("kube-apiserver", 0) / max(1, finished), 2
            ),
            "etcd_cpu_ms_per_call": round(
                1000 * resources["cpu_s"].get("etcd", 0) / max(1, finished), 2
            ),
            "controller_rss_mb_peak": resources["rss_mb_peak"].get(
                "operator" if kind != "floor" else "floor-controller"
            ),
        }
        if kind != "floor":
            out["stages"] = stage_breakdown(calls)
        lat = out["latency"]
        print(
            f"  {kind:>15} @ {rate:>5.0f}/s: p50 {lat['p50_ms']} ms, p95 {lat['p95_ms']} ms, "
            f"p99 {lat['p99_ms']} ms, achieved {out['achieved_per_s']}/s, "
            f"errors {out['errors']}, cpu/1000 {out['controller_cpu_s_per_1000']} s, "
            f"apiserver {out['apiserver_cpu_ms_per_call']} ms/call, "
            f"host busy {resources['host_cpu_busy_pct']}%",
            flush=True,
        )
        return out

    async def delete_phase(self, kind: str, phase: str) -> None:
        """Remove a phase's objects so every phase starts with the same stored set."""
        assert self.kube is not None
        path = self.path_for(kind)
        selector = {"labelSelector": f"{LABEL_PHASE}={phase}"}
        # Thousands of objects after an overload: the collection DELETE (one worker on the
        # API server) can take minutes, and it stops where it is when its request times out
        # (seen: 1,159 of ~20,000 left, and the bench waited its whole deadline): asked
        # again until none is left.
        deadline = time.time() + 600
        while time.time() < deadline:
            with contextlib.suppress(aiohttp.ClientError, TimeoutError):
                await self.kube.call("DELETE", path, params=selector, timeout=120)
            with contextlib.suppress(aiohttp.ClientError, TimeoutError):
                status, listing = await self.kube.call(
                    "GET", path, params={**selector, "limit": "1"}
                )
                if status == 200 and not listing.get("items"):
                    break
            await asyncio.sleep(2)
        else:
            self.report["warnings"].append(f"objects of phase {phase} still present after 10 min")
        await asyncio.sleep(3)

    def start_pyspy(self, kind: str, seconds: float) -> subprocess.Popen[bytes] | None:
        exe = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
        if not Path(exe).exists():
            self.report["warnings"].append("BENCH_PYSPY set but py-spy is not installed")
            return None
        stem, dot, ext = self.cfg.pyspy.rpartition(".")
        out = f"{stem}-{kind}.{ext}" if dot else f"{self.cfg.pyspy}-{kind}"
        fmt = {"svg": "flamegraph", "json": "speedscope"}.get(ext, "raw")
        # --gil: only the thread holding the GIL, i.e. where the operator's CPU goes.
        argv = [exe, "record", "-o", out, "-f", fmt, "--pid", str(self.operator_pid())]
        argv += ["-d", str(int(seconds)), "-r", "50", "--gil"]
        return subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    # ------------------------------------------------------------------ part 1 + 2

    async def calls_and_floor(self) -> None:
        kinds = []
        if "2" in self.cfg.parts:
            kinds.append("floor")
        if "1" in self.cfg.parts or "5" in self.cfg.parts:
            kinds += self.cfg.tools
        results: dict[str, list[dict[str, Any]]] = {k: [] for k in kinds}
        self.report["loads"] = results  # filled as phases end: a failed run keeps what it has
        # Warm up every path (connections, caches, token authentication) before measuring.
        for kind in kinds:
            await self.run_phase(kind, 5, 2)
        for rate in self.cfg.loads:
            print(f"load {rate:.0f} calls/s for {self.cfg.seconds:.0f} s", flush=True)
            for kind in kinds:
                self.check_others()
                results[kind].append(await self.run_phase(kind, rate, self.cfg.seconds))
        self.report["loads"] = results
