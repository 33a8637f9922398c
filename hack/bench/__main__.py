"""`python -m bench [flags]` runs the bench; `floor-controller NAMESPACE` and
`http-server HOST PORT` are its helper processes; `adversarial` times what agent-crafted
input costs the operator (no cluster, `adversarial.py`); `egress` what the egress proxy adds
to a request (no cluster, `egress.py`); `sandboxes` sandboxed calls cold, warm and in an
attempt's workspace side by side (`sandboxes.py`)."""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time

from .config import Config
from .floor import floor_controller
from .http_server import http_server
from .report import goals, print_table, ratios_vs_floor
from .runner import Bench


def main(argv: list[str]) -> None:
    if argv[:1] == ["floor-controller"]:
        asyncio.run(floor_controller(argv[1]))
        return
    if argv[:1] == ["http-server"]:
        asyncio.run(http_server(argv[1], int(argv[2])))
        return
    if argv[:1] == ["egress"]:
        from .egress import main as egress

        egress()
        return
    if argv[:1] == ["sandboxes"]:
        from .sandboxes import main as sandboxes

        sandboxes()
        return
    if argv[:1] == ["adversarial"]:
        from .adversarial import main as adversarial

        adversarial()
        return
    cfg = Config.parse(argv)
    bench = Bench(cfg)
    print(f"bench {bench.run_id}: namespace {bench.ns}, workdir {bench.workdir}", flush=True)
    try:
        asyncio.run(bench.run())
    finally:
        bench.report["machine"]["loadavg_after"] = list(os.getloadavg())
        bench.report["finished"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        if bench.operator is not None and bench.operator.proc is not None:
            log = bench.operator.log_text()
            bench.report["operator_log_errors"] = [
                line[:300] for line in log.splitlines() if "ERROR" in line or "Traceback" in line
            ][:20]
        bench.cleanup()
        bench.report["ratios_vs_floor"] = ratios_vs_floor(bench.report)
        bench.report["goals"] = goals(bench.report)
        cfg.report.write_text(json.dumps(bench.report, indent=2, default=str) + "\n")
        print_table(bench.report)
        print(f"report: {cfg.report}")


if __name__ == "__main__":
    main(sys.argv[1:])
