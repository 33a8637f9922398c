"""How tools and calls look to agents through the gateway: pure functions over plain data.

- Which tools a namespace offers: descriptors that are active, healthy and not retired,
  one entry per `toolId`, bound to its highest version (the caller's grants are checked
  by the gateway, which has the API).
- The MCP tool object of a descriptor, with hints derived from its side-effect class.
- What a caller's `_meta` may set on a call, and the ToolInvocation the gateway creates.
- What a followed invocation reports as progress and, once it ends, as a tools/call
  result: `isError` for every end but `Observed`, and for an Observed tool error (an
  `Uncertain` effect is never reported as a success), with the stage and reason, the
  invocation, its receipt and `provenance: tool-result` in `_meta`; the tool's text
  optionally between unguessable delimiters (`delimit`); a sandbox's refused connections
  after it, in a delimited block of tooladapter's own (`egress_block`).
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Final

from packaging.version import InvalidVersion, Version
from pydantic import ValidationError

from tooladapter.enums import (
    FailureClass,
    InvocationState,
    SideEffectClass,
    ToolKind,
)
from tooladapter.model import (
    TOOL_ID_MAX,
    TOOL_ID_PATTERN,
    VERSION_MAX,
    VERSION_PATTERN,
    EgressRefusal,
    ToolDescriptorSpec,
    ToolDescriptorStatus,
    ToolInvocationSpec,
)
from tooladapter.pipeline.hashing import descriptor_digest
from tooladapter.pipeline.linear_regex import compile_internal
from tooladapter.pipeline.sanitize.egress import refusal_line
from tooladapter.pipeline.validation.arguments import validate_arguments
from tooladapter.review import readout
from tooladapter.review.readout import state_of
from tooladapter.review.shown import shown
from tooladapter.review.texts import waiting_reasons

#: `_meta` keys of tooladapter (namespaced, as MCP asks of non-protocol keys).
META_PREFIX: Final = "dev.tooladapter/"
META_IDEMPOTENCY_KEY: Final = META_PREFIX + "idempotencyKey"
META_VERSION: Final = META_PREFIX + "version"
META_RUN_ID: Final = META_PREFIX + "runId"
META_ATTEMPT_ID: Final = META_PREFIX + "attemptId"
META_FENCING_TOKEN: Final = META_PREFIX + "fencingToken"
META_INVOCATION: Final = META_PREFIX + "invocation"
META_NAMESPACE: Final = META_PREFIX + "namespace"
META_RECEIPT_REF: Final = META_PREFIX + "receiptRef"
META_STATE: Final = META_PREFIX + "state"
META_STAGE: Final = META_PREFIX + "stage"
META_FAILURE_CLASS: Final = META_PREFIX + "failureClass"
META_SIDE_EFFECT_CLASS: Final = META_PREFIX + "sideEffectClass"
META_KIND: Final = META_PREFIX + "kind"
META_DESCRIPTOR: Final = META_PREFIX + "descriptor"
META_TRUNCATED: Final = META_PREFIX + "truncated"
META_DUPLICATE_OF: Final = META_PREFIX + "duplicateOf"
META_DUPLICATE_OF_UID: Final = META_PREFIX + "duplicateOfUid"
META_PROVENANCE: Final = META_PREFIX + "provenance"
META_TOOL_ERROR: Final = META_PREFIX + "toolError"
META_EXIT_CODE: Final = META_PREFIX + "exitCode"
#: What the result is for the data-flow rule (`private`, `untrusted`): a client or model
#: may treat untrusted content as data, never as instructions.
META_LABELS: Final = META_PREFIX + "labels"
META_HTTP_STATUS: Final = META_PREFIX + "httpStatus"
#: The sandbox's connections the egress proxy refused or could not make, with its reasons
#: (`status.result.egressRefused`): tooladapter's record, beside the tool's output.
META_EGRESS_REFUSED: Final = META_PREFIX + "egressRefused"
#: A tools/call option: answer what the call would meet now (the REST dry run), create nothing.
META_DRY_RUN: Final = META_PREFIX + "dryRun"
#: A dry run's answer: the preview, as the REST dry run answers it.
META_PREVIEW: Final = META_PREFIX + "preview"
#: A tool's descriptor digest (what an approval pins): a changed one is a changed tool.
META_DESCRIPTOR_DIGEST: Final = META_PREFIX + "descriptorDigest"
#: The reviewers' page at a call waiting for a decision (a pending result's link).
META_APPROVAL_URL: Final = META_PREFIX + "approvalUrl"

#: What every tools/call result (and the REST invocation view) says of its content: data
#: from a tool, never instructions (the reference's provenance tag).
PROVENANCE: Final = "tool-result"

# Anchored patterns (`^...$`; RE2's `$` matches only at the very end).
_TOOL_ID = compile_internal(TOOL_ID_PATTERN)
_VERSION = compile_internal(VERSION_PATTERN)

#: Invocation states in pipeline order: the progress value of a followed call.
_ORDER: Final = {
    state: rank
    for rank, state in enumerate(
        [
            InvocationState.RECEIVED,
            InvocationState.VALIDATED,
            InvocationState.AUTHORIZED,
            InvocationState.AWAITING_APPROVAL,
            InvocationState.BROKERED,
            InvocationState.EXECUTING,
        ],
        start=1,
    )
}
PROGRESS_TOTAL: Final = len(_ORDER) + 1


def is_tool_id(value: str) -> bool:
    return len(value) <= TOOL_ID_MAX and _TOOL_ID.search(value) is not None


def is_version(value: str) -> bool:
    return len(value) <= VERSION_MAX and _VERSION.search(value) is not None


# --------------------------------------------------------------------------- the tool list


@dataclass(frozen=True)
class ToolEntry:
    """One published descriptor as the gateway shows it."""

    name: str
    spec: ToolDescriptorSpec
    status: ToolDescriptorStatus

    @property
    def callable(self) -> bool:
        return self.status.active and self.status.healthy and not self.spec.retired

    @property
    def declared_class(self) -> SideEffectClass:
        """The class a call starts from: the declared one, raised by the risk class (the
        namespace's environment or a shell command may raise it further at call time)."""
        return self.spec.declared_class


def parse_descriptors(items: Iterable[Mapping[str, Any]]) -> list[ToolEntry]:
    """Descriptors as listed by the API; one that does not parse is skipped (the operator
    never activates it either)."""
    entries = []
    for item in items:
        try:
            spec = ToolDescriptorSpec.model_validate(item.get("spec") or {})
            status = ToolDescriptorStatus.model_validate(item.get("status") or {})
        except ValidationError:
            continue
        name = str((item.get("metadata") or {}).get("name") or "")
        entries.append(ToolEntry(name=name, spec=spec, status=status))
    return entries


def version_key(version: str) -> tuple[int, Version | str]:
    """Order versions as releases (`1.10.0` after `1.9.0`); an unparsable one sorts first."""
    try:
        return (1, Version(version))
    except InvalidVersion:
        return (0, version)


def callable_versions(entries: Iterable[ToolEntry]) -> dict[str, list[ToolEntry]]:
    """The callable versions of each tool id, highest first."""
    by_tool: dict[str, list[ToolEntry]] = {}
    for entry in entries:
        if entry.callable:
            by_tool.setdefault(entry.spec.tool_id, []).append(entry)
    for versions in by_tool.values():
        versions.sort(key=lambda e: version_key(e.spec.version), reverse=True)
    return dict(sorted(by_tool.items()))


def annotations_for(entry: ToolEntry) -> dict[str, bool]:
    """MCP tool annotations from the side-effect class (hints: they never replace the
    pipeline's classification, which can only raise the class at call time).

    `read` changes nothing and may be repeated; `sandbox` acts only inside its own
    throwaway sandbox; `shared-write` and above may change shared state for good. The
    open world: http and MCP tools, classes that act outside the cluster (`external`,
    `production`, `spend`), and a sandbox allowed out to the network."""
    cls = entry.declared_class
    read_only = cls == SideEffectClass.READ
    contained = cls.effects_contained
    sandbox = entry.spec.sandbox
    open_world = (
        entry.spec.kind in (ToolKind.HTTP, ToolKind.MCP)
        or cls.rank >= SideEffectClass.EXTERNAL.rank
        or bool(sandbox is not None and sandbox.egress.allow)
    )
    return {
        "readOnlyHint": read_only,
        "destructiveHint": not contained,
        "idempotentHint": read_only,
        "openWorldHint": open_world,
    }


def mcp_tool(entry: ToolEntry) -> dict[str, Any]:
    """The MCP `Tool` wire object of a descriptor version (name = toolId)."""
    spec = entry.spec
    tool: dict[str, Any] = {
        "name": spec.tool_id,
        "description": spec.description or f"{spec.tool_id} {spec.version} ({spec.kind})",
        "inputSchema": spec.input_schema or {"type": "object"},
        "annotations": annotations_for(entry),
        "_meta": {
            META_VERSION: spec.version,
            META_SIDE_EFFECT_CLASS: str(entry.declared_class),
            META_KIND: str(spec.kind),
            META_DESCRIPTOR: entry.name,
            META_DESCRIPTOR_DIGEST: descriptor_digest(spec.wire()),
        },
    }
    # MCP requires an object schema at the root of outputSchema; any other is not offered
    # (the tool's text result is still returned).
    if isinstance(spec.output_schema, dict) and spec.output_schema.get("type") == "object":
        tool["outputSchema"] = spec.output_schema
    return tool


def tool_summary(entry: ToolEntry, versions: Iterable[ToolEntry]) -> dict[str, Any]:
    """A tool in the REST list: what a client needs to choose it."""
    spec = entry.spec
    summary: dict[str, Any] = {
        "toolId": spec.tool_id,
        "version": spec.version,
        "versions": [v.spec.version for v in versions],
        "descriptor": entry.name,
        "kind": str(spec.kind),
        "description": spec.description,
        "sideEffectClass": str(spec.side_effect_class),
        "declaredClass": str(entry.declared_class),
        "riskClass": str(spec.risk_class) if spec.risk_class else None,
        "server": spec.mcp.server if spec.mcp else None,
        "active": entry.status.active,
        "healthy": entry.status.healthy,
        "annotations": annotations_for(entry),
    }
    return summary


def tool_detail(
    entry: ToolEntry,
    versions: Iterable[ToolEntry],
    *,
    max_result_bytes: int | None = None,
    default_timeout_seconds: int | None = None,
) -> dict[str, Any]:
    """One tool version with schemas, the credentials its calls carry (name, source kind and
    where each goes; not which Secret or ServiceAccount), limits and audit requirements.
    `max_result_bytes`, `default_timeout_seconds`: the operator's settings in force (they
    are reloadable: the descriptor's status may have been written under older ones)."""
    spec = entry.spec.wire()
    detail = tool_summary(entry, versions)
    for key in (
        "inputSchema",
        "outputSchema",
        "timeoutSeconds",
        "maxResultBytes",
        "retryPolicy",
        "rateLimits",
        "auditRequirements",
        "releaseId",
    ):
        detail[key] = spec.get(key)
    if detail["timeoutSeconds"] is None:
        # Unset: the operator's default applies (issue 27), as it is now.
        detail["timeoutSeconds"] = default_timeout_seconds or entry.status.effective_timeout_seconds
    if max_result_bytes is not None:
        own = detail["maxResultBytes"]
        detail["maxResultBytes"] = min(own, max_result_bytes) if own else max_result_bytes
    elif detail["maxResultBytes"] is None:
        detail["maxResultBytes"] = entry.status.effective_max_result_bytes
    detail["credentials"] = [
        {
            "name": c.name,
            "source": c.source.kind,
            **({"file": c.inject.file} if c.inject.file else {"hosts": list(c.inject.hosts or [])}),
        }
        for c in entry.spec.credentials
    ]
    detail["message"] = entry.status.message
    return detail


# --------------------------------------------------------------------------- a call


@dataclass(frozen=True)
class CallOptions:
    """What a tools/call's `_meta` may set on the invocation."""

    idempotency_key: str | None = None
    version: str | None = None
    run_id: str | None = None
    attempt_id: str | None = None
    fencing_token: int | None = None


@dataclass(frozen=True)
class ToolCall:
    """One call as asked, from tools/call or the REST dry run: where, which tool, with what."""

    namespace: str
    tool_id: str
    arguments: Mapping[str, Any]
    options: CallOptions

    def body(self, *, version: str, username: str, groups: Iterable[str]) -> dict[str, Any]:
        """The ToolInvocation this call becomes (`invocation_body`)."""
        return invocation_body(
            tool_id=self.tool_id,
            version=version,
            arguments=self.arguments,
            username=username,
            groups=groups,
            options=self.options,
        )


class BadCallOptions(ValueError):
    """A `_meta` value of tooladapter's that the invocation cannot take."""


def _text_option(meta: Mapping[str, Any], key: str, max_length: int, where: str) -> str | None:
    value = meta.get(key)
    if value is None:
        return None
    if not isinstance(value, str) or not 1 <= len(value) <= max_length:
        raise BadCallOptions(f"{where}[{key!r}] must be a string of 1-{max_length} characters")
    return value


def call_options(
    meta: Mapping[str, Any] | None, *, prefix: str = META_PREFIX, where: str = "_meta"
) -> CallOptions:
    """The call's options from `_meta`, checked as the CRD would check them; the REST dry
    run reads the same options from its body (`prefix=""`, `where="body"`)."""
    meta = meta or {}
    version_key, token_key = prefix + "version", prefix + "fencingToken"
    version = _text_option(meta, version_key, VERSION_MAX, where)
    if version is not None and not is_version(version):
        raise BadCallOptions(f"{where}[{version_key!r}] is not a version: {version!r}")
    token = meta.get(token_key)
    if token is not None and (
        isinstance(token, bool) or not isinstance(token, int) or not 0 <= token <= 2**53 - 1
    ):
        raise BadCallOptions(f"{where}[{token_key!r}] must be an integer 0..2^53-1")
    return CallOptions(
        idempotency_key=_text_option(meta, prefix + "idempotencyKey", 256, where),
        version=version,
        run_id=_text_option(meta, prefix + "runId", 128, where),
        attempt_id=_text_option(meta, prefix + "attemptId", 128, where),
        fencing_token=token,
    )


def dry_run_requested(meta: Mapping[str, Any] | None) -> bool:
    """Whether a tools/call's `_meta` asks for a dry run (`dev.tooladapter/dryRun`: a
    boolean; anything else is refused rather than read as a real call)."""
    value = (meta or {}).get(META_DRY_RUN)
    if value is None:
        return False
    if not isinstance(value, bool):
        raise BadCallOptions(f"_meta[{META_DRY_RUN!r}] must be a boolean")
    return value


def dry_run_result(preview: Mapping[str, Any], *, namespace: str, tool_id: str) -> dict[str, Any]:
    """The tools/call result of a dry run: the preview (the REST dry run's body) in `_meta`
    (`dev.tooladapter/preview`) and as text; never `isError` (any verdict is an answer),
    nothing created, so no invocation or receipt in `_meta`. Not `structuredContent`: a
    client checks that against the tool's outputSchema, which a preview is not."""
    verdict = preview.get("verdict")
    lead = f"dry run of {tool_id} in {namespace}: {verdict}"
    if preview.get("deniedStage"):
        lead += f" at stage {preview['deniedStage']}"
    if preview.get("message"):
        lead += f": {preview['message']}"
    return {
        "content": [_text(lead), _text(json.dumps(preview, sort_keys=True))],
        "isError": False,
        "_meta": {META_DRY_RUN: True, META_PREVIEW: dict(preview), META_NAMESPACE: namespace},
    }


def caller_kind(username: str) -> str:
    """ServiceAccounts are agents; anyone else calling through the gateway is a user."""
    return "agent" if username.startswith("system:serviceaccount:") else "user"


#: spec.caller.groups holds at most this many (the CRD's bound).
MAX_CALLER_GROUPS: Final = 64


def invocation_body(
    *,
    tool_id: str,
    version: str,
    arguments: Mapping[str, Any],
    username: str,
    groups: Iterable[str],
    options: CallOptions,
) -> dict[str, Any]:
    """The ToolInvocation the gateway creates as the caller: caller name and groups are
    the TokenReview's (admission checks both against the creator anyway)."""
    caller: dict[str, Any] = {"kind": caller_kind(username), "name": username}
    kept = [g for g in dict.fromkeys(groups) if 1 <= len(g) <= 253][:MAX_CALLER_GROUPS]
    if kept:
        caller["groups"] = kept
    spec: dict[str, Any] = {
        "tool": {"id": tool_id, "version": version},
        "arguments": dict(arguments),
        "caller": caller,
    }
    for key, value in (
        ("idempotencyKey", options.idempotency_key),
        ("runId", options.run_id),
        ("attemptId", options.attempt_id),
        ("fencingToken", options.fencing_token),
    ):
        if value is not None:
            spec[key] = value
    # Validated here so a bad call is answered before anything is created.
    ToolInvocationSpec.model_validate(spec)
    return {
        "apiVersion": "tooladapter.dev/v1alpha1",
        "kind": "ToolInvocation",
        "metadata": {"generateName": f"{tool_id[:40].rstrip('.-_')}-"},
        "spec": spec,
    }


def progress_of(obj: Mapping[str, Any]) -> tuple[float, str] | None:
    """(progress, message) for a state the call walks through; None once it ended."""
    state = state_of(obj) or InvocationState.RECEIVED
    if state.terminal:
        return None
    status = obj.get("status") or {}
    name = (obj.get("metadata") or {}).get("name", "")
    if state == InvocationState.AWAITING_APPROVAL:
        cls = status.get("effectiveClass") or "gated"
        message = (
            f"awaiting approval ({cls}): a reviewer approves invocation {name} with a "
            f"ToolApproval for requestHash {status.get('requestHash')} and descriptorDigest "
            f"{status.get('descriptorDigest')}"
        )
    else:
        stages = status.get("stages") or []
        last = stages[-1] if stages else {}
        detail = f": {last.get('stage')} {last.get('outcome')}" if last else ""
        message = f"{state}{detail}"
    return float(_ORDER.get(state, 1)), message


def _stage_of(status: Mapping[str, Any]) -> str | None:
    if status.get("deniedStage"):
        return str(status["deniedStage"])
    stages = status.get("stages") or []
    return str(stages[-1].get("stage")) if stages else None


def _text(value: str) -> dict[str, Any]:
    return {"type": "text", "text": value}


def result_meta(obj: Mapping[str, Any]) -> dict[str, Any]:
    meta_obj = obj.get("metadata") or {}
    status = obj.get("status") or {}
    result = status.get("result") or {}
    meta: dict[str, Any] = {
        META_INVOCATION: meta_obj.get("name"),
        META_NAMESPACE: meta_obj.get("namespace"),
        META_STATE: status.get("state"),
        META_RECEIPT_REF: status.get("receiptRef"),
        META_PROVENANCE: PROVENANCE,
    }
    for key, field in (
        (META_STAGE, _stage_of(status)),
        (META_FAILURE_CLASS, status.get("failureClass")),
        (META_DUPLICATE_OF, status.get("duplicateOf")),
        (META_DUPLICATE_OF_UID, status.get("duplicateOfUid")),
    ):
        if field:
            meta[key] = field
    if result.get("truncated"):
        meta[META_TRUNCATED] = True
    labels = (status.get("dataFlow") or {}).get("labels")
    if labels:
        meta[META_LABELS] = list(labels)
    if readout.tool_error(status):
        meta[META_TOOL_ERROR] = True
    for key, field in ((META_EXIT_CODE, "exitCode"), (META_HTTP_STATUS, "httpStatus")):
        if result.get(field) is not None:
            meta[key] = result[field]
    refused = egress_refused(status)
    if refused:
        meta[META_EGRESS_REFUSED] = [r.wire() for r in refused]
    return meta


def egress_refused(status: Mapping[str, Any]) -> list[EgressRefusal]:
    """The refusals in `status.result.egressRefused` (a row that does not parse is left
    out: it was written by this operator, so only an older or newer one's could differ)."""
    result = status.get("result") or {}
    rows = result.get("egressRefused") if isinstance(result, Mapping) else None
    out: list[EgressRefusal] = []
    for row in rows if isinstance(rows, list) else []:
        try:
            out.append(EgressRefusal.model_validate(row))
        except ValidationError:
            continue
    return out


def egress_block(refused: list[EgressRefusal], nonce: str | None = None) -> str:
    """The refusals as the agent reads them, beside the tool's output: tooladapter's words,
    then one line per refusal between `<egress-refused id=NONCE>` tags of their own (a
    random nonce per answer, any delimiter tag inside escaped, as `delimit` does), so
    neither can pass for the other. Hosts and reasons were redacted and made printable
    when they were written (`pipeline.sanitize.egress`)."""
    nonce = nonce or secrets.token_hex(16)
    lines = _DELIMITER_TAG.sub(r"&lt;\1", "\n".join(refusal_line(r) for r in refused))
    return (
        "The egress proxy refused or could not make these connections of the sandbox "
        "(tooladapter's record from the proxy, not the tool's output):\n"
        f'<egress-refused id="{nonce}" provenance="{EGRESS_PROVENANCE}">\n{lines}\n'
        f'</egress-refused id="{nonce}">'
    )


#: `<tool-result`, `</tool-result`, `<egress-refused`, `</egress-refused` (any case, spaces
#: after `<` or `/`) inside a result: a tool's text must not close (or fake) the delimiter
#: around it, nor fake tooladapter's block of egress refusals. RE2 (linear time): the text
#: is a tool's output, which an agent can influence.
_DELIMITER_TAG = compile_internal(r"(?i)<(\s*/?\s*(?:tool-result|egress-refused))")

#: The provenance of the egress block: the proxy's record, written by tooladapter.
EGRESS_PROVENANCE: Final = "egress-proxy"


def delimit(text: str, nonce: str | None = None) -> str:
    """A tool's text as the model should read it: data between `<tool-result id=NONCE>` and
    `</tool-result id=NONCE>`. The nonce is random per answer (a tool cannot guess the
    closing tag) and any delimiter tag inside the text is escaped (`&lt;/tool-result`), so
    instructions inside a result cannot step out of it. Display only: never written to
    `status.result`, a hash or a receipt."""
    nonce = nonce or secrets.token_hex(16)
    escaped = _DELIMITER_TAG.sub(r"&lt;\1", text)
    return (
        f'<tool-result id="{nonce}" provenance="{PROVENANCE}">\n{escaped}\n'
        f'</tool-result id="{nonce}">'
    )


def structured_result(
    output_schema: Mapping[str, Any] | None, text: str, structured: Any
) -> tuple[dict[str, Any] | None, str | None]:
    """(structuredContent, problem) for an Observed call.

    Without an output schema the tool's own structured content (if any) passes. With one,
    the structured content, or else the (sanitized) text parsed as a JSON object, must
    match it: MCP clients reject a result that declares a schema and breaks it."""
    if output_schema is None:
        return (structured if isinstance(structured, dict) else None), None
    candidate = structured
    if not isinstance(candidate, dict):
        try:
            candidate = json.loads(text)
        except ValueError:
            candidate = None
    if not isinstance(candidate, dict):
        return None, "the result has no structured content for the tool's outputSchema"
    problems = validate_arguments(output_schema, candidate, max_problems=3)
    if problems:
        listed = "; ".join(f"{p.path}: {p.message}" for p in problems)
        return None, f"the result does not match the tool's outputSchema: {listed}"
    return candidate, None


#: An egress block's tags alone, escaped in an undelimited tool text beside such a block.
_EGRESS_TAG = compile_internal(r"(?i)<(\s*/?\s*egress-refused)")


def _tool_text(text: str, delimiters: bool, egress: bool = False) -> dict[str, Any]:
    """The tool's text, delimited (`delimit`) or as it is; beside an egress block (`egress`)
    never with that block's tags unescaped, so it cannot fake or close one."""
    if delimiters:
        return _text(delimit(text))
    return _text(_EGRESS_TAG.sub(r"&lt;\1", text) if egress else text)


def call_result(
    obj: Mapping[str, Any],
    *,
    text: str | None,
    output_schema: Mapping[str, Any] | None = None,
    delimiters: bool = False,
) -> dict[str, Any]:
    """The tools/call result of an ended invocation (MCP `CallToolResult` wire form).

    `text` is the sanitized result (inline in status, or read from the artifact store);
    only an `Observed` call without a tool error is a success. A tool error (Observed with
    `result.isError`) is `isError` with the tool's
    own text. `delimiters` wraps the tool's text (never tooladapter's own words) with
    `delimit`. A sandbox's refused connections follow the tool's text as a block of their
    own (`egress_block`), and in `_meta` (`dev.tooladapter/egressRefused`)."""
    refused = egress_refused(obj.get("status") or {})
    wire = _call_result(
        obj,
        text=text,
        output_schema=output_schema,
        delimiters=delimiters,
        egress=bool(refused),
    )
    if refused:
        wire["content"].append(_text(egress_block(refused)))
    return wire


def _call_result(
    obj: Mapping[str, Any],
    *,
    text: str | None,
    output_schema: Mapping[str, Any] | None,
    delimiters: bool,
    egress: bool,
) -> dict[str, Any]:
    status = obj.get("status") or {}
    state = state_of(obj)
    meta = result_meta(obj)
    message = str(status.get("message") or "")
    body = text if text is not None else ""
    if readout.tool_error(status):
        detail = readout.error_detail(status)
        failure = status.get("failureClass") or FailureClass.TOOL_ERROR
        lead = (
            f"{state or 'Unknown'}: the tool ran and answered with an error"
            f"{f' ({detail})' if detail else ''} [{failure}]. Its effect may have happened: "
            f"do not retry blindly. {message}"
        )
        return {
            "content": [_text(lead.strip()), _tool_text(body, delimiters, egress)],
            "isError": True,
            "_meta": meta,
        }
    if state == InvocationState.OBSERVED:
        result = status.get("result") or {}
        structured, problem = structured_result(
            output_schema, body, result.get("structuredContent")
        )
        if problem is not None:
            return {
                "content": [
                    _text(f"Observed, but {problem}"),
                    _tool_text(body, delimiters, egress),
                ],
                "isError": True,
                "_meta": meta,
            }
        wire: dict[str, Any] = {
            "content": [_tool_text(body, delimiters, egress)],
            "isError": False,
            "_meta": meta,
        }
        if structured is not None:
            wire["structuredContent"] = structured
        return wire
    stage = _stage_of(status) or "unknown"
    failure = status.get("failureClass")
    why = f" ({failure})" if failure else ""
    if state == InvocationState.UNCERTAIN:
        lead = (
            f"Uncertain at stage {stage}{why}: the call may have had its effect and that "
            f"could not be confirmed; it is never retried automatically (an operator "
            f"confirms what happened). {message}"
        )
    else:
        lead = f"{state or 'Unknown'} at stage {stage}{why}: {message}"
    content = [_text(lead.strip())]
    if text:
        content.append(_tool_text(text, delimiters, egress))
    return {"content": content, "isError": True, "_meta": meta}


def pending_result(obj: Mapping[str, Any], waited_seconds: float) -> dict[str, Any]:
    """The answer for a call still waiting (for an approval, or still running) when the
    gateway stops waiting: not an error; it names the invocation to come back to."""
    meta = result_meta(obj)
    status = obj.get("status") or {}
    name, namespace = meta[META_INVOCATION], meta[META_NAMESPACE]
    state = status.get("state") or InvocationState.RECEIVED
    what = "awaiting approval" if state == InvocationState.AWAITING_APPROVAL else f"still {state}"
    text = (
        f"{what} after {int(waited_seconds)}s: invocation {namespace}/{name} goes on; read it "
        f"later with GET /namespaces/{namespace}/tool-invocations/{name}"
    )
    if state == InvocationState.AWAITING_APPROVAL:
        # What a reviewer is asked to approve, as every review view shows it (pipeline/shown).
        view = shown((obj.get("spec") or {}).get("arguments") or {})
        text += f"\narguments a reviewer approves, exactly as they will run: {view.canonical}"
        text += "".join(f"\nwarning: {w}" for w in view.warnings)
    return {"content": [_text(text)], "isError": False, "_meta": meta}


# --------------------------------------------------------------------------- REST views


def invocation_view(obj: Mapping[str, Any]) -> dict[str, Any]:
    """An invocation with its pipeline stages, sandbox lease and receipt (no managedFields,
    annotations or other bookkeeping)."""
    meta = obj.get("metadata") or {}
    status = obj.get("status") or {}
    view: dict[str, Any] = {
        "name": meta.get("name"),
        "namespace": meta.get("namespace"),
        "uid": meta.get("uid"),
        "createdAt": meta.get("creationTimestamp"),
        "spec": obj.get("spec") or {},
        "status": status,
        # The result in status is a tool's answer: data, never instructions (as MCP's _meta).
        "provenance": PROVENANCE,
        "toolError": readout.tool_error(status),
    }
    if status.get("state") == InvocationState.AWAITING_APPROVAL:
        # The review view (as the page and the CLI show it): all arguments with markers
        # for what does not print, warnings, credential-like flags, the call's own reasons.
        review = shown((obj.get("spec") or {}).get("arguments") or {}).wire()
        view["review"] = {**review, "reasons": waiting_reasons(status)}
    return view


def receipt_row(obj: Mapping[str, Any], receipt: Mapping[str, Any] | None) -> dict[str, Any]:
    """One call of a run: tool, version, classes, decision, approval, outcome, hashes, and
    the stored receipt itself when it could be read."""
    meta = obj.get("metadata") or {}
    spec = obj.get("spec") or {}
    status = obj.get("status") or {}
    tool = spec.get("tool") or {}
    approval = status.get("approval") or {}
    return {
        "invocation": meta.get("name"),
        "caller": (spec.get("caller") or {}).get("name"),
        "toolId": tool.get("id"),
        "toolVersion": tool.get("version"),
        "state": status.get("state"),
        "outcome": readout.outcome_label(status),
        "toolError": readout.tool_error(status),
        "duplicateOf": status.get("duplicateOf"),
        "declaredClass": status.get("declaredClass"),
        "effectiveClass": status.get("effectiveClass"),
        "policyDecisionId": status.get("policyDecisionId"),
        "approval": approval.get("name"),
        "requestHash": status.get("requestHash"),
        "resultHash": status.get("resultHash"),
        "receiptRef": status.get("receiptRef"),
        "startedAt": status.get("startedAt"),
        "endedAt": status.get("endedAt"),
        "receipt": dict(receipt) if receipt is not None else None,
    }
