"""Readers of one environment variable each, for the settings' declarations (`setting`).

Every reader has one shape, `read(name, default)`, so a field names its variable and its
reader once and one `from_env` reads them all. Each names its variable in the error, so a
value the operator cannot parse stops it at start-up with a message saying which knob is
wrong; an unset or empty variable is the default (`listed`, `pairs` and `verbatim` keep a
set but empty one).
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from pathlib import Path
from typing import Literal, TypeAlias, TypeVar, cast

from tooladapter.enums import ArtifactBackend, EventLevel
from tooladapter.mcp.core.approvals import BadPublicUrl, checked_public_url

T = TypeVar("T")

#: Where readers read variables: the environment, or the values of one reload
#: (`reading_from`: a ConfigMap's keys, parsed with the very readers that parse the
#: environment, so both accept and refuse the same values).
_SOURCE: ContextVar[Mapping[str, str] | None] = ContextVar(
    "tooladapter_settings_source", default=None
)


def _source() -> Mapping[str, str]:
    found = _SOURCE.get()
    return os.environ if found is None else found


@contextmanager
def reading_from(values: Mapping[str, str]) -> Iterator[None]:
    """Readers read `values` instead of the environment inside this block."""
    token = _SOURCE.set(values)
    try:
        yield
    finally:
        _SOURCE.reset(token)


#: Reads the variable `name`; `default` when it is unset (or empty, as the reader says).
Reader: TypeAlias = Callable[[str, T], T]

#: A text setting, with or without a value by default (a bound, not constraints: a
#: generic reader passed to `setting` is then solved from the field's default).
_S = TypeVar("_S", bound=str | None)


def integer(name: str, default: int) -> int:
    raw = _source().get(name)
    if raw is None or raw == "":
        return default
    try:
        return int(raw)
    except ValueError as exc:
        raise ValueError(f"environment variable {name}={raw!r} is not an integer") from exc


def at_least(minimum: int) -> Reader[int]:
    """An integer no lower than `minimum`."""

    def read(name: str, default: int) -> int:
        value = integer(name, default)
        if value < minimum:
            raise ValueError(f"environment variable {name}={value} is below its minimum {minimum}")
        return value

    return read


def prefix(bits: int) -> Reader[int]:
    """A CIDR prefix length of an address family of `bits` bits."""

    def read(name: str, default: int) -> int:
        value = integer(name, default)
        if not 1 <= value <= bits:
            raise ValueError(f"{name} must be a prefix length from 1 to {bits}, not {value}")
        return value

    return read


def port(name: str, default: int) -> int:
    value = integer(name, default)
    if not 0 <= value <= 65535:
        raise ValueError(f"environment variable {name}={value} is not a port (0-65535)")
    return value


def boolean(name: str, default: bool) -> bool:
    raw = _source().get(name, "").strip().lower()
    if raw == "":
        return default
    if raw in ("1", "true", "on", "yes"):
        return True
    if raw in ("0", "false", "off", "no"):
        return False
    raise ValueError(f"environment variable {name}={raw!r} is not a boolean (true/false)")


def text(name: str, default: _S) -> _S:
    """The value as set."""
    raw = _source().get(name)
    return cast(_S, raw) if raw else default


def stripped(name: str, default: str) -> str:
    """The value without surrounding blanks."""
    return _source().get(name, "").strip() or default


def verbatim(name: str, default: str) -> str:
    """The value as set; set but empty is empty (not the default)."""
    return _source().get(name, default)


def or_variable(other: str) -> Reader[str | None]:
    """The value, else the variable `other`'s (as set, even empty)."""

    def read(name: str, default: str | None) -> str | None:
        return _source().get(name) or _source().get(other, default)

    return read


def listed(name: str, default: tuple[str, ...]) -> tuple[str, ...]:
    """Comma-separated items; set but empty is no items (not the default)."""
    raw = _source().get(name)
    if raw is None:
        return default
    return tuple(part.strip() for part in raw.split(",") if part.strip())


def pairs(name: str, default: tuple[tuple[str, str], ...]) -> tuple[tuple[str, str], ...]:
    """`key=value` items, comma-separated."""
    raw = _source().get(name)
    if raw is None:
        return default
    found = []
    for part in listed(name, ()):
        key, sep, value = part.partition("=")
        if not sep or not key.strip() or not value.strip():
            raise ValueError(f"environment variable {name}: {part!r} is not key=value")
        found.append((key.strip(), value.strip()))
    return tuple(found)


_QUANTITY = re.compile(r"^[0-9]+(\.[0-9]+)?(Ki|Mi|Gi|Ti|k|M|G|T)?$")


def quantity(name: str, default: str) -> str:
    raw = _source().get(name, "").strip()
    if not raw:
        return default
    if not _QUANTITY.match(raw):
        raise ValueError(f"environment variable {name}={raw!r} is not a storage quantity (1Gi)")
    return raw


def namespaced(name: str, default: _S) -> _S:
    """`namespace/name`."""
    raw = _source().get(name, "").strip()
    if not raw:
        return default
    namespace, _, obj = raw.partition("/")
    if not namespace or not obj or "/" in obj:
        raise ValueError(f"{name} must be namespace/name, not {raw!r}")
    return cast(_S, raw)


def path(name: str, default: Path | None) -> Path | None:
    raw = _source().get(name, "").strip()
    return Path(raw) if raw else default


def directory(name: str, default: Path) -> Path:
    """A path as set; set but empty is the working directory (not the default)."""
    return Path(_source().get(name, str(default)))


def public_url(name: str, default: str | None) -> str | None:
    raw = _source().get(name, "").strip()
    if not raw:
        return default
    try:
        return checked_public_url(raw)
    except BadPublicUrl as exc:
        raise ValueError(f"environment variable {name}: {exc}") from None


def endpoint(name: str, default: str | None) -> str | None:
    """An http(s) URL."""
    raw = _source().get(name, "").strip()
    if raw and not raw.startswith(("https://", "http://")):
        raise ValueError(f"environment variable {name}={raw!r} is not an http(s) URL")
    return raw or default


_E = TypeVar("_E", ArtifactBackend, EventLevel)


def choice(name: str, default: _E) -> _E:
    """A member of the default's enum, by value (any case)."""
    raw = _source().get(name, "").strip().lower()
    if raw == "":
        return default
    kind = type(default)
    try:
        return kind(raw)
    except ValueError:
        allowed = "|".join(kind)
        raise ValueError(f"environment variable {name}={raw!r} is not one of {allowed}") from None


def cidr_mode(name: str, default: Literal["allow", "forbid"]) -> Literal["allow", "forbid"]:
    value = (_source().get(name) or default).strip().lower()
    if value not in ("allow", "forbid"):
        raise ValueError(f"{name} must be allow or forbid, not {value!r}")
    return "forbid" if value == "forbid" else "allow"
