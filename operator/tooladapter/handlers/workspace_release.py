"""`spec.releaseWorkspace`: an attempt's workspace released from one of its calls.

The gateway's `DELETE .../attempts/{attemptId}/workspace` needs a gateway; deleting the pods
as the user needs pod rights an agent's ServiceAccount does not hold. Setting
`spec.releaseWorkspace` on a call of the attempt needs neither: admission lets only the
call's caller (or whoever may `release` `workspaces`) set it, and the operator releases the
workspace of that caller's attempt once the call has ended.

The moment is recorded first (`status.workspaceReleasedAt`), then only the workspace pods
made before it are deleted: a later call of the attempt gets a new workspace, and a replica
or a restarted operator seeing the same call again finds it recorded and does nothing.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tooladapter.enums import InvocationState, Resource
from tooladapter.events import object_ref
from tooladapter.kube.client import NotFound
from tooladapter.runtime import Runtime
from tooladapter.timeutil import now_iso


def wanted(body: Mapping[str, Any]) -> bool:
    """Whether this call asks for its attempt's workspace to be released now: it asked,
    names an attempt, has ended, and no release was recorded for it yet."""
    spec = body.get("spec") or {}
    status = body.get("status") or {}
    state = InvocationState(status.get("state") or InvocationState.RECEIVED)
    return (
        bool(spec.get("releaseWorkspace"))
        and bool(spec.get("attemptId"))
        and not spec.get("dryRun")  # a dry run changes nothing, a workspace included
        and state.terminal
        and not status.get("workspaceReleasedAt")
    )


def task_key(uid: str) -> str:
    """The runtime task key of a call's release (never the call's own flow key)."""
    return f"workspace-release/{uid}"


async def release(rt: Runtime, body: Mapping[str, Any]) -> None:
    meta = body["metadata"]
    namespace, name = meta["namespace"], meta["name"]
    try:
        fresh = await rt.cluster.get(Resource.INVOCATIONS, namespace, name)
    except NotFound:
        return
    if not wanted(fresh):
        return  # released already (another replica, an earlier event)
    spec = fresh["spec"]
    caller, attempt = spec["caller"]["name"], spec["attemptId"]
    stamp = now_iso()
    await rt.cluster.patch_status(
        Resource.INVOCATIONS, namespace, name, {"workspaceReleasedAt": stamp}
    )
    released = (
        await rt.warm.release(namespace, caller, attempt, made_before=stamp)
        if rt.warm is not None
        else []
    )
    what = ", ".join(released) if released else "none was left (released already or idle)"
    rt.events.post(
        object_ref("ToolInvocation", meta),
        reason="WorkspaceReleased",
        message=f"the workspace of attempt {attempt} of {caller} released: {what}",
    )
