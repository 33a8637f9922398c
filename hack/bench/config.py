"""Knobs (flags or BENCH_* variables) and the names the bench uses."""

from __future__ import annotations

import argparse
import os
from dataclasses import dataclass, field
from pathlib import Path

from . import __doc__ as PACKAGE_DOC

#: The repository root, and hack/ (where the `bench` package lives).
ROOT = Path(__file__).resolve().parents[2]
HACK = ROOT / "hack"

BENCH_GROUP = "bench.tooladapter.dev"
FLOOR_PLURAL = "benchfloors"
FLOOR_CRD = f"{FLOOR_PLURAL}.{BENCH_GROUP}"
TERMINAL = {"Observed", "Failed", "Uncertain", "Cancelled", "Denied"}
LABEL_PHASE = "bench.tooladapter.dev/phase"
BENCH_JOB_MANAGER = "tooladapter-bench"


@dataclass
class Config:
    seconds: float = 60.0
    loads: list[float] = field(default_factory=lambda: [10.0, 25.0, 50.0, 100.0])
    tools: list[str] = field(default_factory=lambda: ["read-configmap", "http"])
    agents: int = 8
    parts: set[str] = field(default_factory=lambda: {"1", "2", "3", "4", "5", "6", "7"})
    fill: int = 10_000
    #: Part 7: finished invocations stored at once.
    stored: int = 100_000
    fill_rate: float = 100.0
    fill_inflight: int = 200
    drain: float = 60.0
    sandbox_sequential: int = 10
    sandbox_concurrent: int = 10
    sandbox_rounds: int = 3
    report: Path = ROOT / "bench-report.json"
    pyspy: str = ""
    #: Path stem of the API server's CPU profiles during the highest load ("": none).
    apiserver_pprof: str = ""
    #: Write each call's times (target, sent, created, startedAt, endedAt, seen) per phase.
    timeline: bool = False
    operator_src: str = ""
    keep: bool = False
    #: Part 6: seconds of twice the capacity; the capacity (0: measured by part 1).
    overload_seconds: float = 60.0
    overload_capacity: float = 0.0

    @classmethod
    def parse(cls, argv: list[str]) -> Config:
        env = os.environ.get
        p = argparse.ArgumentParser(
            prog=f"python -m {__package__}", description=PACKAGE_DOC.splitlines()[0]
        )
        p.add_argument("--seconds", type=float, default=float(env("BENCH_SECONDS", "60")))
        p.add_argument("--loads", default=env("BENCH_LOADS", "10,25,50,100"))
        p.add_argument("--tools", default=env("BENCH_TOOLS", "read-configmap,http"))
        p.add_argument("--agents", type=int, default=int(env("BENCH_AGENTS", "8")))
        p.add_argument("--parts", default=env("BENCH_PARTS", "1,2,3,4,5,6,7,8"))
        p.add_argument("--fill", type=int, default=int(env("BENCH_FILL", "10000")))
        p.add_argument("--stored", type=int, default=int(env("BENCH_STORED", "100000")))
        p.add_argument("--fill-rate", type=float, default=float(env("BENCH_FILL_RATE", "100")))
        p.add_argument("--fill-inflight", type=int, default=int(env("BENCH_FILL_INFLIGHT", "200")))
        p.add_argument("--drain", type=float, default=float(env("BENCH_DRAIN_SECONDS", "60")))
        p.add_argument(
            "--sandbox-sequential", type=int, default=int(env("BENCH_SANDBOX_SEQUENTIAL", "10"))
        )
        p.add_argument(
            "--sandbox-concurrent", type=int, default=int(env("BENCH_SANDBOX_CONCURRENT", "10"))
        )
        p.add_argument("--sandbox-rounds", type=int, default=int(env("BENCH_SANDBOX_ROUNDS", "3")))
        p.add_argument("--report", default=env("BENCH_REPORT", str(ROOT / "bench-report.json")))
        p.add_argument("--pyspy", default=env("BENCH_PYSPY", ""))
        p.add_argument("--apiserver-pprof", default=env("BENCH_APISERVER_PPROF", ""))
        p.add_argument(
            "--timeline",
            action="store_true",
            default=env("BENCH_TIMELINE", "") == "1",
            help="write every call's times per phase beside the report",
        )
        p.add_argument(
            "--operator-src",
            default=env("BENCH_OPERATOR_SRC", ""),
            help="directory holding another copy of the tooladapter package (A/B runs)",
        )
        p.add_argument("--keep", action="store_true", help="keep namespaces and CRD")
        p.add_argument(
            "--overload-seconds", type=float, default=float(env("BENCH_OVERLOAD_SECONDS", "60"))
        )
        p.add_argument(
            "--overload-capacity",
            type=float,
            default=float(env("BENCH_OVERLOAD_CAPACITY", "0")),
            help="calls/s the overload phase doubles (0: the highest load part 1 held)",
        )
        a = p.parse_args(argv)
        return cls(
            seconds=a.seconds,
            loads=[float(x) for x in a.loads.split(",") if x.strip()],
            tools=[t.strip() for t in a.tools.split(",") if t.strip()],
            agents=a.agents,
            parts={x.strip() for x in a.parts.split(",") if x.strip()},
            fill=a.fill,
            stored=a.stored,
            fill_rate=a.fill_rate,
            fill_inflight=a.fill_inflight,
            drain=a.drain,
            sandbox_sequential=a.sandbox_sequential,
            sandbox_concurrent=a.sandbox_concurrent,
            sandbox_rounds=a.sandbox_rounds,
            report=Path(a.report),
            pyspy=a.pyspy,
            apiserver_pprof=a.apiserver_pprof,
            timeline=a.timeline,
            operator_src=a.operator_src,
            keep=a.keep,
            overload_seconds=a.overload_seconds,
            overload_capacity=a.overload_capacity,
        )
