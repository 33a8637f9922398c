"""ToolPolicy status: whether it is valid and which rules it contributes."""

from __future__ import annotations

from typing import Any

from pydantic import ValidationError

from tooladapter.enums import Resource
from tooladapter.model import ToolPolicySpec, ToolPolicyStatus, describe_errors
from tooladapter.pipeline.policy import check_policy
from tooladapter.runtime import Runtime


def policy_status(body: dict[str, Any]) -> ToolPolicyStatus:
    generation = body["metadata"].get("generation")
    try:
        spec = ToolPolicySpec.model_validate(body.get("spec") or {})
    except ValidationError as exc:
        return ToolPolicyStatus(
            valid=False, message=describe_errors(exc), observed_generation=generation
        )
    problems = check_policy(spec)
    rules: list[str] = []
    if spec.tools.allow is not None:
        rules.append(f"allow-list of {len(spec.tools.allow)} tool(s)")
    if spec.tools.deny:
        rules.append(f"deny-list of {len(spec.tools.deny)} tool(s)")
    if spec.max_class:
        rules.append(f"class ceiling {spec.max_class}")
    if spec.shell.allow is not None or spec.shell.block:
        rules.append(
            f"shell lists (block action {spec.shell.block_action}, unlisted {spec.shell.unlisted})"
        )
    elif "unlisted" in spec.shell.model_fields_set:
        rules.append(f"unlisted shell commands: {spec.shell.unlisted}")
    if spec.spend:
        rules.append("spend threshold" if not spec.spend.prohibited else "spend prohibited")
    if spec.approval:
        rules.append(f"approval timeout {spec.approval.timeout_seconds}s")
    if spec.conditions:
        rules.append(f"{len(spec.conditions)} argument condition(s)")
    return ToolPolicyStatus(
        valid=not problems,
        rules=rules,
        message="; ".join(problems) or "valid",
        observed_generation=generation,
    )


async def reconcile_policy(rt: Runtime, event_type: str | None, body: dict[str, Any]) -> None:
    if event_type == "DELETED":
        return
    desired = policy_status(body).wire()
    if (body.get("status") or {}) != desired:
        meta = body["metadata"]
        await rt.cluster.patch_status(Resource.POLICIES, meta["namespace"], meta["name"], desired)
