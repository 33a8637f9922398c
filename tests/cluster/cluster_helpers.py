"""Helpers shared by the cluster integration tests (issue 2)."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
LOCAL_KUBECONFIG = REPO_ROOT / ".cluster" / "kubeconfig"
SANDBOX_IMAGE = "localhost/tooladapter-sandbox:dev"
NS_LABEL = "tooladapter.dev/cluster-test"


def kubeconfig_path() -> Path:
    return Path(os.environ.get("KUBECONFIG") or LOCAL_KUBECONFIG)


def require_cluster() -> bool:
    return os.environ.get("TOOLADAPTER_REQUIRE_CLUSTER") == "1" or os.environ.get("CI") == "true"


def wait_until(
    what: str, predicate: Callable[[], Any], timeout: float = 60.0, interval: float = 0.5
) -> Any:
    """Poll predicate until it returns a truthy value; fail after timeout seconds."""
    deadline = time.monotonic() + timeout
    last_exc: Exception | None = None
    while True:
        try:
            value = predicate()
            if value:
                return value
        except Exception as exc:  # the condition may not be observable yet
            last_exc = exc
        if time.monotonic() >= deadline:
            detail = f" (last error: {last_exc!r})" if last_exc else ""
            pytest.fail(f"timed out after {timeout:.0f}s waiting for {what}{detail}")
        time.sleep(interval)


def sandbox_container(
    name: str,
    command: list[str],
    *,
    cpu: str = "250m",
    memory: str = "64Mi",
) -> Any:
    """A non-root container of the sandbox image with CPU and memory limits."""
    from kubernetes import client

    resources = {"cpu": cpu, "memory": memory}
    return client.V1Container(
        name=name,
        image=SANDBOX_IMAGE,
        image_pull_policy="Never",
        command=command,
        resources=client.V1ResourceRequirements(limits=resources, requests=resources),
        security_context=client.V1SecurityContext(
            run_as_non_root=True,
            run_as_user=65532,
            run_as_group=65532,
            allow_privilege_escalation=False,
            capabilities=client.V1Capabilities(drop=["ALL"]),
            seccomp_profile=client.V1SeccompProfile(type="RuntimeDefault"),
        ),
    )
