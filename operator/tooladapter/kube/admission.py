"""The admission policies and bindings as the cluster holds them: read, and watched for change.

Read only (the operator's RBAC grants get, list and watch on both kinds, nothing more).
The comparison with what was shipped is pure (`pipeline.validation.shipped`); here are the
listing (`admission_objects`) and a watch whose events only say "something changed": the
caller then lists again, 18 small objects, so no event ordering can leave a stale view.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Collection
from typing import Any

from kubernetes_asyncio import client

from tooladapter.enums import AdmissionKind
from tooladapter.kube.client import Kube, json_body, watch_options
from tooladapter.kube.errors import api_errors
from tooladapter.pipeline.validation.shipped import Key, Observed
from tooladapter.timeutil import parse_time

logger = logging.getLogger("tooladapter.admission")

#: Seconds the API server keeps one watch request open.
WATCH_SECONDS = 300
#: Seconds between attempts after a failed watch.
RETRY_SECONDS = 2.0


def _methods(api: client.AdmissionregistrationV1Api, kind: AdmissionKind) -> Any:
    if kind is AdmissionKind.POLICY:
        return api.list_validating_admission_policy
    return api.list_validating_admission_policy_binding


def observed_of(kind: AdmissionKind, obj: dict[str, Any]) -> tuple[Key, Observed]:
    meta = obj.get("metadata") or {}
    created = meta.get("creationTimestamp")
    return (kind, str(meta.get("name") or "")), Observed(
        spec=obj.get("spec") or {}, created=parse_time(created) if created else None
    )


async def admission_objects(kube: Kube, names: Collection[Key]) -> dict[Key, Observed]:
    """The objects among `names` the cluster holds now (absent ones are left out)."""
    api = client.AdmissionregistrationV1Api(kube.api)
    found: dict[Key, Observed] = {}
    for kind in AdmissionKind:
        with api_errors():
            page = await json_body(await _methods(api, kind)(_preload_content=False))
        for obj in page.get("items") or []:
            key, seen = observed_of(kind, obj)
            if key in names:
                found[key] = seen
    return found


async def watch_changes(kube: Kube, changed: Callable[[], None]) -> None:
    """Forever: call `changed()` on every event of either kind (and after each reconnect,
    since events may have been missed meanwhile)."""
    api = client.AdmissionregistrationV1Api(kube.api)
    await asyncio.gather(*(_watch(api, kind, changed) for kind in AdmissionKind))


async def _watch(
    api: client.AdmissionregistrationV1Api, kind: AdmissionKind, changed: Callable[[], None]
) -> None:
    while True:
        try:
            resp = await _methods(api, kind)(**watch_options(WATCH_SECONDS))
            try:
                with api_errors():
                    if resp.status != 200:
                        await json_body(resp)
                # A new watch without a version starts with ADDED for every object: one
                # more comparison, which also covers anything missed while reconnecting.
                # Only that something changed matters (no bookmarks are asked for): a line
                # ends each event, and its content is read again by the listing.
                async for chunk in resp.content.iter_any():
                    if b"\n" in chunk:
                        changed()
            finally:
                resp.release()
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            logger.warning("watch of %s interrupted (%s)", kind, type(exc).__name__)
            changed()
            await asyncio.sleep(RETRY_SECONDS)
