"""Part 6: overload. Twice the measured capacity offered for BENCH_OVERLOAD_SECONDS, sampled
every second: offered and achieved rate, the operator's queue (its `tooladapter_calls_queued`
gauge, absent on an operator without one) and backlog (created, not yet terminal, as the
client sees it), its RSS; the admitted latency (first stage record -> terminal seen) per
window. Written to the report and plotted as a PNG beside it."""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from itertools import pairwise
from pathlib import Path
from typing import Any

import aiohttp

from .calls import Call, Tracker, invocation_terminal
from .config import LABEL_PHASE
from .load import Loads
from .procfs import proc_mem_mb
from .stats import iso_ts, latency_summary, ms, pct

#: Seconds of one window of the admitted-latency series.
WINDOW = 5.0


def capacity_of(report: dict[str, Any], tool: str) -> float | None:
    """The highest rate `tool` held in this run (achieved >= 90% of offered), else the
    highest it achieved: the capacity the overload phase doubles."""
    phases = (report.get("loads") or {}).get(tool) or []
    held = [p["achieved_per_s"] for p in phases if p["achieved_per_s"] >= 0.9 * p["offered_per_s"]]
    if held:
        return float(max(held))
    achieved = [p["achieved_per_s"] for p in phases]
    return float(max(achieved)) if achieved else None


def admitted_at(call: Call) -> float | None:
    """When the operator began evaluating the call: its first stage record's time."""
    stages = (call.status or {}).get("stages") or []
    for stage in stages:
        with contextlib.suppress(ValueError, TypeError, AttributeError):
            at = iso_ts(stage.get("time"))
            if at is not None:
                return at
    return None


def admitted_latency(call: Call) -> float | None:
    at = admitted_at(call)
    if at is None or not call.done:
        return None
    return max(0.0, call.done - at)


async def scrape_queue(session: aiohttp.ClientSession, port: int) -> tuple[float, float] | None:
    """(queued, in flight) from the operator's /metrics; None when it has no such gauges."""
    try:
        async with session.get(f"http://127.0.0.1:{port}/metrics", timeout=2) as resp:
            text = await resp.text()
    except (aiohttp.ClientError, TimeoutError):
        return None
    queued = in_flight = None
    for line in text.splitlines():
        if line.startswith("tooladapter_calls_queued{"):
            queued = (queued or 0.0) + float(line.rsplit(" ", 1)[1])
        elif line.startswith("tooladapter_calls_in_flight "):
            in_flight = float(line.rsplit(" ", 1)[1])
    if in_flight is None:
        return None
    return (queued or 0.0, in_flight)


class Overload(Loads):
    async def overload(self) -> None:
        assert self.kube is not None and self.operator is not None
        tool = self.cfg.tools[0]
        capacity = self.cfg.overload_capacity or capacity_of(self.report, tool)
        if capacity is None:
            self.report["not_measured"]["overload"] = (
                "no capacity measured (run part 1, or set BENCH_OVERLOAD_CAPACITY)"
            )
            return
        rate, seconds = 2 * capacity, self.cfg.overload_seconds
        print(f"overload: {rate:.0f} calls/s ({tool}, 2x {capacity:.0f}/s) for {seconds:.0f} s")
        phase = f"overload-{uuid.uuid4().hex[:4]}"
        tracker = Tracker(invocation_terminal)
        ready = asyncio.Event()
        watcher = asyncio.ensure_future(
            self.kube.watch(
                self.path_for(tool),
                tracker.handle,
                params={"labelSelector": f"{LABEL_PHASE}={phase}"},
                ready=ready,
            )
        )
        await asyncio.wait_for(ready.wait(), 30)
        samples: list[dict[str, Any]] = []
        t0 = time.time()
        sampler = asyncio.ensure_future(self.sample(tracker, t0, samples))
        calls = await self.offered_load(tool, phase, rate, seconds, tracker)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(tracker.all_done.wait(), self.cfg.drain)
        sampler.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await sampler
        watcher.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await watcher
        result = self.summarise_overload(tool, capacity, rate, seconds, t0, calls, samples)
        self.report["overload"] = result
        plot = self.cfg.report.with_name(self.cfg.report.stem + "-overload.png")
        try:
            draw(result, plot)
            result["plot"] = str(plot)
        except ImportError:
            self.report["warnings"].append("matplotlib is not installed: no overload plot")
        await self.delete_phase(tool, phase)

    async def sample(self, tracker: Tracker, t0: float, out: list[dict[str, Any]]) -> None:
        assert self.operator is not None
        port = self.operator.metrics_port
        async with aiohttp.ClientSession() as session:
            while True:
                now = time.time()
                calls = list(tracker.calls.values())
                gauges = await scrape_queue(session, port)
                out.append(
                    {
                        "t": round(now - t0, 2),
                        "sent": sum(1 for c in calls if c.sent),
                        "done": sum(1 for c in calls if c.done),
                        "backlog": sum(1 for c in calls if c.created and not c.done),
                        "queued": gauges[0] if gauges else None,
                        "in_flight": gauges[1] if gauges else None,
                        "rss_mb": round(proc_mem_mb(self.operator_pid())["rss_mb"], 1),
                    }
                )
                await asyncio.sleep(1.0)

    def summarise_overload(
        self,
        tool: str,
        capacity: float,
        rate: float,
        seconds: float,
        t0: float,
        calls: list[Call],
        samples: list[dict[str, Any]],
    ) -> dict[str, Any]:
        observed = [c for c in calls if c.state == "Observed"]
        # Achieved over the offering window only: what was held while overloaded.
        end = t0 + 0.2 + seconds
        in_window = [c for c in observed if c.done <= end]
        admitted = [x for x in (admitted_latency(c) for c in observed) if x is not None]
        windows: list[dict[str, Any]] = []
        start = min((c.target for c in calls), default=t0)
        last = max((c.done for c in observed), default=start)
        w = start
        while w < last:
            inside = [c for c in observed if w <= c.done < w + WINDOW]
            lat = [x for x in (admitted_latency(c) for c in inside) if x is not None]
            windows.append(
                {
                    "t": round(w - t0, 1),
                    "achieved_per_s": round(len(inside) / WINDOW, 1),
                    "admitted_p95_ms": ms(pct(lat, 95)),
                    "end_to_end_p95_ms": ms(pct([c.done - c.target for c in inside], 95)),
                }
            )
            w += WINDOW
        rss = [s["rss_mb"] for s in samples]
        queued = [s["queued"] for s in samples if s["queued"] is not None]
        achieved = round(len(in_window) / seconds, 1)
        out = {
            "tool": tool,
            "capacity_per_s": capacity,
            "offered_per_s": rate,
            "seconds": seconds,
            "sent": len(calls),
            "observed": len(observed),
            "errors": len(calls) - len(observed),
            "achieved_per_s_in_window": achieved,
            "achieved_over_offered": round(achieved / rate, 3),
            "achieved_over_capacity": round(achieved / capacity, 3),
            "admitted_latency": latency_summary(admitted),
            "end_to_end_latency": latency_summary([c.done - c.target for c in observed]),
            "queue_max": max(queued) if queued else None,
            "backlog_max": max((s["backlog"] for s in samples), default=None),
            "rss_mb_max": max(rss) if rss else None,
            "rss_mb_last": rss[-1] if rss else None,
            "samples": samples,
            "windows": windows,
        }
        print(
            f"  overload {rate:.0f}/s offered: achieved {achieved}/s "
            f"({out['achieved_over_offered']} of offered, {out['achieved_over_capacity']} of "
            f"capacity), admitted p95 {out['admitted_latency']['p95_ms']} ms, queue max "
            f"{out['queue_max']}, backlog max {out['backlog_max']}, RSS max {out['rss_mb_max']} MB",
            flush=True,
        )
        return out


def draw(result: dict[str, Any], path: Path) -> None:
    """Four panels over time: rates, admitted p95, queue and backlog, RSS."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    samples, windows = result["samples"], result["windows"]
    t = [s["t"] for s in samples]
    fig, axes = plt.subplots(4, 1, figsize=(9, 11), sharex=True)
    rate_t = t[1:]
    axes[0].plot(rate_t, [b["sent"] - a["sent"] for a, b in pairwise(samples)], label="offered/s")
    axes[0].plot(rate_t, [b["done"] - a["done"] for a, b in pairwise(samples)], label="achieved/s")
    axes[0].axhline(result["capacity_per_s"], color="grey", linestyle=":", label="capacity")
    axes[0].set_ylabel("calls/s")
    axes[0].legend(loc="upper right")
    wt = [w["t"] for w in windows]
    axes[1].plot(wt, [w["admitted_p95_ms"] for w in windows], marker="o", label="admitted p95")
    axes[1].plot(wt, [w["end_to_end_p95_ms"] for w in windows], marker=".", label="create->end p95")
    axes[1].set_ylabel("ms")
    axes[1].set_yscale("log")
    axes[1].legend(loc="upper left")
    axes[2].plot(t, [s["backlog"] for s in samples], label="backlog (created, not ended)")
    if any(s["queued"] is not None for s in samples):
        axes[2].plot(t, [s["queued"] for s in samples], label="tooladapter_calls_queued")
        axes[2].plot(t, [s["in_flight"] for s in samples], label="tooladapter_calls_in_flight")
    axes[2].set_ylabel("calls")
    axes[2].legend(loc="upper left")
    axes[3].plot(t, [s["rss_mb"] for s in samples], color="tab:red")
    axes[3].set_ylabel("operator RSS (MB)")
    axes[3].set_xlabel("seconds since the phase began")
    fig.suptitle(
        f"overload: {result['offered_per_s']:.0f}/s offered ({result['tool']}), "
        f"achieved {result['achieved_per_s_in_window']}/s"
    )
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)
