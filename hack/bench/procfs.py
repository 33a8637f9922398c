"""CPU and memory of processes and of the machine, from /proc."""

from __future__ import annotations

import asyncio
import contextlib
import fnmatch
import os
import time
from pathlib import Path
from typing import Any

CLK_TCK = os.sysconf("SC_CLK_TCK")
PAGE = os.sysconf("SC_PAGE_SIZE")


def proc_cpu_seconds(pid: int) -> float:
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / CLK_TCK  # utime + stime


def proc_mem_mb(pid: int) -> dict[str, float]:
    out = {"rss_mb": 0.0, "hwm_mb": 0.0}
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                out["rss_mb"] = int(line.split()[1]) / 1024
            elif line.startswith("VmHWM:"):
                out["hwm_mb"] = int(line.split()[1]) / 1024
    except OSError:
        pass
    return out


def host_cpu() -> tuple[float, float]:
    """(busy, total) jiffies of the whole machine."""
    parts = [int(x) for x in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
    idle = parts[3] + parts[4]
    total = sum(parts[:8])
    return total - idle, total


def pids_named(*names: str) -> dict[str, int]:
    found: dict[str, int] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        with contextlib.suppress(OSError):
            comm = (entry / "comm").read_text().strip()
            if comm in names and comm not in found:
                found[comm] = int(entry.name)
    return found


def other_operators(mine: set[int], namespace: str) -> list[str]:
    """Other tooladapter operators whose namespaces include the bench's: they would race.

    Operators sharded with TOOLADAPTER_NAMESPACES to other namespaces are harmless; only
    that one variable of their environment is read.
    """
    others = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) in mine:
            continue
        with contextlib.suppress(OSError):
            argv = (entry / "cmdline").read_bytes().split(b"\0")
            if b"tooladapter" not in argv and b"tooladapter.main" not in argv:
                continue
            if b"run" not in argv:
                continue
            patterns = ["*"]
            for var in (entry / "environ").read_bytes().split(b"\0"):
                if var.startswith(b"TOOLADAPTER_NAMESPACES="):
                    raw = var.split(b"=", 1)[1].decode()
                    patterns = [p.strip() for p in raw.split(",") if p.strip()] or ["*"]
            if any(fnmatch.fnmatch(namespace, p) for p in patterns):
                cmd = b" ".join(argv).decode(errors="replace").strip()
                others.append(f"pid {entry.name} ({cmd[:100]}) watches {patterns}")
    return others


class Meter:
    """CPU and memory of the operator (and friends) over one phase, RSS sampled each second."""

    def __init__(self, pids: dict[str, int]) -> None:
        self.pids = pids
        self.cpu0 = {k: proc_cpu_seconds(p) for k, p in pids.items()}
        self.host0 = host_cpu()
        self.load0 = os.getloadavg()
        self.t0 = time.time()
        self.peak_rss = {k: proc_mem_mb(p)["rss_mb"] for k, p in pids.items()}
        self._task = asyncio.ensure_future(self._sample())

    async def _sample(self) -> None:
        while True:
            await asyncio.sleep(1)
            for k, p in self.pids.items():
                self.peak_rss[k] = max(self.peak_rss[k], proc_mem_mb(p)["rss_mb"])

    def stop(self) -> dict[str, Any]:
        self._task.cancel()
        busy1, total1 = host_cpu()
        busy0, total0 = self.host0
        cpu = {k: round(proc_cpu_seconds(p) - self.cpu0[k], 2) for k, p in self.pids.items()}
        return {
            "wall_s": round(time.time() - self.t0, 1),
            "cpu_s": cpu,
            "rss_mb_end": {k: round(proc_mem_mb(p)["rss_mb"], 1) for k, p in self.pids.items()},
            "rss_mb_peak": {k: round(v, 1) for k, v in self.peak_rss.items()},
            "host_cpu_busy_pct": round(100 * (busy1 - busy0) / max(1, total1 - total0), 1),
            "loadavg_start": [round(x, 2) for x in self.load0],
            "loadavg_end": [round(x, 2) for x in os.getloadavg()],
        }
