"""How often idempotency claims are listed: a minute in production, a retention when that
is shorter (a claim outlives its retention by at most one sweep), never faster than the
reconcilers."""

from __future__ import annotations

import pytest

from tooladapter.handlers.workers import claim_sweep_seconds
from tooladapter.settings import Settings
from tooladapter.settings.retention import RetentionSettings


@pytest.mark.parametrize(
    ("retention", "interval", "expected"),
    [
        (86_400, 30, 60),  # the defaults: once a minute
        (0, 30, 60),  # kept forever: still swept once a minute (nothing expires)
        (2, 2, 2),  # a short retention is swept as often as it lasts
        (10, 30, 30),  # but never more often than the reconcilers run
        (3600, 120, 120),  # a slow reconcile interval is kept
    ],
)
def test_the_claim_sweep_follows_a_shorter_retention(
    retention: int, interval: int, expected: float
) -> None:
    settings = Settings(
        reconcile_interval_seconds=interval,
        retention=RetentionSettings(idempotency_seconds=retention),
    )
    assert claim_sweep_seconds(settings) == expected
