"""Long-lived sandboxes: an attempt's workspace and the warm pools."""

from __future__ import annotations

from dataclasses import dataclass

from tooladapter.settings import environ as env


@dataclass(frozen=True)
class WarmSettings:
    """Workspaces (`sandbox.workspace: attempt`) and warm pools (`executors.warm`)."""

    #: An attempt's workspace (`sandbox.workspace: attempt`) is released after this long
    #: without a call (its pod and its volume are deleted).
    workspace_idle_seconds: int = 1800
    #: Size of an attempt's workspace volume (also its pod's ephemeral-storage request and
    #: limit, so a namespace's ResourceQuota bounds the workspaces it holds).
    workspace_size: str = "1Gi"
    #: Workspaces a namespace may hold at once: the first call of one more attempt fails
    #: (nothing started) until one is released, so an agent inventing attemptIds cannot
    #: fill the nodes other tenants share (a ResourceQuota bounds them further).
    workspaces_per_namespace: int = 16
    #: Ready sandboxes kept per namespace and sandbox profile (image, RuntimeClass,
    #: resources) once a call of that profile was seen; 0: no pools (every call that is not
    #: an attempt's runs in a Job of its own).
    pool_size: int = 0
    #: A pool with no call of its profile for this long is drained (its pods deleted).
    pool_idle_seconds: int = 600
    #: How long a new warm pod (a pool's, or a new workspace's) may take to be ready.
    start_seconds: int = 120

    @classmethod
    def from_env(cls) -> WarmSettings:
        base = cls()
        return cls(
            workspace_idle_seconds=env.at_least(
                "TOOLADAPTER_WORKSPACE_IDLE_SECONDS", base.workspace_idle_seconds, 1
            ),
            workspace_size=env.quantity("TOOLADAPTER_WORKSPACE_SIZE", base.workspace_size),
            workspaces_per_namespace=env.at_least(
                "TOOLADAPTER_WORKSPACES_PER_NAMESPACE", base.workspaces_per_namespace, 1
            ),
            pool_size=env.at_least("TOOLADAPTER_WARM_POOL_SIZE", base.pool_size, 0),
            pool_idle_seconds=env.at_least(
                "TOOLADAPTER_WARM_POOL_IDLE_SECONDS", base.pool_idle_seconds, 1
            ),
            start_seconds=env.at_least("TOOLADAPTER_WARM_START_SECONDS", base.start_seconds, 1),
        )
