"""The plain dicts that API bodies and client parameters are built as.

An optional field is left out rather than sent empty (the API server, the admission
policies and the clients all read "absent" as "not given"), so every builder needs the same
few lines per optional field: here they are once.
"""

from __future__ import annotations

from typing import Any


def put_given(target: dict[str, Any], /, **fields: Any) -> dict[str, Any]:
    """Put each of `fields` that is given (truthy) into `target`, in order; `target`."""
    target.update((key, value) for key, value in fields.items() if value)
    return target
