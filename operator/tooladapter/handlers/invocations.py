"""One invocation's walk through the pipeline, written to status.

The order is fixed (validation, permission, policy, classification, approval, credentials,
sandbox, execute, sanitize, audit); every stage is recorded in `status.stages` with its time.
Status is written whenever the call waits or is about to have an effect outside the operator:
AwaitingApproval, Executing before a Job is created or a call with an effect is sent, and the
terminal state with its receipt. The stages in between only do work that is safe to repeat
(pure evaluation, idempotent creates with deterministic names), so they ride along with the
next write instead of costing one each: a restarted operator resumes from the persisted
`status.state` and repeats them. An Executing invocation is only ever followed after a
restart, never started again. A read-class call in the operator is written once, at its end,
unless it runs longer than `PROGRESS_AFTER_SECONDS` (then Executing is written while it runs).
"""

from __future__ import annotations

import asyncio
import base64
import json
import logging
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from typing import Any

from pydantic import ValidationError

from .. import API_VERSION
from ..enums import (
    GATED_CLASSES,
    EnvironmentClass,
    FailureClass,
    InvocationState,
    SideEffectClass,
    Stage,
    ToolKind,
)
from ..executors import Call, Outcome
from ..kube import auth, claims
from ..kube import sandbox as ksandbox
from ..kube.client import NotFound
from ..metrics import APPROVALS_WAITING, DENIALS, INVOCATIONS, LATENCY, SANDBOXES_OPEN, UNCERTAIN
from ..model import (
    ApprovalBinding,
    Caller,
    ExecutionRecord,
    InvocationResult,
    LeaseLimits,
    ReceiptSummary,
    SandboxLease,
    StageEntry,
    ToolApprovalSpec,
    ToolDescriptorSpec,
    ToolInvocationSpec,
    ToolInvocationStatus,
    ToolPolicySpec,
    ToolRef,
    describe_errors,
)
from ..pipeline import approval as approval_rules
from ..pipeline.classification import classify
from ..pipeline.hashing import canonical_json, request_hash
from ..pipeline.policy import PolicyDecision, check_ceiling, evaluate_policies
from ..pipeline.receipt import build_receipt
from ..pipeline.sandbox import (
    LeaseNames,
    build_network_policy,
    build_secret,
    owner_reference,
    secret_item_key,
)
from ..pipeline.sanitize import sanitize
from ..pipeline.shell import check_command
from ..pipeline.states import transition
from ..pipeline.validation import check_bounds, validate_arguments
from ..timeutil import now_iso, parse_time
from .events import object_ref, post
from .runtime import Runtime

logger = logging.getLogger("tooladapter.invocations")

PLURAL = "toolinvocations"
LABEL_ENVIRONMENT = "tooladapter.dev/environment-class"
LABEL_FROZEN = "tooladapter.dev/frozen"
SANDBOX_KINDS = (ToolKind.SHELL, ToolKind.CONTAINER)
#: Retry delays of a step that failed on the API server (every step is safe to repeat).
RETRY_DELAYS = (1, 2, 5, 10, 30)
#: A read call in the operator still running after this long shows Executing on its status.
PROGRESS_AFTER_SECONDS = 1.0


class Denial(Exception):
    """A stage refused the call: the invocation ends Denied with this stage and reason."""

    def __init__(self, stage: Stage | str, reason: str, failure: FailureClass) -> None:
        super().__init__(reason)
        self.stage = str(stage)
        self.reason = reason
        self.failure = failure


class InvocationFlow:
    def __init__(self, rt: Runtime, body: dict[str, Any]) -> None:
        self.rt = rt
        self.body = body
        meta = body["metadata"]
        self.namespace: str = meta["namespace"]
        self.name: str = meta["name"]
        self.uid: str = meta["uid"]
        self.created: str = meta.get("creationTimestamp") or now_iso()
        self.status = ToolInvocationStatus.model_validate(body.get("status") or {})
        #: The state the API server holds (the in-memory one runs ahead between writes).
        self.persisted_state = self.status.state
        self.spec: ToolInvocationSpec | None = None
        self.descriptor: ToolDescriptorSpec | None = None
        self.decision: PolicyDecision | None = None
        self.argv: tuple[str, ...] = ()
        self.secret_values: list[str] = []
        self.started_here = False
        self.approval_forced = False
        self.descriptor_status: dict[str, Any] = {}
        self.interrupted = rt.interrupt_event(self.uid)

    # ------------------------------------------------------------------ status writing

    @property
    def ref(self) -> str:
        return f"{self.namespace}/{self.name}"

    def event_body(self) -> dict[str, Any]:
        return object_ref(
            "ToolInvocation", {"name": self.name, "namespace": self.namespace, "uid": self.uid}
        )

    def record(self, stage: Stage | str, outcome: str, detail: str = "") -> None:
        self.status.stages.append(
            StageEntry(stage=str(stage), outcome=outcome, time=now_iso(), detail=detail[:1024])
        )

    def enter(self, state: InvocationState) -> None:
        """Move to `state` in memory, after checking the transition is legal."""
        transition(self.status.state, state)
        self.status.state = state

    async def commit(self, state: InvocationState | None = None) -> None:
        """Persist status (with a new state, entered first)."""
        if state is not None and state != self.status.state:
            self.enter(state)
        obj = await self.rt.kube.patch_status(PLURAL, self.namespace, self.name, self.status.wire())
        self.body = obj
        self.persisted_state = self.status.state

    async def advance(self, state: InvocationState) -> None:
        """Move to `state`; persisted now only under `write_every_state`, else with the next
        write (the stages between writes are safe to repeat after a restart)."""
        if self.rt.settings.write_every_state:
            return await self.commit(state)
        self.enter(state)

    # ------------------------------------------------------------------ the walk

    async def run(self) -> None:
        await self.rt.catalog.ready.wait()
        if self.body.get("status"):
            # A body with status was seen by a listing or is an echo: act on the stored one.
            # A new object's first event has none, and nothing but this flow writes it.
            try:
                fresh = await self.rt.kube.get_custom(PLURAL, self.namespace, self.name)
            except NotFound:
                return
            if fresh["metadata"]["uid"] != self.uid:
                return
            self.body = fresh
            self.status = ToolInvocationStatus.model_validate(fresh.get("status") or {})
            self.persisted_state = self.status.state
        steps: dict[InvocationState, Callable[[], Awaitable[None]]] = {
            InvocationState.RECEIVED: self.on_received,
            InvocationState.VALIDATED: self.on_validated,
            InvocationState.AUTHORIZED: self.on_authorized,
            InvocationState.AWAITING_APPROVAL: self.on_awaiting_approval,
            InvocationState.BROKERED: self.on_brokered,
            InvocationState.EXECUTING: self.on_executing,
        }
        attempt = 0
        while not self.status.state.terminal:
            state = self.status.state
            try:
                if self.spec is None:
                    self.load_spec()
                await steps[state]()
                attempt = 0
            except Denial as denial:
                await self.deny(denial)
            except asyncio.CancelledError:
                raise
            except Exception:
                delay = RETRY_DELAYS[min(attempt, len(RETRY_DELAYS) - 1)]
                attempt += 1
                logger.exception(
                    "invocation %s: step %s failed; retrying in %ss", self.ref, state, delay
                )
                await asyncio.sleep(delay)
        self.rt.mark_finished(self.uid)

    def unvalidated_spec(self) -> ToolInvocationSpec:
        """The spec as written, for a receipt of an invocation whose spec did not parse."""
        raw = self.body.get("spec") or {}
        tool, caller = raw.get("tool") or {}, raw.get("caller") or {}
        return ToolInvocationSpec.model_construct(
            tool=ToolRef.model_construct(id=str(tool.get("id")), version=str(tool.get("version"))),
            caller=Caller.model_construct(name=str(caller.get("name"))),
            arguments={},
        )

    def load_spec(self) -> None:
        try:
            self.spec = ToolInvocationSpec.model_validate(self.body.get("spec") or {})
        except ValidationError as exc:
            raise Denial(
                Stage.VALIDATION,
                f"invalid invocation: {describe_errors(exc)}",
                FailureClass.VALIDATION,
            ) from None

    # -- Received: idempotency, descriptor, arguments -> Validated

    async def on_received(self) -> None:
        spec = self.spec
        assert spec is not None
        if self.status.started_at is None:
            self.status.started_at = now_iso()
        if spec.idempotency_key:
            await self.claim_idempotency_key(spec)
        if self.interrupted.is_set() or spec.interrupt:
            return await self.cancel("interrupted before validation")
        descriptor = await self.find_descriptor(spec.tool.id, spec.tool.version)
        problems = check_bounds(spec.arguments)
        if problems:
            raise Denial(
                Stage.VALIDATION,
                "arguments too large: " + "; ".join(problems),
                FailureClass.VALIDATION,
            )
        errors = validate_arguments(descriptor.input_schema, spec.arguments)
        self.status.request_hash = request_hash(
            namespace=self.namespace,
            tool_id=spec.tool.id,
            tool_version=spec.tool.version,
            arguments=spec.arguments,
        )
        self.status.declared_class = descriptor.side_effect_class
        if errors:
            detail = "; ".join(f"{e.path}: {e.message}" for e in errors[:20])
            raise Denial(
                Stage.VALIDATION,
                f"arguments do not match the input schema: {detail}",
                FailureClass.VALIDATION,
            )
        self.record(Stage.VALIDATION, "passed", f"{spec.tool.id}@{spec.tool.version}")
        await self.advance(InvocationState.VALIDATED)

    async def claim_idempotency_key(self, spec: ToolInvocationSpec) -> None:
        assert spec.idempotency_key is not None
        claim = await claims.claim_idempotency_key(
            self.rt.kube,
            namespace=self.namespace,
            caller=spec.caller.name,
            key=spec.idempotency_key,
            invocation_name=self.name,
            invocation_uid=self.uid,
        )
        if claim.won:
            return
        if self.status.duplicate_of != claim.winner_name:
            self.status.duplicate_of = claim.winner_name
            self.record("idempotency", "duplicate", f"key already claimed by {claim.winner_name}")
            await self.commit()
        winner = await self.wait_for_terminal(claim.winner_name, claim.winner_uid)
        wstatus = (winner or {}).get("status") or {}
        self.status.receipt_ref = wstatus.get("receiptRef")
        self.status.result_ref = wstatus.get("resultRef")
        self.status.result_hash = wstatus.get("resultHash")
        raise Denial(
            "idempotency",
            f"duplicate of {claim.winner_name} (state {wstatus.get('state', 'unknown')}): "
            "one idempotency key executes once; its receipt is receiptRef",
            FailureClass.DUPLICATE,
        )

    async def wait_for_terminal(self, name: str, uid: str) -> dict[str, Any] | None:
        """Wait (on watch notifications, re-reading the object) until `name` has ended."""
        signal = self.rt.catalog.changed(self.namespace, f"invocation:{name}")
        while True:
            signal.clear()
            try:
                obj = await self.rt.kube.get_custom(PLURAL, self.namespace, name)
            except NotFound:
                return None
            if obj["metadata"]["uid"] != uid:
                return None
            state = (obj.get("status") or {}).get("state")
            if state and InvocationState(state).terminal:
                return obj
            try:
                await asyncio.wait_for(signal.wait(), timeout=30)
            except TimeoutError:
                pass

    async def find_descriptor(self, tool_id: str, version: str) -> ToolDescriptorSpec:
        body = self.rt.catalog.find_descriptor(self.namespace, tool_id, version)
        if body is None:
            # A tool published a moment ago may not have reached the watch yet.
            for item in await self.rt.kube.list_custom("tooldescriptors", self.namespace):
                spec = item.get("spec") or {}
                if spec.get("toolId") == tool_id and spec.get("version") == version:
                    body = item
        if body is None:
            raise Denial(
                Stage.VALIDATION,
                f"tool {tool_id} version {version} is not published in {self.namespace}",
                FailureClass.VALIDATION,
            )
        status = body.get("status") or {}
        if not status.get("active"):
            raise Denial(
                Stage.VALIDATION,
                f"tool {tool_id}@{version} is not active: {status.get('message') or 'inactive'}",
                FailureClass.VALIDATION,
            )
        if not status.get("healthy"):
            # An MCP server that is down or not active may come back (transient); a changed
            # tool schema needs a person to re-pin the digest, so retrying cannot help.
            ready: dict[str, Any] = next(
                (c for c in status.get("conditions") or [] if c.get("type") == "Ready"), {}
            )
            failure = (
                FailureClass.TRANSIENT
                if (body.get("spec") or {}).get("kind") == "mcp"
                and ready.get("reason") != "SchemaChanged"
                else FailureClass.VALIDATION
            )
            raise Denial(
                Stage.VALIDATION,
                f"tool {tool_id}@{version} is unhealthy: {status.get('message') or ''}",
                failure,
            )
        self.descriptor = ToolDescriptorSpec.model_validate(body["spec"])
        self.descriptor_status = status
        return self.descriptor

    # -- Validated: permission, policy, classification -> Authorized

    async def on_validated(self) -> None:
        spec = self.spec
        assert spec is not None
        descriptor = self.descriptor or await self.find_descriptor(spec.tool.id, spec.tool.version)
        labels = self.rt.catalog.namespace_labels(self.namespace)
        environment = (
            EnvironmentClass(labels.get(LABEL_ENVIRONMENT, "development"))
            if labels.get(LABEL_ENVIRONMENT) in {e.value for e in EnvironmentClass}
            else EnvironmentClass.DEVELOPMENT
        )
        frozen = labels.get(LABEL_FROZEN, "").lower() == "true"
        decision = await self.reevaluate_policy()
        shell_blocked, shell_reason, escalate_ok = False, "", True
        if descriptor.kind == ToolKind.SHELL:
            verdict = check_command(
                str(spec.arguments.get("command", "")),
                allow=[
                    *(descriptor.shell.allow if descriptor.shell else []),
                    *decision.shell_allow,
                ],
                block=[
                    *(descriptor.shell.block if descriptor.shell else []),
                    *decision.shell_block,
                ],
            )
            self.argv = tuple(verdict.argv)
            if verdict.blocked:
                shell_blocked, shell_reason = True, verdict.reason
                escalate_ok = verdict.escalate_ok
            elif not verdict.allowed:
                raise Denial(
                    Stage.POLICY,
                    f"shell command refused: {verdict.reason}",
                    FailureClass.POLICY_DENIED,
                )
        hinted = None
        if descriptor.kind == ToolKind.MCP and self.rt.mcp is not None:
            hinted = self.rt.mcp.hinted_class(self.namespace, descriptor)
        classification = classify(
            declared=descriptor.side_effect_class,
            environment=environment,
            frozen=frozen,
            shell_blocked=shell_blocked,
            block_action=decision.block_action,
            hinted=hinted,
            risk=descriptor.risk_class,
            shell_escalate_ok=escalate_ok,
        )
        self.approval_forced = classification.approval_forced
        effective = classification.effective
        # Permission: RBAC, asked for the caller, concurrently for the tool and the class.
        tool_verdict, class_verdict = await asyncio.gather(
            auth.can(
                self.rt.kube,
                user=spec.caller.name,
                namespace=self.namespace,
                verb="invoke",
                resource="tooldescriptors",
                name=spec.tool.id,
                cache=self.rt.access,
            ),
            auth.can(
                self.rt.kube,
                user=spec.caller.name,
                namespace=self.namespace,
                verb="use",
                resource="sideeffectclasses",
                name=str(effective),
                cache=self.rt.access,
            ),
        )
        if not tool_verdict.allowed:
            raise Denial(
                Stage.PERMISSION,
                f"{spec.caller.name} may not invoke tooldescriptors/{spec.tool.id} in "
                f"{self.namespace} (RBAC verb invoke)",
                FailureClass.PERMISSION_DENIED,
            )
        if not class_verdict.allowed:
            raise Denial(
                Stage.PERMISSION,
                f"{spec.caller.name} may not use sideeffectclasses/{effective} in "
                f"{self.namespace} (RBAC verb use)",
                FailureClass.PERMISSION_DENIED,
            )
        self.record(
            Stage.PERMISSION,
            "passed",
            f"invoke tooldescriptors/{spec.tool.id}; use sideeffectclasses/{effective}",
        )
        self.status.policy_decision_id = decision.decision_id
        self.status.policy_reasons = list(decision.reasons)
        if not decision.allowed:
            raise Denial(
                Stage.POLICY,
                "; ".join(decision.denials) or "denied by policy",
                FailureClass.POLICY_DENIED,
            )
        ceiling = check_ceiling(decision, effective)
        if ceiling:
            raise Denial(Stage.POLICY, ceiling, FailureClass.POLICY_DENIED)
        self.record(Stage.POLICY, "passed", f"decision {decision.decision_id}")
        self.status.effective_class = effective
        if classification.refused:
            raise Denial(
                Stage.CLASSIFICATION,
                classification.reason or shell_reason,
                FailureClass.POLICY_DENIED,
            )
        detail = f"{descriptor.side_effect_class} -> {effective}"
        if classification.raised_by:
            detail += " (raised by " + ", ".join(classification.raised_by) + ")"
        self.record(Stage.CLASSIFICATION, "passed", detail)
        await self.advance(InvocationState.AUTHORIZED)

    # -- Authorized: fencing, approval gate -> AwaitingApproval | Brokered

    async def on_authorized(self) -> None:
        spec = self.spec
        assert spec is not None and self.status.effective_class is not None
        descriptor = self.descriptor or await self.find_descriptor(spec.tool.id, spec.tool.version)
        if spec.attempt_id and spec.fencing_token is not None:
            verdict = await claims.check_fencing_token(
                self.rt.kube,
                namespace=self.namespace,
                attempt_id=spec.attempt_id,
                token=spec.fencing_token,
                holder_uid=self.uid,
            )
            if not verdict.accepted:
                raise Denial(
                    "fencing",
                    f"stale fencing token {spec.fencing_token}: attempt "
                    f"{spec.attempt_id} already saw {verdict.highest}",
                    FailureClass.POLICY_DENIED,
                )
        decision = self.decision or await self.reevaluate_policy()
        forced = self.approval_forced or any(
            s.stage == Stage.CLASSIFICATION and "escalat" in s.detail for s in self.status.stages
        )
        if approval_rules.needs_approval(
            effective=self.status.effective_class, decision=decision, forced=forced
        ):
            self.record(
                Stage.APPROVAL,
                "waiting",
                f"class {self.status.effective_class} needs an approval bound to "
                f"{self.status.request_hash} and version {spec.tool.version}",
            )
            await self.commit(InvocationState.AWAITING_APPROVAL)
            return
        self.record(Stage.APPROVAL, "not-required", f"class {self.status.effective_class}")
        await self.broker(descriptor)

    async def reevaluate_policy(self) -> PolicyDecision:
        spec = self.spec
        assert spec is not None
        policies = []
        for body in self.rt.catalog.select(self.rt.catalog.policies, self.namespace):
            name = f"{self.namespace}/{body['metadata']['name']}"
            try:
                policies.append((name, ToolPolicySpec.model_validate(body.get("spec") or {})))
            except ValidationError as exc:
                # Fail closed: a policy we cannot read could have denied this call.
                raise Denial(
                    Stage.POLICY,
                    f"ToolPolicy {name} is invalid ({describe_errors(exc)}): "
                    "calls are denied until it is fixed",
                    FailureClass.POLICY_DENIED,
                ) from None
        self.decision = evaluate_policies(
            policies,
            namespace=self.namespace,
            tool_id=spec.tool.id,
            tool_version=spec.tool.version,
            arguments=spec.arguments,
            request_hash=self.status.request_hash or "",
        )
        return self.decision

    # -- AwaitingApproval -> Brokered | Denied

    async def on_awaiting_approval(self) -> None:
        spec = self.spec
        assert spec is not None and self.status.effective_class is not None
        descriptor = self.descriptor or await self.find_descriptor(spec.tool.id, spec.tool.version)
        decision = self.decision or await self.reevaluate_policy()
        since = next(
            (
                parse_time(s.time)
                for s in reversed(self.status.stages)
                if s.stage == Stage.APPROVAL and s.outcome == "waiting"
            ),
            datetime.now(UTC),
        )
        timeout = (
            decision.approval_timeout_seconds or self.rt.settings.default_approval_timeout_seconds
        )
        groups = list(decision.reviewer_groups)
        if (
            self.status.effective_class == SideEffectClass.PRODUCTION
            and decision.production_reviewer_groups
        ):
            groups = list(decision.production_reviewer_groups)
        signal = self.rt.catalog.changed(self.namespace, f"approval:{self.name}")
        gauge = APPROVALS_WAITING.labels(self.namespace, str(self.status.effective_class))
        gauge.inc()
        try:
            while True:
                signal.clear()
                if self.interrupted.is_set() or self.live_interrupt():
                    raise Denial(
                        Stage.APPROVAL,
                        "interrupted while waiting for approval",
                        FailureClass.CANCELLED,
                    )
                now = datetime.now(UTC)
                for body in self.rt.catalog.approvals_for(self.namespace, self.name):
                    bound = await self.try_bind(body, groups, now)
                    if bound:
                        await self.broker(descriptor)
                        return
                if approval_rules.approval_timed_out(
                    waiting_since=since, timeout_seconds=timeout, now=now
                ):
                    raise Denial(
                        Stage.APPROVAL,
                        f"no approval bound within {timeout}s; the wait expired",
                        FailureClass.POLICY_DENIED,
                    )
                remaining = (since + timedelta(seconds=timeout) - now).total_seconds()
                interrupt = asyncio.ensure_future(self.interrupted.wait())
                changed = asyncio.ensure_future(signal.wait())
                try:
                    await asyncio.wait(
                        {interrupt, changed},
                        timeout=max(0.05, min(remaining, 60)),
                        return_when=asyncio.FIRST_COMPLETED,
                    )
                finally:
                    interrupt.cancel()
                    changed.cancel()
        finally:
            gauge.dec()

    def live_interrupt(self) -> bool:
        return bool((self.body.get("spec") or {}).get("interrupt"))

    async def try_bind(self, body: dict[str, Any], groups: list[str], now: datetime) -> bool:
        spec = self.spec
        assert spec is not None
        meta = body["metadata"]
        approval = ToolApprovalSpec.model_validate(body["spec"])
        astatus = body.get("status") or {}
        used_by = astatus.get("boundTo") if astatus.get("bound") else None
        result = approval_rules.bind_approval(
            approval=approval,
            approval_name=meta["name"],
            creator=None,
            invocation_name=self.name,
            request_hash=self.status.request_hash or "",
            tool_version=spec.tool.version,
            caller=spec.caller.name,
            now=now,
            allowed_groups=groups,
            already_used_by=used_by if used_by != self.name else None,
        )
        if result.bound:
            stamp = now_iso()
            await self.rt.kube.patch_status(
                "toolapprovals",
                self.namespace,
                meta["name"],
                {
                    "bound": True,
                    "boundTo": self.name,
                    "boundAt": stamp,
                    "reason": f"bound to {self.name} ({self.status.request_hash})",
                },
            )
            self.status.approval = ApprovalBinding(
                name=meta["name"],
                reviewer=approval.reviewer,
                bound_at=stamp,
                request_hash=approval.request_hash,
                tool_version=approval.tool_version,
            )
            self.record(Stage.APPROVAL, "bound", f"{meta['name']} by {approval.reviewer}")
            return True
        if astatus.get("reason") != result.reason and not astatus.get("bound"):
            await self.rt.kube.patch_status(
                "toolapprovals",
                self.namespace,
                meta["name"],
                {"bound": False, "reason": result.reason},
            )
        if result.code == "rejected":
            self.record(Stage.APPROVAL, "rejected", f"{meta['name']} by {approval.reviewer}")
            raise Denial(
                Stage.APPROVAL,
                f"rejected by {approval.reviewer}: {approval.comment}",
                FailureClass.POLICY_DENIED,
            )
        return False

    # -- credentials and sandbox lease -> Brokered

    async def broker(self, descriptor: ToolDescriptorSpec) -> None:
        spec = self.spec
        assert spec is not None
        data_b64: dict[str, str] = {}
        for dep in descriptor.secret_dependencies:
            try:
                source = await ksandbox.read_secret_keys(
                    self.rt.kube, self.namespace, dep.secret_name
                )
            except NotFound:
                raise Denial(
                    Stage.CREDENTIALS,
                    f"secret {dep.secret_name} not found in {self.namespace}: failing closed",
                    FailureClass.CREDENTIALS,
                ) from None
            for key in dep.keys:
                if key not in source:
                    raise Denial(
                        Stage.CREDENTIALS,
                        f"secret {dep.secret_name} has no key {key!r}: failing closed",
                        FailureClass.CREDENTIALS,
                    )
                data_b64[secret_item_key(dep.secret_name, key)] = source[key]
        expiry = None
        identity = descriptor.authorization.kubernetes_identity
        if identity is not None:
            try:
                token, expiry = await auth.request_token(
                    self.rt.kube,
                    namespace=self.namespace,
                    service_account=identity.service_account_name,
                    audiences=identity.audiences,
                    expiration_seconds=descriptor.timeout_seconds,
                )
            except NotFound:
                raise Denial(
                    Stage.CREDENTIALS,
                    f"serviceaccount {identity.service_account_name} not found: failing closed",
                    FailureClass.CREDENTIALS,
                ) from None
            data_b64["token"] = base64.b64encode(token.encode()).decode()
        self.secret_values = [ksandbox.decode_b64(v) for v in data_b64.values()]
        self.record(
            Stage.CREDENTIALS,
            "brokered" if data_b64 else "none",
            f"{len(data_b64)} value(s), expiring with the call" if data_b64 else "",
        )
        names = LeaseNames.for_uid(self.uid)
        owner = owner_reference(
            api_version=API_VERSION, kind="ToolInvocation", name=self.name, uid=self.uid
        )
        sandbox = descriptor.sandbox
        leased_at = now_iso()
        limits = LeaseLimits(
            cpu=sandbox.resources.limits.cpu if sandbox else None,
            memory=sandbox.resources.limits.memory if sandbox else None,
            timeout_seconds=descriptor.timeout_seconds,
            egress_allow=list(sandbox.egress.allow) if sandbox else [],
        )
        if descriptor.kind in SANDBOX_KINDS:
            assert sandbox is not None
            if data_b64:
                await ksandbox.create_idempotent(
                    self.rt.kube,
                    build_secret(
                        namespace=self.namespace, uid=self.uid, owner=owner, data_b64=data_b64
                    ),
                )
            await ksandbox.create_idempotent(
                self.rt.kube,
                build_network_policy(
                    namespace=self.namespace,
                    uid=self.uid,
                    owner=owner,
                    egress_allow=list(sandbox.egress.allow),
                ),
            )
            lease = SandboxLease(
                lease_id=self.uid,
                kind=sandbox.kind,
                pool_id=sandbox.pool_id,
                workspace_ref=f"emptyDir:{names.job}/workspace",
                limits=limits,
                credential_expiry=expiry
                or (
                    (datetime.now(UTC) + timedelta(seconds=descriptor.timeout_seconds))
                    .isoformat()
                    .replace("+00:00", "Z")
                    if data_b64
                    else None
                ),
                leased_at=leased_at,
                job_name=names.job,
                network_policy_name=names.network_policy,
                secret_name=names.secret if data_b64 else None,
            )
            self.status.sandbox_lease = lease
            SANDBOXES_OPEN.labels(self.namespace, str(sandbox.kind)).inc()
            self.record(
                Stage.SANDBOX, "leased", f"job {names.job}, networkpolicy {names.network_policy}"
            )
            post(
                self.event_body(),
                reason="SandboxLeased",
                message=f"lease {lease.lease_id} kind {lease.kind} pool {lease.pool_id}",
            )
        else:
            self.record(Stage.SANDBOX, "none", f"{descriptor.kind} tools run in the operator")
        await self.advance(InvocationState.BROKERED)

    # -- Brokered -> Executing -> terminal

    async def on_brokered(self) -> None:
        spec = self.spec
        assert spec is not None
        descriptor = self.descriptor or await self.find_descriptor(spec.tool.id, spec.tool.version)
        if self.interrupted.is_set() or self.live_interrupt():
            return await self.cancel("interrupted before execution started")
        self.status.execution = ExecutionRecord(
            kind=descriptor.kind,
            started_at=now_iso(),
            job_name=LeaseNames.for_uid(self.uid).job if descriptor.kind in SANDBOX_KINDS else None,
        )
        self.record(Stage.EXECUTE, "started", str(descriptor.kind))
        if self.write_before_execute(descriptor):
            await self.commit(InvocationState.EXECUTING)
        else:
            await self.advance(InvocationState.EXECUTING)
        self.started_here = True

    def write_before_execute(self, descriptor: ToolDescriptorSpec) -> bool:
        """Whether Executing must be on the API server before the call starts.

        A sandbox Job must be followed, never recreated, after a restart, and a call with an
        effect must end Uncertain rather than run again. A read in the operator may simply run
        again, so it is written only if it runs long (see `execute_in_operator`).
        """
        return (
            self.rt.settings.write_every_state
            or descriptor.kind in SANDBOX_KINDS
            or self.status.effective_class != SideEffectClass.READ
        )

    async def execute_in_operator(self, run: Awaitable[Outcome], persisted: bool) -> Outcome:
        task = asyncio.ensure_future(run)
        if not persisted:
            done, _ = await asyncio.wait({task}, timeout=PROGRESS_AFTER_SECONDS)
            if not done:
                try:
                    await self.commit()
                except asyncio.CancelledError:
                    task.cancel()
                    raise
                except Exception:
                    # Only a progress note: the terminal write will carry everything.
                    logger.warning("invocation %s: Executing not written", self.ref, exc_info=True)
        return await task

    async def on_executing(self) -> None:
        spec = self.spec
        assert spec is not None and self.status.effective_class is not None
        record = self.status.execution
        descriptor = self.descriptor
        if descriptor is None:
            body = self.rt.catalog.find_descriptor(self.namespace, spec.tool.id, spec.tool.version)
            descriptor = ToolDescriptorSpec.model_validate(body["spec"]) if body else None
        kind = record.kind if record else (descriptor.kind if descriptor else None)
        persisted = self.persisted_state == InvocationState.EXECUTING
        if (
            not self.secret_values
            and self.status.sandbox_lease
            and self.status.sandbox_lease.secret_name
        ):
            # After a restart the brokered values are needed again, for redaction only.
            try:
                data = await ksandbox.read_secret_keys(
                    self.rt.kube, self.namespace, self.status.sandbox_lease.secret_name
                )
                self.secret_values = [ksandbox.decode_b64(v) for v in data.values()]
            except NotFound:
                pass
        call = Call(
            namespace=self.namespace,
            name=self.name,
            uid=self.uid,
            caller=spec.caller.name,
            descriptor=descriptor,
            arguments=spec.arguments,
            effective_class=self.status.effective_class,
            timeout_seconds=descriptor.timeout_seconds
            if descriptor
            else self.rt.settings.default_timeout_seconds,
            max_result_bytes=min(
                descriptor.max_result_bytes if descriptor else self.rt.settings.max_result_bytes,
                self.rt.settings.max_result_bytes,
            ),
            idempotency_key=spec.idempotency_key,
            argv=self.argv or self.shell_argv(descriptor),
            lease_id=self.uid,
            interrupted=self.interrupted,
        )
        if kind in SANDBOX_KINDS and descriptor is not None:
            if self.started_here:
                owner = owner_reference(
                    api_version=API_VERSION, kind="ToolInvocation", name=self.name, uid=self.uid
                )
                job = self.rt.sandbox.job_for(
                    call,
                    owner,
                    has_secret=bool(descriptor.secret_dependencies),
                    has_token=descriptor.authorization.kubernetes_identity is not None,
                )
                outcome = await self.rt.sandbox.start(call, job)
            else:
                # Resumed: follow the Job this operator made before it stopped, never a new one.
                outcome = await self.rt.sandbox.follow(call)
        elif not self.started_here:
            from ..executors import unconfirmed

            outcome = unconfirmed(
                call, f"the operator stopped during the {kind} call; its effect cannot be confirmed"
            )
        elif kind == ToolKind.NATIVE:
            outcome = await self.execute_in_operator(self.rt.native.execute(call), persisted)
        elif kind == ToolKind.HTTP:
            outcome = await self.execute_in_operator(self.rt.http_executor.execute(call), persisted)
        elif kind == ToolKind.MCP and self.rt.mcp is not None:
            outcome = await self.execute_in_operator(self.rt.mcp.execute(call), persisted)
        else:
            outcome = Outcome.failed(FailureClass.INTERNAL, f"no executor for kind {kind}")
        await self.finish(outcome, descriptor)

    def shell_argv(self, descriptor: ToolDescriptorSpec | None) -> tuple[str, ...]:
        if descriptor is None or self.spec is None:
            return ()
        if descriptor.kind == ToolKind.CONTAINER:
            return tuple(descriptor.sandbox.command) if descriptor.sandbox else ()
        command = str(self.spec.arguments.get("command", ""))
        if descriptor.shell and descriptor.shell.use_shell:
            return ("/bin/sh", "-c", command)
        verdict = check_command(command, allow=[], block=[])
        return tuple(verdict.argv)

    # ------------------------------------------------------------------ endings

    async def finish(self, outcome: Outcome, descriptor: ToolDescriptorSpec | None) -> None:
        spec = self.spec
        assert spec is not None
        max_bytes = descriptor.max_result_bytes if descriptor else self.rt.settings.max_result_bytes
        max_bytes = min(max_bytes, self.rt.settings.max_result_bytes)
        clean = sanitize(outcome.output, secrets=self.secret_values, max_bytes=max_bytes)
        structured = None
        if outcome.structured is not None:
            cleaned = sanitize(
                json.dumps(outcome.structured), secrets=self.secret_values, max_bytes=max_bytes
            )
            try:
                structured = json.loads(cleaned.content) if not cleaned.truncated else None
            except ValueError:
                structured = None
        self.record(
            Stage.SANITIZE,
            "done",
            f"{clean.original_bytes} bytes, {len(clean.redactions)} redaction(s)"
            + (", truncated" if clean.truncated else ""),
        )
        content_bytes = clean.content.encode()
        self.status.result_ref = await asyncio.to_thread(self.rt.store.put, content_bytes)
        self.status.result_hash = self.status.result_ref
        inline = len(content_bytes) <= self.rt.settings.inline_result_bytes
        self.status.result = InvocationResult(
            content=clean.content if inline else "",
            structured_content=structured if inline else None,
            truncated=clean.truncated,
            inline=inline,
            original_bytes=clean.original_bytes,
            original_sha256=clean.original_sha256,
            redactions=list(clean.redactions),
            exit_code=outcome.exit_code,
        )
        if outcome.failure_class is not None:
            self.status.failure_class = str(outcome.failure_class)
        self.status.message = outcome.message or None
        await self.release(f"invocation ended {outcome.state}")
        self.record(Stage.EXECUTE, str(outcome.state).lower(), outcome.message)
        await self.end(outcome.state)

    async def release(self, reason: str) -> None:
        """Credentials die with the call: the ephemeral Secret goes now, the rest is reaped."""
        lease = self.status.sandbox_lease
        if lease is None or lease.released_at is not None:
            return
        if lease.secret_name:
            await ksandbox.delete_quietly(self.rt.kube, "Secret", self.namespace, lease.secret_name)
        lease.released_at = now_iso()
        SANDBOXES_OPEN.labels(self.namespace, str(lease.kind)).dec()
        post(
            self.event_body(),
            reason="SandboxReleased",
            message=f"lease {lease.lease_id}: {reason}",
        )

    async def cancel(self, reason: str) -> None:
        self.status.failure_class = str(FailureClass.CANCELLED)
        self.status.message = reason
        await self.release(reason)
        self.record(Stage.EXECUTE, "cancelled", reason)
        await self.end(InvocationState.CANCELLED)

    async def deny(self, denial: Denial) -> None:
        state = self.status.state
        if denial.failure == FailureClass.CANCELLED and state != InvocationState.EXECUTING:
            return await self.cancel(denial.reason)
        self.status.failure_class = str(denial.failure)
        self.status.denied_stage = denial.stage
        self.status.message = denial.reason
        self.record(denial.stage, "denied", denial.reason)
        DENIALS.labels(self.namespace, denial.stage, str(denial.failure)).inc()
        await self.release(f"denied at {denial.stage}")
        post(
            self.event_body(),
            warning=True,
            reason="ToolInvocationDenied",
            message=f"stage {denial.stage}: {denial.reason}"[:1024],
        )
        await self.end(InvocationState.DENIED, post_event=False)

    async def end(self, state: InvocationState, *, post_event: bool = True) -> None:
        spec = self.spec
        self.status.ended_at = now_iso()
        self.enter(state)
        self.record(Stage.AUDIT, "receipt", "tool-invocation-v1 written to the artifact store")
        descriptor = self.descriptor
        receipt = build_receipt(
            namespace=self.namespace,
            name=self.name,
            uid=self.uid,
            spec=spec if spec is not None else self.unvalidated_spec(),
            status=self.status,
            tool_kind=str(descriptor.kind) if descriptor else "unknown",
            sandbox_kind=str(descriptor.sandbox.kind)
            if descriptor and descriptor.sandbox and descriptor.kind in SANDBOX_KINDS
            else None,
            sandbox_pool=descriptor.sandbox.pool_id if descriptor and descriptor.sandbox else None,
            command_line=list(self.argv) if self.argv else None,
            written_at=self.status.ended_at,
        )
        # fsync off the event loop: every other call waits while a write syncs.
        own_ref = await asyncio.to_thread(self.rt.store.put, canonical_json(receipt))
        self.status.audit_ref = own_ref
        if not (self.status.duplicate_of and self.status.receipt_ref):
            # A duplicate carries its winner's receipt; its own denial is the audit record.
            self.status.receipt_ref = own_ref
        self.status.receipt = ReceiptSummary(
            state=state,
            effective_class=self.status.effective_class,
            request_hash=self.status.request_hash,
            result_hash=self.status.result_hash,
            approval_id=self.status.approval.name if self.status.approval else None,
            policy_decision_id=self.status.policy_decision_id,
            written_at=self.status.ended_at,
        )
        await self.commit()
        tool = spec.tool.id if spec else "unknown"
        INVOCATIONS.labels(
            self.namespace, tool, str(self.status.effective_class or ""), str(state)
        ).inc()
        try:
            elapsed = (parse_time(self.status.ended_at) - parse_time(self.created)).total_seconds()
            LATENCY.labels(tool, str(descriptor.kind) if descriptor else "").observe(elapsed)
        except ValueError:
            pass
        if state == InvocationState.UNCERTAIN:
            UNCERTAIN.labels(self.namespace).inc()
            post(
                self.event_body(),
                warning=True,
                reason="ToolEffectUncertain",
                message=f"{tool} ({self.status.effective_class}): {self.status.message}; "
                "an operator must confirm the effect before any retry"[:1024],
            )
        elif post_event:
            post(
                self.event_body(),
                reason="ToolInvoked",
                message=f"{tool} ended {state}; receipt {self.status.receipt_ref}",
            )
        logger.info(
            "invocation %s ended %s (%s)", self.ref, state, self.status.failure_class or "ok"
        )


def is_gated(effective: SideEffectClass) -> bool:
    return effective in GATED_CLASSES
