"""`approvals`, `approve`, `reject`: a reviewer's view of gated calls, and the decision."""

from __future__ import annotations

import asyncio
import sys
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import click

from tooladapter.cli.bodies import approval_body
from tooladapter.cli.complete import invocations_in
from tooladapter.cli.context import (
    Settings,
    common_options,
    gathered,
    run_async,
    stacked,
    wait_options,
)
from tooladapter.cli.exitcodes import ExitCode
from tooladapter.cli.parsing import parse_expiry
from tooladapter.cli.render import fields
from tooladapter.enums import ApprovalDecision, InvocationState, Resource
from tooladapter.kube.errors import UserApiError
from tooladapter.kube.user import UserApi
from tooladapter.review.argdiff import Change, ChangeKind
from tooladapter.review.argdiff import render as render_changes
from tooladapter.review.shown import visible
from tooladapter.review.texts import pending_approvals


async def _approvals(settings: Settings) -> ExitCode:
    async with settings.connect() as api:
        invocations = await api.list_all(Resource.INVOCATIONS)
        descriptors = await _descriptors(api) if _waiting(invocations) else None
        pending = pending_approvals(
            invocations, descriptors={api.namespace: descriptors} if descriptors is not None else {}
        )
    if settings.listed(pending, f"No calls wait for an approval in namespace {api.namespace}."):
        return ExitCode.OK
    for index, view in enumerate(pending):
        if index:
            click.echo("")
        facts = [
            ("Invocation", view["name"]),
            ("Tool", f"{view['tool']} {view['version']}"),
            ("Caller", view["caller"]),
            ("Run", view["runId"]),
            ("Class", f"{view['effectiveClass']} (declared {view['declaredClass']})"),
            ("Waiting since", view["waitingSince"]),
            ("Request hash", view["requestHash"]),
            ("Descriptor", view["descriptorDigest"]),
        ]
        click.echo(fields(facts))
        # All of them, as they will run (pipeline/shown): invisible and bidirectional
        # characters as ⟨U+XXXX⟩, nothing masked. Not through `fields`, whose cells fold
        # runs of spaces: two spaces inside a value are two spaces here.
        width = max(len(k) for k, _ in facts) + 1
        click.echo(f"{'Arguments:'.ljust(width)}  {view['shownArguments']}")
        for warning in view["warnings"]:  # their pointers are shown through `visible`
            click.echo(f"  warning: {warning}")
        for flag in view["flags"]:
            click.echo(
                f"  flagged: {visible(flag['path'])} [{flag['start']}:{flag['end']}] looks like "
                f"a credential ({flag['kind']}); shown as sent"
            )
        for reason in view["reasons"]:
            click.echo(f"  reason: {reason}")
        for line in carried_lines(view["carries"]):
            click.echo(line)
        flow = view.get("dataFlow")
        for label, calls in (flow["sources"] if flow else {}).items():
            # The calls that brought each label into the gated sink's run (issue 42).
            brought = ", ".join(f"{c['invocation']} ({c['tool']})" for c in calls)
            click.echo(f"  data flow: {label} from {visible(brought)}")
        previous = view["lastApproved"]
        if previous is None:
            click.echo("  changed: first approval of this tool for this caller")
        else:
            click.echo(
                f"  changed since {visible(str(previous['name']))} (approved by "
                f"{visible(str(previous['approvedBy']))} at "
                f"{visible(str(previous['approvedAt']))}):"
            )
            # Whole values (no clipping: the tail of a value may be its destination), with
            # markers; the changes themselves were found on the raw values.
            lines = render_changes(_changes(view["changes"]), width=sys.maxsize)
            for line in lines or ["(same arguments)"]:
                click.echo(f"    {visible(line)}")
    return ExitCode.OK


def _waiting(invocations: list[dict[str, Any]]) -> bool:
    return any(
        (i.get("status") or {}).get("state") == InvocationState.AWAITING_APPROVAL
        for i in invocations
    )


async def _descriptors(api: UserApi) -> list[dict[str, Any]] | None:
    """The namespace's ToolDescriptors (the credentials a waiting call will carry); None
    when RBAC refuses them: the calls then say their credentials are unknown."""
    try:
        return await api.list_all(Resource.DESCRIPTORS)
    except UserApiError as exc:
        if exc.status in (401, 403):
            return None
        raise


def carried_lines(carries: dict[str, Any]) -> list[str]:
    """The credentials a waiting call will carry, labelled as the descriptor's (never
    the agent's: `review.carried`)."""
    lines = ["  credentials (declared by the descriptor, not the agent):"]
    if carries.get("note"):
        lines.append(f"    {carries['note']}")
    lines.extend(f"    {c['text']}" for c in carries["credentials"])
    if carries["known"] and not carries["credentials"] and not carries.get("mcpServer"):
        lines.append("    none")
    return lines


def _changes(wire: list[dict[str, Any]]) -> list[Change]:
    return [
        Change(ChangeKind(c["kind"]), c["path"], before=c.get("before"), after=c.get("after"))
        for c in wire
    ]


@click.command("approvals")
@common_options
@click.pass_obj
def approvals(settings: Settings) -> ExitCode:
    """Calls waiting for an approval: all arguments as they will run (canonical JSON;
    invisible and bidirectional characters shown as ⟨U+XXXX⟩ with a warning; credential-like
    tokens flagged, never hidden), class, reasons, the
    request hash and descriptor digest an approval binds to, the credentials the call will
    carry and where (its descriptor's: Secret or ServiceAccount names, hosts with methods
    and paths, or a file; never a value), and what changed since the same caller's last
    approved call of that tool."""
    return run_async(_approvals(settings))


async def _bound_or_refused(
    api: UserApi, approval: str, invocation: str, *, rejection: bool, timeout: float
) -> tuple[str, str]:
    """Wait until the operator binds the approval, refuses it (its status.reason) or, for
    a rejection it accepted, the call ends Denied: ("bound"|"refused"|"denied"|"pending",
    detail)."""
    try:
        async with asyncio.timeout(timeout):
            async for obj in api.follow(Resource.APPROVALS, approval):
                status = obj.get("status") or {}
                if status.get("bound"):
                    return "bound", str(status.get("reason") or "")
                reason = str(status.get("reason") or "")
                if not reason:
                    continue
                # The operator words an accepted rejection "ToolApproval X: rejected by ...";
                # the call's Denied status follows it.
                if rejection and reason.startswith(f"ToolApproval {approval}: rejected by"):
                    async for call in api.follow(Resource.INVOCATIONS, invocation):
                        cstatus = call.get("status") or {}
                        if cstatus.get("state") != InvocationState.AWAITING_APPROVAL:
                            return "denied", str(cstatus.get("message") or reason)
                return "refused", reason
    except TimeoutError:
        pass
    return "pending", ""


@dataclass(frozen=True)
class Asked:
    """What `approve` and `reject` both take (`decision_options`): the waiting call, the
    reviewer's comment, and how long to wait for the operator."""

    name: str
    comment: str
    wait: bool
    timeout: float


async def _decide(
    settings: Settings, asked: Asked, decision: ApprovalDecision, *, expires: str | None
) -> ExitCode:
    name, comment, wait, timeout = asked.name, asked.comment, asked.wait, asked.timeout
    expires_at = parse_expiry(expires, now=datetime.now(UTC)) if expires else None
    async with settings.connect() as api:
        me = await api.whoami()
        invocation = await api.get(Resource.INVOCATIONS, name)
        body = approval_body(
            invocation,
            decision=decision,
            reviewer=me.username,
            reviewer_groups=list(me.groups),
            comment=comment,
            expires_at=expires_at,
        )
        created = await api.create(Resource.APPROVALS, body)
        approval = str(created["metadata"]["name"])
        click.echo(
            f"toolapproval {api.namespace}/{approval} created: {decision.value} {name} "
            f"({body['spec']['requestHash']}) as {me.username}",
            err=True,
        )
        if not wait:
            result, detail = "pending", ""
        else:
            result, detail = await _bound_or_refused(
                api,
                approval,
                name,
                rejection=decision is ApprovalDecision.REJECTED,
                timeout=timeout,
            )
    if settings.structured:
        settings.emit(
            {"approval": approval, "invocation": name, "result": result, "detail": detail}
        )
    elif result != "pending" or wait:
        click.echo(f"{approval}: {result}{': ' + detail if detail else ''}")
    else:
        click.echo(approval)
    if result == "bound" or (decision is ApprovalDecision.REJECTED and result == "denied"):
        return ExitCode.OK
    if result == "pending":
        return ExitCode.PENDING if wait else ExitCode.OK
    return ExitCode.DENIED


def decision_options(func: Any) -> Any:
    """`Asked`'s options, handed to `func` as `asked`."""
    options = [
        click.argument(
            "name",
            metavar="NAME",
            shell_complete=invocations_in(InvocationState.AWAITING_APPROVAL),
        ),
        click.option("--comment", default="", help="Why (kept on the ToolApproval)."),
        *wait_options(
            wait_help="Wait until the operator binds (or refuses) the approval.",
            timeout=60,
            timeout_help="Seconds to wait for the operator (exit 7 after).",
        ),
    ]
    return stacked(gathered(Asked, "asked")(func), options)


@click.command("approve")
@common_options
@decision_options
@click.option(
    "--expires",
    default="1h",
    show_default=True,
    help="Unused after this long (15m, 2h, 1d) or this RFC 3339 time.",
)
@click.pass_obj
def approve(settings: Settings, asked: Asked, expires: str) -> ExitCode:
    """Approve the waiting call NAME, bound to its exact request hash, tool version,
    descriptor digest and uid, as yourself (you may not approve your own calls).

    Exit 0 once bound; 3 when the operator refuses it (its reason is printed: e.g. you
    are not in the policy's reviewer groups); 7 when no answer within --timeout."""
    return run_async(_decide(settings, asked, ApprovalDecision.APPROVED, expires=expires))


@click.command("reject")
@common_options
@decision_options
@click.pass_obj
def reject(settings: Settings, asked: Asked) -> ExitCode:
    """Reject the waiting call NAME: it ends Denied (policy-denied) and never runs.

    Exit 0 once the call is Denied; 3 when the operator does not accept the rejection."""
    return run_async(_decide(settings, asked, ApprovalDecision.REJECTED, expires=None))
