"""The rules, checked on what the cluster, the counting server and the artifact store say;
the JSON report and the printed table."""

from __future__ import annotations

import hashlib
import re
import statistics
from collections import Counter
from pathlib import Path
from typing import Any

from .config import TERMINAL
from .load import Planned
from .supervisor import SupervisedOperator
from .tracker import state_of

#: Classes whose effects stay inside the operator or the call's own sandbox: such a call
#: that cannot be confirmed ends Failed, never Uncertain.
CONTAINED = {"read", "sandbox"}
JOB_NAME = re.compile(r"ta-[0-9a-f]{8}-[0-9a-f-]{27}")


def generic(message: object) -> str:
    """A message without the names of one call's objects, to count alike ones together."""
    return JOB_NAME.sub("ta-<uid>", str(message))[:100]


def sha256_of(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def receipt_path(artifacts: Path, ref: str | None) -> Path | None:
    algo, _, digest = (ref or "").partition(":")
    if algo != "sha256" or len(digest) != 64:
        return None
    return artifacts / "sha256" / digest[:2] / digest


def detail(
    obj: dict[str, Any] | None, operator: SupervisedOperator, ref: str, log_limit: int = 40
) -> dict[str, Any]:
    """Everything the lead needs about one suspicious call."""
    status = (obj or {}).get("status") or {}
    return {
        "state": state_of(obj or {}),
        "message": status.get("message"),
        "failureClass": status.get("failureClass"),
        "effectiveClass": status.get("effectiveClass"),
        "execution": status.get("execution"),
        "duplicateOf": status.get("duplicateOf"),
        "receiptRef": status.get("receiptRef"),
        "stages": status.get("stages"),
        "operator_log": operator.log_lines(ref, log_limit),
    }


def analyse(
    calls: list[Planned],
    final: dict[str, dict[str, Any]],
    counts: dict[str, int],
    operator: SupervisedOperator,
    namespace: str,
) -> dict[str, Any]:
    by_path = {c.path: c for c in calls if c.path}
    per_key = {c.key: counts.get(c.path, 0) for c in calls if c.path and c.created}
    twice = sorted(k for k, n in per_key.items() if n > 1)
    planned = {c.name: c for c in calls}
    states: Counter[str] = Counter()
    per_tool: dict[str, Counter[str]] = {}
    uncertain, missing, unseen, failed = [], [], [], Counter()
    #: Failed says "never started acting": an effectful Failed call the server saw breaks it.
    failed_after_effect: list[str] = []
    tool_errors = 0
    not_observed: dict[str, Any] = {}
    problems: dict[str, Any] = {}
    for call in calls:
        obj = final.get(call.name)
        if not call.created or obj is None:
            continue
        state = state_of(obj)
        status = obj.get("status") or {}
        states[state] += 1
        per_tool.setdefault(call.tool, Counter())[state] += 1
        executions = counts.get(call.path, 0) if call.path else None
        ref = f"{namespace}/{call.name}"
        if state != "Observed":
            not_observed[call.name] = {
                "tool": call.tool,
                "executions_counted": executions,
                **detail(obj, operator, ref, log_limit=8),
            }
        if state == "Failed":
            failed[
                f"{call.tool}: {status.get('failureClass')}: {generic(status.get('message'))}"
            ] += 1
            if executions and status.get("effectiveClass") not in CONTAINED:
                failed_after_effect.append(call.name)
                problems[call.name] = detail(obj, operator, ref)
        if state == "Observed" and (status.get("result") or {}).get("isError"):
            tool_errors += 1
        if state == "Uncertain":
            execution = status.get("execution")
            cls = status.get("effectiveClass")
            may = bool(execution) and cls not in CONTAINED
            uncertain.append(
                {
                    "name": call.name,
                    "tool": call.tool,
                    "effectiveClass": cls,
                    "execution_recorded": bool(execution),
                    "execution_kind": (execution or {}).get("kind"),
                    "effect_may_have_started": may,
                    "executions_counted": executions,
                    "message": status.get("message"),
                }
            )
            if not may:
                problems[call.name] = detail(obj, operator, ref)
        if state in TERMINAL:
            path = receipt_path(operator.artifacts, status.get("receiptRef"))
            if path is None or not path.is_file() or path.name != sha256_of(path):
                missing.append(call.name)
                problems[call.name] = detail(obj, operator, ref)
        if state == "Observed" and executions == 0:
            unseen.append(call.name)
            problems[call.name] = detail(obj, operator, ref)
    for key in twice:
        name = next(c.name for c in calls if c.key == key)
        problems[name] = {
            "executions": per_key[key],
            **detail(final.get(name), operator, f"{namespace}/{name}"),
        }
    stray = {
        p: n for p, n in counts.items() if p not in by_path and not p.startswith("/effect/same-")
    }
    return {
        "executions": {
            "keys_counted": len(per_key),
            "max": max(per_key.values(), default=0),
            "keys_executed_more_than_once": {k: per_key[k] for k in twice},
            "keys_executed_once": sum(1 for n in per_key.values() if n == 1),
            "keys_never_executed": sum(1 for n in per_key.values() if n == 0),
            "requests_to_unknown_paths": stray,
        },
        "states": dict(states),
        "states_per_tool": {t: dict(c) for t, c in per_tool.items()},
        "failed_reasons": dict(failed.most_common(15)),
        "uncertain": uncertain,
        "terminal_without_receipt": missing,
        "observed_but_not_executed": unseen,
        "failed_after_an_effect": failed_after_effect,
        "observed_tool_errors": tool_errors,
        "creates_not_done": [
            {"name": c.name, "attempts": c.attempts, "error": c.error}
            for c in calls
            if not c.created
        ],
        "unknown_invocations": sorted(n for n in final if n not in planned),
        "problems": problems,
        "not_observed": not_observed,
    }


def deleted_pods(
    deletions: list[dict[str, Any]],
    calls: list[Planned],
    final: dict[str, dict[str, Any]],
    counts: dict[str, int],
) -> list[dict[str, Any]]:
    """What became of the call of each deleted sandbox pod."""
    by_uid = {o["metadata"]["uid"]: name for name, o in final.items()}
    planned = {c.name: c for c in calls}
    out = []
    for d in deletions:
        name = by_uid.get(d.get("invocation_uid") or "")
        call = planned.get(name or "")
        obj = final.get(name or "") or {}
        out.append(
            {
                "pod": d["pod"],
                "phase": d["phase"],
                "running_containers": d["running_containers"],
                "invocation": name,
                "state": state_of(obj) if obj else None,
                "message": (obj.get("status") or {}).get("message"),
                "executions_counted": counts.get(call.path, 0) if call and call.path else None,
            }
        )
    return out


def analyse_same_key(
    final: dict[str, dict[str, Any]], counts: dict[str, int], info: dict[str, Any]
) -> dict[str, Any]:
    winners = [n for n, o in final.items() if not (o.get("status") or {}).get("duplicateOf")]
    winner = winners[0] if len(winners) == 1 else None
    wstatus = (final[winner].get("status") or {}) if winner else {}
    # A duplicate ends in its winner's state (before issue 27: Denied `duplicate`).
    duplicates = [
        n
        for n, o in final.items()
        if (o.get("status") or {}).get("duplicateOf") == winner
        and (state_of(o) == state_of(final[winner]) if winner else False)
    ]
    carrying = [
        n
        for n in duplicates
        if (final[n].get("status") or {}).get("receiptRef") == wstatus.get("receiptRef")
    ]
    return {
        **info,
        "executions": counts.get(info["path"], 0),
        "winners": winners,
        "winner_state": state_of(final[winner]) if winner else None,
        "duplicates": len(duplicates),
        "duplicates_carrying_winner_receipt": len(carrying),
        "states": dict(Counter(state_of(o) for o in final.values())),
    }


def rules(report: dict[str, Any]) -> dict[str, dict[str, Any]]:
    load, settle, same = report["load"], report["settle"], report.get("same_key") or {}
    uncertain_bugs = [u["name"] for u in load["uncertain"] if not u["effect_may_have_started"]]
    creators = report["config"]["creators"]
    return {
        "executions per key <= 1": {
            "value": load["executions"]["max"],
            "met": load["executions"]["max"] <= 1
            and not load["executions"]["requests_to_unknown_paths"],
        },
        f"non-terminal {report['config']['settle_seconds']:.0f} s after the last fault == 0": {
            "value": len(settle["non_terminal_at_deadline"]),
            "met": not settle["non_terminal_at_deadline"],
        },
        "terminal calls without a receipt == 0": {
            "value": len(load["terminal_without_receipt"]),
            "met": not load["terminal_without_receipt"],
        },
        "Uncertain only where an effect may have started": {
            "value": uncertain_bugs,
            "met": not uncertain_bugs,
        },
        "Failed only where nothing started (no effectful Failed call seen by the server)": {
            "value": len(load["failed_after_an_effect"]),
            "met": not load["failed_after_an_effect"],
        },
        "Observed effectful calls seen by the server": {
            "value": len(load["observed_but_not_executed"]),
            "met": not load["observed_but_not_executed"],
        },
        f"{creators} creators of one key: 1 execution, {creators - 1} duplicates": {
            "value": f"{same.get('executions')} executions, {same.get('duplicates')} duplicates",
            "met": same.get("executions") == 1
            and len(same.get("winners") or []) == 1
            and same.get("duplicates") == creators - 1,
        },
    }


def fault_summary(report: dict[str, Any]) -> list[str]:
    f = report["faults"]
    start = report.get("load_started") or 0
    kills = f["kills"]
    takeovers = [k["leading_again_after_s"] for k in kills]
    lines = [
        f"operator SIGKILLs: {len(kills)} ({sum(1 for k in kills if k['was_leading'])} while "
        f"leading); leading again after min/median/max "
        f"{_stat(takeovers, min)}/{_stat(takeovers, statistics.median)}/{_stat(takeovers, max)} s",
    ]
    for r in f["apiserver_restarts"]:
        if r.get("done"):
            lines.append(
                f"API server restart at +{r['at'] - start:.0f} s: pid {r['old_pid']} -> "
                f"{r['new_pid']}, stopped after {r['stopped_after_s']} s"
                f"{' (SIGKILL: SIGTERM not done in 15 s)' if r.get('sigkill') else ''}, "
                f"ready after {r['ready_after_s']} s"
            )
        else:
            lines.append(
                f"API server restart at +{r['at'] - start:.0f} s: NOT DONE ({r.get('why')})"
            )
    missing = report["config"]["apiserver_restarts"] - len(f["apiserver_restarts"])
    if missing > 0:
        lines.append(f"API server restarts not reached: {missing}")
    pods = f["pod_deletions"]
    outcomes = Counter(
        f"{p['state']} ({p['phase']}{', running' if p['running_containers'] else ''}, "
        f"server saw {p['executions_counted']})"
        for p in pods
    )
    lines.append(
        f"sandbox pods deleted: {len(pods)}, missed: {len(f['pod_deletions_missed'])}; their "
        f"calls ended: {', '.join(f'{n}x {o}' for o, n in outcomes.most_common()) or '-'}"
    )
    exits = f["operator_exits"]
    lines.append(
        f"operator exits on its own (restarted): {len(exits)}"
        + "".join(
            f"\n    +{e['at'] - start:.0f} s code {e['code']}: {e['why'][:160]}" for e in exits
        )
    )
    return lines


def print_table(report: dict[str, Any]) -> None:
    load, settle = report["load"], report["settle"]
    ex = load["executions"]
    print("\n=== tooladapter chaos ===")
    print(f"run {report['run_id']} (seed {report['seed']}), namespaces {report['namespaces']}")
    for line in fault_summary(report):
        print(f"  {line}")
    print(
        f"executions per key: max {ex['max']} over {ex['keys_counted']} effectful keys "
        f"({ex['keys_executed_once']} once, {ex['keys_never_executed']} never); "
        f"keys > 1: {ex['keys_executed_more_than_once'] or 'none'}; "
        f"unknown paths: {ex['requests_to_unknown_paths'] or 'none'}"
    )
    stuck = settle["non_terminal_at_deadline"]
    print(
        f"non-terminal {report['config']['settle_seconds']:.0f} s after the last fault: "
        f"{len(stuck)} {stuck[:20] if stuck else ''}"
    )
    if "still_non_terminal_after_extra_s" in settle:
        still = settle["still_non_terminal_after_extra_s"]
        print(f"  still non-terminal {still['extra_seconds']:.0f} s later: {len(still['names'])}")
    took = settle["settled_after_last_fault_s"]
    print(
        f"time from the last fault to all terminal: {took if took is not None else 'not settled'} s"
    )
    print(f"terminal states: {dict(sorted(load['states'].items()))}")
    for tool, states in sorted(load["states_per_tool"].items()):
        print(f"  {tool:<8} {dict(sorted(states.items()))}")
    for reason, n in load["failed_reasons"].items():
        print(f"  Failed x{n}: {reason}")
    # Observed with isError: the tool ran and answered with an error (Failed before issue 27).
    print(f"  of them Observed tool errors: {load.get('observed_tool_errors', 0)}")
    print_uncertain(load["uncertain"])
    print(
        f"terminal calls without a receipt: {len(load['terminal_without_receipt'])} "
        f"{load['terminal_without_receipt'][:20] or ''}"
    )
    if load["creates_not_done"]:
        print(f"creates that never got through: {len(load['creates_not_done'])}")
    same = report.get("same_key")
    if same:
        print(
            f"{same['created']} concurrent creators of one key: {same['executions']} execution(s), "
            f"winner {same['winners']} {same['winner_state']}, {same['duplicates']} duplicates "
            f"({same['duplicates_carrying_winner_receipt']} carrying its receipt), "
            f"{same['seconds']} s"
        )
    for name, rule in report["rules"].items():
        print(f"rule {'met' if rule['met'] else 'FAILED'}: {name} (measured {rule['value']})")
    for name, problem in load["problems"].items():
        print(f"--- {name}: {problem['state']} {problem.get('failureClass')}: {problem['message']}")
        for stage in problem.get("stages") or []:
            print(
                f"    {stage.get('time')} {stage.get('stage')} {stage.get('outcome')} "
                f"{stage.get('detail', '')[:120]}"
            )
        for line in problem["operator_log"][-10:]:
            print(f"    log: {line[:240]}")
    for warning in report["warnings"]:
        print(f"WARNING: {warning}")
    print(f"wall time: {report['wall_seconds']:.0f} s")


def print_uncertain(uncertain: list[dict[str, Any]]) -> None:
    may = sum(1 for u in uncertain if u["effect_may_have_started"])
    seen = sum(1 for u in uncertain if u["executions_counted"])
    print(
        f"Uncertain: {len(uncertain)} (effect may have started: {may}, of which the server saw "
        f"{seen}; Uncertain where no effect can have started: {len(uncertain) - may})"
    )
    for message, n in Counter(generic(u["message"]) for u in uncertain).most_common():
        print(f"  x{n}: {message}")
    print("  each as name [class, execution recorded, effect may have started, server saw]:")
    cells = [
        f"{u['name']} [{u['effectiveClass']}, {u['execution_kind'] or 'none'}, "
        f"{'yes' if u['effect_may_have_started'] else 'NO (bug)'}, {u['executions_counted']}]"
        for u in uncertain
    ]
    for i in range(0, len(cells), 3):
        print("    " + "  ".join(cells[i : i + 3]))


def _stat(values: list[float], fn: Any) -> str:
    return f"{fn(values):.1f}" if values else "-"
