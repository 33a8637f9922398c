"""Schema validation stage: size and depth bounds, JSON Schema 2020-12, descriptor checks.

Why this shape:

- Arguments come from agents, so they are bounded in size and nesting depth *before*
  anything walks them recursively (`check_bounds` is iterative and stops early).
- Validation reports every error with the JSON path of the offending value, because
  the reader is an agent or a person who has to fix the call, not a stack trace.
- A `$ref` to a remote URL is never fetched: validation must not make network calls
  (SSRF, slow or changing schemas). Only refs that resolve inside the descriptor's own
  schema (and the bundled 2020-12 metaschemas) work; anything else is a problem.
- A descriptor is checked for internal consistency once, when it is applied, so calls
  never discover a broken descriptor halfway through the pipeline.
- `render_http_request` is the only place where arguments meet an HTTP request: values
  are URL-encoded in the URL, JSON-escaped in JSON bodies, refused when they would
  split a header, and the resulting host must be one the descriptor allows.
"""

from __future__ import annotations

import difflib
import ipaddress
import json
import math
import re
import shlex
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Literal, NamedTuple
from urllib.parse import quote, quote_plus, urljoin, urlsplit

from jsonschema import Draft202012Validator, FormatChecker, validators
from jsonschema._utils import find_evaluated_item_indexes_by_schema as _find_evaluated_item_indexes
from jsonschema.exceptions import ValidationError, best_match
from jsonschema_specifications import REGISTRY as SPECIFICATIONS
from referencing import Registry, Resource
from referencing.exceptions import Unresolvable
from referencing.jsonschema import DRAFT202012

from tooladapter.enums import ToolKind
from tooladapter.model import HttpSpec, ToolDescriptorSpec
from tooladapter.pipeline import linear_regex
from tooladapter.pipeline.hashing import request_hash

DEFAULT_MAX_ARGUMENT_BYTES = 262_144
DEFAULT_MAX_DEPTH = 32
DEFAULT_MAX_PROBLEMS = 50
#: Integers beyond this have no exact JSON (I-JSON, RFC 8785) form: the request hash needs one.
MAX_EXACT_INTEGER = 2**53
#: At most this many schema errors are collected (sorted, then cut to `max_problems`).
_MAX_COLLECTED = 1000
_MAX_MESSAGE_CHARS = 400

DRAFT_2020_12_URI = "https://json-schema.org/draft/2020-12/schema"


# --------------------------------------------------------------------------- JSON paths

_IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def json_path(parts: Iterable[str | int]) -> str:
    """A JSONPath for a location: `$.files[2].name`, `$["key with spaces"]`."""
    out = ["$"]
    for part in parts:
        if isinstance(part, int):
            out.append(f"[{part}]")
        elif _IDENTIFIER.match(part):
            out.append(f".{part}")
        else:
            out.append(f"[{json.dumps(part, ensure_ascii=False)}]")
    return "".join(out)


def _pointer(parts: Sequence[str | int]) -> str:
    """An RFC 6901 JSON pointer (used for schema locations: `#/properties/a/type`)."""
    escaped = (str(p).replace("~", "~0").replace("/", "~1") for p in parts)
    return "#/" + "/".join(escaped) if parts else "#"


def _clip(text: str, limit: int = _MAX_MESSAGE_CHARS) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


# --------------------------------------------------------------------------- bounds


#: Entries of one object or array at admission (`admission_bounds_cel`).
MAX_ADMISSION_ENTRIES = 1024


def admission_bounds_cel(
    arguments: str = "variables.arguments",
    *,
    max_depth: int = DEFAULT_MAX_DEPTH,
    max_entries: int = MAX_ADMISSION_ENTRIES,
) -> str:
    """The CEL of the admission policy `tooladapter-invocation-arguments`: the nesting bound
    of `check_bounds`, checked by the API server before the object is stored, so no watcher
    ever decodes deeper arguments; and at most `max_entries` entries per object or array.

    CEL has no recursion, so the walk is unrolled, one `all()` per level; each level names
    its value once, so the expression grows linearly with the depth. The entry bound keeps
    the API server's work linear: iterating one collection costs it time quadratic in the
    collection's size (measured on 1.34: 40,000 values in one array took 5.9 s, in 40
    arrays of 1,000 0.28 s); beyond ~40,000 values in all (fewer in objects) the evaluation
    exceeds the CEL cost budget and the API server refuses the object. Sizes are bounded by
    the API server (3 MiB requests, 1.5 MiB objects) and again by `check_bounds` in the
    operator."""

    def level(depth: int, value: str) -> str:
        container = f"(type({value}) == map || type({value}) == list)"
        if depth > max_depth:
            return f"!{container}"
        child = f"v{depth + 1}"
        children = (
            f"(type({value}) == map ? {value}.map(k, {value}[k]) : "
            f"type({value}) == list ? {value} : [])"
        )
        return (
            f"(!{container} || size({value}) <= {max_entries}) && "
            f"{children}.all({child}, {level(depth + 1, child)})"
        )

    return level(1, arguments)


def admission_flat_cel(
    arguments: str = "object.spec.?arguments.orValue({})",
    *,
    max_entries: int = MAX_ADMISSION_ENTRIES,
) -> str:
    """The match condition of `tooladapter-invocation-arguments`: true unless the arguments
    are one object of at most `max_entries` scalars. Such arguments (the common call) meet
    `admission_bounds_cel` by construction, so the API server skips its unrolled walk: one
    pass over the top level instead (issue 17: cheaper admission on the common path)."""
    value = f"{arguments}[k]"
    return (
        f"!(type({arguments}) == map && size({arguments}) <= {max_entries} && "
        f"{arguments}.all(k, type({value}) != map && type({value}) != list))"
    )


def check_bounds(
    value: Any,
    *,
    max_bytes: int = DEFAULT_MAX_ARGUMENT_BYTES,
    max_depth: int = DEFAULT_MAX_DEPTH,
    what: str = "arguments",
) -> list[str]:
    """Problems with the size or nesting of `value`, found without recursion.

    `value` is either parsed JSON (dicts, lists, scalars) or the raw JSON text (`str` or
    `bytes`), so the gateway can bound a request body before `json.loads`. The size is
    the length of the compact JSON encoding in UTF-8; the depth counts nested objects
    and arrays (`{"a": [1]}` has depth 2). The walk stops at the first exceeded bound,
    so a hostile value costs at most `max_bytes` of work. Non-JSON values (NaN,
    infinities, sets, non-string keys) are reported too: they have no canonical form.
    """
    if isinstance(value, str | bytes | bytearray):
        return _check_raw_bounds(value, max_bytes=max_bytes, max_depth=max_depth, what=what)

    problems: list[str] = []
    size = 0
    stack: list[tuple[Any, int, tuple[str | int, ...]]] = [(value, 0, ())]
    while stack:
        node, depth, path = stack.pop()
        if isinstance(node, dict):
            if depth + 1 > max_depth:
                problems.append(
                    f"{what} nest deeper than {max_depth} levels at {json_path(path)}: "
                    "flatten the structure"
                )
                return problems
            size += 2 + max(len(node) - 1, 0)
            for key, child in node.items():
                if not isinstance(key, str):
                    problems.append(
                        f"{what} have a non-string key {key!r} at {json_path(path)}: "
                        "JSON object keys are strings"
                    )
                    return problems
                size += _string_size(key, max_bytes) + 1
                stack.append((child, depth + 1, (*path, key)))
        elif isinstance(node, list | tuple):
            if depth + 1 > max_depth:
                problems.append(
                    f"{what} nest deeper than {max_depth} levels at {json_path(path)}: "
                    "flatten the structure"
                )
                return problems
            size += 2 + max(len(node) - 1, 0)
            for index, child in enumerate(node):
                stack.append((child, depth + 1, (*path, index)))
        elif isinstance(node, str):
            size += _string_size(node, max_bytes)
        elif node is None or isinstance(node, bool):
            size += 4 if node in (None, True) else 5
        elif isinstance(node, int):
            if abs(node) > MAX_EXACT_INTEGER:
                problems.append(
                    f"{what} hold the integer {str(node)[:40]} at {json_path(path)}, beyond "
                    f"+-2**53: JSON numbers cannot carry it exactly; send it as a string"
                )
                return problems
            size += len(str(node))
        elif isinstance(node, float):
            if not math.isfinite(node):
                problems.append(
                    f"{what} hold {node!r} at {json_path(path)}, which JSON cannot carry"
                )
                return problems
            size += len(repr(node))
        else:
            problems.append(
                f"{what} hold a {type(node).__name__} at {json_path(path)}, which is not JSON"
            )
            return problems
        if size > max_bytes:
            problems.append(
                f"{what} are larger than {max_bytes} bytes as compact JSON: "
                "pass large inputs by reference (an artifact or URL), not inline"
            )
            return problems
    return problems


def _string_size(text: str, limit: int) -> int:
    if len(text) > limit:  # every character is at least one byte: no need to encode
        return len(text)
    return len(json.dumps(text, ensure_ascii=False).encode("utf-8", errors="surrogatepass"))


def _check_raw_bounds(
    raw: str | bytes | bytearray, *, max_bytes: int, max_depth: int, what: str
) -> list[str]:
    data = raw.encode("utf-8", errors="surrogatepass") if isinstance(raw, str) else bytes(raw)
    if len(data) > max_bytes:
        return [
            f"{what} are {len(data)} bytes, larger than the limit of {max_bytes} bytes: "
            "pass large inputs by reference (an artifact or URL), not inline"
        ]
    depth = 0
    in_string = False
    escaped = False
    for offset, byte in enumerate(data):
        if in_string:
            if escaped:
                escaped = False
            elif byte == 0x5C:  # backslash
                escaped = True
            elif byte == 0x22:  # quote
                in_string = False
        elif byte == 0x22:
            in_string = True
        elif byte in (0x5B, 0x7B):  # [ {
            depth += 1
            if depth > max_depth:
                return [
                    f"{what} nest deeper than {max_depth} levels (at byte {offset}): "
                    "flatten the structure"
                ]
        elif byte in (0x5D, 0x7D):  # ] }
            depth -= 1
    return []


# --------------------------------------------------------------------------- schemas


class RemoteRefRefused(LookupError):
    """A `$ref` pointed outside the schema; remote schemas are never fetched."""

    def __init__(self, uri: str) -> None:
        super().__init__(
            f"remote $ref {uri!r} is never fetched: only refs inside the same schema "
            "resolve (e.g. '#/$defs/name'); inline the referenced schema under $defs"
        )
        self.uri = uri


def _refuse_remote(uri: str) -> Resource[Any]:
    raise RemoteRefRefused(uri)


#: Resolves local refs and the bundled metaschemas; every other lookup is refused.
LOCAL_ONLY_REGISTRY: Registry[Any] = SPECIFICATIONS.combine(
    Registry(retrieve=_refuse_remote)  # type: ignore[call-arg]  # attrs alias of _retrieve
)


@dataclass(frozen=True)
class SchemaProblem:
    """One way the arguments fail the tool's input schema."""

    path: str
    message: str
    rule: str
    schema_path: str = ""

    def __str__(self) -> str:
        return f"{self.path}: {self.message} (schema rule '{self.rule}')"


# ---- linear keywords: jsonschema's own run Python `re` (backtracking) on agent strings and
# are quadratic in places (`uniqueItems` over objects, `unevaluated*` list membership).


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
_FORMAT_CHECKER = _format_checker()


@lru_cache(maxsize=256)
def _validator_for(schema_json: str) -> Any:
    """One validator per distinct schema: building one (its registry) costs more than most
    validations. Keyed by the schema's JSON, so the cached validator owns its own copy."""
    return LinearValidator(
        json.loads(schema_json),
        registry=LOCAL_ONLY_REGISTRY,
        format_checker=_FORMAT_CHECKER,
    )


def validate_arguments(
    schema: Mapping[str, Any] | bool,
    arguments: Any,
    *,
    max_problems: int = DEFAULT_MAX_PROBLEMS,
) -> list[SchemaProblem]:
    """Every way `arguments` fail `schema` (JSON Schema 2020-12), sorted by path.

    `format` is asserted (an `"format": "email"` that does not hold is an error), refs
    resolve only inside the schema, and a schema that cannot be applied at all yields a
    single problem at `$` with rule `schema` (fail closed: the call is denied). At most
    `max_problems` are returned; a last problem with rule `max-problems` says how many
    more there were.
    """
    problems: list[SchemaProblem] = []
    try:
        validator = _validator_for(json.dumps(schema, sort_keys=True))
        for error in validator.iter_errors(arguments):
            problems.append(_problem_from(error))
            if len(problems) >= _MAX_COLLECTED:  # a flood of errors costs no more than this
                break
    except Unresolvable as err:
        problems.append(SchemaProblem(path="$", message=_unresolvable_message(err), rule="$ref"))
    except Exception as err:  # a broken schema must deny the call, not crash the stage
        problems.append(
            SchemaProblem(
                path="$",
                message=_clip(
                    f"the tool's schema cannot be applied ({type(err).__name__}: {err}); "
                    "the descriptor needs fixing"
                ),
                rule="schema",
            )
        )
    problems.sort(key=lambda p: (p.path, p.rule, p.message, p.schema_path))
    if len(problems) > max_problems:
        more = f"{len(problems) - max_problems}"
        if len(problems) >= _MAX_COLLECTED:
            more = f"at least {more}"
        problems = problems[:max_problems]
        problems.append(
            SchemaProblem(path="$", message=f"and {more} more problems", rule="max-problems")
        )
    return problems


def check_arguments(
    schema: dict[str, Any], arguments: Any, *, namespace: str, tool_id: str, tool_version: str
) -> tuple[list[str], list[SchemaProblem], str | None]:
    """(bound problems, schema problems, request hash): the bounds first, so nothing walks
    arguments that are too large or too deep."""
    problems = check_bounds(arguments)
    if problems:
        return problems, [], None
    errors = validate_arguments(schema, arguments)
    hashed = request_hash(
        namespace=namespace, tool_id=tool_id, tool_version=tool_version, arguments=arguments
    )
    return [], errors, hashed


def _problem_from(error: ValidationError) -> SchemaProblem:
    message = error.message
    if error.context:
        closest = best_match(error.context)
        if closest is not None:
            message = (
                f"{message}; closest alternative fails at "
                f"{json_path(closest.absolute_path)}: {closest.message}"
            )
    return SchemaProblem(
        path=json_path(error.absolute_path),
        message=_clip(message),
        rule=str(error.validator),
        schema_path=_pointer(list(error.absolute_schema_path)),
    )


def _unresolvable_message(err: Unresolvable, ref: str | None = None) -> str:
    cause: BaseException | None = err
    while cause is not None:
        if isinstance(cause, RemoteRefRefused):
            return str(cause)
        cause = cause.__cause__ or cause.__context__
    return _clip(f"$ref {ref or err.ref!r} does not resolve inside the schema")


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
            f"{what} at {json_path(error.absolute_path)}: {_clip(error.message)} "
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
                    yield f"{what} at {json_path(path)}: {_unresolvable_message(err, ref)}"
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


# --------------------------------------------------------------------------- descriptor

_SECRET_KEY = re.compile(r"^[-._a-zA-Z0-9]+$")
_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_HOST_LABEL = re.compile(r"^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$")
_HEADER_NAME = re.compile(r"^[!#$%&'*+.^_`|~0-9A-Za-z-]+$")
PLACEHOLDER = re.compile(r"\{([A-Za-z_][A-Za-z0-9_]*)\}")

#: Which optional spec block belongs to which tool kind.
_KIND_BLOCKS: dict[str, frozenset[ToolKind]] = {
    "shell": frozenset({ToolKind.SHELL}),
    "http": frozenset({ToolKind.HTTP}),
    "mcp": frozenset({ToolKind.MCP}),
    "native": frozenset({ToolKind.NATIVE}),
    "sandbox": frozenset({ToolKind.SHELL, ToolKind.CONTAINER, ToolKind.HTTP}),
}


@dataclass(frozen=True)
class EgressEntry:
    """One parsed egress allow entry: a CIDR (NetworkPolicy) or a host name (proxy)."""

    kind: Literal["cidr", "host"]
    value: str
    port: int | None = None


def parse_egress_entry(entry: str) -> EgressEntry:
    """Parse an egress allow entry; raises `ValueError` with an actionable message.

    CIDRs must be canonical (no host bits) and narrower than the whole address space.
    Host names are RFC 1123 names, optionally with `:port`, optionally with a single
    leading `*.` wildcard over at least two labels (`*.example.com`). Bare IP addresses
    are refused: write them as `/32` (or `/128`) CIDRs.
    """
    text = entry.strip()
    if not text:
        raise ValueError("egress entry is empty")
    if "/" in text:
        try:
            network = ipaddress.ip_network(text, strict=True)
        except ValueError as err:
            hint = ""
            try:
                hint = f"; did you mean {ipaddress.ip_network(text, strict=False)}?"
            except ValueError:
                pass
            raise ValueError(f"egress entry {entry!r} is not a valid CIDR ({err}){hint}") from err
        if network.prefixlen == 0:
            raise ValueError(
                f"egress entry {entry!r} allows every address: arbitrary internet access is "
                "denied by design; list the networks or hosts the tool needs"
            )
        return EgressEntry(kind="cidr", value=str(network))
    try:
        address = ipaddress.ip_address(text.strip("[]"))
    except ValueError:
        pass
    else:
        suffix = 32 if address.version == 4 else 128
        raise ValueError(
            f"egress entry {entry!r} is a bare IP address: write it as a CIDR, "
            f"e.g. {address}/{suffix}"
        )
    host, port = text, None
    if ":" in text:
        host, _, port_text = text.rpartition(":")
        if not port_text.isdigit() or not 1 <= int(port_text) <= 65535:
            raise ValueError(f"egress entry {entry!r} has an invalid port {port_text!r}")
        port = int(port_text)
    host = host.lower()
    problem = _host_name_problem(host)
    if problem:
        raise ValueError(f"egress entry {entry!r} {problem}")
    return EgressEntry(kind="host", value=host, port=port)


def _host_name_problem(host: str) -> str | None:
    name = host[2:] if host.startswith("*.") else host
    if "*" in name:
        return "has a wildcard that is not a single leading '*.' (e.g. '*.example.com')"
    if host.startswith("*.") and name.count(".") < 1:
        return "wildcards a whole top-level domain: use at least '*.example.com'"
    if len(name) > 253 or not name:
        return "is not a valid host name (1 to 253 characters)"
    labels = name.split(".")
    if not all(_HOST_LABEL.match(label) for label in labels):
        return (
            "is not a valid host name: labels are 1-63 letters, digits or '-', "
            "not starting or ending with '-'"
        )
    if labels[-1].isdigit():
        return "is not a valid host name (the last label is numeric)"
    return None


def _parse_host_port(entry: str) -> tuple[str, int | None]:
    """`host`, `host:port`, `[v6]` or `[v6]:port` -> (lower-case host, port)."""
    text = entry.strip().lower()
    if text.startswith("["):
        host, _, rest = text[1:].partition("]")
        port_text = rest[1:] if rest.startswith(":") else ""
    elif text.count(":") == 1:
        host, _, port_text = text.partition(":")
    else:
        host, port_text = text, ""
    if port_text:
        if not port_text.isdigit() or not 1 <= int(port_text) <= 65535:
            raise ValueError(f"{entry!r} has an invalid port {port_text!r}")
        return host, int(port_text)
    return host, None


def check_descriptor(spec: ToolDescriptorSpec) -> list[str]:
    """Every inconsistency that makes a descriptor unusable; empty when it is fine.

    Checked: both schemas compile; the input schema describes an object; the block for
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
        # The agent chooses a shell tool's command: it never runs beside brokered
        # credentials (the API server refuses this too; this keeps older objects inactive).
        if spec.secret_dependencies:
            problems.append(
                "secretDependencies: a shell tool's command comes from the agent, so it may "
                "not carry brokered secrets; use a container tool (a fixed sandbox.command)"
            )
        if spec.authorization.kubernetes_identity is not None:
            problems.append(
                "authorization.kubernetesIdentity: a shell tool's command comes from the "
                "agent, so it may not carry a brokered token; use a container tool (a fixed "
                "sandbox.command)"
            )
    elif spec.kind is ToolKind.HTTP:
        if spec.http is None:
            problems.append("http: an http tool needs an http block (method, url, ...)")
        else:
            problems.extend(_check_http(spec.http, declared_names))
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
        for index, credential in enumerate(spec.sandbox.egress.credentials):
            where = f"sandbox.egress.credentials[{index}]"
            try:
                if parse_egress_entry(credential.host).kind != "host":
                    problems.append(f"{where}.host: {credential.host!r} is not a host name")
            except ValueError as err:
                problems.append(f"{where}.host: {err}")
            if not _HEADER_NAME.match(credential.header):
                problems.append(f"{where}.header: {credential.header!r} is not a header name")
            if any(c in credential.scheme for c in "\r\n"):
                problems.append(f"{where}.scheme: must be one line")
            if not _DNS_SUBDOMAIN.match(credential.secret_key_ref.name):
                problems.append(f"{where}.secretKeyRef.name: not a valid Secret name")

    for index, dependency in enumerate(spec.secret_dependencies):
        where = f"secretDependencies[{index}]"
        if not _DNS_SUBDOMAIN.match(dependency.secret_name):
            problems.append(
                f"{where}.secretName: {dependency.secret_name!r} is not a valid Secret name "
                "(lower-case DNS subdomain)"
            )
        seen: set[str] = set()
        for key_index, key in enumerate(dependency.keys):
            problem = _secret_key_problem(key)
            if problem:
                problems.append(f"{where}.keys[{key_index}]: {problem}")
            if key in seen:
                problems.append(f"{where}.keys[{key_index}]: key {key!r} is listed twice")
            seen.add(key)
    return problems


def _secret_key_problem(key: str) -> str | None:
    if not key:
        return "a secret key must not be empty"
    if len(key) > 253 or not _SECRET_KEY.match(key) or key in (".", "..") or key.startswith(".."):
        return (
            f"{key!r} is not a valid Secret key (letters, digits, '-', '_', '.'; "
            "at most 253 characters; not '.' or '..')"
        )
    return None


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


def placeholders(template: str) -> list[str]:
    """The `{name}` placeholders of a template, in order of appearance."""
    return PLACEHOLDER.findall(template)


def _check_http(http: HttpSpec, declared_names: set[str] | None) -> list[str]:
    problems: list[str] = []
    templates: list[tuple[str, str]] = [("http.url", http.url)]
    templates.extend((f"http.headers[{name!r}]", value) for name, value in http.headers.items())
    if http.body is not None:
        templates.append(("http.body", http.body))
    if declared_names is not None:
        for where, template in templates:
            for name in placeholders(template):
                if name not in declared_names:
                    problems.append(
                        f"{where}: placeholder {{{name}}} is not a property of inputSchema "
                        f"(declared: {', '.join(sorted(declared_names)) or 'none'})"
                    )
    for name, value in http.headers.items():
        if not _HEADER_NAME.match(name) or PLACEHOLDER.search(name):
            problems.append(f"http.headers: {name!r} is not a valid literal header name")
        if any(ch in value for ch in "\r\n\0"):
            problems.append(f"http.headers[{name!r}]: the value contains CR, LF or NUL")
    if http.body is not None:
        try:
            _body_content_type(http)
        except HttpTemplateError as err:
            problems.append(str(err))

    parts = urlsplit(PLACEHOLDER.sub("x", http.url))
    if parts.scheme not in ("http", "https") or "{" in http.url.split("://", 1)[0]:
        problems.append(f"http.url: scheme must be http or https (got {http.url!r})")
    if "@" in parts.netloc:
        problems.append(
            "http.url: credentials in the URL are not allowed; broker them through "
            "secretDependencies and a header"
        )
    netloc_template = http.url.split("://", 1)[-1].split("/", 1)[0].split("?", 1)[0]
    host_has_placeholder = PLACEHOLDER.search(netloc_template) is not None
    allowed: list[tuple[str, int | None]] = []
    for index, entry in enumerate(http.allowed_hosts):
        try:
            host, port = _parse_host_port(entry)
        except ValueError as err:
            problems.append(f"http.allowedHosts[{index}]: {err}")
            continue
        problem = _host_name_problem(host) if not _is_ip(host) else None
        if problem or host.startswith("*."):
            problems.append(
                f"http.allowedHosts[{index}]: {entry!r} "
                f"{problem or 'must name a host exactly (no wildcards)'}"
            )
            continue
        allowed.append((host, port))
    if host_has_placeholder and not http.allowed_hosts:
        problems.append(
            "http.url: the host comes from a placeholder, so http.allowedHosts must list "
            "the hosts it may resolve to"
        )
    if not host_has_placeholder and allowed and parts.hostname:
        if not _host_allowed(parts.hostname, parts.port, parts.scheme, allowed):
            problems.append(
                f"http.url: host {parts.netloc!r} is not in http.allowedHosts "
                f"({', '.join(http.allowed_hosts)})"
            )
    if not host_has_placeholder and not parts.hostname:
        problems.append(f"http.url: {http.url!r} has no host")
    return problems


def _is_ip(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True


_DEFAULT_PORTS = {"http": 80, "https": 443}


def _host_allowed(
    host: str, port: int | None, scheme: str, allowed: Sequence[tuple[str, int | None]]
) -> bool:
    """`host` alone allows the scheme's default port only; `host:port` that port only."""
    effective_port = port if port is not None else _DEFAULT_PORTS.get(scheme)
    for allowed_host, allowed_port in allowed:
        if host != allowed_host:
            continue
        if allowed_port is None and effective_port == _DEFAULT_PORTS.get(scheme):
            return True
        if allowed_port is not None and allowed_port == effective_port:
            return True
    return False


# --------------------------------------------------------------------------- http render


class HttpTemplateError(ValueError):
    """The declared HTTP request cannot be rendered from these arguments."""


#: Form bodies: every placeholder value is encoded as one form field value.
FORM_MEDIA_TYPE = "application/x-www-form-urlencoded"


def _body_content_type(spec: HttpSpec) -> str:
    """The media type of the body, from the descriptor's literal Content-Type header (it
    decides how arguments are encoded into the body, so an argument may not choose it)."""
    declared = next((v for k, v in spec.headers.items() if k.lower() == "content-type"), "")
    if PLACEHOLDER.search(declared):
        raise HttpTemplateError(
            "http.headers['Content-Type']: holds a placeholder, but the Content-Type decides "
            "how arguments are encoded into http.body; declare it literally"
        )
    return declared.split(";", 1)[0].strip().lower()


class RenderedHttpRequest(NamedTuple):
    method: str
    url: str
    headers: dict[str, str]
    body: str | None


def _argument_text(arguments: Mapping[str, Any], name: str, where: str) -> tuple[str, Any]:
    if name not in arguments:
        raise HttpTemplateError(
            f"placeholder {{{name}}} in {where} has no value: the call has no argument {name!r}"
        )
    value = arguments[name]
    if value is None:
        raise HttpTemplateError(f"placeholder {{{name}}} in {where}: argument {name!r} is null")
    text = value if isinstance(value, str) else json.dumps(value, separators=(",", ":"))
    return text, value


def render_http_request(spec: HttpSpec, arguments: Mapping[str, Any]) -> RenderedHttpRequest:
    """The concrete request for a declared HTTP tool; raises `HttpTemplateError`.

    - URL: each `{name}` is replaced by the argument, percent-encoded with no safe
      characters (`/`, `?`, `#`, `@` and `:` are encoded too), so an argument can never
      change the host, path structure or query layout; `.` and `..` are refused.
    - Headers: plain text; a value that would contain CR, LF or NUL is refused.
    - Body, by the descriptor's literal Content-Type: JSON-escaped (without quotes) for
      JSON, and the rendered body must parse as JSON; for a form
      (`application/x-www-form-urlencoded`) each value is form-encoded (`quote_plus`: `&`,
      `=` and `+` cannot add or split fields); otherwise plain text. Non-string arguments
      are written as compact JSON.
    - The host of the rendered URL must be in `allowedHosts` (or, when that is empty,
      be the literal host of the URL template).
    Placeholders are filled in one pass: a value containing `{x}` is not expanded again.
    """

    def fill(template: str, where: str, encode: Callable[[str, str, Any], str]) -> str:
        def replace(match: re.Match[str]) -> str:
            text, value = _argument_text(arguments, match.group(1), where)
            return encode(match.group(1), text, value)

        return PLACEHOLDER.sub(replace, template)

    def url_value(name: str, text: str, _value: Any) -> str:
        if text in ("", ".", ".."):
            raise HttpTemplateError(
                f"placeholder {{{name}}} in the URL: argument {name!r} is {text!r}, "
                "which would change the URL's structure"
            )
        return quote(text, safe="")

    url = fill(spec.url, "the URL", url_value)
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https"):
        raise HttpTemplateError(f"the rendered URL must be http or https, got {parts.scheme!r}")
    try:
        port = parts.port
    except ValueError as err:
        raise HttpTemplateError(f"the rendered URL has an invalid port: {err}") from err
    host = parts.hostname or ""
    allowed: list[tuple[str, int | None]] = []
    for entry in spec.allowed_hosts:
        try:
            allowed.append(_parse_host_port(entry))
        except ValueError as err:
            raise HttpTemplateError(f"http.allowedHosts: {err}") from err
    if not allowed:
        template_netloc = spec.url.split("://", 1)[-1].split("/", 1)[0]
        if PLACEHOLDER.search(template_netloc) is None and host:
            allowed.append((host, port))
    if not host or not _host_allowed(host, port, parts.scheme, allowed):
        shown = ", ".join(spec.allowed_hosts) or "none"
        raise HttpTemplateError(
            f"the rendered URL's host {parts.netloc!r} is not an allowed host "
            f"(http.allowedHosts: {shown})"
        )

    headers: dict[str, str] = {}
    for name, template in spec.headers.items():

        def header_value(placeholder: str, text: str, _value: Any, header: str = name) -> str:
            if any(ch in text for ch in "\r\n\0"):
                raise HttpTemplateError(
                    f"placeholder {{{placeholder}}} in header {header!r}: the argument "
                    "contains CR, LF or NUL, which would split the header"
                )
            return text

        headers[name] = fill(template, f"header {name!r}", header_value)

    body: str | None = None
    if spec.body is not None:
        content_type = _body_content_type(spec)
        if "json" in content_type:

            def json_value(_name: str, _text: str, value: Any) -> str:
                if isinstance(value, str):
                    return json.dumps(value, ensure_ascii=False)[1:-1]
                return json.dumps(value, separators=(",", ":"), ensure_ascii=False)

            body = fill(spec.body, "the body", json_value)
            try:
                json.loads(body)
            except ValueError as err:
                raise HttpTemplateError(
                    f"the rendered JSON body is not valid JSON ({err}); check the quoting "
                    "around placeholders in http.body"
                ) from err
        elif content_type == FORM_MEDIA_TYPE:
            body = fill(spec.body, "the body", lambda _n, text, _v: quote_plus(text))
        else:
            body = fill(spec.body, "the body", lambda _n, text, _v: text)
    return RenderedHttpRequest(method=spec.method, url=url, headers=headers, body=body)
