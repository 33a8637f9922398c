"""The reloadable settings from the settings ConfigMap, merged over the environment's: pure.

A key names a variable (`TOOLADAPTER_MAX_RESULT_BYTES`) and is parsed by the very reader
that parses the environment, so both accept and refuse the same values. What `reload`
decides, per variable:

- reloadable and present: its parsed value; a value that does not parse keeps the one in
  force (never the default: a typo must not widen a list), and is reported;
- reloadable and absent: the environment's value (deleting a key undoes it);
- present but read only at start-up, or not a setting at all: reported, never applied.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from tooladapter.settings import Settings
from tooladapter.settings.environ import reading_from
from tooladapter.settings.variables import FromEnv, Variable, variable_of

#: Where a setting sits: its group fields, then its own (`("limits", "max_result_bytes")`).
Path = tuple[str, ...]


@dataclass(frozen=True)
class Declared:
    """One setting: where it sits and its variable."""

    path: Path
    variable: Variable[Any]


def declared(group: type[FromEnv] = Settings) -> Iterator[Declared]:
    """Every setting of `group` and its groups, in declaration order."""
    base = group()
    for item in dataclasses.fields(group):  # type: ignore[arg-type]
        variable = variable_of(item)
        if variable is not None:
            yield Declared((item.name,), variable)
            continue
        inner = getattr(base, item.name)
        if isinstance(inner, FromEnv):
            for found in declared(type(inner)):
                yield Declared((item.name, *found.path), found.variable)


def reloadable_variables() -> tuple[str, ...]:
    """The names of the variables the settings ConfigMap may set."""
    return tuple(d.variable.name for d in declared() if d.variable.reloadable)


def value_at(settings: Settings, path: Path) -> Any:
    found: Any = settings
    for name in path:
        found = getattr(found, name)
    return found


def with_value(settings: Any, path: Path, value: Any) -> Any:
    """`settings` with the field at `path` replaced (frozen groups rebuilt on the way)."""
    head, *rest = path
    inner = value if not rest else with_value(getattr(settings, head), tuple(rest), value)
    return dataclasses.replace(settings, **{head: inner})


@dataclass(frozen=True)
class Rejected:
    """A key whose value does not parse: the value in force stays."""

    key: str
    reason: str


@dataclass(frozen=True)
class Reloaded:
    """The settings in force after one reading of the ConfigMap, and what to say about it."""

    settings: Settings
    #: Variables whose value in force changed with this reading.
    changed: tuple[str, ...] = ()
    #: Keys that did not parse (their previous value stays).
    rejected: tuple[Rejected, ...] = ()
    #: Keys of settings read only at start-up: ignored until a restart (from the
    #: environment, never from the ConfigMap).
    not_reloadable: tuple[str, ...] = ()
    #: Keys that name no setting.
    unknown: tuple[str, ...] = ()


def reload(*, base: Settings, previous: Settings, data: Mapping[str, str]) -> Reloaded:
    """The settings in force once the ConfigMap holds `data`: `base` (the environment's)
    overlaid with its reloadable keys; a key that does not parse keeps `previous`'s value."""
    result = base
    changed: list[str] = []
    rejected: list[Rejected] = []
    not_reloadable: list[str] = []
    known: set[str] = set()
    for item in declared():
        name = item.variable.name
        known.add(name)
        if name not in data:
            value = value_at(base, item.path) if item.variable.reloadable else None
        elif not item.variable.reloadable:
            not_reloadable.append(name)
            continue
        else:
            try:
                # Only this key is visible: an unset one reads as the default it is given.
                with reading_from({name: data[name]}):
                    value = item.variable.read(name, value_at(base, item.path))
            except ValueError as exc:
                rejected.append(Rejected(name, str(exc)))
                value = value_at(previous, item.path)
        if not item.variable.reloadable:
            continue
        if value != value_at(previous, item.path):
            changed.append(name)
        result = with_value(result, item.path, value)
    unknown = sorted(key for key in data if key not in known)
    return Reloaded(
        settings=result,
        changed=tuple(changed),
        rejected=tuple(rejected),
        not_reloadable=tuple(not_reloadable),
        unknown=tuple(unknown),
    )
