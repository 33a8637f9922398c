"""The reloadable settings kept as the settings ConfigMap says, without a restart.

Read once at start-up (before any call is taken up), then again on every watch event and
every `RELIST_SECONDS` besides (a watch that stalls silently must not keep an old value for
long). Each reading is merged by `settings.reload` (pure) into the `LiveSettings` the
runtime and the gateway read at use time; what it rejected or ignored is said three ways:
a Warning Event on the ConfigMap, a log line, and a metric (`tooladapter_settings_rejected`).
The same data is reported once, not at every reading.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any, Protocol

from tooladapter.kube.client import Kube
from tooladapter.kube.settings_map import read_settings_map, watch_settings_map
from tooladapter.metrics import SETTINGS_REJECTED, SETTINGS_RELOADS
from tooladapter.settings.live import LiveSettings
from tooladapter.settings.reload import Reloaded, reloadable_variables

logger = logging.getLogger("tooladapter.settings")

class EventSink(Protocol):
    """Where Events go (`events.EventSink`, a module beside this one)."""

    def post(
        self, obj: dict[str, Any], *, reason: str, message: str, warning: bool = False
    ) -> None: ...


#: Seconds between readings beside the watch.
RELIST_SECONDS = 30.0
#: The longest value quoted back in an Event or a log line.
SHOWN_VALUE = 120


def where(live: LiveSettings) -> tuple[str, str]:
    """The ConfigMap's (namespace, name), from the settings the process started with."""
    namespace, _, name = live.base.settings_config_map.partition("/")
    return namespace, name


def _shown(value: str) -> str:
    return repr(value if len(value) <= SHOWN_VALUE else value[: SHOWN_VALUE - 1] + "…")


def _data(body: dict[str, Any] | None) -> dict[str, str]:
    if body is None:
        return {}
    return {str(k): str(v) for k, v in (body.get("data") or {}).items()}


def report(reloaded: Reloaded, body: dict[str, Any] | None, events: EventSink) -> None:
    """Say what one reading changed, rejected and ignored (log, metric, Events)."""
    data = _data(body)
    ref = (
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {
                "name": body["metadata"]["name"],
                "namespace": body["metadata"]["namespace"],
                "uid": body["metadata"].get("uid"),
            },
        }
        if body is not None
        else None
    )

    def say(reason: str, message: str, *, warning: bool) -> None:
        (logger.warning if warning else logger.info)("settings ConfigMap: %s", message)
        if ref is not None:
            events.post(ref, reason=reason, message=message, warning=warning)

    if reloaded.changed:
        SETTINGS_RELOADS.inc()
        say("SettingsApplied", "applied " + ", ".join(reloaded.changed), warning=False)
    for rejected in reloaded.rejected:
        SETTINGS_REJECTED.labels(setting=rejected.key).inc()
        say(
            "SettingRejected",
            f"{rejected.key}={_shown(data.get(rejected.key, ''))} does not parse "
            f"({rejected.reason}): the value in force stays",
            warning=True,
        )
    if reloaded.not_reloadable:
        say(
            "SettingNotReloadable",
            f"{', '.join(reloaded.not_reloadable)} "
            f"{'is' if len(reloaded.not_reloadable) == 1 else 'are'} read only at start-up, "
            "from the environment: ignored here (reloadable: "
            f"{', '.join(reloadable_variables())})",
            warning=True,
        )
    if reloaded.unknown:
        say(
            "SettingUnknown",
            f"{', '.join(_shown(k) for k in reloaded.unknown[:10])} "
            f"{'names' if len(reloaded.unknown) == 1 else 'name'} no setting: ignored",
            warning=True,
        )


async def read_once(kube: Kube, live: LiveSettings, events: EventSink) -> Reloaded | None:
    """Read the ConfigMap and apply it when its data changed (None: unchanged)."""
    namespace, name = where(live)
    body = await read_settings_map(kube, namespace, name)
    data = _data(body)
    if live.applied is not None and data == live.applied:
        return None
    reloaded = live.apply(data)
    report(reloaded, body, events)
    return reloaded


async def keep_reloaded(kube: Kube, live: LiveSettings, events: EventSink) -> None:
    """Forever: read again after every change the watch reports, and every
    `RELIST_SECONDS`; a failed reading keeps what is in force and is tried again."""
    namespace, name = where(live)
    changed = asyncio.Event()
    watcher = asyncio.create_task(watch_settings_map(kube, namespace, name, changed.set))
    try:
        while True:
            try:
                await asyncio.wait_for(changed.wait(), timeout=RELIST_SECONDS)
            except TimeoutError:
                pass
            changed.clear()
            try:
                await read_once(kube, live, events)
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                logger.warning(
                    "settings ConfigMap %s/%s not read (%s): the settings in force stay",
                    namespace,
                    name,
                    type(exc).__name__,
                )
    finally:
        watcher.cancel()
        await asyncio.gather(watcher, return_exceptions=True)
