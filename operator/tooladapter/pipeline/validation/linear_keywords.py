"""JSON Schema 2020-12 keywords in linear time, for schemas applied to agents' arguments.

jsonschema's own keywords run Python's `re` (backtracking) on agent strings, and are
quadratic in places (`uniqueItems` over objects, `unevaluated*` list membership). These
replacements run every regular expression on RE2 (`linear_regex`) and keep the work
linear in the arguments, whatever an agent sends.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from jsonschema import Draft202012Validator, FormatChecker, validators
from jsonschema._utils import find_evaluated_item_indexes_by_schema as _find_evaluated_item_indexes
from jsonschema.exceptions import ValidationError

from tooladapter.pipeline import linear_regex


def _pattern(validator: Any, pattern: str, instance: Any, schema: Any) -> Iterator[ValidationError]:
    if validator.is_type(instance, "string") and not linear_regex.search(pattern, instance):
        shown = (
            repr(instance)
            if len(instance) <= 60
            else f"{instance[:50]!r}… ({len(instance)} characters)"
        )
        yield ValidationError(f"{shown} does not match {pattern!r}")


def _pattern_properties(
    validator: Any, pattern_properties: Mapping[str, Any], instance: Any, schema: Any
) -> Iterator[ValidationError]:
    if not validator.is_type(instance, "object"):
        return
    for pattern, subschema in pattern_properties.items():
        regex = linear_regex.compile_linear(pattern)
        for key, value in instance.items():
            if regex.search(key) is not None:
                yield from validator.descend(value, subschema, path=key, schema_path=pattern)


def _additional(instance: Mapping[str, Any], schema: Mapping[str, Any]) -> list[str]:
    properties = schema.get("properties", {})
    regexes = [linear_regex.compile_linear(p) for p in schema.get("patternProperties", {})]
    return [
        key
        for key in instance
        if key not in properties and not any(r.search(key) is not None for r in regexes)
    ]


def _additional_properties(
    validator: Any, additional: Any, instance: Any, schema: Any
) -> Iterator[ValidationError]:
    if not validator.is_type(instance, "object"):
        return
    extras = _additional(instance, schema)
    if validator.is_type(additional, "object"):
        for extra in extras:
            yield from validator.descend(instance[extra], additional, path=extra)
    elif not additional and extras:
        shown = ", ".join(repr(extra) for extra in sorted(extras)[:20])
        more = f" and {len(extras) - 20} more" if len(extras) > 20 else ""
        if "patternProperties" in schema:
            patterns = ", ".join(repr(p) for p in sorted(schema["patternProperties"]))
            yield ValidationError(f"{shown}{more} do(es) not match any of the regexes: {patterns}")
        else:
            yield ValidationError(
                f"Additional properties are not allowed ({shown}{more} unexpected)"
            )


def _evaluated_keys(validator: Any, instance: Mapping[str, Any], schema: Any) -> set[str]:
    """jsonschema's `find_evaluated_property_keys_by_schema`, with RE2 and a set."""
    if validator.is_type(schema, "boolean"):
        return set()
    keys: set[str] = set()
    for keyword in ("$ref", "$dynamicRef"):
        ref = schema.get(keyword)
        if ref is not None:
            resolved = validator._resolver.lookup(ref)
            keys |= _evaluated_keys(
                validator.evolve(schema=resolved.contents, _resolver=resolved.resolver),
                instance,
                resolved.contents,
            )
    properties = schema.get("properties")
    if validator.is_type(properties, "object"):
        keys |= properties.keys() & instance.keys()
    for keyword in ("additionalProperties", "unevaluatedProperties"):
        subschema = schema.get(keyword)
        if subschema is not None:
            keys |= {
                key
                for key, value in instance.items()
                if next(validator.descend(value, subschema), None) is None
            }
    if "patternProperties" in schema:
        regexes = [linear_regex.compile_linear(p) for p in schema["patternProperties"]]
        keys |= {key for key in instance if any(r.search(key) is not None for r in regexes)}
    for prop, subschema in (schema.get("dependentSchemas") or {}).items():
        if prop in instance:
            keys |= _evaluated_keys(validator, instance, subschema)
    for keyword in ("allOf", "oneOf", "anyOf"):
        for subschema in schema.get(keyword, []):
            if next(validator.descend(instance, subschema), None) is None:
                keys |= _evaluated_keys(validator, instance, subschema)
    if "if" in schema:
        if validator.evolve(schema=schema["if"]).is_valid(instance):
            keys |= _evaluated_keys(validator, instance, schema["if"])
            if "then" in schema:
                keys |= _evaluated_keys(validator, instance, schema["then"])
        elif "else" in schema:
            keys |= _evaluated_keys(validator, instance, schema["else"])
    return keys


def _unevaluated_properties(
    validator: Any, unevaluated: Any, instance: Any, schema: Any
) -> Iterator[ValidationError]:
    if not validator.is_type(instance, "object"):
        return
    evaluated = _evaluated_keys(validator, instance, schema)
    failing = [
        key
        for key in instance
        if key not in evaluated
        and next(validator.descend(instance[key], unevaluated, path=key, schema_path=key), None)
        is not None
    ]
    if failing:
        shown = ", ".join(repr(key) for key in sorted(failing)[:20])
        more = f" and {len(failing) - 20} more" if len(failing) > 20 else ""
        if unevaluated is False:
            yield ValidationError(f"Unevaluated properties are not allowed ({shown}{more})")
        else:
            yield ValidationError(
                "Unevaluated properties are not valid under the given schema "
                f"({shown}{more} unevaluated and invalid)"
            )


def _unevaluated_items(
    validator: Any, unevaluated: Any, instance: Any, schema: Any
) -> Iterator[ValidationError]:
    """jsonschema's `unevaluatedItems`, with the evaluated indexes in a set (it scans a
    list per item: quadratic in the array's length)."""
    if not validator.is_type(instance, "array"):
        return
    evaluated = set(_find_evaluated_item_indexes(validator, instance, schema))
    failing = [
        item
        for index, item in enumerate(instance)
        if index not in evaluated and not validator.evolve(schema=unevaluated).is_valid(item)
    ]
    if failing:
        yield ValidationError(
            f"Unevaluated items are not allowed ({len(failing)} unexpected)"
            if unevaluated is False
            else f"{len(failing)} unevaluated items are not valid under the given schema"
        )


class _Key:
    __slots__ = ("name",)

    def __init__(self, name: str) -> None:
        self.name = name


def _unique_key(value: Any) -> tuple[Any, ...]:
    """A hashable key equal for JSON-equal values (1 == 1.0, true != 1, key order
    ignored), computed without recursion."""
    out: list[Any] = []
    stack: list[Any] = [value]
    while stack:
        node = stack.pop()
        if isinstance(node, _Key):
            out.append(("key", node.name))
        elif isinstance(node, dict):
            out.append(("{", len(node)))
            for key in sorted(node, key=str, reverse=True):
                stack.append(node[key])
                stack.append(_Key(str(key)))
        elif isinstance(node, list | tuple):
            out.append(("[", len(node)))
            stack.extend(reversed(node))
        elif isinstance(node, bool) or node is None:
            out.append(("literal", node))
        elif isinstance(node, str):
            out.append(("string", node))
        else:
            out.append(node)  # numbers: 1 == 1.0, with equal hashes
    return tuple(out)


def _unique_items(
    validator: Any, unique: Any, instance: Any, schema: Any
) -> Iterator[ValidationError]:
    """Linear (a set of keys), not jsonschema's pairwise comparison of unsortable items."""
    if not unique or not validator.is_type(instance, "array"):
        return
    seen: set[Any] = set()
    for item in instance:
        key = _unique_key(item)
        if key in seen:
            yield ValidationError(f"the array has non-unique elements ({len(instance)} items)")
            return
        seen.add(key)


def _is_regex(instance: object) -> bool:
    return not isinstance(instance, str) or linear_regex.is_valid_agent_regex(instance)


def _format_checker() -> FormatChecker:
    checker = FormatChecker(formats=())
    checker.checkers = dict(Draft202012Validator.FORMAT_CHECKER.checkers)
    checker.checkers["regex"] = (_is_regex, ())
    return checker


#: JSON Schema 2020-12 with every regular expression on RE2 and no quadratic keyword.
LinearValidator = validators.extend(
    Draft202012Validator,
    {
        "pattern": _pattern,
        "patternProperties": _pattern_properties,
        "additionalProperties": _additional_properties,
        "unevaluatedProperties": _unevaluated_properties,
        "unevaluatedItems": _unevaluated_items,
        "uniqueItems": _unique_items,
    },
)
FORMAT_CHECKER = _format_checker()
