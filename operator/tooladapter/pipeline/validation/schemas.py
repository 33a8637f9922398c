"""A descriptor's schemas, checked when it is applied: usable JSON Schema 2020-12, no typos.

A schema that cannot be applied would deny every call; a misspelt keyword (`requird`) would
silently stop enforcing the rule its author meant. Both are found once, at apply, so calls
never discover a broken schema halfway through the pipeline.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any
from urllib.parse import urljoin

from jsonschema import Draft202012Validator
from referencing.exceptions import Unresolvable
from referencing.jsonschema import DRAFT202012

from tooladapter.pipeline import linear_regex
from tooladapter.pipeline.validation.paths import clip, json_path
from tooladapter.pipeline.validation.refs import LOCAL_ONLY_REGISTRY, unresolvable_message

DRAFT_2020_12_URI = "https://json-schema.org/draft/2020-12/schema"


#: Keywords whose values are data, not subschemas: never look for refs inside them.
_DATA_KEYWORDS = frozenset({"const", "enum", "default", "examples"})


def check_schema(schema: Any, *, what: str = "schema") -> list[str]:
    """Problems that make `schema` unusable as a JSON Schema 2020-12; empty when fine.

    Checks the metaschema (every violation, with its location), that `$schema` (when
    given) is 2020-12, that every `$ref`/`$dynamicRef` resolves locally (remote refs are
    refused), and that every `pattern`/`patternProperties` regex compiles.
    """
    if not isinstance(schema, dict | bool):
        return [f"{what} must be a JSON object (or true/false), not {type(schema).__name__}"]
    if isinstance(schema, bool):
        return []
    problems: list[str] = []
    declared = schema.get("$schema")
    if declared is not None and str(declared).rstrip("#") != DRAFT_2020_12_URI:
        problems.append(
            f"{what}: $schema {declared!r} is not supported: tooladapter validates with "
            f"JSON Schema 2020-12; remove $schema or set it to {DRAFT_2020_12_URI!r}"
        )
    meta = Draft202012Validator(Draft202012Validator.META_SCHEMA, registry=LOCAL_ONLY_REGISTRY)
    for error in sorted(meta.iter_errors(schema), key=lambda e: list(map(str, e.absolute_path))):
        problems.append(
            f"{what} at {json_path(error.absolute_path)}: {clip(error.message)} "
            f"(metaschema rule '{error.validator}')"
        )
    if problems:
        return problems
    problems.extend(_check_refs_and_patterns(schema, what=what))
    return problems


def _check_refs_and_patterns(schema: dict[str, Any], *, what: str) -> Iterator[str]:
    resolver = LOCAL_ONLY_REGISTRY.resolver_with_root(DRAFT202012.create_resource(schema))
    stack: list[tuple[Any, str, tuple[str | int, ...]]] = [(schema, "", ())]
    while stack:
        node, base, path = stack.pop()
        if isinstance(node, list):
            stack.extend((child, base, (*path, i)) for i, child in enumerate(node))
            continue
        if not isinstance(node, dict):
            continue
        if isinstance(node.get("$id"), str):
            base = urljoin(base, node["$id"])
        for keyword in ("$ref", "$dynamicRef"):
            ref = node.get(keyword)
            if isinstance(ref, str):
                try:
                    resolver.lookup(urljoin(base, ref))
                except Unresolvable as err:
                    yield f"{what} at {json_path(path)}: {unresolvable_message(err, ref)}"
        pattern = node.get("pattern")
        if isinstance(pattern, str):
            yield from _regex_problem(pattern, f"{what} at {json_path((*path, 'pattern'))}")
        pattern_properties = node.get("patternProperties")
        if isinstance(pattern_properties, dict):
            for key in pattern_properties:
                yield from _regex_problem(
                    key, f"{what} at {json_path((*path, 'patternProperties'))}"
                )
        for key, child in node.items():
            if key not in _DATA_KEYWORDS:
                stack.append((child, base, (*path, key)))


#: Every keyword of JSON Schema 2020-12 (core, applicator, unevaluated, validation, format,
#: content, meta-data), the draft-07 spellings the validator still honours, and annotations
#: OpenAPI-derived tool schemas commonly carry. Anything else is ignored by a validator.
SCHEMA_KEYWORDS = frozenset(
    {
        "$schema", "$id", "$ref", "$anchor", "$dynamicRef", "$dynamicAnchor", "$vocabulary",
        "$comment", "$defs", "allOf", "anyOf", "oneOf", "not", "if", "then", "else",
        "dependentSchemas", "prefixItems", "items", "contains", "properties",
        "patternProperties", "additionalProperties", "propertyNames", "unevaluatedItems",
        "unevaluatedProperties", "type", "enum", "const", "multipleOf", "maximum",
        "exclusiveMaximum", "minimum", "exclusiveMinimum", "maxLength", "minLength",
        "pattern", "maxItems", "minItems", "uniqueItems", "maxContains", "minContains",
        "maxProperties", "minProperties", "required", "dependentRequired", "format",
        "contentEncoding", "contentMediaType", "contentSchema", "title", "description",
        "default", "deprecated", "readOnly", "writeOnly", "examples",
        "definitions", "dependencies", "additionalItems", "$recursiveRef", "$recursiveAnchor",
        "example",
    }
)  # fmt: skip
_LOWER_KEYWORDS = {keyword.lower(): keyword for keyword in SCHEMA_KEYWORDS}
_ONE_SCHEMA = frozenset(
    {
        "items", "additionalProperties", "not", "if", "then", "else", "contains",
        "propertyNames", "unevaluatedProperties", "unevaluatedItems", "additionalItems",
        "contentSchema",
    }
)  # fmt: skip
_SCHEMA_MAPS = frozenset(
    {"properties", "patternProperties", "$defs", "definitions", "dependentSchemas", "dependencies"}
)
_SCHEMA_LISTS = frozenset({"allOf", "anyOf", "oneOf", "prefixItems", "items"})


@dataclass(frozen=True)
class UnknownKeyword:
    """A keyword no validator knows: ignored, so the rule its author meant is not enforced."""

    path: str
    keyword: str
    #: The known keyword it is one typo away from (`requird` -> `required`), if any.
    meant: str | None

    def __str__(self) -> str:
        hint = f" (did you mean {self.meant!r}?)" if self.meant else ""
        return f"unknown keyword {self.keyword!r} at {self.path}{hint}"


def unknown_keywords(schema: Any) -> list[UnknownKeyword]:
    """Keywords of `schema` (and its subschemas) that JSON Schema does not define, except
    `x-` extensions; values of unknown keywords are not walked (nobody knows what they are)."""
    found: list[UnknownKeyword] = []
    stack: list[tuple[Any, tuple[str | int, ...]]] = [(schema, ())]
    while stack:
        node, path = stack.pop()
        if not isinstance(node, dict):
            continue
        for key, value in node.items():
            where = (*path, key)
            if key not in SCHEMA_KEYWORDS:
                if not key.startswith("x-"):
                    close = difflib.get_close_matches(key.lower(), _LOWER_KEYWORDS, n=1, cutoff=0.8)
                    meant = _LOWER_KEYWORDS[close[0]] if close else None
                    found.append(UnknownKeyword(json_path(path), key, meant))
                continue
            if key in _ONE_SCHEMA and isinstance(value, dict):
                stack.append((value, where))
            elif key in _SCHEMA_LISTS and isinstance(value, list):
                stack.extend((item, (*where, i)) for i, item in enumerate(value))
            elif key in _SCHEMA_MAPS and isinstance(value, dict):
                stack.extend((sub, (*where, name)) for name, sub in value.items())
    return sorted(found, key=lambda k: (k.path, k.keyword))


def misspelt_keywords(schema: Any, *, what: str) -> list[str]:
    """Problems for keywords one typo away from a known one: a misspelt `required` would
    silently stop requiring anything, so the descriptor is refused until it is fixed."""
    return [
        f"{what}: {finding}: JSON Schema ignores unknown keywords, so the rule it meant "
        "would not be enforced"
        for finding in unknown_keywords(schema)
        if finding.meant is not None
    ]


def _regex_problem(pattern: str, where: str) -> Iterator[str]:
    """A pattern is refused when the linear engine cannot run it or it nests quantifiers
    (`linear_regex.pattern_problem`): the descriptor stays inactive with this reason."""
    problem = linear_regex.pattern_problem(pattern)
    if problem:
        yield f"{where}: regular expression {pattern!r} {problem}"
