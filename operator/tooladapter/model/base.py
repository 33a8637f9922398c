"""The base of every model: camelCase on the wire, docstrings as CRD descriptions.

`Model` is what every spec, status and nested block derives from; `Resource` is a whole object
as the API returns it. `wire()` and `sparse_wire()` are the one way a model goes back to JSON,
so every writer drops unset optionals (and, sparse, empty defaults) the same way.

`json_schema_extra` keys starting with `x-kubernetes-` pass through to the CRD untouched:
that is how CEL rules, preserve-unknown-fields and list types reach the API server.
"""

from __future__ import annotations

import functools
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError
from pydantic.alias_generators import to_camel

#: Free-form JSON subtrees (schemas, arguments, results) keep unknown fields.
FREE_FORM: dict[str, Any] = {"x-kubernetes-preserve-unknown-fields": True}
#: Free-form and owned whole: an agent's keys never become managedFields entries (each
#: would be stored, served and diffed on every write of the object).
FREE_FORM_ATOMIC: dict[str, Any] = {**FREE_FORM, "x-kubernetes-map-type": "atomic"}


def no_crd_default(schema: dict[str, Any]) -> None:
    """Leave a field's default out of the CRD: the API server would store and serve it in
    every item of every object, while every reader already takes its absence as the default
    (`sparse_wire` omits it on writing)."""
    schema.pop("default", None)


def describe_errors(exc: ValidationError, root: str = "spec") -> str:
    """One line naming every invalid field by its wire path, e.g. `spec.tool.id: ...`."""
    return "; ".join(
        f"{'.'.join([root, *(str(p) for p in err['loc'])])}: {err['msg']}" for err in exc.errors()
    )


class Model(BaseModel):
    """Base: camelCase on the wire, strict about unknown fields in typed subtrees."""

    model_config = ConfigDict(
        alias_generator=to_camel,
        populate_by_name=True,
        extra="forbid",
        use_enum_values=False,
        # A docstring under a field is its description: the CRD's, so `kubectl explain`.
        use_attribute_docstrings=True,
    )

    def wire(self) -> dict[str, Any]:
        """The JSON-ready, camelCase form without unset optionals."""
        return self.model_dump(by_alias=True, exclude_none=True, mode="json")

    def sparse_wire(self) -> dict[str, Any]:
        """`wire()` without optional fields left at an empty default ("", [], {}): what a
        reader gets back by parsing anyway, and bytes every write, watch event and stored
        copy would carry (issue 17: a smaller status per call)."""
        return _sparse(self, self.wire())


_EMPTY: tuple[Any, ...] = ("", [], {})
#: A field `_sparse` never drops (required, or its default is not an empty value).
_KEPT = object()


@functools.cache
def _sparse_fields(cls: type[BaseModel]) -> tuple[tuple[str, str, Any], ...]:
    """(attribute, wire key, empty default or `_KEPT`) of each field of `cls`, once per class:
    pydantic's `get_default` inspects the default factory's signature on every call, which
    cost ~0.7 ms of every status write (3 of them parse a builtin's text signature)."""
    fields = []
    for name, info in cls.model_fields.items():
        empty = _KEPT
        if not info.is_required():
            default = info.get_default(call_default_factory=True)
            if any(default == e and type(default) is type(e) for e in _EMPTY):
                empty = default
        fields.append((name, info.alias or name, empty))
    return tuple(fields)


def _sparse(model: BaseModel, dumped: dict[str, Any]) -> dict[str, Any]:
    for name, key, empty in _sparse_fields(type(model)):
        if key not in dumped:
            continue
        out = dumped[key]
        if empty is not _KEPT and type(out) is type(empty) and out == empty:
            del dumped[key]
            continue
        value = getattr(model, name)
        if isinstance(value, BaseModel):
            _sparse(value, out)
        elif isinstance(value, list):
            for item, item_out in zip(value, out, strict=True):
                if isinstance(item, BaseModel):
                    _sparse(item, item_out)
    return dumped


class Resource(Model):
    """A whole object as the API returns it; metadata stays a plain dict."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="ignore")
    api_version: str = "tooladapter.dev/v1alpha1"
    kind: str
    metadata: dict[str, Any] = Field(default_factory=dict)
