"""`python -m chaos [flags]` runs the chaos test (see the package docstring)."""

from __future__ import annotations

import json
import sys
import time
import traceback
from dataclasses import asdict
from typing import Any

from .config import Config
from .report import analyse, analyse_same_key, deleted_pods, print_table, rules
from .runner import Chaos, log


def build_report(chaos: Chaos, began: float) -> dict[str, Any]:
    assert chaos.load is not None and chaos.plan is not None and chaos.deleter is not None
    cfg = chaos.cfg
    counts = chaos.server.snapshot()
    report: dict[str, Any] = {
        **chaos.result,
        "config": {**asdict(cfg), "report": str(cfg.report)},
        "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(began)),
        "faults": {
            "kills": chaos.plan.kills,
            "apiserver_restarts": chaos.plan.restarts,
            "pod_deletions": deleted_pods(
                chaos.deleter.deleted, chaos.load.calls, chaos.final, counts
            ),
            "pod_deletions_missed": chaos.deleter.missed,
            "operator_exits": chaos.operator.exits,
            "operator_start_failures": chaos.operator.start_failures,
        },
        "load": analyse(
            chaos.load.calls, chaos.final, counts, chaos.operator, chaos.namespaces[0].name
        ),
        "reviewer": {
            "approved": len(chaos.reviewer.approved) if chaos.reviewer else 0,
            "errors": dict(chaos.reviewer.errors) if chaos.reviewer else {},
            "refused": chaos.reviewer.refused if chaos.reviewer else {},
        },
        "watch": {
            t.namespace: {"lists": t.relists, "errors": dict(t.errors)} for t in chaos.trackers
        },
    }
    if "same_key" in chaos.result:
        report["same_key"] = analyse_same_key(chaos.same_final, counts, chaos.result["same_key"])
    report["rules"] = rules(report)
    report["ok"] = all(r["met"] for r in report["rules"].values())
    return report


def main(argv: list[str]) -> int:
    cfg = Config.parse(argv)
    began = time.time()
    chaos = Chaos(cfg)
    log(
        f"run {chaos.run_id} (seed {cfg.seed}): namespaces {chaos.prefix}-*, "
        f"workdir {chaos.workdir}"
    )
    report: dict[str, Any] | None = None
    try:
        chaos.setup()
        chaos.load_with_faults()
        chaos.settle()
        chaos.one_key_many_creators()
        report = build_report(chaos, began)
    except BaseException:
        traceback.print_exc()
        log("the run itself failed (infrastructure, not a rule); operator log tail:")
        print(chaos.operator.op.tail(40), flush=True)
        chaos.cleanup(keep_workdir=True)
        return 2
    chaos.cleanup(keep_workdir=not report["ok"])
    report["warnings"] = chaos.result["warnings"]
    report["wall_seconds"] = round(time.time() - began, 1)
    report["finished"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    cfg.report.write_text(json.dumps(report, indent=2, default=str) + "\n")
    print_table(report)
    print(f"report: {cfg.report}")
    return 0 if report["ok"] else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
