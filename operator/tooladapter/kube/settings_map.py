"""The settings ConfigMap (`TOOLADAPTER_SETTINGS_CONFIGMAP`): read, and watched for change.

Read only: the operator's RBAC grants get, list and watch on that one ConfigMap by name.
As with the admission objects (`kube.admission`), the watch only says "something changed"
and the caller reads the ConfigMap again, so no event ordering can leave a stale view.
"""

from __future__ import annotations

import asyncio
import logging
import socket
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from tooladapter.kube.client import Kube, NotFound, json_body, watch_options
from tooladapter.kube.errors import api_errors

logger = logging.getLogger("tooladapter.settings")

#: The component the Events name (`source.component`), as kopf's poster does for ours.
REPORTER = "tooladapter"
#: Kubernetes truncates an Event's message; ours are bounded before they leave.
MAX_MESSAGE = 1024

#: Seconds the API server keeps one watch request open.
WATCH_SECONDS = 300
#: Seconds before the first attempt after a failed watch, doubled after each failure in a
#: row up to `RETRY_MAX_SECONDS` (a ConfigMap the operator may not read must not flood the
#: log; the readings every 30 s still say so).
RETRY_SECONDS = 2.0
RETRY_MAX_SECONDS = 60.0


async def read_settings_map(kube: Kube, namespace: str, name: str) -> dict[str, Any] | None:
    """The ConfigMap as the API server holds it now (None: there is none)."""
    try:
        with api_errors():
            found: dict[str, Any] = await json_body(
                await kube.core.read_namespaced_config_map(name, namespace, _preload_content=False)
            )
    except NotFound:
        return None
    return found


async def post_event(
    kube: Kube, config_map: dict[str, Any], *, reason: str, message: str, warning: bool
) -> None:
    """An Event on the ConfigMap (`kubectl describe configmap` shows it). Posted here, not
    through kopf's poster: the reading runs outside any kopf handler's context."""
    meta = config_map["metadata"]
    now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    body = {
        "metadata": {"generateName": f"{meta['name']}-", "namespace": meta["namespace"]},
        "involvedObject": {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "name": meta["name"],
            "namespace": meta["namespace"],
            "uid": meta.get("uid"),
            "resourceVersion": meta.get("resourceVersion"),
        },
        "reason": reason,
        "message": message[:MAX_MESSAGE],
        "type": "Warning" if warning else "Normal",
        "source": {"component": REPORTER},
        "reportingComponent": REPORTER,
        "reportingInstance": socket.gethostname(),
        "firstTimestamp": now,
        "lastTimestamp": now,
        "count": 1,
    }
    with api_errors():
        await json_body(
            await kube.core.create_namespaced_event(meta["namespace"], body, _preload_content=False)
        )


async def watch_settings_map(
    kube: Kube, namespace: str, name: str, changed: Callable[[], None]
) -> None:
    """Forever: call `changed()` on every watch event of the ConfigMap, and after every
    reconnect (events may have been missed meanwhile)."""
    delay = RETRY_SECONDS
    while True:
        try:
            resp = await kube.core.list_namespaced_config_map(
                namespace, field_selector=f"metadata.name={name}", **watch_options(WATCH_SECONDS)
            )
            try:
                with api_errors():
                    if resp.status != 200:
                        await json_body(resp)
                # A new watch starts with ADDED for the object when it exists: one more
                # reading, which also covers anything missed while reconnecting.
                delay = RETRY_SECONDS  # granted: failures in a row count anew
                async for chunk in resp.content.iter_any():
                    if b"\n" in chunk:
                        changed()
            finally:
                resp.release()
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            logger.warning(
                "watch of ConfigMap %s/%s interrupted (%s)", namespace, name, type(exc).__name__
            )
            changed()
            await asyncio.sleep(delay)
            delay = min(2 * delay, RETRY_MAX_SECONDS)
