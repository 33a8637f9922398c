"""How a validation problem names its place: JSON paths of values, pointers into schemas.

Problems are read by an agent or a person who has to fix a call or a descriptor, so each
names where it is (`$.files[2].name`, `#/properties/a/type`) and is clipped to a length a
status field and an event can carry.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Sequence

MAX_MESSAGE_CHARS = 400

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


def schema_pointer(parts: Sequence[str | int]) -> str:
    """An RFC 6901 JSON pointer (used for schema locations: `#/properties/a/type`)."""
    escaped = (str(p).replace("~", "~0").replace("/", "~1") for p in parts)
    return "#/" + "/".join(escaped) if parts else "#"


def clip(text: str, limit: int = MAX_MESSAGE_CHARS) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"
