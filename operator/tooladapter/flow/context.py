"""One invocation's context: what the stages share, and the one place status is persisted.

The context loads the spec, the descriptor, the policy decision and the class once and hands
them to every stage; stages append to `status` with `record` and move the state with
`advance` (in memory, persisted with the next write) or `commit` (persisted now). Nothing
else writes the invocation's status. Everything a restarted operator needs is a typed field
of `status`, never parsed back from stage text.
"""

from __future__ import annotations

import asyncio
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, field
from typing import Any

from pydantic import ValidationError

from tooladapter import tracing
from tooladapter.catalog import Catalog, Entry
from tooladapter.credentials.carried import Carried
from tooladapter.enums import (
    EnvironmentClass,
    FailureClass,
    InvocationState,
    Resource,
    Stage,
    StageOutcome,
    ToolKind,
)
from tooladapter.events import object_ref
from tooladapter.executors.limits import CallLimits
from tooladapter.kube.client import Conflict, NotFound
from tooladapter.model import (
    Caller,
    StageEntry,
    ToolDescriptorSpec,
    ToolInvocationSpec,
    ToolInvocationStatus,
    ToolPolicySpec,
    ToolRef,
    describe_errors,
)
from tooladapter.pipeline import refusals
from tooladapter.pipeline.availability import published_versions, unavailable
from tooladapter.pipeline.classification import namespace_environment
from tooladapter.pipeline.conditions import invocation_conditions
from tooladapter.pipeline.effect import command_argv
from tooladapter.pipeline.hashing import descriptor_digest
from tooladapter.pipeline.policy import PolicyDecision, evaluate_policies
from tooladapter.pipeline.refusals import Refusal
from tooladapter.pipeline.sanitize.redaction import (
    EVENT_MESSAGE_CHARS,
    bounded_message,
    redact_argv,
)
from tooladapter.pipeline.states import transition
from tooladapter.pipeline.status_patch import merge_patch
from tooladapter.runtime import Runtime
from tooladapter.timeutil import now_iso

Body = dict[str, Any]

#: Holds a deleted invocation whose execution started until its outcome is settled and its
#: receipt written (removed by the flow at its end).
FINALIZER = "tooladapter.dev/settle"
#: Bound of one stage's detail in status.
STAGE_DETAIL_CHARS = 1024
#: Tool kinds that run in a sandbox Job (the rest run in the operator).
SANDBOX_KINDS = frozenset({ToolKind.SHELL, ToolKind.CONTAINER})


class StageEnd(Exception):
    """A stage ends the call: at this stage, for this reason, with this failure class."""

    def __init__(self, stage: Stage, reason: str, failure: FailureClass) -> None:
        super().__init__(reason)
        self.stage = stage
        self.reason = reason
        self.failure = failure


class Denial(StageEnd):
    """A stage refused the call: the invocation ends Denied with this stage and reason."""

    @classmethod
    def of(cls, refusal: Refusal) -> Denial:
        return cls(refusal.stage, refusal.reason, refusal.failure)


class Restart(Exception):
    """The stored invocation changed under the flow: go on from the state stored now."""


class Superseded(Exception):
    """Another operator claimed this call's execution: it owns the call from here."""


class Failure(StageEnd):
    """A stage could not go on and no effect has started: the invocation ends Failed."""


@dataclass
class FlowContext:
    rt: Runtime
    body: Body
    namespace: str
    name: str
    uid: str
    created: str
    status: ToolInvocationStatus
    #: The state the API server holds (the in-memory one runs ahead between writes).
    persisted_state: InvocationState
    interrupted: asyncio.Event
    spec: ToolInvocationSpec | None = None
    descriptor: ToolDescriptorSpec | None = None
    #: The catalog's entry `descriptor` came from (None: read or parsed by this flow).
    descriptor_entry: Entry[ToolDescriptorSpec] | None = None
    decision: PolicyDecision | None = None
    #: Brokered secret values: redacted from every output, never persisted.
    secret_values: list[str] = field(default_factory=list)
    #: The credentials the call carries, with their values (`flow.brokering`); None: not
    #: brokered by this process.
    carried: list[Carried] | None = None
    #: Tokens an issuer minted for this call, as soon as each is minted (a later credential
    #: that fails still leaves them to revoke at the end: `ending.revoke_issued`).
    minted: list[Carried] = field(default_factory=list)
    #: Artifacts status already names (the sanitized result), stored with the receipt in
    #: one trip to the store's threads before status is written (`ending.conclude`).
    unstored: list[bytes] = field(default_factory=list)
    #: This process started the execution (False: it resumes one a stopped operator began).
    started_here: bool = False
    #: The flow began from a state an earlier process (or an earlier read) stored.
    resumed: bool = False
    #: The catalog as the re-check read it from the API server (`recheck.fresh_view`);
    #: None: the watch's view, `rt.catalog`.
    view: Catalog | None = None
    #: The re-check passed in this flow (`recheck`): it is not made twice.
    rechecked: bool = False
    #: The call's timeout and result bound, derived once (`call_limits`).
    limits: CallLimits | None = None
    #: The argv of a shell or container call, parsed once (`command_line`).
    argv: tuple[str, ...] | None = None

    @property
    def catalog(self) -> Catalog:
        """Where this call's descriptor, policies and namespace labels come from."""
        return self.view if self.view is not None else self.rt.catalog

    @classmethod
    def of(cls, rt: Runtime, body: Body) -> FlowContext:
        meta = body["metadata"]
        status = ToolInvocationStatus.model_validate(body.get("status") or {})
        return cls(
            rt=rt,
            body=body,
            namespace=meta["namespace"],
            name=meta["name"],
            uid=meta["uid"],
            created=meta.get("creationTimestamp") or now_iso(),
            status=status,
            persisted_state=status.state,
            interrupted=rt.interrupt_event(meta["uid"]),
            resumed=status.state != InvocationState.RECEIVED,
        )

    # ------------------------------------------------------------------ identity

    @property
    def ref(self) -> str:
        return f"{self.namespace}/{self.name}"

    def event_ref(self) -> Body:
        return object_ref(
            "ToolInvocation", {"name": self.name, "namespace": self.namespace, "uid": self.uid}
        )

    def post(self, *, reason: str, message: str, warning: bool = False) -> None:
        """An event on the invocation: its message redacted (brokered values, secret
        formats) and bounded, as everything that reaches events is."""
        message = bounded_message(message, self.secret_values, max_chars=EVENT_MESSAGE_CHARS)
        self.rt.events.post(self.event_ref(), reason=reason, message=message, warning=warning)

    def without_slot(self) -> AbstractAsyncContextManager[None]:
        """Wait on something outside the operator (an approval, an idempotency winner)
        without holding one of the calls-in-flight slots (`inflight`)."""
        return self.rt.gate.released(self.namespace, self.uid)

    def awaiting_remote(self) -> AbstractAsyncContextManager[None]:
        """Await an http or MCP server's answer on a remote slot, not a calls-in-flight one."""
        return self.rt.gate.handed_over(self.rt.remote_gate, self.namespace, self.uid)

    def bounded(self, text: str | None) -> str:
        """Text for status (`message`, stage details): redacted and bounded."""
        return bounded_message(text, self.secret_values)

    def interrupt_requested(self) -> bool:
        return self.interrupted.is_set() or bool((self.body.get("spec") or {}).get("interrupt"))

    # ------------------------------------------------------------------ status writing

    def record(
        self,
        stage: Stage,
        outcome: StageOutcome,
        detail: str = "",
        *,
        since: str | None = None,
        until: str | None = None,
    ) -> None:
        """Append a stage entry (and, when tracing, its span: from `since`, else the previous
        entry, to `until`, else now)."""
        detail = bounded_message(detail, self.secret_values, max_chars=STAGE_DETAIL_CHARS)
        entry = StageEntry(stage=stage, outcome=outcome, time=now_iso(), detail=detail)
        self.status.stages.append(entry)
        if tracing.enabled():
            stages = self.status.stages
            first = self.status.started_at or self.created
            tracing.emit_stage(
                self.uid,
                entry,
                start=since or tracing.stage_start(stages, len(stages) - 1, first),
                end=until,
                attributes=self.trace_attributes(),
            )

    def trace_attributes(self) -> dict[str, str | int | bool]:
        """What identifies the call on its spans: never arguments, results or details."""
        raw = self.body.get("spec") or {}
        tool = raw.get("tool") or {}
        labels = self.catalog.namespace_labels(self.namespace)
        attributes: dict[str, str | int | bool] = {
            "k8s.namespace.name": self.namespace,
            "tooladapter.tenant": labels.get(tracing.TENANT_LABEL) or self.namespace,
            "tooladapter.invocation.name": self.name,
            "tooladapter.invocation.uid": self.uid,
            "tooladapter.tool.id": str(tool.get("id") or ""),
            "tooladapter.tool.version": str(tool.get("version") or ""),
            "tooladapter.state": str(self.status.state),
        }
        optional = {
            "tooladapter.tool.kind": self.descriptor.kind if self.descriptor else None,
            "tooladapter.class.declared": self.status.declared_class,
            "tooladapter.class.effective": self.status.effective_class,
            "tooladapter.failure_class": self.status.failure_class,
            "tooladapter.run_id": raw.get("runId"),
            "tooladapter.dry_run": True if raw.get("dryRun") is True else None,
        }
        attributes.update(
            {k: v if isinstance(v, bool) else str(v) for k, v in optional.items() if v}
        )
        return attributes

    def trace_end(self) -> None:
        """The call's root span, once its end is persisted."""
        if tracing.enabled():
            tracing.emit_invocation(
                self.uid,
                start=self.created,
                end=self.status.ended_at or now_iso(),
                state=self.status.state,
                attributes=self.trace_attributes(),
            )

    def enter(self, state: InvocationState) -> None:
        """Move to `state` in memory, after checking the transition is legal."""
        transition(self.status.state, state)
        self.status.state = state

    async def commit(
        self, state: InvocationState | None = None, *, exclusive: bool = False
    ) -> None:
        """Persist status (with a new state, entered first).

        `exclusive`: only if nobody wrote the invocation since this flow last read or wrote
        it; `Conflict` otherwise, with nothing written. Whenever the write fails the state
        is left as it was, so the step that moved it runs again: a call whose Executing was
        never stored must be started, not resumed, and a wait must be stored to be seen."""
        before = self.status.state
        if state is not None and state != self.status.state:
            self.enter(state)
        version = self.body.get("metadata", {}).get("resourceVersion") if exclusive else None
        if self.status.trace_id is None and tracing.enabled():
            self.status.trace_id = tracing.trace_id_hex(self.uid)
        self.status.conditions = invocation_conditions(
            self.status.state,
            failure_class=self.status.failure_class,
            message=self.status.message,
            previous=self.status.conditions,
            now=now_iso(),
        )
        # Only what changed since the status last seen (a first write sends it all).
        patch = merge_patch(self.body.get("status") or {}, self.status.sparse_wire())
        try:
            self.body = await self.rt.cluster.patch_status(
                Resource.INVOCATIONS,
                self.namespace,
                self.name,
                patch,
                resource_version=version,
            )
        except Exception:
            self.status.state = before
            raise
        self.persisted_state = self.status.state

    @property
    def finalizers(self) -> list[str]:
        return list(self.body.get("metadata", {}).get("finalizers") or [])

    async def hold(self) -> None:
        """Add the finalizer onto the version last seen (`Conflict` if anyone wrote since)."""
        if FINALIZER in self.finalizers:
            return
        self.body = await self.rt.cluster.set_finalizers(
            Resource.INVOCATIONS,
            self.namespace,
            self.name,
            [*self.finalizers, FINALIZER],
            resource_version=self.body["metadata"]["resourceVersion"],
        )

    async def let_go(self) -> None:
        """Remove the finalizer (after the end is persisted): a deleted call may now go."""
        for _ in range(5):
            if FINALIZER not in self.finalizers:
                return
            try:
                self.body = await self.rt.cluster.set_finalizers(
                    Resource.INVOCATIONS,
                    self.namespace,
                    self.name,
                    [f for f in self.finalizers if f != FINALIZER],
                    resource_version=self.body["metadata"]["resourceVersion"],
                )
            except NotFound:
                return
            except Conflict:
                self.body = await self.rt.cluster.get(
                    Resource.INVOCATIONS, self.namespace, self.name
                )
        raise Conflict(f"finalizer of {self.ref} not removed: the object keeps changing")

    async def reload(self) -> Body:
        """Forget what ran ahead in memory: status as the API server holds it now."""
        fresh = await self.rt.cluster.get(Resource.INVOCATIONS, self.namespace, self.name)
        self.body = fresh
        self.status = ToolInvocationStatus.model_validate(fresh.get("status") or {})
        self.persisted_state = self.status.state
        self.resumed = True
        return fresh

    async def advance(self, state: InvocationState) -> None:
        """Move to `state`; persisted now only under `write_every_state`, else with the next
        write (the stages between writes are safe to repeat after a restart)."""
        if self.rt.settings.write_every_state:
            return await self.commit(state)
        self.enter(state)

    # ------------------------------------------------------------------ loaded once

    def load_spec(self) -> ToolInvocationSpec:
        if self.spec is None:
            try:
                self.spec = ToolInvocationSpec.model_validate(self.body.get("spec") or {})
            except ValidationError as exc:
                raise Denial.of(refusals.invalid_invocation(describe_errors(exc))) from None
        return self.spec

    def unvalidated_spec(self) -> ToolInvocationSpec:
        """The spec as written, for a receipt of an invocation whose spec did not parse."""
        raw = self.body.get("spec") or {}
        tool, caller = raw.get("tool") or {}, raw.get("caller") or {}
        return ToolInvocationSpec.model_construct(
            tool=ToolRef.model_construct(id=str(tool.get("id")), version=str(tool.get("version"))),
            caller=Caller.model_construct(name=str(caller.get("name"))),
            arguments={},
        )

    async def load_descriptor(self) -> ToolDescriptorSpec:
        """The active, healthy descriptor the call names; Denial otherwise."""
        if self.descriptor is not None:
            return self.descriptor
        spec = self.load_spec()
        tool_id, version = spec.tool.id, spec.tool.version
        entry = self.catalog.find_descriptor(self.namespace, tool_id, version)
        body = entry.body if entry else None
        published: list[str] = []
        refused = None
        if body is not None:
            refused = unavailable(
                namespace=self.namespace, tool_id=tool_id, version=version, body=body
            )
        if body is None or refused is not None:
            # The watch may lag the API server: a tool published or activated a moment ago
            # (by this operator or another replica) is read again before it is refused.
            body = None
            known = await self.rt.cluster.list_all(Resource.DESCRIPTORS, self.namespace)
            for item in known:
                ispec = item.get("spec") or {}
                if ispec.get("toolId") == tool_id and ispec.get("version") == version:
                    body = item
            published = published_versions(known, tool_id)
            refused = unavailable(
                namespace=self.namespace,
                tool_id=tool_id,
                version=version,
                body=body,
                published=published,
            )
        if refused is not None:
            raise Denial(Stage.VALIDATION, refused[0], refused[1])
        assert body is not None
        if entry is not None and entry.body is body and entry.spec is not None:
            self.descriptor = entry.spec
            self.descriptor_entry = entry
        else:
            self.descriptor = ToolDescriptorSpec.model_validate(body["spec"])
        return self.descriptor

    def descriptor_digest(self, descriptor: ToolDescriptorSpec) -> str:
        """`descriptor`'s digest; once per descriptor version when it is the catalog's."""
        entry = self.descriptor_entry
        if entry is None or entry.spec is not descriptor:
            return descriptor_digest(descriptor.wire())
        digest = entry.derived.get("digest")
        if digest is None:
            digest = entry.derived["digest"] = descriptor_digest(descriptor.wire())
        return digest

    def load_decision(self) -> PolicyDecision:
        """The tenant policies' decision for this call; fails closed on an invalid policy."""
        if self.decision is not None:
            return self.decision
        spec = self.load_spec()
        policies: list[tuple[str, ToolPolicySpec]] = []
        for entry in self.catalog.policies.in_namespace(self.namespace):
            name = f"{self.namespace}/{entry.name}"
            if entry.spec is None:
                # Fail closed: a policy we cannot read could have denied this call.
                raise Denial.of(refusals.invalid_policy(name, entry.error))
            policies.append((name, entry.spec))
        self.decision = evaluate_policies(
            policies,
            namespace=self.namespace,
            tool_id=spec.tool.id,
            tool_version=spec.tool.version,
            arguments=spec.arguments,
            request_hash=self.status.request_hash or "",
            default_approval_timeout_seconds=self.rt.settings.limits.default_approval_timeout_seconds,
            default_shell_allow=self.rt.settings.shell.allow_list,
            default_shell_block=self.rt.settings.shell.block_list,
        )
        return self.decision

    def environment(self) -> tuple[EnvironmentClass, bool]:
        """The namespace's environment class (an unknown one counts as production) and
        whether it is frozen (from its labels)."""
        return namespace_environment(self.catalog.namespace_labels(self.namespace))

    def recorded_command_line(self) -> list[str]:
        """The command line as status and receipts show it: redacted, bounded."""
        if self.status.execution is not None and self.status.execution.command_line:
            return list(self.status.execution.command_line)
        return redact_argv(self.command_line(), self.secret_values)

    def command_line(self) -> list[str]:
        """The argv a shell or container tool runs, from the spec and the descriptor:
        parsed on first use, then carried (the status record, the Job, the warm exec)."""
        descriptor, spec = self.descriptor, self.spec
        if descriptor is None or spec is None:
            return []
        if self.argv is None:
            self.argv = tuple(command_argv(descriptor, spec.arguments))
        return list(self.argv)

    def call_limits(self) -> CallLimits:
        """The call's timeout and result bound: derived once, from the descriptor the call
        was checked against (its digest is pinned: a re-check denies a changed one), and
        carried from brokering to the executor and the sanitizer."""
        if self.limits is not None:
            return self.limits
        limits = CallLimits.of(self.descriptor, self.rt.settings)
        if self.descriptor is not None:
            self.limits = limits
        return limits
