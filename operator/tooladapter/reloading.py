"""The reloadable settings kept as the settings ConfigMap says, without a restart.

Read once at start-up (before any call is taken up, in every replica: a standby's gateway
previews with the settings in force too), then again on every watch event and every
`RELIST_SECONDS` besides (a watch that stalls silently must not keep an old value long).
Each reading is merged by `settings.reload` (pure) into the `LiveSettings` the runtime and
the gateway read at use time; what it changed, rejected or ignored is said three ways: an
Event on the ConfigMap, a log line, and a metric (`tooladapter_settings_reloads`,
`tooladapter_settings_rejected`). The same data is reported once, not at every reading.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from tooladapter.kube.client import Kube
from tooladapter.kube.settings_map import post_event, read_settings_map, watch_settings_map
from tooladapter.metrics import SETTINGS_REJECTED, SETTINGS_RELOADS
from tooladapter.settings.live import LiveSettings
from tooladapter.settings.reload import Reloaded, reloadable_variables

logger = logging.getLogger("tooladapter.settings")


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


def _data(body: Mapping[str, Any] | None) -> dict[str, str]:
    if body is None:
        return {}
    return {str(k): str(v) for k, v in (body.get("data") or {}).items()}


@dataclass(frozen=True)
class Note:
    """One thing a reading says: an Event on the ConfigMap and a log line."""

    reason: str
    message: str
    warning: bool


def report(reloaded: Reloaded, data: dict[str, str]) -> list[Note]:
    """What one reading changed, rejected and ignored: logged and counted here, returned
    to be posted as Events on the ConfigMap."""
    notes: list[Note] = []
    if reloaded.changed:
        SETTINGS_RELOADS.inc()
        notes.append(Note("SettingsApplied", "applied " + ", ".join(reloaded.changed), False))
    for rejected in reloaded.rejected:
        SETTINGS_REJECTED.labels(setting=rejected.key).inc()
        notes.append(
            Note(
                "SettingRejected",
                f"{rejected.key}={_shown(data.get(rejected.key, ''))} does not parse "
                f"({rejected.reason}): the value in force stays",
                True,
            )
        )
    if reloaded.not_reloadable:
        notes.append(
            Note(
                "SettingNotReloadable",
                f"{', '.join(reloaded.not_reloadable)} "
                f"{'is' if len(reloaded.not_reloadable) == 1 else 'are'} read only at "
                "start-up, from the environment: ignored here (reloadable: "
                f"{', '.join(reloadable_variables())})",
                True,
            )
        )
    if reloaded.unknown:
        notes.append(
            Note(
                "SettingUnknown",
                f"{', '.join(_shown(k) for k in reloaded.unknown[:10])} "
                f"{'names' if len(reloaded.unknown) == 1 else 'name'} no setting: ignored",
                True,
            )
        )
    for note in notes:
        (logger.warning if note.warning else logger.info)("settings ConfigMap: %s", note.message)
    return notes


async def read_once(kube: Kube, live: LiveSettings) -> Reloaded | None:
    """Read the ConfigMap and apply it when its data changed (None: unchanged)."""
    namespace, name = where(live)
    body = await read_settings_map(kube, namespace, name)
    data = _data(body)
    if live.applied is not None and data == live.applied:
        return None
    reloaded = live.apply(data)
    notes = report(reloaded, data)
    if body is not None:
        for note in notes:
            try:
                await post_event(
                    kube, body, reason=note.reason, message=note.message, warning=note.warning
                )
            except Exception as exc:
                logger.warning("Event %s not posted (%s)", note.reason, type(exc).__name__)
    return reloaded


class Reloader:
    """The reading at start and the watch after, in every replica (a standby's gateway
    previews with the settings in force too), with a client of its own."""

    def __init__(self, kube: Kube, task: asyncio.Task[None]) -> None:
        self.kube = kube
        self.task = task

    @classmethod
    async def start(cls, live: LiveSettings) -> Reloader:
        kube = await Kube.connect()
        try:
            # Before any call is taken up, so none runs with values the ConfigMap overrides.
            await read_once(kube, live)
        except Exception as exc:
            logger.warning(
                "settings ConfigMap %s not read at start (%s): the environment's values hold "
                "until it is",
                live.base.settings_config_map,
                type(exc).__name__,
            )
        return cls(kube, asyncio.create_task(keep_reloaded(kube, live)))

    async def close(self) -> None:
        self.task.cancel()
        await asyncio.gather(self.task, return_exceptions=True)
        await self.kube.close()


async def keep_reloaded(kube: Kube, live: LiveSettings) -> None:
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
                await read_once(kube, live)
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
