"""Start-up as a new user meets it: one line for CRDs not served yet and for a taken metrics
port, not a traceback per retry; events reported by tooladapter, not by the framework."""

from __future__ import annotations

import dataclasses
import logging
import os
import socket
import subprocess
import sys
from typing import Any

import kopf
import pytest
from kubernetes_asyncio.client import V1Service, V1ServiceSpec
from kubernetes_asyncio.client.exceptions import ApiException

from tooladapter import metrics
from tooladapter.handlers import lifecycle
from tooladapter.kube.client import NotFound
from tooladapter.settings import EgressSettings

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


@pytest.mark.timeout(90)  # a fresh interpreter starts the operator: seconds on a loaded node
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


class Services:
    """`kube.core.read_namespaced_service` answering from a dict of name -> ClusterIP."""

    def __init__(self, **ips: str) -> None:
        self.ips = ips
        self.asked: list[tuple[str, str]] = []
        self.core = self

    async def read_namespaced_service(self, name: str, namespace: str) -> Any:
        self.asked.append((namespace, name))
        if name not in self.ips:
            raise ApiException(status=404, reason="Not Found")
        return V1Service(spec=V1ServiceSpec(cluster_ip=self.ips[name]))


EGRESS = EgressSettings(namespace="ta-system", proxy_pod_labels=(("app", "proxy"),))


async def test_in_the_cluster_sandboxes_get_the_proxy_services_cluster_ip(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(lifecycle, "default_route_address", lambda: "10.244.0.9")
    kube = Services(**{"ta-egress-proxy": "10.0.0.200"})
    settings = dataclasses.replace(EGRESS, proxy_service="ta-egress-proxy")
    address = await lifecycle.egress_proxy_address(settings, kube)  # type: ignore[arg-type]
    assert address == "10.0.0.200", "never the pod's own default-route address"
    assert kube.asked == [("ta-system", "ta-egress-proxy")]
    peer = lifecycle.egress_peer(settings, address)
    assert peer is not None and peer.endpoint == "10.0.0.200:3128"
    # The policy admits the proxy pods (the Service address is DNAT'ed before it applies).
    assert peer.rule()["to"] == [
        {
            "podSelector": {"matchLabels": {"app": "proxy"}},
            "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "ta-system"}},
        }
    ]


async def test_the_proxy_namespace_setting_is_where_its_service_and_pods_are_found(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(lifecycle, "default_route_address", lambda: "10.244.0.9")
    kube = Services(**{"ta-egress-proxy": "10.0.0.201"})
    settings = dataclasses.replace(
        EGRESS, proxy_service="ta-egress-proxy", proxy_namespace="ta-proxy"
    )
    address = await lifecycle.egress_proxy_address(settings, kube)  # type: ignore[arg-type]
    assert address == "10.0.0.201" and kube.asked == [("ta-proxy", "ta-egress-proxy")]
    peer = lifecycle.egress_peer(settings, address)
    assert peer is not None
    assert peer.rule()["to"][0]["namespaceSelector"] == {
        "matchLabels": {"kubernetes.io/metadata.name": "ta-proxy"}
    }


async def test_a_missing_proxy_service_retries_the_start_up_and_a_headless_one_fails_closed(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(lifecycle, "default_route_address", lambda: "10.244.0.9")
    missing = dataclasses.replace(EGRESS, proxy_service="absent")
    with pytest.raises(kopf.TemporaryError, match="ta-system/absent"):
        await lifecycle.egress_proxy_address(missing, Services())  # type: ignore[arg-type]
    headless = dataclasses.replace(EGRESS, proxy_service="headless")
    kube = Services(headless="None")
    assert await lifecycle.egress_proxy_address(headless, kube) is None  # type: ignore[arg-type]
    assert "has no ClusterIP" in caplog.text
    assert lifecycle.egress_peer(headless, None) is None


async def test_a_configured_address_or_a_disabled_proxy_asks_no_service(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(lifecycle, "default_route_address", lambda: "192.0.2.5")
    kube = Services(**{"ta-egress-proxy": "10.0.0.200"})
    fixed = dataclasses.replace(EGRESS, proxy_address="10.0.0.7", proxy_service="ta-egress-proxy")
    assert await lifecycle.egress_proxy_address(fixed, kube) == "10.0.0.7"  # type: ignore[arg-type]
    off = dataclasses.replace(EGRESS, proxy_enabled=False, proxy_service="ta-egress-proxy")
    assert await lifecycle.egress_proxy_address(off, kube) is None  # type: ignore[arg-type]
    assert kube.asked == []
    # Host mode (`make run`): the proxy listens on this host's default-route address.
    host = EgressSettings()
    assert await lifecycle.egress_proxy_address(host, kube) == "192.0.2.5"  # type: ignore[arg-type]
