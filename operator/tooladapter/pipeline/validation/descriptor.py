"""A tool descriptor, checked for internal consistency once, when it is applied.

A descriptor with problems stays inactive with them as its reason, so calls never discover
a broken descriptor halfway through the pipeline: its schemas (`schemas`; closed objects
for effectful tools that receive their arguments whole, `closed_objects`), the block of its
kind and no other, its HTTP templates (`http_templates`), egress entries and secret names.
"""

from __future__ import annotations

import shlex
from collections.abc import Sequence

from tooladapter.egress.core.hosts import parse_egress_entry
from tooladapter.enums import ToolKind
from tooladapter.model import ToolDescriptorSpec
from tooladapter.pipeline.validation.closed_objects import closed_schema_problems
from tooladapter.pipeline.validation.credentials import check_credentials
from tooladapter.pipeline.validation.http_templates import check_http
from tooladapter.pipeline.validation.schemas import check_schema, misspelt_keywords

#: Which optional spec block belongs to which tool kind.
_KIND_BLOCKS: dict[str, frozenset[ToolKind]] = {
    "shell": frozenset({ToolKind.SHELL}),
    "http": frozenset({ToolKind.HTTP}),
    "mcp": frozenset({ToolKind.MCP}),
    "native": frozenset({ToolKind.NATIVE}),
    "sandbox": frozenset({ToolKind.SHELL, ToolKind.CONTAINER, ToolKind.HTTP}),
}


def check_descriptor(spec: ToolDescriptorSpec) -> list[str]:
    """Every inconsistency that makes a descriptor unusable; empty when it is fine.

    Checked: both schemas compile; the input schema describes an object (every object of it
    closed with `additionalProperties: false` for an effectful container or mcp tool,
    `closed_objects`); the block for
    the tool's kind is present and no block of another kind is; kind-specific rules
    (container needs `sandbox.command`; shell takes `arguments.command` and carries no
    secrets or Kubernetes identity; http templates only use declared arguments and reach
    allowed hosts); egress entries; secret dependency names and keys.
    """
    problems: list[str] = []
    problems.extend(check_schema(spec.input_schema, what="inputSchema"))
    problems.extend(misspelt_keywords(spec.input_schema, what="inputSchema"))
    if spec.output_schema is not None:
        problems.extend(check_schema(spec.output_schema, what="outputSchema"))
        problems.extend(misspelt_keywords(spec.output_schema, what="outputSchema"))
    declared_type = spec.input_schema.get("type")
    if declared_type is not None and declared_type != "object":
        problems.append(
            f"inputSchema: type is {declared_type!r}, but arguments are always a JSON "
            'object: use "type": "object"'
        )
    problems.extend(closed_schema_problems(spec))

    for block, kinds in _KIND_BLOCKS.items():
        if getattr(spec, block) is not None and spec.kind not in kinds:
            problems.append(
                f"{block}: a {block} block does not apply to a {spec.kind.value} tool "
                f"(it belongs to {', '.join(sorted(k.value for k in kinds))} tools); "
                "remove it or change kind"
            )

    properties = spec.input_schema.get("properties")
    declared_names = set(properties) if isinstance(properties, dict) else None

    if spec.kind is ToolKind.CONTAINER:
        if spec.sandbox is None or not spec.sandbox.command:
            problems.append(
                "sandbox.command: a container tool needs the argv to run in sandbox.command "
                "(arguments arrive as JSON in /tooladapter/arguments.json)"
            )
    elif spec.kind is ToolKind.SHELL:
        if declared_names is not None:
            if "command" not in declared_names:
                problems.append(
                    "inputSchema: a shell tool takes its command line in arguments.command, "
                    "but inputSchema.properties has no 'command'"
                )
            else:
                command_type = (properties or {}).get("command", {}).get("type")
                if command_type not in (None, "string"):
                    problems.append(
                        "inputSchema.properties.command: must be a string (the command "
                        f"line), not {command_type!r}"
                    )
        if spec.shell is not None:
            problems.extend(check_shell_patterns(spec.shell.allow or [], where="shell.allow"))
            problems.extend(check_shell_patterns(spec.shell.block, where="shell.block"))
    elif spec.kind is ToolKind.HTTP:
        if spec.http is None:
            problems.append("http: an http tool needs an http block (method, url, ...)")
        else:
            problems.extend(check_http(spec.http, declared_names))
    elif spec.kind is ToolKind.MCP:
        if spec.mcp is None:
            problems.append("mcp: an mcp tool needs an mcp block (server, tool, pinnedDigest)")
    elif spec.kind is ToolKind.NATIVE and spec.native is None:
        problems.append("native: a native tool needs a native block naming the built-in tool")

    if spec.sandbox is not None:
        for index, entry in enumerate(spec.sandbox.egress.allow or []):
            try:
                parse_egress_entry(entry)
            except ValueError as err:
                problems.append(f"sandbox.egress.allow[{index}]: {err}")

    problems.extend(check_credentials(spec))
    return problems


def check_shell_patterns(patterns: Sequence[str], *, where: str) -> list[str]:
    """Problems with shell allow/block patterns: empty or unparseable entries."""
    problems: list[str] = []
    for index, pattern in enumerate(patterns):
        try:
            tokens = shlex.split(pattern)
        except ValueError as err:
            problems.append(f"{where}[{index}]: pattern {pattern!r} does not parse ({err})")
            continue
        if not tokens:
            problems.append(f"{where}[{index}]: pattern is empty")
    return problems
