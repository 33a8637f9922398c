"""One dry run, from lookups to preview: shared by every door that previews a call.

`pipeline.preview` is pure: it takes the descriptor, the policies, the namespace's labels,
the MCP tool's annotations and the caller's RBAC answers as plain data. Where those come
from differs by door: the operator (`spec.dryRun`) reads its watched catalog and asks
SubjectAccessReviews for the spec's caller; the gateway's REST dry run reads the
descriptor with the caller's own token, the rest with the operator's client, and asks
reviews for the authenticated caller. Both hand a `Lookups` to `dry_run`, so the order
(gather, evaluate, ask exactly `Evaluation.questions`, conclude) is written once and the
doors cannot drift apart.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Protocol

from tooladapter import offload
from tooladapter.enums import FailureClass, PreviewVerdict, Stage
from tooladapter.model import Caller, ToolPolicySpec
from tooladapter.pipeline import dataflow as rule
from tooladapter.pipeline.effect import effect_hash
from tooladapter.pipeline.permission import Permission, Question
from tooladapter.pipeline.preview import (
    Evaluation,
    Preview,
    PreviewSettings,
    conclude,
    evaluate,
)
from tooladapter.pipeline.refusals import Refusal
from tooladapter.pipeline.sanitize.redaction import bounded_message
from tooladapter.settings import Settings

Body = dict[str, Any]

#: Tenant policies as `pipeline.preview.evaluate` takes them: (`namespace/name`, spec),
#: or (`namespace/name`, why it does not parse).
Policies = Sequence[tuple[str, ToolPolicySpec | str]]


@dataclass(frozen=True)
class Found:
    """The descriptor of the version a call names, or None and the versions published."""

    descriptor: Body | None
    published: Sequence[str] = ()


class Lookups(Protocol):
    """Where a door finds a dry run's inputs; every method is read-only."""

    async def descriptor(self, namespace: str, tool_id: str, version: str) -> Found:
        """The ToolDescriptor object (spec and status) of that tool version."""

    async def policies(self, namespace: str) -> Policies:
        """The namespace's ToolPolicies, unreadable ones included (they fail closed)."""

    async def namespace_labels(self, namespace: str) -> Mapping[str, str]: ...

    async def unconfirmed(self, namespace: str, tool_id: str, hashes: Sequence[str]) -> list[str]:
        """The Uncertain, unconfirmed calls whose effect (or request) hash is one of
        `hashes` (they block new ones)."""

    async def mcp_annotations(
        self, namespace: str, server: str, tool: str
    ) -> Mapping[str, Any] | None:
        """The annotations the McpServer's last discovery listed for the tool."""

    async def allowed(self, namespace: str, caller: Caller, question: Question) -> bool:
        """The caller's RBAC answer to one permission question."""

    async def scope_store(self, namespace: str, name: str) -> Mapping[str, str] | None:
        """A data-flow scope's store (`pipeline.dataflow`), None when it has none."""


def preview_settings(settings: Settings) -> PreviewSettings:
    """What a preview needs of the operator's settings (every door has the same)."""
    return PreviewSettings(
        default_approval_timeout_seconds=settings.limits.default_approval_timeout_seconds,
        runtime_classes=tuple(settings.sandbox.runtime_classes),
        sandbox_image=settings.sandbox.image,
        default_egress_allow=settings.egress.default_allow,
        dataflow_window_seconds=settings.dataflow_window_seconds,
        default_shell_allow=settings.shell.allow_list,
        default_shell_block=settings.shell.block_list,
    )


def _named_tool(spec: Mapping[str, Any]) -> tuple[str, str] | None:
    tool = spec.get("tool")
    if not isinstance(tool, Mapping):
        return None
    tool_id, version = tool.get("id"), tool.get("version")
    if isinstance(tool_id, str) and isinstance(version, str):
        return tool_id, version
    return None  # the spec's validation refuses it before any lookup matters


async def dry_run(
    lookups: Lookups,
    *,
    namespace: str,
    spec: Mapping[str, Any],
    settings: PreviewSettings,
) -> Preview:
    """The preview of the call `spec` (a ToolInvocation spec) in `namespace`."""
    named = _named_tool(spec)
    found = Found(None)
    if named is not None:
        found = await lookups.descriptor(namespace, *named)
    policies, labels = await asyncio.gather(
        lookups.policies(namespace), lookups.namespace_labels(namespace)
    )
    mcp = ((found.descriptor or {}).get("spec") or {}).get("mcp") or {}
    annotations = None
    if mcp.get("server") and mcp.get("tool"):
        annotations = await lookups.mcp_annotations(namespace, str(mcp["server"]), str(mcp["tool"]))
    evaluation = await offload.run(
        namespace,
        offload.INLINE_BYTES + 1,  # a dry run is rare: never walk an agent's input inline
        lambda: evaluate(
            namespace=namespace,
            spec=spec,
            descriptor=found.descriptor,
            policies=policies,
            settings=settings,
            namespace_labels=labels,
            published=found.published,
            mcp_annotations=annotations,
        ),
    )
    hashed = evaluation.validation.request_hash
    if named is not None and hashed and evaluation.descriptor is not None:
        effect = effect_hash(
            namespace=namespace,
            descriptor=evaluation.descriptor,
            arguments=(spec.get("arguments") or {}),
        )
        held = await lookups.unconfirmed(namespace, named[0], (effect, hashed))
        if held:
            # Refused at idempotency, before every other stage, as a real call would be.
            evaluation.refusals.insert(
                0,
                Refusal(
                    Stage.IDEMPOTENCY,
                    f"an identical call ({held[0]}) is Uncertain and unconfirmed: no new call "
                    "of this request runs until an operator confirms it",
                    FailureClass.UNCONFIRMED_EFFECT,
                ),
            )
    permission = None
    if evaluation.questions and evaluation.call is not None:
        caller = evaluation.call.caller
        invoke, use = await asyncio.gather(
            *(lookups.allowed(namespace, caller, q) for q in evaluation.questions)
        )
        permission = Permission(invoke=invoke, use=use)
    preview = conclude(evaluation, permission)
    return await with_data_flow(lookups, evaluation, preview, policies)


async def with_data_flow(
    lookups: Lookups, evaluation: Evaluation, preview: Preview, policies: Policies
) -> Preview:
    """The data-flow rule on a preview nothing else denies: a sink whose scopes hold private
    and untrusted results would wait for an approval (or be denied), and the preview says
    why, with the calls behind each label (`pipeline.dataflow`)."""
    call, descriptor, decision = evaluation.call, evaluation.descriptor, evaluation.decision
    if (
        preview.verdict is PreviewVerdict.WOULD_BE_DENIED
        or preview.classification is None
        or call is None
        or descriptor is None
        or decision is None
    ):
        return preview
    settings = evaluation.settings
    narrowing = [
        spec.egress.allow
        for _, spec in policies
        if isinstance(spec, ToolPolicySpec) and spec.egress.allow is not None
    ]
    reach = rule.reach_of(
        descriptor, default_allow=settings.default_egress_allow, narrowing=narrowing
    )
    if not rule.is_sink(descriptor, preview.classification.effective, reach):
        return preview
    namespace = evaluation.namespace
    scopes = rule.judged_scopes(
        namespace=namespace,
        caller=call.caller.name,
        run_id=call.run_id or "",
        attempt_id=call.attempt_id or "",
        scope=decision.dataflow_scope,
    )
    stores = [(scope, await lookups.scope_store(namespace, scope.store_name)) for scope in scopes]
    sources = rule.held(
        stores, now=datetime.now(UTC), window_seconds=settings.dataflow_window_seconds
    )
    verdict = rule.judge(
        sink=True, reach=reach, sources=sources, action=decision.dataflow_action, scopes=scopes
    )
    return gated_preview(preview, verdict, decision.approval_timeout_seconds)


def gated_preview(preview: Preview, verdict: rule.Verdict, timeout_seconds: int) -> Preview:
    """`preview` as the data-flow `verdict` changes it (unchanged when it gates nothing)."""
    reason = bounded_message(verdict.reason)
    if verdict.denies:
        return preview.model_copy(
            update={
                "verdict": PreviewVerdict.WOULD_BE_DENIED,
                "denied_stage": Stage.POLICY,
                "failure_class": FailureClass.POLICY_DENIED,
                "message": reason,
            }
        )
    if not verdict.needs_approval or preview.approval is None:
        return preview
    approval = preview.approval.model_copy(
        update={
            "required": True,
            "reasons": [*preview.approval.reasons, reason],
            "timeout_seconds": preview.approval.timeout_seconds or timeout_seconds,
        }
    )
    update: dict[str, object] = {"approval": approval}
    if preview.verdict is PreviewVerdict.WOULD_RUN:
        update["verdict"] = PreviewVerdict.WOULD_AWAIT_APPROVAL
        update["message"] = bounded_message(f"would wait for an approval: {verdict.reason}")
    return preview.model_copy(update=update)
