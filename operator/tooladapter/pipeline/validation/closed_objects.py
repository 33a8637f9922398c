"""Closed input schemas: an effectful tool that receives its arguments whole must refuse keys
it does not declare.

No new call may run while an identical one is Uncertain and unconfirmed, and "identical" is
the effect hash (`pipeline.effect`): for `container` and `mcp` tools, which receive their
arguments whole, that is the whole arguments. A key the schema does not declare is one the
tool most likely ignores, so an agent adding `{"memo": "2"}` would make the same effect look
new and slip past the block. Closing every object of the input schema
(`additionalProperties: false`) leaves the agent nothing to add: every key it may send is
one the schema names.

The rule binds classes that can have an effect outside the sandbox (`shared-write` and up;
`SideEffectClass.effects_contained` is False). A `read` or `sandbox` tool has no effect to
confirm, so it never reaches the block and keeps open schemas.

"Every object" is every subschema that describes an object: `type` is or includes
`"object"`, or no `type` but an object keyword (`properties`, `required`, ...), and the root
always (arguments are a JSON object). Subschemas are walked wherever JSON Schema 2020-12
puts them: `properties`, `patternProperties`, `additionalProperties`, `items`,
`prefixItems`, `contains`, `$defs`, `allOf`/`anyOf`/`oneOf`, `not`, `if`/`then`/`else`,
`dependentSchemas` and the rest of `_SUBSCHEMA_*`. Only `additionalProperties: false`
counts: it is the one keyword that closes an object on its own, wherever it is referenced
from (`unevaluatedProperties` depends on the schema around it).

`patternProperties` beside `additionalProperties: false` is the author's way to write a
map with free keys (labels, headers): its keys are the tool's input by declaration.

Two ways around the walk are closed too (each once let an open object through):
- A `$ref` (or `$dynamicRef`) may point anywhere in the document, including under a keyword
  the walk does not know (`"x-hidden": {"type": "object"}`), so every reference is followed
  to its target and the target walked.
- A reference that resolves outside the schema (the bundled metaschemas, which admit any
  keys) or not at all is open at the reference: nothing here says what it admits.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any
from urllib.parse import urljoin

from referencing.exceptions import Unresolvable
from referencing.jsonschema import DRAFT202012

from tooladapter.enums import SideEffectClass, ToolKind
from tooladapter.model import ToolDescriptorSpec
from tooladapter.pipeline.validation.paths import json_path
from tooladapter.pipeline.validation.refs import LOCAL_ONLY_REGISTRY

#: Keywords whose value is one subschema.
_SUBSCHEMA_ONE = (
    "additionalProperties",
    "unevaluatedProperties",
    "propertyNames",
    "items",
    "contains",
    "unevaluatedItems",
    "not",
    "if",
    "then",
    "else",
    "contentSchema",
)
#: Keywords whose value is a list of subschemas.
_SUBSCHEMA_LIST = ("prefixItems", "allOf", "anyOf", "oneOf")
#: Keywords whose value maps names to subschemas (`definitions`: the pre-2019 spelling,
#: still resolvable by a `$ref`).
_SUBSCHEMA_MAP = ("properties", "patternProperties", "$defs", "definitions", "dependentSchemas")

#: Keywords that only apply to objects: a subschema with one of them and no `type` describes
#: objects.
_OBJECT_KEYWORDS = frozenset(
    {
        "properties",
        "patternProperties",
        "additionalProperties",
        "unevaluatedProperties",
        "required",
        "propertyNames",
        "minProperties",
        "maxProperties",
        "dependentRequired",
        "dependentSchemas",
    }
)

#: Kinds whose tool receives the arguments whole (an http tool receives its rendered
#: request, a shell tool its argv: `pipeline.effect` hashes those instead).
WHOLE_ARGUMENT_KINDS = frozenset({ToolKind.CONTAINER, ToolKind.MCP})

#: At most this many open objects are named in one message.
MAX_NAMED = 10


def open_objects(schema: Any) -> list[str]:
    """JSON paths (into the schema) of every object subschema without
    `additionalProperties: false`, and of every reference that leaves the schema, in a
    stable order; the root is always an object."""
    if schema is True:
        # `true` as the whole schema admits any object, keys and all.
        return [json_path(())]
    if not isinstance(schema, Mapping):
        return []
    resolver = LOCAL_ONLY_REGISTRY.resolver_with_root(DRAFT202012.create_resource(schema))
    inside = _nodes(schema)
    found: list[str] = []
    #: Subschemas already walked (by identity): a reference cycle is walked once.
    seen: set[int] = set()
    stack: list[tuple[Any, tuple[str | int, ...], bool, str]] = [(schema, (), True, "")]
    #: Reference targets, walked after the document so that a target the walk reaches by
    #: itself is named by its own path; only a hidden one is named by its reference.
    deferred: list[tuple[Any, tuple[str | int, ...], bool, str]] = []
    while stack or deferred:
        if not stack:
            stack, deferred = list(reversed(deferred)), []
        node, path, is_root, base = stack.pop()
        if not isinstance(node, Mapping) or id(node) in seen:
            continue
        seen.add(id(node))
        if isinstance(node.get("$id"), str):
            base = urljoin(base, node["$id"])
        if (is_root or _describes_objects(node)) and node.get("additionalProperties") is not False:
            found.append(json_path(path))
        children: list[tuple[Any, tuple[str | int, ...], bool, str]] = []
        for keyword in ("$ref", "$dynamicRef"):
            ref = node.get(keyword)
            if not isinstance(ref, str):
                continue
            target = _resolve(resolver, urljoin(base, ref))
            if target is None or id(target) not in inside:
                found.append(json_path((*path, keyword)))
            else:
                deferred.append((target, (*path, keyword), False, base))
        for keyword in _SUBSCHEMA_ONE:
            if keyword in node:
                children.append((node[keyword], (*path, keyword), False, base))
        for keyword in _SUBSCHEMA_LIST:
            value = node.get(keyword)
            if isinstance(value, list):
                children.extend(
                    (child, (*path, keyword, index), False, base)
                    for index, child in enumerate(value)
                )
        for keyword in _SUBSCHEMA_MAP:
            value = node.get(keyword)
            if isinstance(value, Mapping):
                children.extend(
                    (child, (*path, keyword, str(name)), False, base)
                    for name, child in value.items()
                )
        # Below the root, `true` or `{}` is any value, not necessarily an object: only a
        # subschema that says it describes objects must close them.
        stack.extend(reversed(children))
    return found


def _resolve(resolver: Any, uri: str) -> Any:
    """The subschema `uri` names, or None when it does not resolve (a remote ref is never
    fetched: `refs.LOCAL_ONLY_REGISTRY`)."""
    try:
        return resolver.lookup(uri).contents
    except (Unresolvable, LookupError):
        return None


def _nodes(schema: Any) -> set[int]:
    """The identity of every mapping in the document: a reference resolving to one of them
    stays inside the schema; anything else (a bundled metaschema) does not."""
    found: set[int] = set()
    stack: list[Any] = [schema]
    while stack:
        node = stack.pop()
        if isinstance(node, Mapping):
            found.add(id(node))
            stack.extend(node.values())
        elif isinstance(node, list):
            stack.extend(node)
    return found


def _describes_objects(node: Mapping[str, Any]) -> bool:
    declared = node.get("type")
    if isinstance(declared, str):
        return declared == "object"
    if isinstance(declared, list):
        return "object" in declared
    return any(keyword in node for keyword in _OBJECT_KEYWORDS)


def needs_closed_schema(kind: ToolKind, cls: SideEffectClass) -> bool:
    """Whether a tool of `kind` and class `cls` must close every object of its input schema:
    it receives its arguments whole and its class can have an effect to confirm."""
    return kind in WHOLE_ARGUMENT_KINDS and not cls.effects_contained


def open_schema_message(paths: list[str], *, what: str, cls: SideEffectClass) -> str:
    """The refusal: which objects are open, and why they must be closed."""
    named = ", ".join(paths[:MAX_NAMED]) + (
        f" and {len(paths) - MAX_NAMED} more" if len(paths) > MAX_NAMED else ""
    )
    return (
        f"{what} at {named}: an object without additionalProperties: false; a tool of class "
        f"{cls.value} receives its arguments whole, so every object of its input schema must "
        "declare additionalProperties: false (a key the tool ignores would make the same "
        "effect look new to the unconfirmed-effect block)"
    )


def closed_schema_problems(spec: ToolDescriptorSpec) -> list[str]:
    """The descriptor check: one problem naming the open objects of an effectful `container`
    or `mcp` tool's inputSchema; empty otherwise."""
    cls = spec.declared_class
    if not needs_closed_schema(spec.kind, cls):
        return []
    paths = open_objects(spec.input_schema)
    return [open_schema_message(paths, what="inputSchema", cls=cls)] if paths else []
