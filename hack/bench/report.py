"""The report's derived parts (ratios to the floor, the goals) and the printed table."""

from __future__ import annotations

from typing import Any

from .stats import ratio


def ratios_vs_floor(report: dict[str, Any]) -> dict[str, list[dict[str, Any]]]:
    """Ours / floor at each offered load both were measured at."""
    loads = report.get("loads") or {}
    floors = {r["offered_per_s"]: r for r in loads.get("floor", [])}
    ratios: dict[str, list[dict[str, Any]]] = {}
    for kind, rows in loads.items():
        if kind == "floor" or not floors:
            continue
        ratios[kind] = [
            {
                "offered_per_s": ours["offered_per_s"],
                **{
                    f"{p}_ratio": ratio(ours["latency"][p], floor["latency"][p])
                    for p in ("p50_ms", "p95_ms", "p99_ms")
                },
                "achieved_ratio": ratio(ours["achieved_per_s"], floor["achieved_per_s"]),
                # What a call costs the API server against the floor's (issue 41).
                "requests_per_call": ours.get("apiserver_requests_per_call"),
                "floor_requests_per_call": floor.get("apiserver_requests_per_call"),
                "requests_ratio": ratio(
                    ours.get("apiserver_requests_per_call"),
                    floor.get("apiserver_requests_per_call"),
                ),
                "apiserver_cpu_ratio": ratio(
                    ours.get("apiserver_cpu_ms_per_call"), floor.get("apiserver_cpu_ms_per_call")
                ),
            }
            for ours in rows
            if (floor := floors.get(ours["offered_per_s"])) is not None
        ]
    return ratios


def goals(report: dict[str, Any]) -> dict[str, Any]:
    """The issue's targets, each with the measured value and whether it was met."""
    out: dict[str, Any] = {}
    loads = report.get("loads") or {}
    for tool, rows in loads.items():
        if tool == "floor":
            continue
        sustained = [
            r["offered_per_s"]
            for r in rows
            if r["errors"] == 0 and r["achieved_per_s"] >= 0.95 * r["offered_per_s"]
        ]
        best = max(sustained, default=None)
        out[f"{tool}: sustained calls/s >= 100"] = {"value": best, "met": (best or 0) >= 100}
        at50 = next((r for r in rows if r["offered_per_s"] == 50), None)
        if at50 is not None:
            p95 = at50["latency"]["p95_ms"]
            out[f"{tool}: p95 at 50/s <= 250 ms"] = {
                "value": p95,
                "met": p95 is not None and p95 <= 250 and at50["errors"] == 0,
            }
    for tool, rows in (report.get("ratios_vs_floor") or {}).items():
        worst = max((r["p95_ms_ratio"] or 0 for r in rows), default=None)
        out[f"{tool}: p95 ours/floor <= 3 at every load"] = {
            "value": worst,
            "met": worst is not None and worst <= 3,
        }
    sandbox = report.get("sandbox")
    if sandbox:
        worst = max(
            v or 0
            for k, v in sandbox["ratios_vs_bare_job"].items()
            if k.startswith("vs job_same_pod_spec")
        )
        out["sandbox: ours/bare Job (same pod spec) <= 1.10"] = {
            "value": worst,
            "met": worst <= 1.10,
        }
    fill = report.get("fill")
    if fill:
        rss = max(fill["rss_mb_after_processing"], fill["rss_mb_restarted_with_stored"])
        out[f"RSS with {fill['stored_invocations']} stored <= 150 MB"] = {
            "value": rss,
            "met": rss <= 150,
        }
    return out


def print_table(report: dict[str, Any]) -> None:
    print("\n=== tooladapter bench ===")
    ratios = report.get("ratios_vs_floor") or {}
    if ratios:
        print("Ratios ours / floor (goal <= 3x):")
        print(
            f"  {'tool':<15} {'load/s':>7} {'p50':>6} {'p95':>6} {'p99':>6} {'thru':>6} "
            f"{'req/call (floor)':>17} {'req':>6} {'apiCPU':>6}"
        )
        for tool, rows in ratios.items():
            for r in rows:
                reqs = f"{_f(r.get('requests_per_call'))} ({_f(r.get('floor_requests_per_call'))})"
                print(
                    f"  {tool:<15} {r['offered_per_s']:>7.0f} {_f(r['p50_ms_ratio']):>6} "
                    f"{_f(r['p95_ms_ratio']):>6} {_f(r['p99_ms_ratio']):>6} "
                    f"{_f(r['achieved_ratio']):>6} {reqs:>17} {_f(r.get('requests_ratio')):>6} "
                    f"{_f(r.get('apiserver_cpu_ratio')):>6}"
                )
    sandbox = report.get("sandbox")
    if sandbox:
        print("Sandbox ours / bare Job (goal <= 1.10 against the same pod spec):")
        for k, v in sandbox["ratios_vs_bare_job"].items():
            print(f"  {k:<45} {_f(v)}")
    elif "sandbox" in report.get("not_measured", {}):
        print(f"Sandbox: not measured: {report['not_measured']['sandbox'][:300]}")
    loads = report.get("loads") or {}
    if loads:
        print("Absolute (create -> terminal seen on a watch, ms; throughput /s; operator):")
        print(
            f"  {'kind':<15} {'load/s':>7} {'p50':>8} {'p95':>8} {'p99':>8} {'achvd':>6} "
            f"{'err':>5} {'cpu s/1k':>8} {'rss MB':>7} {'host%':>6}"
        )
        for kind, rows in loads.items():
            for r in rows:
                lat = r["latency"]
                print(
                    f"  {kind:<15} {r['offered_per_s']:>7.0f} {_f(lat['p50_ms']):>8} "
                    f"{_f(lat['p95_ms']):>8} {_f(lat['p99_ms']):>8} {r['achieved_per_s']:>6} "
                    f"{r['errors']:>5} {_f(r['controller_cpu_s_per_1000']):>8} "
                    f"{_f(r['controller_rss_mb_peak']):>7} "
                    f"{r['resources']['host_cpu_busy_pct']:>6}"
                )
    if sandbox:
        for label in ("ours", "job_same_pod_spec", "job_tool_only"):
            s = sandbox[label]
            print(
                f"  sandbox {label:<17} sequential p50 {s['sequential']['p50_ms']} ms "
                f"p95 {s['sequential']['p95_ms']} ms; {sandbox['concurrency']} concurrent p50 "
                f"{s['concurrent']['p50_ms']} ms, makespans {s['concurrent_makespan_s']} s"
            )
    fill = report.get("fill")
    if fill:
        print(
            f"Stored {fill['stored_invocations']} invocations: operator RSS "
            f"{fill['rss_mb_after_processing']} MB after processing, "
            f"{fill['rss_mb_restarted_with_stored']} MB restarted "
            f"(peak {fill['hwm_mb_restarted_with_stored']} MB; goal <= 150 MB); "
            f"{fill['operator_cpu_s_per_1000']} CPU s per 1000 calls"
        )
    stored = report.get("stored")
    if stored:
        w, a = stored.get("with_stored") or {}, stored.get("after_retention") or {}
        print(
            f"Stored {w.get('stored_invocations')} invocations "
            f"({stored['object_bytes_as_served']} B each as served): etcd "
            f"{_f(w.get('etcd_db_mb_apiserver'))} MB (in use {_f(w.get('etcd_db_in_use_mb'))} MB); "
            f"operator start -> first call Observed {stored['startup_first_call_observed_s']} s, "
            f"RSS {stored['rss_mb_with_stored']} MB (peak {stored['hwm_mb_with_stored']} MB)"
        )
        print(
            f"  retention drained them in {_f(stored['retention_seconds_to_drain'])} s "
            f"({_f(stored['retention_deletes_per_s'])}/s): {a.get('stored_invocations')} left, "
            f"etcd {_f(a.get('etcd_db_mb_apiserver'))} MB (in use "
            f"{_f(a.get('etcd_db_in_use_mb'))} MB), RSS {stored['rss_mb_after_retention']} MB; "
            f"a later start -> first call Observed "
            f"{stored['startup_after_retention_first_call_observed_s']} s"
        )
    stage_sets = [
        (f"{kind} at {r['offered_per_s']:.0f}/s", r.get("stages") or {})
        for kind, rows in loads.items()
        if kind != "floor"
        for r in (rows[:1] + rows[-1:] if len(rows) > 1 else rows)
    ]
    if sandbox:
        stage_sets.append(("sandboxed shell calls", sandbox.get("stages") or {}))
    for label, stages in stage_sets:
        if stages.get("segments"):
            print(f"Stages of {label} (p50 / mean ms):")
            for seg in stages["segments"]:
                print(f"  {seg['segment']:<52} {_f(seg['p50_ms']):>8} {_f(seg['mean_ms']):>8}")
            print(f"  slowest: {stages['slowest']}")
    over = report.get("overload")
    if over:
        print(
            f"Overload ({over['tool']}, 2x {over['capacity_per_s']}/s = "
            f"{over['offered_per_s']}/s for {over['seconds']:.0f} s): achieved "
            f"{over['achieved_per_s_in_window']}/s ({over['achieved_over_offered']} of offered, "
            f"{over['achieved_over_capacity']} of capacity); admitted p95 "
            f"{_f(over['admitted_latency']['p95_ms'])} ms, create->end p95 "
            f"{_f(over['end_to_end_latency']['p95_ms'])} ms; queue max {_f(over['queue_max'])}, "
            f"backlog max {_f(over['backlog_max'])}; RSS max {_f(over['rss_mb_max'])} MB "
            f"(plot: {over.get('plot', '-')})"
        )
    for name, goal in (report.get("goals") or {}).items():
        print(f"goal {'met' if goal['met'] else 'NOT met'}: {name} (measured {goal['value']})")
    machine = report["machine"]
    print(
        f"Machine: {machine['cpus']} CPUs, load before {machine['loadavg_before']}, "
        f"after {machine.get('loadavg_after')}"
    )
    for w in report.get("warnings", []):
        print(f"WARNING: {w}")
    for k, v in report.get("not_measured", {}).items():
        print(f"not measured: {k}: {v[:300]}")


def _f(v: Any) -> str:
    return "-" if v is None else str(v)
