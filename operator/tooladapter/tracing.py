"""OpenTelemetry traces of invocations: one trace per call, one span per recorded stage.

Off unless `OTEL_EXPORTER_OTLP_ENDPOINT` (or `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`) is set.
Off costs nothing: the SDK and the exporter are never imported, `enabled()` is a global
read, and every emitting function returns at once.

A call can outlive the process that began it (a restart, a standby taking over), so no span
is held open across a wait or a process: the trace id and the id of the root span
(`invocation`) are derived from the invocation's uid, each stage's span is started and
ended at once when the stage is recorded (its start is the previous stage's time), and the
root span is emitted when the call's end is persisted, from its creation to its end. A
resumed call continues the same trace; `status.traceId` names it.

The span of an execution (`execute`, from the start of the tool to its answer) also has an
id derived from the uid: the `traceparent` sent with http and MCP calls names it, so the
tool's own spans hang under it, whichever process ends up recording it.

Attributes identify the call (namespace, tenant, tool, version, kind, classes, state,
stage, outcome, failure class); never arguments, results, stage details or credentials.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import os
from collections.abc import Awaitable, Callable, Mapping, Sequence
from contextvars import ContextVar
from datetime import datetime
from typing import TYPE_CHECKING, Any

from tooladapter.enums import InvocationState, Stage, StageOutcome
from tooladapter.model import StageEntry
from tooladapter.timeutil import parse_time

if TYPE_CHECKING:
    from opentelemetry.sdk.trace import SpanProcessor
    from opentelemetry.trace import Tracer

logger = logging.getLogger("tooladapter.tracing")

#: The environment variables that switch tracing on (the OTLP exporter's own).
ENDPOINT_VARIABLES = ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT")
SCOPE = "tooladapter"
#: The namespace label naming the tenant (the namespace itself when absent).
TENANT_LABEL = "tooladapter.dev/tenant"
ROOT_SPAN = "invocation"
#: Outcomes that end one execution attempt (their span starts when the attempt started).
ATTEMPT_ENDS = frozenset(
    {
        StageOutcome.OBSERVED,
        StageOutcome.FAILED,
        StageOutcome.UNCERTAIN,
        StageOutcome.CANCELLED,
        StageOutcome.RETRY,
    }
)
#: The outcome whose span carries the execution's derived id (what `traceparent` names).
_EXECUTION_ENDS = ATTEMPT_ENDS - {StageOutcome.RETRY}
_ERROR_STATES = frozenset({InvocationState.FAILED, InvocationState.UNCERTAIN})
_ERROR_OUTCOMES = frozenset({StageOutcome.FAILED, StageOutcome.UNCERTAIN})

Attributes = Mapping[str, str | int | bool]

_tracer: Tracer | None = None
#: (trace id, span id) the next span must get; set only around one `start_span`.
_pinned: ContextVar[tuple[int | None, int] | None] = ContextVar("tooladapter_pinned_ids")


def requested(environ: Mapping[str, str] | None = None) -> bool:
    """Whether the environment asks for traces (an OTLP endpoint, and the SDK not disabled)."""
    env = os.environ if environ is None else environ
    if env.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return False
    return any(env.get(name, "").strip() for name in ENDPOINT_VARIABLES)


def enabled() -> bool:
    return _tracer is not None


# --------------------------------------------------------------------------- ids


def _digest(uid: str, purpose: str) -> bytes:
    return hashlib.sha256(f"tooladapter/{purpose}/{uid}".encode()).digest()


def trace_id(uid: str) -> int:
    """The call's trace id (128 bits), the same in every process and after every restart."""
    return int.from_bytes(_digest(uid, "trace")[:16], "big") or 1


def root_span_id(uid: str) -> int:
    return int.from_bytes(_digest(uid, "invocation")[:8], "big") or 1


def execution_span_id(uid: str) -> int:
    return int.from_bytes(_digest(uid, "execute")[:8], "big") or 1


def trace_id_hex(uid: str) -> str:
    return f"{trace_id(uid):032x}"


def traceparent(uid: str) -> str | None:
    """The W3C `traceparent` for an outgoing tool request (None while tracing is off): the
    call's trace, parent span its execution."""
    if _tracer is None:
        return None
    return f"00-{trace_id(uid):032x}-{execution_span_id(uid):016x}-01"


# --------------------------------------------------------------------------- set-up


def configure(service_version: str = "") -> Callable[[], Awaitable[None]] | None:
    """Install the exporting tracer when the environment asks for it; the returned coroutine
    function flushes and stops it (None: tracing stays off)."""
    if not requested():
        return None
    # Imported here only: with tracing off the SDK is never loaded.
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    # The exporter reads the standard OTEL_EXPORTER_OTLP_* variables (endpoint, headers,
    # timeout, certificates); the batch processor exports from its own thread.
    shutdown = start(BatchSpanProcessor(OTLPSpanExporter()), service_version)
    logger.info("exporting traces over OTLP/HTTP")
    return shutdown


def start(processor: SpanProcessor, service_version: str = "") -> Callable[[], Awaitable[None]]:
    """Trace every call into `processor` (the OTLP exporter's, or a test's in-memory one);
    the returned coroutine function flushes and stops it."""
    global _tracer
    from opentelemetry.sdk.resources import SERVICE_NAME, SERVICE_VERSION, Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.id_generator import RandomIdGenerator
    from opentelemetry.sdk.trace.sampling import ALWAYS_ON

    class UidIds(RandomIdGenerator):
        """Random ids, except where a span's ids were pinned (derived from a uid)."""

        def generate_trace_id(self) -> int:
            pinned = _pinned.get(None)
            if pinned is not None and pinned[0] is not None:
                return pinned[0]
            return super().generate_trace_id()

        def generate_span_id(self) -> int:
            pinned = _pinned.get(None)
            return pinned[1] if pinned is not None else super().generate_span_id()

    # OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES still win (Resource.create reads them).
    defaults: dict[str, str] = {SERVICE_NAME: "tooladapter"}
    if service_version:
        defaults[SERVICE_VERSION] = service_version
    resource = Resource.create()
    if str(resource.attributes.get(SERVICE_NAME, "")).startswith("unknown_service"):
        resource = resource.merge(Resource({SERVICE_NAME: defaults[SERVICE_NAME]}))
    resource = Resource(defaults).merge(resource)
    # Every call is traced: a sampled-out root with sampled stage spans would be half a trace.
    provider = TracerProvider(
        resource=resource, sampler=ALWAYS_ON, id_generator=UidIds(), shutdown_on_exit=False
    )
    provider.add_span_processor(processor)
    _tracer = provider.get_tracer(SCOPE)

    async def shutdown() -> None:
        global _tracer
        _tracer = None
        await asyncio.to_thread(provider.shutdown)

    return shutdown


# --------------------------------------------------------------------------- spans


def _ns(moment: str | datetime) -> int:
    when = parse_time(moment) if isinstance(moment, str) else moment
    return int(when.timestamp() * 1_000_000) * 1000


def stage_start(stages: Sequence[StageEntry], index: int, first: str) -> str:
    """When the span of `stages[index]` starts: the previous entry's time (`first` for the
    first), except that an execution's end spans the attempt, from its `started` (or last
    `retry`) entry."""
    entry = stages[index]
    if entry.stage == Stage.EXECUTE and entry.outcome in ATTEMPT_ENDS:
        for earlier in reversed(stages[:index]):
            if earlier.stage == Stage.EXECUTE and earlier.outcome in (
                StageOutcome.STARTED,
                StageOutcome.RETRY,
            ):
                return earlier.time
    return stages[index - 1].time if index > 0 else first


def emit_stage(
    uid: str,
    entry: StageEntry,
    *,
    start: str,
    end: str | None = None,
    attributes: Attributes,
) -> None:
    """One stage's span, started and ended at once, under the call's root span."""
    tracer = _tracer
    if tracer is None:
        return
    pinned = (
        execution_span_id(uid)
        if entry.stage == Stage.EXECUTE and entry.outcome in _EXECUTION_ENDS
        else None
    )
    attrs: dict[str, Any] = {
        **attributes,
        "tooladapter.stage": str(entry.stage),
        "tooladapter.stage.outcome": str(entry.outcome),
    }
    _emit(
        tracer,
        str(entry.stage),
        uid,
        start=start,
        end=end or entry.time,
        attributes=attrs,
        error=entry.outcome in _ERROR_OUTCOMES,
        span_id=pinned,
    )


def emit_invocation(
    uid: str, *, start: str, end: str, state: InvocationState, attributes: Attributes
) -> None:
    """The call's root span, from its creation to its end, once its end is persisted."""
    tracer = _tracer
    if tracer is None:
        return
    _emit(
        tracer,
        ROOT_SPAN,
        uid,
        start=start,
        end=end,
        attributes=dict(attributes),
        error=state in _ERROR_STATES,
        span_id=root_span_id(uid),
        root=True,
    )


def _emit(
    tracer: Tracer,
    name: str,
    uid: str,
    *,
    start: str,
    end: str,
    attributes: dict[str, Any],
    error: bool,
    span_id: int | None,
    root: bool = False,
) -> None:
    from opentelemetry import trace
    from opentelemetry.context import Context

    try:
        start_ns, end_ns = _ns(start), _ns(end)
    except ValueError:
        return
    if root:
        parent = Context()
        pin: tuple[int | None, int] | None = (trace_id(uid), span_id or root_span_id(uid))
    else:
        parent = trace.set_span_in_context(
            trace.NonRecordingSpan(
                trace.SpanContext(
                    trace_id=trace_id(uid),
                    span_id=root_span_id(uid),
                    is_remote=True,
                    trace_flags=trace.TraceFlags(trace.TraceFlags.SAMPLED),
                )
            )
        )
        pin = (None, span_id) if span_id is not None else None
    token = _pinned.set(pin)
    try:
        span = tracer.start_span(
            name, context=parent, attributes=attributes, start_time=min(start_ns, end_ns)
        )
    finally:
        _pinned.reset(token)
    if error:
        span.set_status(trace.Status(trace.StatusCode.ERROR))
    span.end(end_time=end_ns)
