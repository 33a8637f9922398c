"""The effect hash: what a call does to the world, independent of how the agent spelled it.

No new call may run while an identical one is Uncertain and unconfirmed (the reference: "an
operator must confirm before any retry"). "Identical" cannot be the request hash alone: an
approval binds to exactly what the agent wrote, but a blind retry only needs to do the
same thing, and the attack pass found three ways to do the same thing under another hash:

- an argument the tool never receives (a `memo` beside an http tool's placeholders);
- a shell command spelled with other whitespace or quoting (`sleep  60`, `'sleep' 60`);
- another published version of the same tool.

So the effect hash covers what reaches the tool, by kind, and never the version: the
rendered request of an `http` tool (method, URL, headers, body), the argv of a `shell`
tool, and the whole arguments for the kinds that receive them whole (`container`: the
arguments file; `mcp`: tools/call; `native`). When what reaches the tool cannot be worked
out (a template that does not render, a command that does not parse), the arguments stand
in: such a call is refused before it runs anyway.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tooladapter.enums import ToolKind
from tooladapter.model import ToolDescriptorSpec
from tooladapter.pipeline.hashing import digest
from tooladapter.pipeline.shell.check import check_command
from tooladapter.pipeline.validation.http_templates import render_http_request


def effect_hash(
    *, namespace: str, descriptor: ToolDescriptorSpec, arguments: Mapping[str, Any]
) -> str:
    """sha256 of the RFC 8785 JSON of {namespace, toolId, kind, what reaches the tool}."""
    return digest(
        {
            "namespace": namespace,
            "toolId": descriptor.tool_id,
            "kind": str(descriptor.kind),
            "effect": reaches_tool(descriptor, arguments),
        }
    )


def command_argv(descriptor: ToolDescriptorSpec, arguments: Mapping[str, Any]) -> list[str]:
    """The argv a shell or container tool runs for `arguments` (empty for other kinds): a
    container's fixed command, or a shell tool's command parsed (`/bin/sh -c` with
    `useShell`)."""
    if descriptor.kind == ToolKind.CONTAINER:
        return list(descriptor.sandbox.command) if descriptor.sandbox else []
    if descriptor.kind != ToolKind.SHELL:
        return []
    command = str(arguments.get("command", ""))
    if descriptor.shell and descriptor.shell.use_shell:
        return ["/bin/sh", "-c", command]
    return list(check_command(command, allow=[], block=[]).argv)


def reaches_tool(descriptor: ToolDescriptorSpec, arguments: Mapping[str, Any]) -> Any:
    """What the tool receives for `arguments`, as plain JSON."""
    try:
        if descriptor.kind == ToolKind.HTTP and descriptor.http is not None:
            method, url, headers, body = render_http_request(descriptor.http, arguments)
            lowered = {k.lower(): v for k, v in headers.items()}
            return {"method": method.upper(), "url": url, "headers": lowered, "body": body}
        if descriptor.kind == ToolKind.SHELL:
            argv = command_argv(descriptor, arguments)
            if argv:
                return {"argv": argv}
    except ValueError:
        pass
    return {"arguments": dict(arguments)}
