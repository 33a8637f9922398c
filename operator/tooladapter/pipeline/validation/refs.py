"""Schema references resolve locally or not at all.

A `$ref` to a remote URL is never fetched: validation must not make network calls (SSRF,
slow or changing schemas). Only refs that resolve inside the schema itself (and the bundled
2020-12 metaschemas) work; anything else is a problem that says how to inline it.
"""

from __future__ import annotations

from typing import Any

from jsonschema_specifications import REGISTRY as SPECIFICATIONS
from referencing import Registry, Resource
from referencing.exceptions import Unresolvable

from tooladapter.pipeline.validation.paths import clip


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


def unresolvable_message(err: Unresolvable, ref: str | None = None) -> str:
    cause: BaseException | None = err
    while cause is not None:
        if isinstance(cause, RemoteRefRefused):
            return str(cause)
        cause = cause.__cause__ or cause.__context__
    return clip(f"$ref {ref or err.ref!r} does not resolve inside the schema")
