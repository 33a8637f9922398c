"""The settings in force: the one place the reloadable values are read at use time.

The runtime (`Runtime.settings`) and the gateway (`Deps.live`) hold the same `LiveSettings`;
the settings ConfigMap's watch (`handlers.settings`) swaps `current` whole, so a reader
sees one consistent `Settings`, never half of a reload. Code that must not change its
mind mid-call takes its values once (a call's limits, `executors.limits`) or pins them
(an approval's lists, `pipeline.pinning`).
"""

from __future__ import annotations

from collections.abc import Mapping

from tooladapter.settings import Settings
from tooladapter.settings.reload import Reloaded, reload


class LiveSettings:
    """The environment's settings (`base`) and the ones in force (`current`)."""

    def __init__(self, base: Settings) -> None:
        self.base = base
        self.current = base
        #: The ConfigMap data last applied (None: not read yet, or absent).
        self.applied: Mapping[str, str] | None = None

    def apply(self, data: Mapping[str, str]) -> Reloaded:
        """Apply the ConfigMap's `data` (empty: the ConfigMap is gone)."""
        reloaded = reload(base=self.base, previous=self.current, data=data)
        self.current = reloaded.settings
        self.applied = dict(data)
        return reloaded
