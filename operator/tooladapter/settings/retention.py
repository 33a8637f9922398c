"""How long finished invocations and idempotency claims are kept, and how fast they go."""

from __future__ import annotations

from dataclasses import dataclass

from tooladapter.settings import environ as env
from tooladapter.settings.variables import FromEnv, setting


@dataclass(frozen=True)
class RetentionSettings(FromEnv):
    """Retention of ended calls (`handlers.workers`); their receipts stay in the store."""

    #: Finished invocations are deleted this long after they ended (0 keeps them forever);
    #: never an unconfirmed Uncertain one. Their receipts stay in the artifact store.
    invocation_seconds: int = setting("TOOLADAPTER_RETENTION_SECONDS", env.at_least(0), 7 * 86_400)
    #: Retention's deletions per second at most (0: no bound): above the sustained call
    #: rate, so storage stays bounded, and paced, so a backlog never arrives as a burst.
    deletes_per_second: int = setting(
        "TOOLADAPTER_RETENTION_DELETES_PER_SECOND", env.at_least(0), 200
    )
    #: An idempotency claim (a Lease) is kept this long after its winner ended (0: forever);
    #: it keeps the winner's receiptRef for duplicates. Its key never runs again after: the
    #: receipt index answers for it (an Uncertain call confirmed "did not happen" frees it).
    idempotency_seconds: int = setting(
        "TOOLADAPTER_IDEMPOTENCY_RETENTION_SECONDS", env.at_least(0), 86_400
    )
