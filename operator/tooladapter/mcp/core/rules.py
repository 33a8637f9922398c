"""Pure rules for MCP servers: digests, bindings, shadowing, output checks, lifecycle.

No I/O here: `tooladapter.mcp.client` talks to servers, the handlers write status; these
functions decide. Tools arrive as their wire objects (the dicts of `tools/list`, camelCase
keys, `_meta` included), exactly as `mcp_client.discover` returns them.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from tooladapter.enums import McpServerPhase, SideEffectClass, ToolKind
from tooladapter.pipeline.classification import mcp_hint_class
from tooladapter.pipeline.hashing import CanonicalizationError, digest
from tooladapter.pipeline.validation.arguments import validate_arguments
from tooladapter.pipeline.validation.closed_objects import (
    needs_closed_schema,
    open_objects,
    open_schema_message,
)

#: The fields of a tool's wire object the digest covers at least (every field it carries
#: is hashed: a server adding `icons` or `execution` changes the digest too).
TOOL_DIGEST_FIELDS = (
    "name",
    "title",
    "description",
    "inputSchema",
    "outputSchema",
    "annotations",
    "_meta",
)

#: At most this many violations are reported for one output.
MAX_VIOLATIONS = 20

_I_JSON_MAX = 2**53


# --------------------------------------------------------------------------- digests


def _ijson(value: Any) -> Any:
    """`value` with integers beyond +-2**53 as floats: what RFC 8785 (I-JSON) makes of them.

    A JSON number is an IEEE double to JCS, so a schema's `"maximum": 18446744073709551615`
    canonicalises to `1.8446744073709552e+19`; without this, such a schema could not be
    pinned at all.
    """
    if isinstance(value, bool):
        return value
    if isinstance(value, int) and abs(value) > _I_JSON_MAX:
        return float(value)
    if isinstance(value, Mapping):
        return {k: _ijson(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_ijson(v) for v in value]
    return value


def _digest(value: Any) -> str:
    try:
        return digest(value)
    except CanonicalizationError:
        return digest(_ijson(value))


def tool_digest(wire_tool: Mapping[str, Any]) -> str:
    """`sha256:<hex>` of the RFC 8785 canonical JSON of the tool's whole wire object.

    Name, title, description, inputSchema, outputSchema, annotations and `_meta` (and any
    other field the server sends) all count: hashing the description alone would miss a
    changed input schema. Absent and `null` fields are the same tool (`null`s dropped at
    the top level), and key order or number spelling never matter.
    """
    return _digest({k: v for k, v in wire_tool.items() if v is not None})


def server_digest(
    *, instructions: str | None, server_name: str | None, server_version: str | None
) -> str:
    """`sha256:<hex>` over what a server says about itself: instructions and serverInfo."""
    return _digest(
        {
            "instructions": instructions,
            "serverInfo": {"name": server_name, "version": server_version},
        }
    )


def tool_digests(tools: Iterable[Mapping[str, Any]]) -> dict[str, str]:
    """name -> digest for a discovered tool list."""
    return {str(t.get("name")): tool_digest(t) for t in tools}


# --------------------------------------------------------------------------- bindings


BindingCode = Literal["ok", "missing", "schema-changed", "open-schema"]

#: At most this many open objects of a discovered tool are kept on the server's status.
MAX_OPEN_OBJECTS = 20


def tool_open_objects(wire_tool: Mapping[str, Any]) -> list[str]:
    """The open objects of a discovered tool's inputSchema (`closed_objects.open_objects`),
    at most `MAX_OPEN_OBJECTS`; a tool without an object schema is open at its root."""
    schema = wire_tool.get("inputSchema")
    found = open_objects(schema if isinstance(schema, Mapping) else {})
    return found[:MAX_OPEN_OBJECTS]


@dataclass(frozen=True)
class BindingCheck:
    bound: bool
    reason: str
    code: BindingCode


def check_binding(*, pinned_digest: str, discovered: Mapping[str, str], tool: str) -> BindingCheck:
    """Whether a descriptor's pinned digest still matches what the server lists.

    `discovered` is name -> digest from the latest discovery (never a cache). A changed
    digest unbinds the tool until someone re-approves it by updating `spec.mcp.pinnedDigest`.
    """
    current = discovered.get(tool)
    if current is None:
        return BindingCheck(
            False, f"tool {tool!r} is not listed by the server (pinned {pinned_digest})", "missing"
        )
    if current != pinned_digest:
        return BindingCheck(
            False,
            f"tool {tool!r} changed on the server: pinned digest {pinned_digest}, discovered "
            f"{current}; calls are denied until spec.mcp.pinnedDigest is updated to the new "
            "digest (re-approval)",
            "schema-changed",
        )
    return BindingCheck(True, f"tool {tool!r} matches pinned digest {pinned_digest}", "ok")


def check_closed_schema(
    *,
    tool: str,
    declared: SideEffectClass,
    annotations: Mapping[str, Any] | None,
    open_paths: Sequence[str] | None,
) -> BindingCheck:
    """Whether a descriptor of class `declared` may bind to a server tool whose inputSchema
    has the open objects `open_paths` (`None`: not checked yet, so not bound).

    The server's schema is what the tool takes: a class that can have effects needs every
    object of it closed (`closed_objects`), or a key the tool ignores would make the same
    effect look new to the unconfirmed-effect block. The class is the descriptor's, raised
    by the tool's annotations as calls are (`mcp_hint_class`)."""
    cls = SideEffectClass.highest(declared, mcp_hint_class(annotations) or declared)
    if not needs_closed_schema(ToolKind.MCP, cls):
        return BindingCheck(
            True, f"tool {tool!r}: class {cls.value} has no effect to confirm", "ok"
        )
    if open_paths is None:
        return BindingCheck(
            False,
            f"tool {tool!r}: its inputSchema is not checked yet (the next discovery does)",
            "open-schema",
        )
    if open_paths:
        message = open_schema_message(
            list(open_paths), what=f"tool {tool!r} of the server: inputSchema", cls=cls
        )
        return BindingCheck(False, message, "open-schema")
    return BindingCheck(True, f"tool {tool!r}: every object of its inputSchema is closed", "ok")


# --------------------------------------------------------------------------- shadowing

_WORD = r"[A-Za-z0-9_\-./]"


def _mentions(text: str, name: str) -> bool:
    if len(name) < 3:
        return False
    pattern = rf"(?<!{_WORD}){re.escape(name)}(?!{_WORD})"
    return re.search(pattern, text, flags=re.IGNORECASE) is not None


def _describing_text(tool: Mapping[str, Any]) -> str:
    """A tool's prose a model reads: title, description, and every schema description."""
    parts: list[str] = []
    for key in ("title", "description"):
        value = tool.get(key)
        if isinstance(value, str):
            parts.append(value)

    def walk(node: Any) -> None:
        if isinstance(node, Mapping):
            for key, value in node.items():
                if key in ("description", "title") and isinstance(value, str):
                    parts.append(value)
                else:
                    walk(value)
        elif isinstance(node, list):
            for item in node:
                walk(item)

    walk(tool.get("inputSchema"))
    walk(tool.get("outputSchema"))
    return "\n".join(parts)


def detect_shadowing(
    server: str,
    tools: Iterable[Mapping[str, Any]],
    other_servers_tools: Mapping[str, Iterable[str]],
) -> list[str]:
    """Cross-server shadowing: this server's tools talking about other servers' tools.

    A description (or title, or a schema's property description) that names a tool of
    another server, or the other server itself, is how a malicious server steers a model
    into calling it instead of, or before, the other one. Names shorter than 3 characters
    and names this server's own tools also carry are ignored (they are not evidence).
    Returns one human message per finding, sorted.
    """
    tools = list(tools)
    own_names = {str(t.get("name", "")).lower() for t in tools}
    findings: set[str] = set()
    for tool in tools:
        name = str(tool.get("name", ""))
        text = _describing_text(tool)
        if not text:
            continue
        for other, other_tools in other_servers_tools.items():
            if other == server:
                continue
            for other_tool in other_tools:
                if other_tool.lower() in own_names:
                    continue
                if _mentions(text, other_tool):
                    findings.add(
                        f"tool {name!r} of server {server!r} mentions tool {other_tool!r} of "
                        f"server {other!r} in its description (possible cross-server shadowing)"
                    )
            if other.lower() not in own_names and _mentions(text, other):
                findings.add(
                    f"tool {name!r} of server {server!r} mentions server {other!r} in its "
                    "description (possible cross-server shadowing)"
                )
    return sorted(findings)


# --------------------------------------------------------------------------- output

#: Problems about the schema itself (their messages carry no result data).
_SCHEMA_RULES = frozenset({"schema", "$ref", "max-problems"})


def _at_pointer(schema: Any, pointer: str) -> Any:
    node = schema
    for raw in pointer.removeprefix("#").split("/")[1:]:
        part = raw.replace("~1", "/").replace("~0", "~")
        if isinstance(node, Mapping):
            node = node.get(part)
        elif isinstance(node, list) and part.isdigit() and int(part) < len(node):
            node = node[int(part)]
        else:
            return None
    return node


def _brief(value: Any) -> str:
    text = json.dumps(value, sort_keys=True, default=str)
    return text if len(text) <= 80 else text[:77] + "..."


def validate_structured_output(
    output_schema: Mapping[str, Any] | None, structured: Any
) -> list[str]:
    """Violations of `structuredContent` against the tool's outputSchema, as `<path>: <why>`.

    Paths are JSON paths (`$.count`, `$.items[2]`), from `pipeline.validation` (JSON Schema
    2020-12, local refs only: a remote `$ref` is never fetched and is a violation). The
    reasons name the failing schema rule, its value and its place in the schema, never the
    offending value itself: results may carry secrets that must not reach status. No schema
    -> no violations; a schema and no structured content -> one violation at `$`.
    """
    if output_schema is None:
        return []
    if structured is None:
        return ["$: the tool declares an outputSchema but returned no structuredContent"]
    out: list[str] = []
    for problem in validate_arguments(output_schema, structured, max_problems=MAX_VIOLATIONS):
        if problem.rule in _SCHEMA_RULES:
            out.append(f"{problem.path}: {problem.message}")
            continue
        expected = _at_pointer(output_schema, problem.schema_path)
        out.append(
            f"{problem.path}: fails '{problem.rule}' {_brief(expected)} "
            f"(outputSchema {problem.schema_path})"
        )
    return out


# --------------------------------------------------------------------------- lifecycle


def next_phase(
    current: McpServerPhase,
    *,
    activated: bool,
    retired: bool,
    probe_ok: bool,
    consecutive_failures: int,
    failure_threshold: int,
    discovered: bool,
) -> McpServerPhase:
    """The phase an McpServer moves to, given what the latest reconcile/probe saw.

    Registered -> Verified (discovery ok) -> Active (activated by an admin) -> Degraded
    (consecutive probe failures >= threshold) -> Active again when a probe passes (Verified
    if no longer activated). Retired is terminal. A Registered server whose discovery
    succeeds while already activated goes straight to Active; deactivating an Active server
    puts it back to Verified.

    `probe_ok`: the latest probe (or discovery) passed. `consecutive_failures`: failed
    probes in a row, including the latest (0 after a pass). `discovered`: the latest
    discovery succeeded (only consulted to leave Registered).
    """
    if retired or current is McpServerPhase.RETIRED:
        return McpServerPhase.RETIRED
    failing = consecutive_failures >= failure_threshold
    settled = McpServerPhase.ACTIVE if activated else McpServerPhase.VERIFIED
    if current is McpServerPhase.REGISTERED:
        if not discovered:
            return McpServerPhase.REGISTERED
        return McpServerPhase.VERIFIED if failing else settled
    if current is McpServerPhase.DEGRADED:
        # A passing probe ends the streak of consecutive failures, whatever the count says.
        return settled if probe_ok else McpServerPhase.DEGRADED
    # Verified or Active
    if failing:
        return McpServerPhase.DEGRADED
    return settled


#: Reasons of an McpServer held back by something a person must change (each posts a
#: Warning event `McpServer<reason>` when it first appears or its message changes).
#: The McpServer condition that says whether the operator may and did reach the server;
#: False names why (AddressRefused, ProbeFailed) in its reason and message.
REACHABLE = "Reachable"
ADDRESS_REFUSED = "AddressRefused"
PROBE_FAILED = "ProbeFailed"
AWAITING_ACTIVATION = "AwaitingActivation"
HELD_BACK = frozenset({ADDRESS_REFUSED, PROBE_FAILED})


@dataclass(frozen=True)
class Standing:
    """Why an McpServer is in its phase: `status.message`, and its `Reachable` condition."""

    reason: str
    message: str
    reachable: bool


def standing(
    phase: McpServerPhase,
    *,
    activated: bool,
    probe_ok: bool,
    probe_message: str,
    address_refused: bool,
    tools: int,
) -> Standing:
    """The reason and message of a server's phase (pure): a refused address names
    `spec.allowedCidrs`, a verified server waiting for an admin names `spec.activated`."""
    if phase is McpServerPhase.RETIRED:
        return Standing("Retired", "retired (spec.retired): no probes, no calls", probe_ok)
    if address_refused:
        return Standing(
            ADDRESS_REFUSED,
            f"{probe_message}. The operator connects only to public addresses and to the "
            "networks in spec.allowedCidrs: a platform admin who trusts this server lists its "
            "network there (e.g. 10.1.2.3/32)",
            False,
        )
    if not probe_ok:
        where = "never reached" if phase is McpServerPhase.REGISTERED else f"{phase}"
        return Standing(PROBE_FAILED, f"{where}: {probe_message}", False)
    if phase is McpServerPhase.VERIFIED and not activated:
        return Standing(
            AWAITING_ACTIVATION,
            f"verified ({probe_message}); its tools are callable once a platform admin sets "
            "spec.activated: true",
            True,
        )
    return Standing(str(phase), f"{phase}: {probe_message}; {tools} tools discovered", True)


def server_reason_for_descriptor(server_status: Mapping[str, Any]) -> str:
    """What a descriptor (and a call refused because of it) repeats of its server's
    standing: the server's `status.message`, except after a failed probe.

    A failed probe's message quotes the server's own error text for the platform admins who
    read the McpServer; a descriptor's message is read by agents (and copied into a call's
    refusal) as tooladapter's words, so a server could speak there as us. After a failed
    probe the descriptor names only the reason and where the text is."""
    reachable = next(
        (
            c
            for c in server_status.get("conditions") or []
            if isinstance(c, Mapping) and c.get("type") == REACHABLE
        ),
        {},
    )
    if reachable.get("reason") == PROBE_FAILED:
        return (
            f"{PROBE_FAILED}: its probe failed (the server's own words are in the McpServer's "
            "status.lastProbe)"
        )
    return str(server_status.get("message") or "")


# --------------------------------------------------------------------------- credentials


@dataclass(frozen=True)
class ProbePlan:
    """How one reconcile talks to a server: `verify` probes its url without credentials;
    `with_credentials` then discovers with them (only if the url is verified by then)."""

    verify: bool
    with_credentials: bool


def probe_plan(
    *, url: str, verified_url: str | None, activated: bool, has_credentials: bool
) -> ProbePlan:
    """A server's credential goes only to the url it was configured for, once that url was
    reached without it and a platform admin activated the server (`spec.activated`, guarded
    by admission). Until then every probe is sent without credentials; an activated server
    whose url changed (or was never verified) is verified again first."""
    send = activated and has_credentials
    return ProbePlan(verify=not send or verified_url != url, with_credentials=send)


def reachable_without_credentials(http_status: int | None, *, has_credentials: bool) -> bool:
    """A server that refuses a probe without credentials with 401 is reachable and merely
    wants the credentials it is configured with (none configured: it cannot be used)."""
    return has_credentials and http_status == 401
