"""Leadership of the served namespace set, taken before the operator does anything.

`lead` runs inside kopf's start-up activity, before the catalog is primed: kopf starts no
watch until the start-up handlers have returned, so a standby waiting here processes
nothing. It says so once ("standby: <holder> leads scope <lease>; waiting") and then polls
quietly until the Lease is free or expired.

A leader renews in a background task. If it cannot renew for `renew_deadline` (two thirds
of the Lease duration), or finds another holder in the Lease, the process exits at once
(`os._exit`, like a crash, which the flow already survives: calls that were `Executing`
are followed or settled by the next leader, never run twice). A watchdog thread checks the
deadline too, so a stalled event loop cannot keep a deposed leader acting. A clean stop
deletes the Lease after the flows are cancelled, so a standby takes over at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import threading
from dataclasses import dataclass, field

import kopf

from tooladapter.kube.client import Kube, is_transient
from tooladapter.kube.leases import (
    KubeLeases,
    LeaseElector,
    LeaseUnavailable,
    LostLease,
    holder_identity,
    lease_name,
    renew_deadline,
    retry_period,
    scope_text,
)
from tooladapter.settings import Settings

logger = logging.getLogger("tooladapter")

#: Exit status of a leader that lost its Lease (EX_TEMPFAIL: start again, as a standby).
LOST_LEADERSHIP_EXIT = 75


def _stop_acting(reason: str) -> None:
    logger.critical("%s; exiting now so that no call is processed by two operators", reason)
    for handler in logging.getLogger().handlers + logger.handlers:
        with contextlib.suppress(Exception):
            handler.flush()
    os._exit(LOST_LEADERSHIP_EXIT)


@dataclass
class Leadership:
    """The held Lease, its renewal task and its watchdog."""

    elector: LeaseElector
    kube: Kube
    renewer: asyncio.Task[None] | None = None
    stopped: threading.Event = field(default_factory=threading.Event)
    watchdog: threading.Thread | None = None

    @property
    def describe(self) -> str:
        e = self.elector
        return f"{e.namespace}/{e.name} [{scope_text(e.scope)}]"

    def start(self) -> None:
        self.renewer = asyncio.create_task(self._renew(), name="leadership renewal")
        self.watchdog = threading.Thread(
            target=self._watch, name="leadership watchdog", daemon=True
        )
        self.watchdog.start()

    async def _renew(self) -> None:
        period = retry_period(self.elector.duration_seconds)
        failing = False
        attempt = self.elector.monotonic()
        while True:
            # Every period from the last attempt's start: a slow (timed-out) attempt is
            # followed by the next one at once, not a period later.
            await asyncio.sleep(max(0.0, attempt + period - self.elector.monotonic()))
            attempt = self.elector.monotonic()
            try:
                await self.elector.renew()
            except LostLease as exc:
                _stop_acting(f"lost leadership of {self.describe}: {exc}")
            except Exception as exc:
                if not failing:
                    logger.warning(
                        "cannot renew the leadership Lease %s (%s); stopping if it is not "
                        "renewed within %.0fs of the last renewal",
                        self.describe,
                        exc,
                        renew_deadline(self.elector.duration_seconds),
                    )
                failing = True
            else:
                if failing:
                    logger.info("renewed the leadership Lease %s again", self.describe)
                failing = False

    def _watch(self) -> None:
        deadline = renew_deadline(self.elector.duration_seconds)
        tick = min(0.5, deadline / 10)
        while not self.stopped.wait(tick):
            silent = self.elector.monotonic() - self.elector.renewed_at
            if silent > deadline:
                _stop_acting(
                    f"leadership of {self.describe} not renewed for {silent:.1f}s "
                    f"(deadline {deadline:.1f}s)"
                )

    async def release(self) -> None:
        """Stop renewing and delete the Lease (called after the flows are cancelled)."""
        self.stopped.set()
        if self.renewer is not None:
            self.renewer.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self.renewer
        try:
            await self.elector.release()
            logger.info("released the leadership of %s", self.describe)
        except Exception as exc:  # it expires on its own
            logger.warning("could not release the leadership Lease %s: %s", self.describe, exc)
        finally:
            await self.kube.close()


async def lead(config: Settings) -> Leadership:
    """Wait (as a standby) until this process holds the Lease of its namespace set."""
    kube = await Kube.connect()
    period = retry_period(config.leadership.lease_seconds)
    elector = LeaseElector(
        # Its own connection pool: renewals never queue behind the flows' requests.
        api=KubeLeases(kube, timeout=max(period, 1.0)),
        namespace=config.leadership.lease_namespace,
        name=lease_name(config.namespaces),
        identity=holder_identity(),
        duration_seconds=config.leadership.lease_seconds,
        scope=config.namespaces,
    )
    leadership = Leadership(elector, kube)
    try:
        announced = False
        failing = False
        while True:
            try:
                holder = await elector.try_acquire()
            except LeaseUnavailable as exc:
                raise kopf.PermanentError(str(exc)) from exc
            except Exception as exc:
                if not is_transient(exc):
                    raise
                if not failing:
                    logger.warning(
                        "cannot read the leadership Lease %s yet (%s); retrying",
                        leadership.describe,
                        exc,
                    )
                failing = True
            else:
                failing = False
                if holder is None:
                    break
                if not announced:
                    logger.info("standby: %s leads scope %s; waiting", holder, leadership.describe)
                    announced = True
            await asyncio.sleep(period)
    except BaseException:
        await kube.close()
        raise
    leadership.start()
    logger.info("leading scope %s as %s", leadership.describe, elector.identity)
    return leadership
