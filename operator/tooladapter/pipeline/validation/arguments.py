"""A call's arguments: bounded in size and depth, then validated against JSON Schema 2020-12.

Why this shape:

- Arguments come from agents, so they are bounded in size and nesting depth *before*
  anything walks them recursively (`check_bounds` is iterative and stops early).
- Validation reports every error with the JSON path of the offending value, because
  the reader is an agent or a person who has to fix the call, not a stack trace.
- Refs resolve only inside the tool's own schema (`refs`), and every keyword runs in
  linear time (`linear_keywords`).
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from jsonschema.exceptions import ValidationError, best_match
from referencing.exceptions import Unresolvable

from tooladapter.pipeline.hashing import request_hash
from tooladapter.pipeline.validation.linear_keywords import FORMAT_CHECKER, LinearValidator
from tooladapter.pipeline.validation.paths import clip, json_path, schema_pointer
from tooladapter.pipeline.validation.refs import LOCAL_ONLY_REGISTRY, unresolvable_message

DEFAULT_MAX_ARGUMENT_BYTES = 262_144
DEFAULT_MAX_DEPTH = 32
DEFAULT_MAX_PROBLEMS = 50
#: Integers beyond this have no exact JSON (I-JSON, RFC 8785) form: the request hash needs one.
MAX_EXACT_INTEGER = 2**53
#: At most this many schema errors are collected (sorted, then cut to `max_problems`).
_MAX_COLLECTED = 1000


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
        if isinstance(node, dict | list | tuple):
            if depth + 1 > max_depth:
                problems.append(
                    f"{what} nest deeper than {max_depth} levels at {json_path(path)}: "
                    "flatten the structure"
                )
                return problems
            size += 2 + max(len(node) - 1, 0)  # brackets and commas
            if isinstance(node, dict):
                for key, child in node.items():
                    if not isinstance(key, str):
                        problems.append(
                            f"{what} have a non-string key {key!r} at {json_path(path)}: "
                            "JSON object keys are strings"
                        )
                        return problems
                    size += _string_size(key, max_bytes) + 1
                    stack.append((child, depth + 1, (*path, key)))
            else:
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


@dataclass(frozen=True)
class SchemaProblem:
    """One way the arguments fail the tool's input schema."""

    path: str
    message: str
    rule: str
    schema_path: str = ""

    def __str__(self) -> str:
        return f"{self.path}: {self.message} (schema rule '{self.rule}')"


@lru_cache(maxsize=256)
def _validator_for(schema_json: str) -> Any:
    """One validator per distinct schema: building one (its registry) costs more than most
    validations. Keyed by the schema's JSON, so the cached validator owns its own copy."""
    return LinearValidator(
        json.loads(schema_json),
        registry=LOCAL_ONLY_REGISTRY,
        format_checker=FORMAT_CHECKER,
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
        problems.append(SchemaProblem(path="$", message=unresolvable_message(err), rule="$ref"))
    except Exception as err:  # a broken schema must deny the call, not crash the stage
        problems.append(
            SchemaProblem(
                path="$",
                message=clip(
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
        message=clip(message),
        rule=str(error.validator),
        schema_path=schema_pointer(list(error.absolute_schema_path)),
    )
