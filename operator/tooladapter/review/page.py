"""What the reviewers' page shows, as plain data: arguments exactly as they will run, the
change since the last approved call, stage timelines, the evidence kept for an Uncertain
effect, recent decisions and the runs of a namespace.

An approval binds to the hash of the exact arguments, so the page hides nothing an agent
sent (issue 28: redacting by pattern or key name let an agent hide an upload's destination
behind something secret-looking). Arguments go through pipeline/shown: invisible, control
and bidirectional characters become visible markers with warnings, credential-like tokens
are flagged, never masked. The change since the last approved call is computed over the
raw values; only its display is marked.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Final

from tooladapter.enums import InvocationState
from tooladapter.pipeline.parts import meta_of as _meta
from tooladapter.pipeline.parts import name_of as _name
from tooladapter.pipeline.parts import spec_of as _spec
from tooladapter.pipeline.parts import status_of as _status
from tooladapter.review import readout
from tooladapter.review.argdiff import ChangeKind, diff
from tooladapter.review.shown import shown, shown_json, visible
from tooladapter.review.texts import pending_approvals
from tooladapter.timeutil import parse_time

#: At most this many runs are offered per page.
MAX_RUNS: Final = 50
#: Decisions listed below the waiting calls.
RECENT_DECISIONS: Final = 20


def pretty(value: Any) -> str:
    """JSON for people: indented, keys sorted."""
    return json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False)


def arguments_view(arguments: Any) -> dict[str, Any]:
    """What the page shows of a call's arguments: all of them (pipeline/shown), in pieces
    the template highlights, with the warnings and credential-like flags."""
    view = shown(arguments)
    return {
        "prettyArguments": view.pretty,
        "argumentSegments": view.segments(),
        "argumentWarnings": list(view.warnings),
        "argumentFlags": [f.text() for f in view.flags],
    }


def shown_changes(before: Any, after: Any) -> list[dict[str, Any]]:
    """The changes from `before` to `after`, compared on the raw values (a change in an
    invisible character is a change), each value shown whole with markers."""
    changes = []
    for change in diff(before, after):
        row: dict[str, Any] = {"kind": change.kind.value, "path": visible(change.path)}
        for side, value in (("before", change.before), ("after", change.after)):
            absent = (side == "before" and change.kind is ChangeKind.ADDED) or (
                side == "after" and change.kind is ChangeKind.REMOVED
            )
            if absent:
                continue
            row[side] = shown_json(value)
        changes.append(row)
    return changes


def pending_for_page(
    invocations: Sequence[dict[str, Any]],
    earlier: Sequence[dict[str, Any]] = (),
    descriptors: Mapping[str, Sequence[dict[str, Any]]] | None = None,
) -> list[dict[str, Any]]:
    """The CLI's pending approvals (same reasons, hashes, credentials and previous call),
    namespace by namespace, with the arguments and the change since the last approved
    call shown whole (pipeline/shown).
    `earlier`: approved calls from the receipt index, `descriptors` the ToolDescriptor
    bodies by namespace (see `review.pending_approvals`)."""
    namespaces: dict[str, list[dict[str, Any]]] = {}
    for obj in invocations:
        namespaces.setdefault(str(_meta(obj).get("namespace") or ""), []).append(obj)
    views = []
    for namespace, objects in sorted(namespaces.items()):
        older = [e for e in earlier if _meta(e).get("namespace") == namespace]
        by_name = {str(_meta(o).get("name")): o for o in objects}
        # By uid: a deleted call's name may since have been given to another.
        by_uid = {str(_meta(o).get("uid")): o for o in [*older, *objects]}
        for view in pending_approvals(objects, older, descriptors):
            obj = by_name[view["name"]]
            view["namespace"] = namespace
            view["uid"] = _meta(obj).get("uid")
            view.update(arguments_view(view.pop("arguments")))
            view.pop("canonicalArguments", None)
            previous = view.get("lastApproved")
            if previous is not None:
                previous.pop("canonicalArguments", None)
                before = _spec(by_uid.get(str(previous.get("uid"))) or {}).get("arguments") or {}
                view["changes"] = shown_changes(before, _spec(obj).get("arguments") or {})
            views.append(view)
    views.sort(key=lambda v: str(v.get("waitingSince") or ""))
    return views


@dataclass(frozen=True)
class TimelineEntry:
    """One recorded stage, placed on the call's time axis (percent of its duration)."""

    stage: str
    outcome: str
    time: str
    detail: str
    offset_ms: int
    left: float
    width: float


def timeline(status: dict[str, Any], *, minimum_width: float = 1.0) -> list[TimelineEntry]:
    """The stages of a call on one axis: each bar starts at its stage's time and ends at
    the next stage's (the last one is a thin mark). Entries without a parsable time keep
    their place with no offset."""
    stages = [s for s in status.get("stages") or [] if isinstance(s, dict)]
    moments: list[datetime | None] = []
    for entry in stages:
        try:
            moments.append(parse_time(str(entry.get("time") or "")))
        except ValueError:
            moments.append(None)
    known = [m for m in moments if m is not None]
    start = min(known) if known else None
    end = max(known) if known else None
    total = (end - start).total_seconds() if start is not None and end is not None else 0.0
    entries = []
    for index, (entry, moment) in enumerate(zip(stages, moments, strict=True)):
        offset = (moment - start).total_seconds() if moment and start else 0.0
        following = next((m for m in moments[index + 1 :] if m is not None), None)
        span = (following - moment).total_seconds() if following and moment else 0.0
        left = 100.0 * offset / total if total > 0 else 0.0
        width = 100.0 * span / total if total > 0 else 0.0
        entries.append(
            TimelineEntry(
                stage=str(entry.get("stage") or ""),
                outcome=str(entry.get("outcome") or ""),
                time=str(entry.get("time") or ""),
                # A detail may quote a command: what does not print is shown by code point.
                detail=visible(str(entry.get("detail") or "")),
                offset_ms=round(offset * 1000),
                left=round(min(left, 100.0 - minimum_width), 2),
                width=round(max(width, minimum_width), 2),
            )
        )
    return entries


def uncertain_view(obj: dict[str, Any]) -> dict[str, Any]:
    """An Uncertain call with what the operator kept: why, the execution record (command
    line, Job, holder), the sandbox lease, the stages and the confirmation so far."""
    spec, status = _spec(obj), _status(obj)
    tool = spec.get("tool") or {}
    execution = status.get("execution") or {}
    lease = status.get("sandboxLease") or {}
    confirmation = status.get("effectConfirmation") or None
    if confirmation is not None:
        # The status schema has no defaults: a person's confirmation carries no `recorded`
        # until the operator records it.
        confirmation = {**confirmation, "recorded": bool(confirmation.get("recorded"))}
    evidence = {
        "kind": execution.get("kind"),
        "startedAt": execution.get("startedAt"),
        "commandLine": execution.get("commandLine") or [],
        "job": execution.get("jobName") or lease.get("jobName"),
        "networkPolicy": lease.get("networkPolicyName"),
        "runtimeClass": lease.get("runtimeClass"),
        "holder": execution.get("holder"),
        "attempts": execution.get("attempts"),
        "leasedAt": lease.get("leasedAt"),
        "releasedAt": lease.get("releasedAt"),
    }
    return {
        "namespace": _meta(obj).get("namespace"),
        "name": _meta(obj).get("name"),
        "tool": tool.get("id"),
        "version": tool.get("version"),
        "caller": (spec.get("caller") or {}).get("name"),
        "runId": spec.get("runId"),
        "effectiveClass": status.get("effectiveClass"),
        "message": status.get("message"),
        "failureClass": status.get("failureClass"),
        "receiptRef": status.get("receiptRef"),
        "receipt": status.get("receipt"),
        **arguments_view(spec.get("arguments") or {}),
        "evidence": {k: v for k, v in evidence.items() if v not in (None, [], "")},
        "timeline": timeline(status),
        "confirmation": confirmation,
        "confirmable": confirmation is None,
    }


def uncertain_calls(invocations: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Uncertain calls, unconfirmed first, then newest first. A duplicate is left out: it
    ran nothing, carries its first call's state, and takes that call's confirmation."""
    chosen = [
        i
        for i in invocations
        if _status(i).get("state") == InvocationState.UNCERTAIN
        and not readout.duplicate_of(_status(i))
    ]
    chosen.sort(key=lambda i: str(_status(i).get("endedAt") or ""), reverse=True)
    chosen.sort(key=lambda i: bool(_status(i).get("effectConfirmation")))
    return [uncertain_view(i) for i in chosen]


def recent_decisions(
    invocations: Sequence[dict[str, Any]], limit: int = RECENT_DECISIONS
) -> list[dict[str, Any]]:
    """Calls an approval was bound to, or that were rejected, newest first, with where
    they are now: a reviewer watches an approved call go on to its end."""
    rows = []
    for obj in invocations:
        status = _status(obj)
        approval = status.get("approval") or {}
        rejected = any(
            (s or {}).get("stage") == "approval" and (s or {}).get("outcome") == "rejected"
            for s in status.get("stages") or []
        )
        if not approval and not rejected:
            continue
        tool = _spec(obj).get("tool") or {}
        rows.append(
            {
                "namespace": _meta(obj).get("namespace"),
                "name": _meta(obj).get("name"),
                "tool": tool.get("id"),
                "version": tool.get("version"),
                "decision": "Rejected" if rejected and not approval else "Approved",
                "reviewer": approval.get("reviewer"),
                "at": approval.get("boundAt") or status.get("endedAt") or "",
                "state": status.get("state"),
                "outcome": readout.outcome_label(status),
                "toolError": readout.tool_error(status),
            }
        )
    rows.sort(key=lambda r: str(r["at"]), reverse=True)
    return rows[:limit]


def run_ids(invocations: Sequence[dict[str, Any]], limit: int = MAX_RUNS) -> list[str]:
    """The runs of these calls, most recently started first."""
    latest: dict[str, str] = {}
    for obj in invocations:
        run = _spec(obj).get("runId")
        if run:
            created = str(_meta(obj).get("creationTimestamp") or "")
            latest[str(run)] = max(latest.get(str(run), ""), created)
    return sorted(latest, key=lambda r: (latest[r], r), reverse=True)[:limit]


def run_calls(invocations: Sequence[dict[str, Any]], run_id: str) -> list[dict[str, Any]]:
    """The calls of one run in creation order (then start order), each with its stage
    timeline."""
    chosen = [i for i in invocations if _spec(i).get("runId") == run_id]
    # creationTimestamp has whole seconds; startedAt (microseconds) orders calls within one.
    chosen.sort(
        key=lambda i: (
            str(_meta(i).get("creationTimestamp") or ""),
            str(_status(i).get("startedAt") or ""),
            _name(i),
        )
    )
    rows = []
    for obj in chosen:
        spec, status = _spec(obj), _status(obj)
        tool = spec.get("tool") or {}
        rows.append(
            {
                "namespace": _meta(obj).get("namespace"),
                "name": _meta(obj).get("name"),
                # A run id is a label any caller may use: whose call this is.
                "caller": (spec.get("caller") or {}).get("name"),
                "tool": tool.get("id"),
                "version": tool.get("version"),
                "state": status.get("state"),
                # Observed alone is a success: a tool error (or a duplicate) says so.
                "outcome": readout.outcome_label(status),
                "toolError": readout.tool_error(status),
                "effectiveClass": status.get("effectiveClass"),
                "receiptRef": status.get("receiptRef"),
                "auditRef": status.get("auditRef"),
                "timeline": timeline(status),
            }
        )
    return rows
