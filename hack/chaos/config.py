"""Knobs (flags or CHAOS_* variables)."""

from __future__ import annotations

import argparse
import os
import random
from dataclasses import dataclass
from pathlib import Path

from . import __doc__ as PACKAGE_DOC

#: The repository root.
ROOT = Path(__file__).resolve().parents[2]
TERMINAL = {"Observed", "Failed", "Uncertain", "Cancelled", "Denied"}
#: The tools of the load, in the order calls are dealt out.
TOOLS = ("read", "http", "sandbox", "gated")


@dataclass
class Config:
    invocations: int = 500
    rate: float = 4.0
    kills: int = 20
    apiserver_restarts: int = 2
    pod_deletes: int = 15
    settle_seconds: float = 120.0
    creators: int = 50
    lease_seconds: int = 5
    http_delay: float = 0.3
    seed: int = 0
    report: Path = ROOT / "chaos-report.json"
    keep: bool = False
    operator_src: str = "tree"

    @property
    def load_seconds(self) -> float:
        return self.invocations / self.rate

    @classmethod
    def parse(cls, argv: list[str]) -> Config:
        env = os.environ.get
        p = argparse.ArgumentParser(
            prog=f"python -m {__package__}",
            description=PACKAGE_DOC.splitlines()[0],
            epilog="Every flag defaults to its CHAOS_* variable; see hack/chaos/__init__.py.",
        )
        p.add_argument("--invocations", type=int, default=int(env("CHAOS_INVOCATIONS", "500")))
        p.add_argument("--rate", type=float, default=float(env("CHAOS_RATE", "4")))
        p.add_argument("--kills", type=int, default=int(env("CHAOS_KILLS", "20")))
        p.add_argument(
            "--apiserver-restarts", type=int, default=int(env("CHAOS_APISERVER_RESTARTS", "2"))
        )
        p.add_argument("--pod-deletes", type=int, default=int(env("CHAOS_POD_DELETES", "15")))
        p.add_argument(
            "--settle-seconds", type=float, default=float(env("CHAOS_SETTLE_SECONDS", "120"))
        )
        p.add_argument("--creators", type=int, default=int(env("CHAOS_CREATORS", "50")))
        p.add_argument("--lease-seconds", type=int, default=int(env("CHAOS_LEASE_SECONDS", "5")))
        p.add_argument("--http-delay", type=float, default=float(env("CHAOS_HTTP_DELAY", "0.3")))
        p.add_argument(
            "--seed", type=int, default=int(env("CHAOS_SEED") or random.randrange(10**6))
        )
        p.add_argument("--report", default=env("CHAOS_REPORT", "chaos-report.json"))
        p.add_argument(
            "--keep",
            action="store_true",
            default=env("CHAOS_KEEP", "") == "1",
            help="keep the namespaces and the operator's workdir",
        )
        p.add_argument(
            "--operator-src",
            default=env("CHAOS_OPERATOR_SRC", "tree"),
            help="the operator's code: tree (the working tree, copied at the start), HEAD "
            "(git HEAD), or a directory holding a tooladapter package",
        )
        a = p.parse_args(argv)
        if a.invocations < 1 or a.rate <= 0:
            p.error("--invocations must be >= 1 and --rate > 0")
        return cls(
            invocations=a.invocations,
            rate=a.rate,
            kills=a.kills,
            apiserver_restarts=a.apiserver_restarts,
            pod_deletes=a.pod_deletes,
            settle_seconds=a.settle_seconds,
            creators=a.creators,
            lease_seconds=a.lease_seconds,
            http_delay=a.http_delay,
            seed=a.seed,
            report=Path(a.report),
            keep=a.keep,
            operator_src=a.operator_src,
        )
