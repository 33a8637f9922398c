"""The event sink the operator runs with: kopf queues each event and posts it in the
background, so a flow never waits on an Event write."""

from __future__ import annotations

import logging
from typing import Any, cast

import kopf

from tooladapter.events import MAX_MESSAGE

logger = logging.getLogger("tooladapter.events")


class KopfEvents:
    def post(
        self, obj: dict[str, Any], *, reason: str, message: str, warning: bool = False
    ) -> None:
        try:
            kopf.event(
                cast(kopf.Body, obj),
                type="Warning" if warning else "Normal",
                reason=reason,
                message=message[:MAX_MESSAGE],
            )
        except LookupError:
            # Outside kopf's context (no event poster): the status and receipt still hold it.
            logger.warning(
                "event %s not posted for %s: no event poster", reason, obj["metadata"]["name"]
            )
