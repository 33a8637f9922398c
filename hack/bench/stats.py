"""Percentiles, latency summaries and the per-stage breakdown of the calls' stage logs."""

from __future__ import annotations

from typing import Any

from .calls import Call

#: What happens between two consecutive marks of the stage log (see handlers/invocations.py).
SEGMENT_NOTES = {
    "sent -> startedAt": "create + admission, watch event to the operator, kopf dispatch",
    "startedAt -> validation:passed": "descriptor lookup, bounds, JSON Schema, request hash",
    "validation:passed -> permission:passed": "policy evaluation, 2 SARs (allowed answers "
    "remembered TOOLADAPTER_AUTHZ_CACHE_SECONDS)",
    "sandbox:leased -> execute:started": "PATCH Executing (before the Job exists)",
    "credentials:none -> sandbox:leased": "NetworkPolicy create",
    "execute:started -> sanitize:done": "the tool itself (a read in the operator: no PATCH "
    "before it); for sandboxes the Job, its pod and the log read",
    "sanitize:done -> execute:observed": "result to the artifact store (fsync, in a thread), "
    "lease release",
    "execute:observed -> audit:receipt": "end time and state set",
    "audit:receipt -> client saw terminal": "receipt built and stored, the one status PATCH, "
    "the watch event back to the client",
    "execute:observed -> client saw terminal": "receipt built and stored, the one status "
    "PATCH, the watch event back to the client",
    "audit:receipt -> status PATCH sent": "receipt built, signed, chained and stored (the "
    "store's threads, one trip per namespace chain at a time)",
    "status PATCH sent -> client saw terminal": "the one status PATCH, the watch event back "
    "to the client (the API server's part)",
}


def pct(values: list[float], p: float) -> float | None:
    if not values:
        return None
    s = sorted(values)
    k = max(0, min(len(s) - 1, round(p / 100 * len(s) + 0.5) - 1))
    return s[k]


def ms(v: float | None) -> float | None:
    return None if v is None else round(v * 1000, 1)


def latency_summary(values: list[float]) -> dict[str, Any]:
    return {
        "n": len(values),
        "p50_ms": ms(pct(values, 50)),
        "p95_ms": ms(pct(values, 95)),
        "p99_ms": ms(pct(values, 99)),
        "max_ms": ms(max(values) if values else None),
        "mean_ms": ms(sum(values) / len(values) if values else None),
    }


def iso_ts(value: str | None) -> float | None:
    if not value:
        return None
    from datetime import datetime

    return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()


def stage_breakdown(records: list[Call]) -> dict[str, Any]:
    """Mean/p50/p95 of the time between consecutive marks of each Observed call's stage log."""
    segments: dict[str, list[float]] = {}
    order: list[str] = []
    for rec in records:
        if rec.state != "Observed" or not rec.status:
            continue
        st = rec.status
        marks: list[tuple[str, float | None]] = [
            ("sent", rec.target),
            ("startedAt", iso_ts(st.get("startedAt"))),
        ]
        marks += [
            (f"{s['stage']}:{s['outcome']}", iso_ts(s.get("time"))) for s in st.get("stages") or []
        ]
        # The end's conditions are stamped as its status PATCH is made (after the receipt's
        # trip to the store): splits the operator's part of the last segment from the
        # API server's (the PATCH and the watch event back).
        stamps = [iso_ts(c.get("lastTransitionTime")) for c in st.get("conditions") or []]
        written = max((t for t in stamps if t is not None), default=None)
        if written is not None:
            marks.append(("status PATCH sent", written))
        marks.append(("client saw terminal", rec.done))
        prev_name, prev_t = marks[0]
        for name, t in marks[1:]:
            if t is None or prev_t is None:
                prev_name, prev_t = name, t
                continue
            key = f"{prev_name} -> {name}"
            if key not in segments:
                segments[key] = []
                order.append(key)
            segments[key].append(t - prev_t)
            prev_name, prev_t = name, t
    rows = []
    for key in order:
        vals = segments[key]
        rows.append(
            {
                "segment": key,
                "n": len(vals),
                "mean_ms": ms(sum(vals) / len(vals)),
                "p50_ms": ms(pct(vals, 50)),
                "p95_ms": ms(pct(vals, 95)),
                "what": SEGMENT_NOTES.get(key, ""),
            }
        )
    slowest = max(rows, key=lambda r: r["mean_ms"] or 0, default=None)
    return {"segments": rows, "slowest": slowest["segment"] if slowest else None}


def ratio(a: float | None, b: float | None) -> float | None:
    if a is None or b is None or b == 0:
        return None
    return round(a / b, 2)
