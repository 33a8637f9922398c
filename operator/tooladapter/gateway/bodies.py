"""Request bodies: read within a deadline, parsed as JSON without a stack to blow.

aiohttp bounds a body's size (`client_max_size`) but not its pace: a client sending a
byte now and then would hold its handler for as long as it liked. And `json.loads` of a
body nested a few thousand levels deep raises `RecursionError`, which would surface as a
500 with a traceback in the operator's log for every such request.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable
from typing import Any, Final, TypeVar

from aiohttp import web
from multidict import MultiDictProxy

from tooladapter.gateway.errors import ProblemError
from tooladapter.gateway.views.problems import ProblemKind

T = TypeVar("T")

#: A body must have arrived this long after its handler began reading it.
BODY_SECONDS: Final = 30.0


async def _arrived(read: Awaitable[T], what: str) -> T:
    """`read`'s value, or a 400 when it has not arrived within `BODY_SECONDS`."""
    try:
        async with asyncio.timeout(BODY_SECONDS):
            return await read
    except TimeoutError:
        raise ProblemError(
            ProblemKind.BAD_REQUEST, f"the {what} did not arrive within {BODY_SECONDS:g} s"
        ) from None


async def read_body(request: web.Request) -> bytes:
    return await _arrived(request.read(), "body")


async def form_body(request: web.Request) -> MultiDictProxy[Any]:
    """A posted form (the page's), read within the same deadline as every other body."""
    return await _arrived(request.post(), "form")


async def json_body(request: web.Request) -> Any:
    data = await read_body(request)
    try:
        return json.loads(data)
    except RecursionError:
        raise ProblemError(ProblemKind.BAD_REQUEST, "the body is nested too deeply") from None
    except ValueError as exc:
        raise ProblemError(ProblemKind.BAD_REQUEST, "the body is not JSON") from exc
