"""How long finished invocations and idempotency claims are kept, and how fast they go."""

from __future__ import annotations

from dataclasses import dataclass

from tooladapter.settings import environ as env


@dataclass(frozen=True)
class RetentionSettings:
    """Retention of ended calls (`handlers.workers`); their receipts stay in the store."""

    #: Finished invocations are deleted this long after they ended (0 keeps them forever);
    #: never an unconfirmed Uncertain one. Their receipts stay in the artifact store.
    invocation_seconds: int = 7 * 86_400
    #: Retention's deletions per second at most (0: no bound): above the sustained call
    #: rate, so storage stays bounded, and paced, so a backlog never arrives as a burst.
    deletes_per_second: int = 200
    #: An idempotency claim (and so its key) is kept this long after its winner ended (0:
    #: forever); it keeps the winner's receiptRef for duplicates.
    idempotency_seconds: int = 86_400

    @classmethod
    def from_env(cls) -> RetentionSettings:
        base = cls()
        return cls(
            invocation_seconds=env.at_least(
                "TOOLADAPTER_RETENTION_SECONDS", base.invocation_seconds, 0
            ),
            deletes_per_second=env.at_least(
                "TOOLADAPTER_RETENTION_DELETES_PER_SECOND", base.deletes_per_second, 0
            ),
            idempotency_seconds=env.at_least(
                "TOOLADAPTER_IDEMPOTENCY_RETENTION_SECONDS", base.idempotency_seconds, 0
            ),
        )
