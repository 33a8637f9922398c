"""Start-up as a new user meets it: one line for CRDs not served yet and for a taken metrics
port, not a traceback per retry; events reported by tooladapter, not by the framework."""

from __future__ import annotations

import logging
import os
import socket
import subprocess
import sys
from typing import Any

import kopf
import pytest
from kubernetes_asyncio.client.exceptions import ApiException

from tooladapter import metrics
from tooladapter.handlers import lifecycle
from tooladapter.kube.client import NotFound

pytestmark = pytest.mark.timeout(10)


class FlakyCatalog:
    """A catalog whose first primes fail as a just-created CRD's lists do."""

    def __init__(self, *failures: BaseException) -> None:
        self.failures = list(failures)
        self.primed = 0

    async def prime(self, kube: Any) -> None:
        if self.failures:
            raise self.failures.pop(0)
        self.primed += 1


async def test_crds_not_served_yet_are_waited_for_with_one_log_line(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(lifecycle, "CRD_POLL_SECONDS", 0)
    catalog = FlakyCatalog(
        NotFound("Not Found"),
        ApiException(status=429, reason="storage is (re)initializing"),
        ApiException(status=429, reason="storage is (re)initializing"),
        NotFound("Not Found"),
    )
    with caplog.at_level(logging.INFO, logger="tooladapter"):
        await lifecycle.prime_when_served(catalog, kube=None)  # type: ignore[arg-type]

    assert catalog.primed == 1
    lines = [r for r in caplog.records if r.name == "tooladapter"]
    assert len(lines) == 1
    assert "waiting for the API server to serve the tooladapter CRDs" in lines[0].getMessage()
    assert lines[0].exc_info is None


async def test_other_start_up_errors_still_fail_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(lifecycle, "CRD_POLL_SECONDS", 0)
    catalog = FlakyCatalog(ApiException(status=403, reason="Forbidden"))

    with pytest.raises(ApiException):
        await lifecycle.prime_when_served(catalog, kube=None)  # type: ignore[arg-type]
    assert catalog.primed == 0


def test_a_taken_metrics_port_is_named_in_one_error() -> None:
    with socket.socket() as holder:
        holder.bind(("", 0))
        holder.listen()
        port = holder.getsockname()[1]
        with pytest.raises(metrics.MetricsPortTaken) as caught:
            metrics.listen(port)
    message = str(caught.value)
    assert f"port {port} (TOOLADAPTER_METRICS_PORT)" in message
    assert "\n" not in message and "0 disables" in message


def test_events_are_reported_by_tooladapter_not_kopf() -> None:
    settings = kopf.OperatorSettings()
    lifecycle.configure(settings)

    assert settings.posting.reporting_component == "tooladapter"
    assert settings.posting.event_name_prefix == "tooladapter-"
    assert settings.posting.reporting_instance == socket.gethostname()


def test_tooladapter_run_on_a_taken_metrics_port_exits_with_one_line() -> None:
    with socket.socket() as holder:
        holder.bind(("", 0))
        holder.listen()
        port = holder.getsockname()[1]
        done = subprocess.run(
            [sys.executable, "-m", "tooladapter", "run"],
            env={**os.environ, "TOOLADAPTER_METRICS_PORT": str(port), "KUBECONFIG": "/nonexistent"},
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        f"tooladapter: cannot serve metrics on port {port} (TOOLADAPTER_METRICS_PORT): "
        "Address already in use; another process holds it: stop it, or set "
        "TOOLADAPTER_METRICS_PORT to a free port (0 disables metrics)"
    ]
