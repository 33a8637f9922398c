"""A schema keyword JSON Schema does not define is ignored by every validator: a misspelt
one is refused where it is written, any other is flagged on the descriptor's status."""

from __future__ import annotations

from typing import Any

from tests.unit.fake_cluster import descriptor
from tooladapter.handlers.descriptors import SCHEMA_KEYWORDS, desired_status
from tooladapter.pipeline.validation.schemas import unknown_keywords


def _status(schema: dict[str, Any]) -> dict[str, Any]:
    body = descriptor("lister", inputSchema=schema)
    body["metadata"]["generation"] = 3
    return desired_status(body).wire()


def _condition(status: dict[str, Any], kind: str) -> dict[str, Any]:
    (found,) = [c for c in status["conditions"] if c["type"] == kind]
    return found


def test_a_misspelt_required_keeps_the_descriptor_inactive_and_says_what_was_meant() -> None:
    status = _status({"type": "object", "properties": {"a": {"type": "string"}}, "requird": ["a"]})

    assert status["active"] is False
    assert _condition(status, "Ready")["reason"] == "Invalid"
    assert "unknown keyword 'requird' at $ (did you mean 'required'?)" in status["message"]


def test_a_misspelt_keyword_deep_in_the_schema_is_found_by_its_path() -> None:
    schema = {
        "type": "object",
        "properties": {"files": {"type": "array", "items": {"type": "string", "maxlenght": 9}}},
    }

    (finding,) = unknown_keywords(schema)

    assert (finding.path, finding.keyword, finding.meant) == (
        "$.properties.files.items",
        "maxlenght",
        "maxLength",
    )


def test_other_unknown_keywords_are_flagged_on_an_active_descriptor() -> None:
    status = _status({"type": "object", "properties": {"a": {"type": "string", "sensitive": True}}})

    assert status["active"] is True
    flagged = _condition(status, SCHEMA_KEYWORDS)
    assert (flagged["status"], flagged["reason"]) == ("False", "UnknownKeywords")
    assert "inputSchema unknown keyword 'sensitive' at $.properties.a" in flagged["message"]
    assert "ignored by validation" in status["message"]


def test_known_keywords_extensions_and_data_are_not_flagged() -> None:
    schema = {
        "type": "object",
        "x-ui-order": ["a"],
        "$defs": {"name": {"type": "string", "pattern": "^[a-z]+$"}},
        "properties": {
            "a": {"$ref": "#/$defs/name", "default": {"requird": 1}, "examples": [{"foo": 1}]},
            "b": {"enum": [{"bar": 2}], "deprecated": True},
        },
        "required": ["a"],
        "additionalProperties": False,
    }

    assert unknown_keywords(schema) == []
    flagged = _condition(_status(schema), SCHEMA_KEYWORDS)
    assert (flagged["status"], flagged["reason"]) == ("True", "AllKnown")
