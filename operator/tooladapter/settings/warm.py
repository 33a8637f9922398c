"""Long-lived sandboxes: an attempt's workspace and the warm pools."""

from __future__ import annotations

from dataclasses import dataclass

from tooladapter.settings import environ as env
from tooladapter.settings.variables import FromEnv, setting


@dataclass(frozen=True)
class WarmSettings(FromEnv):
    """Workspaces (`sandbox.workspace: attempt`) and warm pools (`executors.warm`)."""

    #: An attempt's workspace (`sandbox.workspace: attempt`) is released after this long
    #: without a call (its pod and its volume are deleted).
    workspace_idle_seconds: int = setting(
        "TOOLADAPTER_WORKSPACE_IDLE_SECONDS", env.at_least(1), 1800
    )
    #: Size of an attempt's workspace volume (also its pod's ephemeral-storage request and
    #: limit, so a namespace's ResourceQuota bounds the workspaces it holds).
    workspace_size: str = setting("TOOLADAPTER_WORKSPACE_SIZE", env.quantity, "1Gi")
    #: Workspaces a namespace may hold at once: the first call of one more attempt fails
    #: (nothing started) until one is released, so an agent inventing attemptIds cannot
    #: fill the nodes other tenants share (a ResourceQuota bounds them further).
    workspaces_per_namespace: int = setting(
        "TOOLADAPTER_WORKSPACES_PER_NAMESPACE", env.at_least(1), 16
    )
    #: Ready sandboxes kept per namespace and sandbox profile (image, RuntimeClass,
    #: resources) once a call of that profile was seen; 0: no pools (every call that is not
    #: an attempt's runs in a Job of its own). Each idle pod requests CPU 10m and memory
    #: 32Mi at most, its limits as declared (`sandbox.warm.IDLE_REQUESTS`).
    pool_size: int = setting("TOOLADAPTER_WARM_POOL_SIZE", env.at_least(0), 0)
    #: A pool with no call of its profile for this long is drained (its pods deleted).
    pool_idle_seconds: int = setting("TOOLADAPTER_WARM_POOL_IDLE_SECONDS", env.at_least(1), 600)
    #: How long a new warm pod (a pool's, or a new workspace's) may take to be ready.
    start_seconds: int = setting("TOOLADAPTER_WARM_START_SECONDS", env.at_least(1), 120)
