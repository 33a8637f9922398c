"""Identity checks fail closed: the admission policies verified at start and on every change.

`spec.caller` is believed because the admission policies (`manifests/admission/`) made the
API server check it at create. The operator compares every shipped policy and binding with
the cluster's (`pipeline.validation.shipped`) once before it takes up any call, again on
every watch event of either kind, and every `relist_seconds` besides; the result goes to the
`AdmissionGuard` the validation stage asks, the `tooladapter_admission_intact` gauge and the
reviewers' page. A listing that fails counts as broken: what cannot be read is not intact.
"""

from __future__ import annotations

import asyncio
import logging
from datetime import UTC, datetime

from tooladapter.kube.admission import watch_changes
from tooladapter.kube.client import Kube
from tooladapter.kube.cluster import Cluster
from tooladapter.metrics import ADMISSION_INTACT
from tooladapter.pipeline.validation.shipped import (
    AdmissionGuard,
    compare,
    shipped_keys,
    unreadable,
)
from tooladapter.settings import AdmissionSettings

logger = logging.getLogger("tooladapter.identity")


async def verify(cluster: Cluster, guard: AdmissionGuard, settings: AdmissionSettings) -> None:
    """One comparison of the cluster's admission objects with the shipped ones."""
    names = shipped_keys(settings.prefix)
    at = datetime.now(UTC)
    try:
        observed = await cluster.admission_objects(names)
    except Exception as exc:
        problems = unreadable(settings.prefix)
        observed = {}
        reason = type(exc).__name__
    else:
        problems = compare(observed, prefix=settings.prefix, namespace=settings.namespace)
        reason = ""
    was = guard.problems
    guard.observe(problems, at=at, observed=observed)
    broken = {(p.kind, p.name) for p in problems}
    for kind, name in names:
        ADMISSION_INTACT.labels(kind=kind.value, name=name).set(0 if (kind, name) in broken else 1)
    if problems != was:
        if problems:
            logger.error(
                "admission not as shipped%s: %s; no call passes validation until it is",
                f" ({reason})" if reason else "",
                "; ".join(p.text() for p in problems),
            )
        elif was is not None:
            logger.warning("admission policies restored as shipped: new calls run again")


async def keep_verified(
    cluster: Cluster, kube: Kube, guard: AdmissionGuard, settings: AdmissionSettings
) -> None:
    """Forever: compare again after every change the watch reports, and every
    `relist_seconds` (a watch that stalls silently must not hide a removed binding)."""
    changed = asyncio.Event()
    watcher = asyncio.create_task(watch_changes(kube, changed.set))
    try:
        while True:
            try:
                await asyncio.wait_for(changed.wait(), timeout=settings.relist_seconds)
            except TimeoutError:
                pass
            changed.clear()
            await verify(cluster, guard, settings)
    finally:
        watcher.cancel()
        await asyncio.gather(watcher, return_exceptions=True)
