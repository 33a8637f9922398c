"""Data flow across a run: a call that can send data out, made once its scopes hold both
private data and untrusted content, is gated (the "lethal trifecta").

Each call passes every other check on its own; the harm is the chain: an agent reads
tenant-private data, then reads content an attacker wrote (which tells it to send the data
somewhere), then calls a tool that can send. So descriptors label their results
(`spec.dataFlow.labels`), a scope collects the labels of the calls that ended Observed or
Uncertain (either may have returned data), and a sink call in a scope that holds both
needs an approval whose reasons name the calls behind each label and the hosts the call
can reach (`ToolPolicy.spec.dataFlow.onPrivateAndUntrusted`: approve, deny or allow).

Pure: the flow reads the scopes' stores (`flow.dataflow`) and hands their entries in.

Scopes. A call belongs to its run (namespace, caller, runId) and, with an attempt
workspace, to its attempt (namespace, caller, attemptId): the workspace carries data
between runs. A call that names neither is judged by its caller's calls within the window
(TOOLADAPTER_DATAFLOW_WINDOW_SECONDS), as is every call under `scope: caller`. A labelled
call is written to its run, its attempt and always its caller's scope, so the caller's
scope sees every call whatever the policy says later.

Store: one ConfigMap per scope in the call's namespace (`store_name`), one data key per
(label, call) (`entry_key`): a merge patch adds a key without reading the map, so two calls
ending at once never lose each other's label, and a repeated write (a resumed end) is the
same key. It outlives the invocations (their retention) and the operator (a restart).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from tooladapter.egress.core.rules import effective_allow
from tooladapter.enums import (
    DataFlowAction,
    DataFlowScope,
    DataLabel,
    InvocationState,
    ScopeKind,
    SideEffectClass,
    ToolKind,
)
from tooladapter.model import LabelSource, ToolDescriptorSpec
from tooladapter.timeutil import parse_time

#: Prefix of the scopes' ConfigMaps (the rest is a digest of the scope's key).
STORE_PREFIX = "tooladapter-dataflow-"
#: Label on the scopes' ConfigMaps: what they are, for people and for cleanup.
STORE_LABEL = "tooladapter.dev/dataflow-scope"
#: The class from which every call counts as a sink, whatever its kind.
SINK_CLASS = SideEffectClass.EXTERNAL


@dataclass(frozen=True)
class Scope:
    """One scope of a call: what it collects and whose calls it holds."""

    kind: ScopeKind
    namespace: str
    caller: str
    #: The runId or attemptId ("" for a caller's scope).
    id: str = ""

    @property
    def key(self) -> str:
        return json.dumps([self.kind.value, self.namespace, self.caller, self.id])

    @property
    def store_name(self) -> str:
        """The ConfigMap holding its labels: a digest, since runIds and caller names are not
        object names (and need not be kept readable)."""
        return STORE_PREFIX + hashlib.sha256(self.key.encode()).hexdigest()[:40]

    @property
    def windowed(self) -> bool:
        """A caller's scope counts only the calls within the window."""
        return self.kind is ScopeKind.CALLER

    def describe(self) -> str:
        if self.kind is ScopeKind.CALLER:
            return f"caller {self.caller}'s recent calls"
        return f"{self.kind.value} {self.id}"


def judged_scopes(
    *, namespace: str, caller: str, run_id: str, attempt_id: str, scope: DataFlowScope
) -> list[Scope]:
    """The scopes a call is judged by: its run and attempt, and its caller's window when it
    names neither or the policy says `scope: caller`. `scope: caller` widens, never
    narrows: the run and attempt still count (their labels do not leave a window), so a
    long run is judged at least as strictly as under `scope: run`."""
    found = []
    if scope is DataFlowScope.CALLER or not (run_id or attempt_id):
        found.append(Scope(ScopeKind.CALLER, namespace, caller))
    if run_id:
        found.append(Scope(ScopeKind.RUN, namespace, caller, run_id))
    if attempt_id:
        found.append(Scope(ScopeKind.ATTEMPT, namespace, caller, attempt_id))
    return found


def recorded_scopes(*, namespace: str, caller: str, run_id: str, attempt_id: str) -> list[Scope]:
    """The scopes a labelled call's labels are written to: its run, its attempt and always
    its caller's (which `scope: caller` and calls without a run read)."""
    found = [Scope(ScopeKind.CALLER, namespace, caller)]
    if run_id:
        found.append(Scope(ScopeKind.RUN, namespace, caller, run_id))
    if attempt_id:
        found.append(Scope(ScopeKind.ATTEMPT, namespace, caller, attempt_id))
    return found


#: An McpServer's annotation that adds labels to every tool bound to it, comma-separated:
#: `tooladapter.dev/dataflow-labels: private` (a server that serves tenant data). It can only
#: add: the descriptor's own labels (or the mcp default, `untrusted`) always stay.
SERVER_LABELS_ANNOTATION = "tooladapter.dev/dataflow-labels"


def server_labels(annotations: Mapping[str, str] | None) -> tuple[list[DataLabel], list[str]]:
    """The labels an McpServer's annotation adds, and the values it holds that are no label.
    A value that is no label (a typo of `private`, say) adds both labels: the annotation can
    only ever add, so what it cannot read errs on the gated side (its status names it)."""
    text = (annotations or {}).get(SERVER_LABELS_ANNOTATION)
    if not text:
        return [], []
    found: set[DataLabel] = set()
    unknown: list[str] = []
    for part in str(text).split(","):
        value = part.strip()
        if not value:
            continue
        try:
            found.add(DataLabel(value))
        except ValueError:
            unknown.append(value)
    if unknown:
        found |= {DataLabel.PRIVATE, DataLabel.UNTRUSTED}
    return sorted(found), unknown


def server_label_problems(annotations: Mapping[str, str] | None) -> list[str]:
    """What an McpServer's status says about its labels annotation (empty: nothing wrong)."""
    _, unknown = server_labels(annotations)
    if not unknown:
        return []
    listed = ", ".join(repr(v[:64]) for v in unknown[:5])
    return [
        f"metadata.annotations[{SERVER_LABELS_ANNOTATION}]: {listed} is no data-flow label "
        f"(private, untrusted): its tools count as both until it is fixed"
    ]


def hinted_labels(annotations: Mapping[str, object] | None) -> list[DataLabel]:
    """Labels an MCP tool's own annotations (the server's hints) add: `openWorldHint: true`
    says the tool reaches the open world, so what it returns is `untrusted`. Hints only add
    (as they only raise a class)."""
    if annotations and annotations.get("openWorldHint") is True:
        return [DataLabel.UNTRUSTED]
    return []


def labels_of(
    descriptor: ToolDescriptorSpec, *, added: Iterable[DataLabel] = ()
) -> list[DataLabel]:
    """What a call's result is: the descriptor's `dataFlow.labels`; unset on an mcp tool,
    `untrusted` (a third-party server's answer); an explicit list (even `[]`) is what the
    platform team reviewed and wins over the default. `added`: what the tool's server adds
    (its annotation, its hints): added, never removing one."""
    declared = descriptor.data_flow.labels if descriptor.data_flow is not None else None
    if declared is None:
        declared = [DataLabel.UNTRUSTED] if descriptor.kind == ToolKind.MCP else []
    return sorted(set(declared) | set(added))


def reach_of(
    descriptor: ToolDescriptorSpec,
    *,
    default_allow: Sequence[str],
    narrowing: Sequence[Sequence[str]] = (),
    mcp_url: str | None = None,
) -> list[str]:
    """Where a call can send data: a sandbox's effective egress (the operator's default
    list when the descriptor sets none, narrowed by the policies: what its lease gets), an
    http tool's allowed hosts, an mcp tool's server."""
    if descriptor.kind == ToolKind.HTTP and descriptor.http is not None:
        return list(descriptor.http.allowed_hosts) or [descriptor.http.url]
    if descriptor.kind == ToolKind.MCP and descriptor.mcp is not None:
        return [mcp_url or f"McpServer {descriptor.mcp.server}"]
    sandbox = descriptor.sandbox_spec
    if sandbox is None:
        return []
    return effective_allow(sandbox.egress.allow, default_allow, narrowing)


def is_sink(
    descriptor: ToolDescriptorSpec, effective: SideEffectClass, reach: Sequence[str]
) -> bool:
    """Whether a call can send data out: any egress (`reach`, the default list included),
    every http and mcp tool, every class external and above. `sink: none` (allowed by the
    CRD only where none of these holds) therefore never lowers the answer: it states it."""
    if effective.rank >= SINK_CLASS.rank:
        return True
    return descriptor.kind in (ToolKind.HTTP, ToolKind.MCP) or bool(reach)


def entry_key(label: DataLabel, invocation: str) -> str:
    """The store's data key of one label brought by one call (a ConfigMap key)."""
    return f"{label.value}.{invocation}"


def entry_value(*, tool: str, at: str) -> str:
    return json.dumps({"tool": tool, "at": at}, sort_keys=True)


def entries_of(data: Mapping[str, str] | None) -> list[LabelSource]:
    """A scope's store read back; keys it does not know are skipped (never fatal)."""
    found: list[LabelSource] = []
    for key, value in sorted((data or {}).items()):
        label_text, _, invocation = key.partition(".")
        try:
            label = DataLabel(label_text)
            detail = json.loads(value)
        except ValueError:
            continue
        if not invocation or not isinstance(detail, dict):
            continue
        found.append(
            LabelSource(
                label=label,
                invocation=invocation,
                tool=str(detail.get("tool") or ""),
                at=str(detail.get("at") or ""),
            )
        )
    return found


def within(source: LabelSource, *, now: datetime, window_seconds: int) -> bool:
    """A caller's scope counts a label only while its call ended within the window."""
    try:
        return parse_time(source.at) >= now - timedelta(seconds=window_seconds)
    except ValueError:
        return True  # unreadable: kept (the safe side)


def expired_keys(
    data: Mapping[str, str] | None, *, now: datetime, window_seconds: int
) -> list[str]:
    """Keys of a caller's store that left the window: removed with the next write."""
    return [
        entry_key(s.label, s.invocation)
        for s in entries_of(data)
        if not within(s, now=now, window_seconds=window_seconds)
    ]


def held(
    stores: Iterable[tuple[Scope, Mapping[str, str] | None]],
    *,
    now: datetime,
    window_seconds: int,
    exclude: str = "",
) -> list[LabelSource]:
    """The labels a call's scopes hold, with their sources (deduplicated, the call itself
    excluded: a call is judged by what came before it)."""
    seen: dict[tuple[DataLabel, str], LabelSource] = {}
    for scope, data in stores:
        for source in entries_of(data):
            if source.invocation == exclude:
                continue
            if scope.windowed and not within(source, now=now, window_seconds=window_seconds):
                continue
            seen.setdefault((source.label, source.invocation), source)
    return sorted(seen.values(), key=lambda s: (s.label.value, s.at, s.invocation))


@dataclass(frozen=True)
class Verdict:
    """The rule's answer for one call."""

    sink: bool
    sources: tuple[LabelSource, ...]
    #: What happens: None when the rule does not apply (not a sink, or not both labels).
    action: DataFlowAction | None
    reason: str

    @property
    def labels(self) -> frozenset[DataLabel]:
        return frozenset(s.label for s in self.sources)

    @property
    def needs_approval(self) -> bool:
        return self.action is DataFlowAction.APPROVE

    @property
    def denies(self) -> bool:
        return self.action is DataFlowAction.DENY


def _calls(sources: Sequence[LabelSource], label: DataLabel) -> str:
    return ", ".join(
        f"{s.invocation} ({s.tool})" if s.tool else s.invocation
        for s in sources
        if s.label is label
    )


def judge(
    *,
    sink: bool,
    reach: Sequence[str],
    sources: Sequence[LabelSource],
    action: DataFlowAction,
    scopes: Sequence[Scope] = (),
) -> Verdict:
    """Whether a call is gated: a sink whose scopes hold both private and untrusted gets
    `action`; the reason names the calls behind each label and where the call can send."""
    labels = {s.label for s in sources}
    both = {DataLabel.PRIVATE, DataLabel.UNTRUSTED} <= labels
    if not (sink and both):
        return Verdict(sink=sink, sources=tuple(sources), action=None, reason="")
    where = ", ".join(reach) if reach else "outside the tenant (its class)"
    within_text = f" in {', '.join(s.describe() for s in scopes)}" if scopes else ""
    reason = (
        f"data flow: private data from {_calls(sources, DataLabel.PRIVATE)} and untrusted "
        f"content from {_calls(sources, DataLabel.UNTRUSTED)}{within_text}; this call can "
        f"send data to {where}"
    )
    gated = None if action is DataFlowAction.ALLOW else action
    return Verdict(sink=sink, sources=tuple(sources), action=gated, reason=reason)


def arrived_since(before: Sequence[LabelSource], now: Sequence[LabelSource]) -> list[LabelSource]:
    """Sources a scope gained after `before` was judged (a label that arrived while the call
    waited: its approval did not see it)."""
    known = {(s.label, s.invocation) for s in before}
    return [s for s in now if (s.label, s.invocation) not in known]


@dataclass(frozen=True)
class LabelWrite:
    """The labels one ended call brings into its scopes: what the end writes, and what waits
    in `PendingLabels` while that write fails."""

    namespace: str
    invocation: str
    uid: str
    caller: str
    run_id: str
    attempt_id: str
    tool: str
    #: When the call ended (RFC 3339): a caller's window counts from here.
    at: str
    labels: tuple[DataLabel, ...]

    @property
    def scopes(self) -> list[Scope]:
        return recorded_scopes(
            namespace=self.namespace,
            caller=self.caller,
            run_id=self.run_id,
            attempt_id=self.attempt_id,
        )

    def entries(self) -> dict[str, str]:
        """Its data keys and values, as each of its scopes' stores holds them."""
        value = entry_value(tool=self.tool, at=self.at)
        return {entry_key(label, self.invocation): value for label in self.labels}


#: Ends after which a call may have returned data: its labels enter its scopes.
LABELLING_STATES = frozenset({InvocationState.OBSERVED, InvocationState.UNCERTAIN})


def brings_labels(state: InvocationState, *, executed: bool, attempt_workspace: bool) -> bool:
    """Whether a call that ended in `state` brings its labels into its scopes.

    Observed and Uncertain: it may have returned data. Also a call interrupted after it
    started executing in its attempt's workspace (`sandbox.workspace: attempt`): its end is
    Cancelled when its class keeps effects in the sandbox, yet what its tool read may be in
    the workspace, which the attempt's next calls read and may send out."""
    if state in LABELLING_STATES:
        return True
    return state == InvocationState.CANCELLED and executed and attempt_workspace


def pending_write_of(body: Mapping[str, object]) -> LabelWrite | None:
    """The label write an ended invocation still owes its scopes (`status.dataFlow.pending`),
    read off its body as the watch delivers it; None when it owes none."""
    status = body.get("status")
    spec = body.get("spec")
    meta = body.get("metadata")
    if not (isinstance(status, Mapping) and isinstance(spec, Mapping)):
        return None
    if not isinstance(meta, Mapping):
        return None
    flow = status.get("dataFlow")
    if not isinstance(flow, Mapping) or not flow.get("pending"):
        return None
    labels: list[DataLabel] = []
    for text in flow.get("labels") or []:
        try:
            labels.append(DataLabel(str(text)))
        except ValueError:
            continue
    caller = spec.get("caller")
    tool = spec.get("tool")
    if not labels or not isinstance(caller, Mapping) or not isinstance(tool, Mapping):
        return None
    return LabelWrite(
        namespace=str(meta.get("namespace") or ""),
        invocation=str(meta.get("name") or ""),
        uid=str(meta.get("uid") or ""),
        caller=str(caller.get("name") or ""),
        run_id=str(spec.get("runId") or ""),
        attempt_id=str(spec.get("attemptId") or ""),
        tool=str(tool.get("id") or ""),
        at=str(status.get("endedAt") or ""),
        labels=tuple(sorted(set(labels))),
    )


class PendingLabels:
    """Label writes that failed at their call's end, held until a retry stores them.

    A call's end never waits for its labels (a scope's store that cannot be written, over
    quota say, must not hold the call Executing forever); while they are pending the gate
    counts them as if stored, so the labels of a call whose result the agent can already
    read are never missing from a judgement this process makes (fail closed). The call's
    status says `dataFlow.pending` until they are stored, so a restarted operator (or the
    next holder of the namespace) finds them on its listing and takes them up again."""

    def __init__(self) -> None:
        self._writes: dict[tuple[str, str], LabelWrite] = {}

    def __len__(self) -> int:
        return len(self._writes)

    def add(self, write: LabelWrite) -> None:
        self._writes[(write.namespace, write.invocation)] = write

    def discard(self, namespace: str, invocation: str) -> None:
        self._writes.pop((namespace, invocation), None)

    def holds(self, namespace: str, invocation: str) -> bool:
        return (namespace, invocation) in self._writes

    def writes(self) -> list[LabelWrite]:
        return list(self._writes.values())

    def data_for_store(self, namespace: str, store_name: str) -> dict[str, str]:
        """`data_for` by the store's name (what a dry run's lookups know)."""
        data: dict[str, str] = {}
        for write in self._writes.values():
            if write.namespace == namespace and any(
                s.store_name == store_name for s in write.scopes
            ):
                data.update(write.entries())
        return data

    def over_store(
        self, namespace: str, store_name: str, stored: Mapping[str, str] | None
    ) -> Mapping[str, str] | None:
        """A store as a dry run reads it: what is `stored` plus the pending labels that go
        there, which the call's gate counts as stored."""
        pending = self.data_for_store(namespace, store_name)
        return {**(stored or {}), **pending} if pending else stored

    def stores(self) -> set[tuple[str, str]]:
        """(namespace, store name) of every store a pending write will add to."""
        return {(w.namespace, s.store_name) for w in self._writes.values() for s in w.scopes}

    def data_for(self, scope: Scope) -> dict[str, str]:
        """What the scope's store would hold once the pending writes are made."""
        data: dict[str, str] = {}
        for write in self._writes.values():
            if write.namespace == scope.namespace and any(s.key == scope.key for s in write.scopes):
                data.update(write.entries())
        return data


def store_collectable(
    kind: str,
    data: Mapping[str, str] | None,
    *,
    now: datetime,
    window_seconds: int,
    retention_seconds: int,
    present: Callable[[str], bool],
) -> bool:
    """Whether a scope's store may be deleted (garbage collection of the stores).

    - A caller's store: once every entry left the window (none is counted any more).
    - A run's or an attempt's: once none of the calls behind its labels exists any more
      (`present`: the invocation is still stored) and its newest label is older than the
      window plus the invocations' retention. The labels so outlive their calls' retention
      by a window: a run idle that long starts clean. With retention off (0), invocations
      stay, and so do the stores.
    - Anything unreadable (an unknown kind, a time that does not parse) is kept."""
    sources = entries_of(data)
    if kind == ScopeKind.CALLER.value:
        return all(not within(s, now=now, window_seconds=window_seconds) for s in sources)
    if kind not in (ScopeKind.RUN.value, ScopeKind.ATTEMPT.value) or retention_seconds <= 0:
        return False
    keep_for = timedelta(seconds=window_seconds + retention_seconds)
    for source in sources:
        try:
            ended = parse_time(source.at)
        except ValueError:
            return False
        if ended >= now - keep_for or present(source.invocation):
            return False
    return True
