"""Effectful container and mcp tools close every object of their input schema, or stay
inactive: an argument the tool ignores must not make the same effect look new."""

from __future__ import annotations

from typing import Any

import pytest

from tooladapter.enums import RiskClass, SideEffectClass, ToolKind
from tooladapter.handlers.descriptors import desired_status
from tooladapter.model import McpBinding, SandboxSpec, ToolDescriptorSpec
from tooladapter.pipeline.validation.closed_objects import open_objects
from tooladapter.pipeline.validation.descriptor import check_descriptor

CLOSED: dict[str, Any] = {
    "type": "object",
    "properties": {"target": {"type": "string"}},
    "additionalProperties": False,
}


def container(schema: dict[str, Any], cls: SideEffectClass = SideEffectClass.EXTERNAL, **kw: Any):
    return ToolDescriptorSpec(
        tool_id="deploy",
        version="1.0.0",
        kind=ToolKind.CONTAINER,
        side_effect_class=cls,
        sandbox=SandboxSpec(command=["/bin/deploy"]),
        input_schema=schema,
        **kw,
    )


def mcp(schema: dict[str, Any], cls: SideEffectClass = SideEffectClass.EXTERNAL):
    return ToolDescriptorSpec(
        tool_id="send",
        version="1.0.0",
        kind=ToolKind.MCP,
        side_effect_class=cls,
        mcp=McpBinding(server="mail", tool="send", pinned_digest="sha256:" + "0" * 64),
        input_schema=schema,
    )


def open_problems(spec: ToolDescriptorSpec) -> list[str]:
    return [p for p in check_descriptor(spec) if "additionalProperties: false" in p]


# --------------------------------------------------------------------------- the walk


def test_a_closed_flat_schema_has_no_open_objects() -> None:
    assert open_objects(CLOSED) == []


def test_the_root_is_an_object_even_without_a_type() -> None:
    assert open_objects({}) == ["$"]
    assert open_objects({"properties": {"a": {"type": "string"}}}) == ["$"]
    assert open_objects({"additionalProperties": False}) == []


def test_nested_objects_are_named_by_their_json_path_in_the_schema() -> None:
    schema = {
        "type": "object",
        "additionalProperties": False,
        "properties": {
            "mail": {
                "type": "object",
                "additionalProperties": False,
                "properties": {"headers": {"type": "object"}},
            },
            "to": {"type": "string"},
        },
    }
    assert open_objects(schema) == ["$.properties.mail.properties.headers"]


def test_arrays_of_objects_are_walked_through_items_and_prefix_items() -> None:
    schema = {
        "type": "object",
        "additionalProperties": False,
        "properties": {
            "rows": {"type": "array", "items": {"type": "object", "properties": {}}},
            "pair": {
                "type": "array",
                "prefixItems": [{"type": "string"}, {"required": ["x"]}],
            },
        },
    }
    assert open_objects(schema) == [
        "$.properties.rows.items",
        "$.properties.pair.prefixItems[1]",
    ]


def test_defs_and_every_branch_of_a_combinator_are_walked() -> None:
    schema = {
        "type": "object",
        "additionalProperties": False,
        "properties": {"spec": {"$ref": "#/$defs/spec"}},
        "$defs": {"spec": {"type": ["object", "null"], "properties": {"a": {}}}},
        "anyOf": [{"type": "object", "additionalProperties": False}, {"type": "object"}],
        "if": {"properties": {"a": {"const": 1}}},
        "then": {"not": {"type": "object"}},
    }
    assert open_objects(schema) == [
        "$.if",
        "$.then.not",
        "$.anyOf[1]",
        '$["$defs"].spec',
    ]


def test_an_additional_properties_schema_leaves_its_object_open_and_is_walked_too() -> None:
    schema = {
        "type": "object",
        "additionalProperties": {"type": "object", "properties": {"v": {"type": "string"}}},
    }
    assert open_objects(schema) == ["$", "$.additionalProperties"]


def test_values_that_are_not_objects_need_nothing() -> None:
    schema = {
        "type": "object",
        "additionalProperties": False,
        "properties": {
            "n": {"type": "integer"},
            "tags": {"type": "array", "items": {"type": "string"}},
            "any": {},
            "free": True,
            "choice": {"enum": [{"a": 1}]},
        },
    }
    assert open_objects(schema) == []


def test_a_ref_to_an_object_hidden_under_an_unknown_keyword_is_followed() -> None:
    """Once broke: the walk only looked under schema keywords, and a `$ref` may point
    anywhere in the document: `"x-hidden": {"type": "object"}` referenced from a property
    admitted `{"a": {"memo": 1}}` while the schema looked closed (and OpenAPI-derived schemas
    keep their objects under `components`, which the walk did not know)."""
    schema = {
        "type": "object",
        "additionalProperties": False,
        "properties": {"a": {"$ref": "#/x-hidden"}, "b": {"$ref": "#/hidden"}},
        "x-hidden": {"type": "object"},
        "hidden": {"type": "object", "additionalProperties": False},
    }
    assert open_objects(schema) == ['$.properties.a["$ref"]']
    openapi = {
        "type": "object",
        "additionalProperties": False,
        "properties": {"body": {"$ref": "#/components/schemas/Body"}},
        "components": {"schemas": {"Body": {"properties": {"to": {"type": "string"}}}}},
    }
    assert open_objects(openapi) == ['$.properties.body["$ref"]']


def test_a_ref_that_leaves_the_schema_is_open() -> None:
    """Once broke: a `$ref` to the bundled 2020-12 metaschema resolves (it is bundled, never
    fetched) and admits an object with any keys, yet nothing in the schema was open. A
    reference that leaves the schema, or does not resolve, is open at the reference."""
    for ref in (
        "https://json-schema.org/draft/2020-12/schema",
        "https://json-schema.org/draft/2020-12/meta/core",
        "https://example.com/remote.json",
        "#/nowhere",
    ):
        schema = {
            "type": "object",
            "additionalProperties": False,
            "properties": {"a": {"$ref": ref}},
        }
        assert open_objects(schema) == ['$.properties.a["$ref"]'], ref


def test_recursive_refs_are_walked_once() -> None:
    schema = {
        "type": "object",
        "additionalProperties": False,
        "properties": {"node": {"$ref": "#/$defs/node"}},
        "$defs": {
            "node": {
                "type": "object",
                "additionalProperties": False,
                "properties": {"children": {"type": "array", "items": {"$ref": "#/$defs/node"}}},
            }
        },
    }
    assert open_objects(schema) == []


# --------------------------------------------------------------------------- at apply


def test_an_effectful_container_tool_with_an_open_nested_object_is_invalid_naming_the_path() -> (
    None
):
    schema = {
        "type": "object",
        "additionalProperties": False,
        "properties": {"options": {"type": "object", "properties": {"force": {}}}},
    }
    [problem] = open_problems(container(schema))
    assert problem.startswith("inputSchema at $.properties.options: ")
    assert "class external" in problem and "unconfirmed-effect block" in problem


def test_an_effectful_mcp_tool_whose_schema_admits_unknown_keys_is_invalid() -> None:
    schema = {"type": "object", "properties": {"to": {"type": "string"}}}
    [problem] = open_problems(mcp(schema))
    assert problem.startswith("inputSchema at $: ")


def test_an_array_of_open_objects_and_an_open_def_are_both_named() -> None:
    schema = {
        "type": "object",
        "additionalProperties": False,
        "properties": {
            "items": {"type": "array", "items": {"$ref": "#/$defs/item"}},
            "meta": {"type": "array", "items": {"type": "object"}},
        },
        "$defs": {"item": {"type": "object", "properties": {"id": {"type": "string"}}}},
    }
    [problem] = open_problems(mcp(schema, SideEffectClass.SHARED_WRITE))
    assert 'inputSchema at $.properties.meta.items, $["$defs"].item:' in problem


@pytest.mark.parametrize(
    "cls",
    [
        SideEffectClass.SHARED_WRITE,
        SideEffectClass.EXTERNAL,
        SideEffectClass.PRODUCTION,
        SideEffectClass.SPEND,
    ],
)
def test_every_class_that_can_have_effects_needs_closed_objects(cls: SideEffectClass) -> None:
    assert open_problems(container({"type": "object"}, cls))
    assert open_problems(mcp({"type": "object"}, cls))
    assert open_problems(container(CLOSED, cls)) == []
    assert open_problems(mcp(CLOSED, cls)) == []


@pytest.mark.parametrize("cls", [SideEffectClass.READ, SideEffectClass.SANDBOX])
def test_read_and_sandbox_tools_are_exempt(cls: SideEffectClass) -> None:
    assert check_descriptor(container({"type": "object"}, cls)) == []
    assert check_descriptor(mcp({"type": "object"}, cls)) == []


def test_a_risk_class_that_raises_a_read_tool_to_an_effect_makes_it_need_closed_objects() -> None:
    raised = container({"type": "object"}, SideEffectClass.READ, risk_class=RiskClass.FINANCIAL)
    [problem] = open_problems(raised)
    assert "class spend" in problem


def test_kinds_that_do_not_receive_arguments_whole_are_exempt() -> None:
    """http tools are hashed by their rendered request, shell tools by their argv."""
    shell = ToolDescriptorSpec(
        tool_id="sh",
        version="1.0.0",
        kind=ToolKind.SHELL,
        side_effect_class=SideEffectClass.PRODUCTION,
        input_schema={"type": "object", "properties": {"command": {"type": "string"}}},
    )
    assert check_descriptor(shell) == []


def test_many_open_objects_are_named_up_to_a_bound() -> None:
    properties = {f"p{i}": {"type": "object"} for i in range(15)}
    schema = {"type": "object", "additionalProperties": False, "properties": properties}
    [problem] = open_problems(container(schema))
    assert "$.properties.p9" in problem and "$.properties.p10" not in problem
    assert "and 5 more" in problem


def test_an_open_effectful_descriptor_never_becomes_active_and_its_status_says_why() -> None:
    body = {
        "metadata": {"name": "deploy", "namespace": "team", "generation": 3},
        "spec": container({"type": "object"}).wire(),
    }
    status = desired_status(body)
    assert status.active is False
    assert status.conditions[0].reason == "Invalid"
    assert status.message is not None
    assert "inputSchema at $: an object without additionalProperties: false" in status.message
    body["spec"] = container(CLOSED).wire()
    assert desired_status(body).active is True
