"""An effectful mcp descriptor binds only to a server tool whose discovered inputSchema closes
every object: the server's schema is what the tool takes."""

from __future__ import annotations

from typing import Any

from tooladapter.enums import SideEffectClass
from tooladapter.handlers.mcp import descriptor_binding
from tooladapter.mcp.core.rules import (
    MAX_OPEN_OBJECTS,
    check_closed_schema,
    tool_digest,
    tool_open_objects,
)
from tooladapter.model import McpToolInfo

CLOSED = {
    "type": "object",
    "properties": {"to": {"type": "string"}},
    "additionalProperties": False,
}


def wire_tool(schema: Any, **extra: Any) -> dict[str, Any]:
    return {"name": "send", "inputSchema": schema, **extra}


def info(wire: dict[str, Any]) -> McpToolInfo:
    return McpToolInfo(
        name=wire["name"],
        digest=tool_digest(wire),
        annotations=wire.get("annotations"),
        open_objects=tool_open_objects(wire),
    )


def descriptor(cls: str, wire: dict[str, Any]) -> dict[str, Any]:
    return {
        "toolId": "send",
        "version": "1.0.0",
        "kind": "mcp",
        "sideEffectClass": cls,
        "inputSchema": CLOSED,
        "mcp": {"server": "mail", "tool": "send", "pinnedDigest": tool_digest(wire)},
    }


def test_the_open_objects_of_a_discovered_tool_are_named_and_bounded() -> None:
    assert tool_open_objects(wire_tool(CLOSED)) == []
    nested = {**CLOSED, "properties": {"cc": {"type": "array", "items": {"type": "object"}}}}
    assert tool_open_objects(wire_tool(nested)) == ["$.properties.cc.items"]
    assert tool_open_objects({"name": "send"}) == ["$"]
    many = {**CLOSED, "properties": {f"p{i}": {"type": "object"} for i in range(30)}}
    assert len(tool_open_objects(wire_tool(many))) == MAX_OPEN_OBJECTS


def test_an_effectful_binding_to_an_open_server_schema_is_refused_naming_tool_and_path() -> None:
    check = check_closed_schema(
        tool="send", declared=SideEffectClass.EXTERNAL, annotations=None, open_paths=["$"]
    )
    assert not check.bound and check.code == "open-schema"
    assert check.reason.startswith("tool 'send' of the server: inputSchema at $: ")
    assert "additionalProperties: false" in check.reason


def test_a_tool_not_checked_yet_does_not_bind_an_effectful_descriptor() -> None:
    check = check_closed_schema(
        tool="send", declared=SideEffectClass.SHARED_WRITE, annotations=None, open_paths=None
    )
    assert not check.bound and "not checked yet" in check.reason


def test_read_and_sandbox_descriptors_bind_to_open_schemas() -> None:
    for cls in (SideEffectClass.READ, SideEffectClass.SANDBOX):
        check = check_closed_schema(tool="send", declared=cls, annotations={}, open_paths=["$"])
        assert check.bound


def test_annotations_that_raise_a_read_descriptor_to_a_write_need_closed_objects() -> None:
    check = check_closed_schema(
        tool="send",
        declared=SideEffectClass.READ,
        annotations={"readOnlyHint": False},
        open_paths=["$.properties.x"],
    )
    assert not check.bound and "class shared-write" in check.reason


def test_the_descriptor_binding_joins_the_pinned_digest_and_the_closed_schema() -> None:
    open_tool = wire_tool({"type": "object"})
    check = descriptor_binding(descriptor("external", open_tool), [info(open_tool)])
    assert not check.bound and check.code == "open-schema"
    closed_tool = wire_tool(CLOSED)
    check = descriptor_binding(descriptor("external", closed_tool), [info(closed_tool)])
    assert check.bound and check.code == "ok"
    check = descriptor_binding(descriptor("read", open_tool), [info(open_tool)])
    assert check.bound
    # A changed digest is still reported as such, before the schema is looked at.
    check = descriptor_binding(descriptor("external", closed_tool), [info(open_tool)])
    assert check.code == "schema-changed"


def test_a_servers_schema_that_refers_to_the_metaschema_is_open() -> None:
    """Once broke: an agent-controlled server could list a closed-looking schema whose
    property is `{"$ref": <the bundled 2020-12 metaschema>}`, which admits any keys."""
    schema = {
        "type": "object",
        "additionalProperties": False,
        "properties": {"to": {"$ref": "https://json-schema.org/draft/2020-12/schema"}},
    }
    assert tool_open_objects(wire_tool(schema)) == ['$.properties.to["$ref"]']
