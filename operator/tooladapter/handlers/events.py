"""Posting the domain events (reference: ToolInvoked, ToolInvocationDenied, ...).

kopf queues them and posts in the background; messages never carry arguments, results or
credentials.
"""

from __future__ import annotations

import logging
from typing import Any, cast

import kopf

from .. import API_VERSION

logger = logging.getLogger("tooladapter.events")


def object_ref(kind: str, meta: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": API_VERSION,
        "kind": kind,
        "metadata": {"name": meta["name"], "namespace": meta["namespace"], "uid": meta.get("uid")},
    }


def post(obj: dict[str, Any], *, reason: str, message: str, warning: bool = False) -> None:
    try:
        kopf.event(
            cast(kopf.Body, obj),
            type="Warning" if warning else "Normal",
            reason=reason,
            message=message[:1024],
        )
    except LookupError:
        # Outside kopf's context (no event poster): the status and receipt still hold it.
        logger.warning(
            "event %s not posted for %s: no event poster", reason, obj["metadata"]["name"]
        )
