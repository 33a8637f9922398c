"""Each setting declared once: its field names its environment variable and its reader
(`setting`), and one `from_env` reads every field of a group (`FromEnv`).

The declaration is the single source: `from_env` reads it, and hack/docs_gen.py lists it in
docs/reference/settings.md, so the page cannot name a variable the operator does not read.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Generic, Self, TypeVar, cast, overload

from tooladapter.settings.environ import Reader

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

T = TypeVar("T")

#: The key of a field's `Variable` in its metadata.
VARIABLE = "tooladapter.variable"


@dataclass(frozen=True)
class Variable(Generic[T]):
    """The environment variable a setting is read from, and how it is read."""

    name: str
    read: Reader[T]
    #: Applied live from the settings ConfigMap (`settings.reload`); otherwise read once,
    #: from the environment, at start-up.
    reloadable: bool = False


@overload
def setting(variable: str, read: Reader[T], default: T, *, reloadable: bool = False) -> T: ...
@overload
def setting(
    variable: str,
    read: Reader[T],
    *,
    default_factory: Callable[[], T],
    reloadable: bool = False,
) -> T: ...
def setting(
    variable: str,
    read: Reader[T],
    default: T | None = None,
    *,
    default_factory: Callable[[], T] | None = None,
    reloadable: bool = False,
) -> T:
    """A dataclass field read from `variable` by `read` (`default` when it is unset);
    `reloadable`: also applied live from the settings ConfigMap."""
    metadata = {VARIABLE: Variable(variable, read, reloadable)}
    if default_factory is not None:
        return dataclasses.field(default_factory=default_factory, metadata=metadata)
    return cast(T, dataclasses.field(default=default, metadata=metadata))


def variable_of(item: dataclasses.Field[object]) -> Variable[object] | None:
    """The variable a field is declared with (None: not a setting, e.g. a group)."""
    found = item.metadata.get(VARIABLE)
    return found if isinstance(found, Variable) else None


class FromEnv:
    """A settings group: a frozen dataclass whose fields are `setting`s or other groups."""

    @classmethod
    def from_env(cls) -> Self:
        """The group as the environment sets it, each field by its variable, each group
        field by its group's own `from_env`."""
        kind = cast("type[DataclassInstance]", cls)
        base = cls()
        values: dict[str, object] = {}
        for item in dataclasses.fields(kind):
            variable = variable_of(item)
            default: object = getattr(base, item.name)
            if variable is not None:
                values[item.name] = variable.read(variable.name, default)
            elif isinstance(default, FromEnv):
                values[item.name] = type(default).from_env()
        build: Callable[..., Self] = cls
        return build(**values)
